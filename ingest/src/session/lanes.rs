//! ATL_INBOUND read tenant by tenant: one lane per tenant, each in its own inbound order.
//!
//! ```text
//! atl.in.acme.>  ─▶ consumer ingest_acme  ─▶ lane acme:  held in inbound order ─┐
//! atl.in.beta.>  ─▶ consumer ingest_beta  ─▶ lane beta:  held in inbound order ─┼─▶ a batch: every
//! atl.in.*       ─▶ consumer ingest-bare  ─▶ lane (bare)                        ─┘   lane's share,
//!                                                                                     by sequence
//! ```
//!
//! The ledger promises each tenant's events in ATL_INBOUND order and nothing across tenants (see
//! `docs/ingest.md`), so a tenant's message that is retried, held or read raw holds back only that
//! tenant, and a tenant's backlog takes only its share of each batch. ATL_INBOUND stays one work
//! queue (its filters never overlap); ingest finds tenants from the stream's subjects and opens a
//! durable pull consumer per tenant, filtered on `atl.in.<tenant>.>`.
//!
//! A lane knows which of its messages may go into a batch: those below [`Lane::known`], the point
//! up to which every message the stream stores for the lane is in hand. Deliveries move it: a first
//! delivery whose consumer sequence follows the last one received leaves nothing of the lane
//! unseen before it (a consumer delivers its subjects in stream order). A gap in consumer sequences
//! (a delivery the client could not read, a connection that dropped, deliveries still out from an
//! earlier session) stops it, and the lane is then read raw (`STREAM.MSG.GET` with `next_by_subj`)
//! from `known` through what is in hand, which fills the gap and moves `known` past it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use sha2::{Digest, Sha256};
use toolledger_wire::Tenant;

use crate::quarantine::Original;

/// An inbound message in hand, and what finishes it once the ledger holds it.
pub(super) struct Item {
    pub original: Original,
    pub done: Done,
}

pub(super) enum Done {
    /// Delivered normally: ack it.
    Ack(jetstream::Message),
    /// Fetched raw after its deliveries ran out: delete it from ATL_INBOUND, then ack the advisory.
    Exhausted(jetstream::Message),
    /// Read raw because its delivery did not arrive (a header block the client cannot read, or a
    /// delivery still out from an earlier session): delete it from ATL_INBOUND.
    Raw,
}

/// How a delivery arrived: its consumer sequence and how many times it was delivered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivery {
    pub consumer_seq: u64,
    pub delivered: i64,
}

/// The lane an inbound subject belongs to: the tenant token of `atl.in.<tenant>.<class…>`, or
/// [`LaneKey::Bare`] for a subject with no class (`atl.in.<x>`), which no tenant filter covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum LaneKey {
    Tenant(String),
    Bare,
}

impl LaneKey {
    /// The lane of an inbound subject; `None` for a subject outside `atl.in.>`.
    pub fn of(subject: &str) -> Option<Self> {
        let rest = subject.strip_prefix("atl.in.")?;
        match rest.split_once('.') {
            Some((tenant, _)) if !tenant.is_empty() => Some(Self::Tenant(tenant.to_owned())),
            None if !rest.is_empty() => Some(Self::Bare),
            _ => None,
        }
    }

    /// The lane's filter on ATL_INBOUND.
    pub fn filter(&self) -> String {
        match self {
            Self::Tenant(tenant) => format!("atl.in.{tenant}.>"),
            Self::Bare => "atl.in.*".to_owned(),
        }
    }

    /// The lane's durable consumer name: `<prefix>_<tenant>` for a well-formed tenant, else a name
    /// no tenant can take (`<prefix>-bare`, `<prefix>-x<digest of the token>`).
    pub fn consumer_name(&self, prefix: &str) -> String {
        match self {
            Self::Tenant(tenant) if Tenant::parse(tenant).is_ok() => format!("{prefix}_{tenant}"),
            Self::Tenant(token) => {
                let digest = Sha256::digest(token.as_bytes());
                let hex = toolledger_wire::entry::hex(&digest[..8]);
                format!("{prefix}-x{hex}")
            }
            Self::Bare => format!("{prefix}-bare"),
        }
    }
}

impl std::fmt::Display for LaneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tenant(tenant) => f.write_str(tenant),
            Self::Bare => f.write_str("(no class)"),
        }
    }
}

/// One tenant's inbound messages in hand, in inbound order.
pub(super) struct Lane {
    /// Messages in hand that are not yet in a batch, by inbound sequence, with how those that came
    /// as deliveries were delivered.
    held: BTreeMap<u64, (Item, Option<Delivery>)>,
    /// Deliveries received past [`Lane::consumer_seq`], by consumer sequence: (inbound sequence,
    /// times delivered). Followed and forgotten as the consumer sequence catches up.
    deliveries: BTreeMap<u64, (u64, i64)>,
    /// Every message of the lane below it is in a batch: a copy below it is a late redelivery.
    cursor: u64,
    /// Every message the stream stores for the lane below it is held or below `cursor`.
    known: u64,
    /// The consumer sequence through which every delivery has been received (`None`: not known,
    /// as at the start of a session or after the connection dropped, until a raw read lands on a
    /// first delivery in hand).
    consumer_seq: Option<u64>,
    /// Deliveries may have been lost (the connection dropped, or deliveries are still out from an
    /// earlier session): read the lane raw from `known` on, a message a round, even with nothing in
    /// hand past it, until the consumer sequence is followed through this one (the last the
    /// consumer had delivered when it was opened) or a read finds nothing.
    suspect: Option<u64>,
    /// When the lane's consumer was made, Unix nanoseconds (a consumer made again numbers its
    /// deliveries afresh).
    consumer_created: Option<i128>,
    /// When a delivery last came, or the lane was opened.
    pub last_delivery: Instant,
    /// When the first delivery of a message not yet batched last came (a new event, not a
    /// redelivery): what makes the lane a trickle while it holds nothing (see [`Lanes::batch`]).
    last_arrival: Option<Instant>,
    /// When the deliveries held past `known` were last kept from redelivery.
    pub progressed: Instant,
}

impl Lane {
    pub fn new() -> Self {
        Self {
            held: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            cursor: 0,
            known: 0,
            consumer_seq: None,
            suspect: None,
            consumer_created: None,
            last_delivery: Instant::now(),
            last_arrival: None,
            progressed: Instant::now(),
        }
    }

    /// Messages in hand.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Keeps `item` for its inbound sequence; returns it when the lane is past it already (a late
    /// redelivery, finished once the batch holding the first copy is). A delivery replaces the copy
    /// in hand (only the latest delivery can be acked); a raw copy never replaces one in hand. Call
    /// [`Lane::advance`] once a fetch's deliveries are all held.
    pub fn hold(&mut self, item: Item, delivery: Option<Delivery>) -> Option<Item> {
        let seq = item.original.inbound_seq;
        if let Some(delivery) = delivery {
            self.last_delivery = Instant::now();
            // Late copies count too: the consumer sequences are followed through them.
            if self.consumer_seq.is_none_or(|last| delivery.consumer_seq > last) {
                self.deliveries
                    .insert(delivery.consumer_seq, (seq, delivery.delivered));
            }
        }
        if seq < self.cursor {
            return Some(item);
        }
        if delivery.is_some_and(|delivery| delivery.delivered == 1) {
            self.last_arrival = Some(Instant::now());
        }
        if matches!(item.done, Done::Raw) && self.held.contains_key(&seq) {
            return None;
        }
        self.held.insert(seq, (item, delivery));
        None
    }

    /// Moves `known` along the deliveries in hand whose consumer sequences follow the last one
    /// received: a first delivery right after it leaves nothing of the lane unseen before it (a
    /// consumer first delivers its subjects in stream order).
    pub fn advance(&mut self) {
        let Some(mut last) = self.consumer_seq else {
            // Not followed: what arrives is kept until a raw read re-trusts a delivery, but only
            // as much as the consumer can have out.
            if self.deliveries.len() > MAX_UNFOLLOWED {
                self.deliveries.clear();
            }
            return;
        };
        while let Some(entry) = self.deliveries.first_entry()
            && *entry.key() <= last
        {
            entry.remove();
        }
        while let Some((seq, delivered)) = self.deliveries.remove(&(last + 1)) {
            last += 1;
            if delivered == 1 {
                self.known = self.known.max(seq + 1);
            }
        }
        self.consumer_seq = Some(last);
        if self.suspect.is_some_and(|until| last >= until) {
            self.suspect = None;
        }
    }

    /// Takes note of the lane's consumer as it was (re)opened: made at `created` (Unix
    /// nanoseconds), having delivered through consumer sequence `delivered`.
    ///
    /// A consumer made anew numbers its deliveries afresh: what the lane knew of the old numbering
    /// is dropped (a consumer that has delivered nothing yet is followed from its start). When the
    /// lane has not followed every delivery the consumer made — deliveries still out from an earlier
    /// session, lost with a connection, or given up after `max_deliver` — it is suspect: it is read
    /// raw from `known` (see [`Lane::next_raw_read`]), a message a round, until its consumer
    /// sequences are followed through `delivered` or a read finds nothing. A lost delivery followed
    /// by others shows as a gap anyway; this finds the ones no later delivery points at.
    pub fn opened(&mut self, created: i128, delivered: u64) {
        if self.consumer_created != Some(created) {
            self.deliveries.clear();
            self.consumer_seq = None;
            self.consumer_created = Some(created);
        }
        if self.consumer_seq.is_none() && delivered == 0 {
            self.consumer_seq = Some(0);
        }
        self.advance();
        if self.consumer_seq != Some(delivered) {
            self.suspect = Some(delivered);
        }
    }

    /// Where the next raw read starts, if one is wanted, with `reads` already done this round out of
    /// `max`: through everything in hand past `known`, and one more a round while suspect.
    pub fn next_raw_read(&self, reads: usize, max: usize) -> Option<u64> {
        let wanted = self.past_known() || (self.suspect.is_some() && reads == 0);
        (wanted && reads < max).then_some(self.known)
    }

    /// Whether the lane must be read raw before everything it holds can go into a batch.
    pub fn needs_fill(&self) -> bool {
        self.suspect.is_some() || self.past_known()
    }

    fn past_known(&self) -> bool {
        self.held
            .last_key_value()
            .is_some_and(|(seq, _)| *seq >= self.known)
    }

    /// Takes in a raw read from `known` on: `None` when the stream stores nothing more for the lane.
    pub fn raw_read(&mut self, read: Option<Original>) {
        let Some(original) = read else {
            // What is held past `known` is no longer stored (deleted meanwhile): nothing is missing.
            if let Some((last, _)) = self.held.last_key_value() {
                self.known = self.known.max(last + 1);
            }
            self.suspect = None;
            return;
        };
        let seq = original.inbound_seq;
        // Landing on a first delivery in hand: every message of the lane through it is in hand, so
        // every delivery before it that never came was of a message below it, and the consumer
        // sequences after it can be followed again.
        if let Some((_, Some(delivery))) = self.held.get(&seq)
            && delivery.delivered == 1
        {
            self.consumer_seq = Some(
                self.consumer_seq
                    .map_or(delivery.consumer_seq, |last| last.max(delivery.consumer_seq)),
            );
        }
        self.hold(
            Item {
                original,
                done: Done::Raw,
            },
            None,
        );
        self.known = self.known.max(seq + 1);
        self.advance();
    }

    /// How many messages held may go into a batch.
    fn ready(&self) -> usize {
        // What is held past `known` is usually nothing: count that side.
        self.held.len() - self.held.range(self.known..).count()
    }

    /// Whether anything held may go into a batch.
    pub fn runnable(&self) -> bool {
        self.held
            .first_key_value()
            .is_some_and(|(seq, _)| *seq < self.known)
    }

    /// Takes up to `max` messages from the front of the lane that may go into a batch.
    pub fn take(&mut self, max: usize, into: &mut Vec<Item>) {
        let mut taken = 0;
        while taken < max {
            let Some(entry) = self.held.first_entry() else {
                break;
            };
            if *entry.key() >= self.known {
                break;
            }
            self.cursor = *entry.key() + 1;
            into.push(entry.remove().0);
            taken += 1;
        }
    }

    /// Deliveries in hand.
    pub fn deliveries(&self) -> impl Iterator<Item = &jetstream::Message> {
        self.held.values().filter_map(|(item, _)| match &item.done {
            Done::Ack(message) => Some(message),
            _ => None,
        })
    }
}

/// How recently a lane with nothing in hand must have had a new event to count as a trickle.
const TRICKLE: Duration = Duration::from_secs(1);

/// How long a backlog gives only a shared batch's worth to each batch (see [`Lanes::batch`]).
const SHARED_FOR: Duration = Duration::from_secs(10);

/// How long no lane must have had a backlog before a new one shares batches again.
const BACKLOG_GONE: Duration = Duration::from_secs(5);

/// What the backlogs give a batch they share with a trickle (see [`Lanes::batch`]): an eighth, and
/// at least 16 (below 128 a batch is short anyway; below 16 nothing is capped).
pub(super) fn shared_batch(max: usize) -> usize {
    (max / 8).max(16)
}

/// Deliveries kept while a lane's consumer sequences are not followed: more than a consumer can have
/// out means they are not worth keeping (raw reads cover what they would have vouched for).
const MAX_UNFOLLOWED: usize = 16_384;

/// Every lane of the session.
pub(super) struct Lanes {
    pub lanes: HashMap<LaneKey, Lane>,
    /// Where the next batch starts taking lanes from, so no lane is always last.
    turn: usize,
    /// Since when a backlog has shared batches with a trickle (see [`Lanes::batch`]).
    shared_since: Option<Instant>,
    /// When a lane last had a backlog.
    last_backlog: Option<Instant>,
}

impl Lanes {
    pub fn new() -> Self {
        Self {
            lanes: HashMap::new(),
            turn: 0,
            shared_since: None,
            last_backlog: None,
        }
    }

    /// Whether a lane holds messages that may go into a batch, or must be read raw.
    pub fn work_in_hand(&self) -> bool {
        self.lanes
            .values()
            .any(|lane| lane.runnable() || lane.needs_fill())
    }

    /// The next batch: each lane that has messages ready gives its share of `max` (the share of a
    /// lane with fewer is spread over the others), in inbound order within the batch.
    ///
    /// While a backlog shares the batches with a trickle — a lane with more than two batches ready,
    /// and another with no more than [`shared_batch`] ready, or nothing held and a new event within
    /// [`TRICKLE`] — each backlog gives a batch only its part of [`shared_batch`] (125 of 1,000;
    /// at least one each) and every other lane its whole share: the trickle's events wait for a few
    /// short batches rather than a few full ones (each stage of a full batch takes ~100 ms on a busy
    /// machine). The backlog drains more slowly meanwhile (each batch pays the atomic batch's round
    /// trips and the index commit), so this lasts [`SHARED_FOR`] at most: a backlog that outlasts
    /// it is drained in full batches until no lane has had a backlog for [`BACKLOG_GONE`] (a
    /// trickle that pauses, or a backlog that dips below two batches between batches, does not
    /// start the while again). Lanes that all have about as much ready (an even load, however
    /// heavy) keep full batches.
    pub fn batch(&mut self, max: usize) -> Vec<Item> {
        let shared = shared_batch(max);
        let mut trickle = false;
        let mut ready: Vec<(&LaneKey, usize)> = Vec::new();
        for (key, lane) in &self.lanes {
            let n = lane.ready();
            trickle |= (n > 0 && n <= shared)
                || (lane.held() == 0 && lane.last_arrival.is_some_and(|at| at.elapsed() < TRICKLE));
            if n > 0 {
                ready.push((key, n));
            }
        }
        if ready.is_empty() {
            return Vec::new();
        }
        let backlog = |ready: usize| ready > 2 * max;
        let backlogs = ready.iter().filter(|(_, n)| backlog(*n)).count();
        if backlogs > 0 {
            self.last_backlog = Some(Instant::now());
        } else if self.last_backlog.is_none_or(|at| at.elapsed() >= BACKLOG_GONE) {
            self.shared_since = None;
        }
        let capped = backlogs > 0
            && trickle
            && self.shared_since.get_or_insert_with(Instant::now).elapsed() < SHARED_FOR;
        ready.sort();
        let turn = self.turn % ready.len();
        ready.rotate_left(turn);
        self.turn = self.turn.wrapping_add(1);
        // What each lane may still give: a capped backlog its part of the shared batch.
        let mut ready: Vec<(LaneKey, usize)> = ready
            .into_iter()
            .map(|(key, n)| {
                let left = if capped && backlog(n) {
                    (shared / backlogs).max(1)
                } else {
                    usize::MAX
                };
                (key.clone(), left)
            })
            .collect();
        let mut batch = Vec::new();
        let mut open = ready.len();
        while batch.len() < max && open > 0 {
            let share = ((max - batch.len()) / open).max(1);
            open = 0;
            for (key, left) in &mut ready {
                let lane = self.lanes.get_mut(key).expect("a ready lane");
                let before = batch.len();
                lane.take(share.min(max - batch.len()).min(*left), &mut batch);
                let took = batch.len() - before;
                *left -= took;
                if took == share && *left > 0 && lane.runnable() {
                    open += 1;
                }
                if batch.len() == max {
                    break;
                }
            }
        }
        batch.sort_by_key(|item| item.original.inbound_seq);
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn raw(subject: &str, seq: u64) -> Original {
        Original {
            subject: subject.to_owned(),
            headers: None,
            raw_headers: None,
            payload: bytes::Bytes::new(),
            inbound_seq: seq,
            published: Utc::now(),
        }
    }

    fn item(seq: u64) -> Item {
        Item {
            original: raw("atl.in.acme.tool.declared", seq),
            done: Done::Raw,
        }
    }

    fn first(consumer_seq: u64) -> Option<Delivery> {
        Some(Delivery {
            consumer_seq,
            delivered: 1,
        })
    }

    fn created() -> i128 {
        1_700_000_000_000_000_000
    }

    fn seqs(items: &[Item]) -> Vec<u64> {
        items.iter().map(|item| item.original.inbound_seq).collect()
    }

    #[test]
    fn subjects_map_to_lanes_and_consumer_names() {
        let acme = LaneKey::of("atl.in.acme.tool.declared").unwrap();
        assert_eq!(acme, LaneKey::Tenant("acme".into()));
        assert_eq!(acme.filter(), "atl.in.acme.>");
        assert_eq!(acme.consumer_name("ingest"), "ingest_acme");
        assert_eq!(LaneKey::of("atl.in.acme"), Some(LaneKey::Bare));
        assert_eq!(LaneKey::Bare.consumer_name("ingest"), "ingest-bare");
        assert_eq!(LaneKey::of("atl.ledger.acme.x"), None);
        let odd = LaneKey::of("atl.in.a~b.tool.declared").unwrap();
        let name = odd.consumer_name("ingest");
        assert!(
            name.starts_with("ingest-x") && name.len() == "ingest-x".len() + 16,
            "{name}"
        );
    }

    #[test]
    fn a_session_first_delivery_waits_for_a_raw_read_then_contiguous_deliveries_run() {
        let mut lane = Lane::new();
        // The first deliveries of a session: earlier messages may still be out, so they wait.
        assert!(lane.hold(item(10), first(7)).is_none());
        lane.hold(item(12), first(8));
        lane.advance();
        assert!(!lane.runnable());
        // The raw read from the start finds seq 4 (a delivery still out from before), then seq 10,
        // a first delivery in hand, from which consumer sequence 8 follows: no more reads.
        assert_eq!(lane.next_raw_read(0, 100), Some(0));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 4)));
        assert_eq!(lane.next_raw_read(1, 100), Some(5));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 10)));
        assert_eq!(lane.next_raw_read(2, 100), None);
        // Consumer sequence 9 follows 8.
        lane.hold(item(13), first(9));
        lane.advance();
        assert_eq!(lane.next_raw_read(0, 100), None);
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![4, 10, 12, 13]);
        // A redelivery of something already batched comes back as late.
        assert!(lane.hold(item(10), first(10)).is_some());
    }

    #[test]
    fn a_lost_delivery_holds_back_only_later_messages_of_its_lane_until_read_raw() {
        let mut lane = Lane::new();
        lane.hold(item(1), first(1));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 1)));
        assert_eq!(lane.consumer_seq, Some(1));
        // Consumer sequence 2 never arrives (it broke the client); 3 does.
        lane.hold(item(5), first(3));
        lane.advance();
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![1], "seq 5 waits for the lost one before it");
        assert_eq!(lane.next_raw_read(0, 100), Some(2));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 3)));
        assert_eq!(lane.next_raw_read(1, 100), Some(4));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 5)));
        assert_eq!(lane.next_raw_read(2, 100), None);
        assert_eq!(
            lane.consumer_seq,
            Some(3),
            "followed again from the first delivery read raw"
        );
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![1, 3, 5]);
    }

    #[test]
    fn a_redelivery_does_not_vouch_for_messages_after_it() {
        let mut lane = Lane::new();
        // Seq 1's first delivery (1) was lost; 2 and 3 were delivered (2, 3) but lost too; seq 1 comes
        // again as consumer sequence 4.
        lane.hold(
            item(1),
            Some(Delivery {
                consumer_seq: 4,
                delivered: 2,
            }),
        );
        lane.hold(item(6), first(5));
        lane.advance();
        assert_eq!(lane.next_raw_read(0, 100), Some(0));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 1)));
        // Not trusted from consumer sequence 4: seqs 2 and 3 must be read.
        assert_eq!(lane.next_raw_read(1, 100), Some(2));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 2)));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 3)));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 6)));
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![1, 2, 3, 6]);
    }

    #[test]
    fn a_suspect_lane_reads_raw_even_with_nothing_in_hand() {
        let mut lane = Lane::new();
        lane.hold(item(1), first(1));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 1)));
        // Reopened after a reconnect: delivery 2 is out and lost.
        lane.opened(created(), 2);
        // A message a round while nothing in hand says where the lost ones end.
        assert_eq!(lane.next_raw_read(0, 100), Some(2));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 2)));
        assert_eq!(lane.next_raw_read(1, 100), None);
        assert_eq!(lane.next_raw_read(0, 100), Some(3));
        lane.raw_read(None);
        assert_eq!(lane.next_raw_read(0, 100), None);
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![1, 2]);
    }

    #[test]
    fn a_suspect_lane_stops_reading_at_a_first_delivery_in_hand() {
        let mut lane = Lane::new();
        lane.hold(item(1), first(1));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 1)));
        lane.opened(created(), 2);
        // Delivery 2 was lost; 3 came on the new connection.
        lane.hold(item(4), first(3));
        assert_eq!(lane.next_raw_read(0, 100), Some(2));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 2)));
        assert_eq!(lane.next_raw_read(1, 100), Some(3));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 4)));
        assert_eq!(
            lane.next_raw_read(0, 100),
            None,
            "resynchronised, no longer suspect"
        );
        assert_eq!(lane.consumer_seq, Some(3));
    }

    #[test]
    fn a_suspect_lane_reads_on_until_it_follows_what_the_consumer_had_delivered() {
        let mut lane = Lane::new();
        lane.opened(created(), 0);
        // Deliveries 1 and 2 are in hand (not yet batched) when the connection drops; 3 was lost.
        lane.hold(item(11), first(1));
        lane.hold(item(12), first(2));
        lane.advance();
        lane.opened(created(), 3);
        // Landing on 11 re-trusts the sequences from 1, 2 follows, but 3 is not followed yet.
        assert_eq!(lane.next_raw_read(0, 100), Some(13));
        lane.raw_read(Some(raw("atl.in.acme.tool.declared", 13)));
        assert_eq!(lane.next_raw_read(0, 100), Some(14), "still suspect");
        lane.raw_read(None);
        assert_eq!(lane.next_raw_read(0, 100), None);
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![11, 12, 13]);
    }

    #[test]
    fn a_consumer_made_anew_is_followed_from_its_own_numbering() {
        let mut lane = Lane::new();
        lane.opened(created(), 0);
        lane.hold(item(5), first(1));
        lane.advance();
        let mut batch = Vec::new();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![5]);
        // Deleted and made again: it delivers from 1 again; nothing of the old numbering vouches.
        lane.opened(created() + 1_000_000_000, 0);
        lane.hold(item(9), first(1));
        lane.advance();
        lane.take(10, &mut batch);
        assert_eq!(seqs(&batch), vec![5, 9]);
    }

    /// A lane of `tenant` holding `seqs`, first deliveries from consumer sequence 1, all ready.
    fn lane_of(tenant: &str, seqs: impl IntoIterator<Item = u64>) -> (LaneKey, Lane) {
        let mut lane = Lane::new();
        let mut first_seq = None;
        for (n, seq) in seqs.into_iter().enumerate() {
            first_seq.get_or_insert(seq);
            lane.hold(item(seq), first(n as u64 + 1));
        }
        let subject = format!("atl.in.{tenant}.x");
        lane.raw_read(Some(raw(&subject, first_seq.expect("a message"))));
        (LaneKey::Tenant(tenant.to_owned()), lane)
    }

    fn ago(duration: Duration) -> Instant {
        Instant::now()
            .checked_sub(duration)
            .expect("a clock older than that")
    }

    #[test]
    fn a_batch_gives_each_ready_lane_its_share_in_inbound_order() {
        let mut lanes = Lanes::new();
        lanes
            .lanes
            .extend([lane_of("busy", 1..=100), lane_of("other", 200..300)]);
        // Two backlogs: full batches, shared.
        let batch = lanes.batch(40);
        assert_eq!(seqs(&batch), (1..=20).chain(200..220).collect::<Vec<_>>());
        // A backlog with a trickle beside it, but no more than two batches ready: full batches.
        lanes.lanes.remove(&LaneKey::Tenant("other".into()));
        lanes.lanes.extend([lane_of("quiet", [350])]);
        let batch = lanes.batch(40);
        assert_eq!(seqs(&batch), (21..=59).chain([350]).collect::<Vec<_>>());
        // One lane alone: full batches.
        let batch = lanes.batch(40);
        assert_eq!(seqs(&batch), (60..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_backlog_beside_a_trickle_gives_short_batches_for_a_while() {
        let max = 80;
        let shared = shared_batch(max);
        assert_eq!(shared, 16);
        let mut lanes = Lanes::new();
        lanes
            .lanes
            .extend([lane_of("busy", 1..=1000), lane_of("quiet", [5000])]);
        // The trickle's event and the backlog's shared part.
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (1..=16).chain([5000]).collect::<Vec<_>>());
        // Between the trickle's events (a new one within the last second): still short.
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (17..=32).collect::<Vec<_>>());
        // The trickle quiet for longer: full batches.
        let quiet = LaneKey::Tenant("quiet".into());
        lanes.lanes.get_mut(&quiet).unwrap().last_arrival = Some(ago(2 * TRICKLE));
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (33..113).collect::<Vec<_>>());
        // A redelivery of the trickle's batched event is no new event.
        let late = lanes.lanes.get_mut(&quiet).unwrap().hold(item(5000), first(2));
        assert!(late.is_some());
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (113..193).collect::<Vec<_>>());
        // Many trickles: each gives all it has, the backlog still its shared part.
        for n in 0..40 {
            lanes.lanes.extend([lane_of(&format!("t{n}"), [6000 + n])]);
        }
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (193..209).chain(6000..6040).collect::<Vec<_>>());
        // Two backlogs beside a trickle share the shared part.
        lanes
            .lanes
            .extend([lane_of("heavy", 10_000..10_500), lane_of("drip", [20_000])]);
        let batch = lanes.batch(max);
        assert_eq!(
            seqs(&batch),
            (209..217)
                .chain(10_000..10_008)
                .chain([20_000])
                .collect::<Vec<_>>()
        );
        // A backlog that outlasts the while: full batches, though a trickle is there.
        lanes.shared_since = Some(ago(SHARED_FOR));
        lanes.lanes.extend([lane_of("drop", [30_000])]);
        let batch = lanes.batch(max);
        assert_eq!(batch.len(), max);
        assert!(seqs(&batch).contains(&30_000));
    }

    #[test]
    fn only_new_events_ready_to_go_make_a_trickle() {
        let max = 80;
        let mut lanes = Lanes::new();
        let mut again = Lane::new();
        again.hold(
            item(5000),
            Some(Delivery {
                consumer_seq: 1,
                delivered: 2,
            }),
        );
        again.raw_read(Some(raw("atl.in.again.x", 5000)));
        lanes.lanes.extend([lane_of("busy", 1..=1000)]);
        lanes.lanes.insert(LaneKey::Tenant("again".into()), again);
        // One message ready: a trickle while it waits.
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (1..=16).chain([5000]).collect::<Vec<_>>());
        // Taken, it was a redelivery, no new event: no trickle.
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (17..=96).collect::<Vec<_>>());
        // A lane just opened, with nothing yet: no trickle.
        lanes.lanes.insert(LaneKey::Tenant("new".into()), Lane::new());
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (97..=176).collect::<Vec<_>>());
        // Messages held past `known` (waiting for a raw read) are not ready: neither a trickle nor a
        // backlog of their lane.
        let mut gap = Lane::new();
        for seq in 7000..7500 {
            gap.hold(item(seq), first(seq - 6999));
        }
        gap.last_arrival = Some(ago(2 * TRICKLE));
        lanes.lanes.insert(LaneKey::Tenant("gap".into()), gap);
        assert_eq!(lanes.lanes[&LaneKey::Tenant("gap".into())].ready(), 0);
        let batch = lanes.batch(max);
        assert_eq!(seqs(&batch), (177..=256).collect::<Vec<_>>());
    }

    #[test]
    fn the_while_of_short_batches_starts_again_only_after_the_backlog_is_gone() {
        let max = 80;
        let quiet = LaneKey::Tenant("quiet".into());
        let mut lanes = Lanes::new();
        lanes
            .lanes
            .extend([lane_of("busy", 1..=2000), lane_of("quiet", [9000])]);
        assert_eq!(lanes.batch(max).len(), 17);
        // The while is over: full batches beside the trickle.
        lanes.shared_since = Some(ago(SHARED_FOR));
        assert_eq!(lanes.batch(max).len(), max);
        // The trickle pauses for a batch, then sends again: still full batches.
        lanes.lanes.get_mut(&quiet).unwrap().last_arrival = Some(ago(2 * TRICKLE));
        assert_eq!(lanes.batch(max).len(), max);
        lanes.lanes.extend([lane_of("quiet", [9001])]);
        let batch = lanes.batch(max);
        assert_eq!(batch.len(), max);
        assert!(seqs(&batch).contains(&9001));
        // The backlog dips below two batches for a batch: still full batches after it.
        let busy = LaneKey::Tenant("busy".into());
        let parked = lanes.lanes.remove(&busy).unwrap();
        lanes
            .lanes
            .extend([lane_of("busy", 3000..3100), lane_of("quiet", [9002])]);
        assert_eq!(lanes.batch(max).len(), max);
        lanes.lanes.insert(busy.clone(), parked);
        lanes.lanes.extend([lane_of("quiet", [9003])]);
        assert_eq!(lanes.batch(max).len(), max);
        // No backlog for long enough: a new backlog beside the trickle gets short batches again.
        lanes.lanes.remove(&busy);
        lanes.last_backlog = Some(ago(BACKLOG_GONE));
        lanes.lanes.extend([lane_of("quiet", [9004])]);
        assert_eq!(lanes.batch(max).len(), 1);
        lanes
            .lanes
            .extend([lane_of("busy", 10_000..11_000), lane_of("quiet", [9005])]);
        assert_eq!(
            seqs(&lanes.batch(max)),
            [9005].into_iter().chain(10_000..10_016).collect::<Vec<_>>()
        );
    }
}
