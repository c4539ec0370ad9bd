//! Entries read for the stages that apply the ledger in order (projector, export): the part of
//! reading an entry that needs no state — its leaf hash, the strict parse, the classification — done
//! a bounded distance ahead on a second thread while the caller applies what is already decoded.
//!
//! ```text
//! entries ─▶ decoder thread: decode_entry, in chunks of DECODE_CHUNK ─▶ ≤ AHEAD_CHUNKS waiting ─▶ apply, in order
//!                 ▲                                                                                  │
//!                 └──────────── applied chunks, dropped where they were allocated ◀─────────────────┘
//! ```
//!
//! A decoded entry is a tree of small allocations (the event's JSON), and freeing them cost the
//! applier a fifth of its time (a profile of the projector's apply), more than the allocator's
//! thread-local free would: the applier hands each applied chunk back and the decoder frees it.
//! The decoder is a job on rayon's pool, whose threads live on: a thread started per batch took
//! the allocator a fresh heap each time (page faults on new pages were a tenth of the apply's CPU).

use toolledger_schemas::ClassifiedEvent;
use toolledger_wire::LedgerEntry;

/// Entries are handed from the decoder to the applier this many at a time, so the two threads
/// wake each other once a chunk, not once an entry (which cost more than the decoding it moved).
pub const DECODE_CHUNK: usize = 32;
/// Chunks decoded and waiting for the applier, at most.
pub const AHEAD_CHUNKS: usize = 2;
/// Fewer entries than this are decoded on the caller's thread: a thread is not worth starting.
pub const DECODE_AHEAD_FROM: usize = 2 * DECODE_CHUNK;

/// One ledger entry as far as it goes without state.
pub struct DecodedEntry {
    /// `SHA-256(0x00 || bytes)` in lowercase hex (DESIGN §4).
    pub leaf: String,
    /// The parsed entry and its classification, or why the bytes are no ledger entry.
    pub entry: Result<(LedgerEntry, ClassifiedEvent), toolledger_wire::Error>,
}

/// Reads an entry's bytes: leaf hash, strict parse, classification.
pub fn decode_entry(bytes: &[u8]) -> DecodedEntry {
    DecodedEntry {
        leaf: toolledger_wire::entry::hex(&toolledger_merkle::leaf_hash(bytes)),
        entry: LedgerEntry::parse(bytes).map(|entry| {
            let classified = entry.classify();
            (entry, classified)
        }),
    }
}

/// Calls `apply` on every item in order with what `decode` made of it; `decode` runs on a second
/// thread (rayon's pool), up to [`AHEAD_CHUNKS`] × [`DECODE_CHUNK`] items ahead (on the caller's thread when there
/// are fewer than [`DECODE_AHEAD_FROM`] items), and what `apply` leaves of a decoded item is dropped
/// there too (`apply` takes what it keeps, e.g. with [`std::mem::take`]). Stops at `apply`'s first
/// error, and the decoder with it.
pub fn decode_ahead<T, D, E>(
    items: &[T],
    decode: impl Fn(&T) -> D + Sync,
    mut apply: impl FnMut(&T, &mut D) -> Result<(), E>,
) -> Result<(), E>
where
    T: Sync,
    D: Send,
{
    // On a pool thread, a decoder queued behind this one could wait for a thread that never frees.
    if items.len() < DECODE_AHEAD_FROM || rayon::current_thread_index().is_some() {
        return items.iter().try_for_each(|item| apply(item, &mut decode(item)));
    }
    rayon::in_place_scope(|scope| {
        let (send, decoded) = std::sync::mpsc::sync_channel::<Vec<D>>(AHEAD_CHUNKS);
        // Unbounded, but never holds more than the chunks the applier has had: AHEAD_CHUNKS + 1.
        let (give_back, applied) = std::sync::mpsc::channel::<Vec<D>>();
        let decode = &decode;
        scope.spawn(move |_| {
            for chunk in items.chunks(DECODE_CHUNK) {
                if send.send(chunk.iter().map(decode).collect()).is_err() {
                    break; // the applier failed and stopped reading
                }
                applied.try_iter().for_each(drop);
            }
            drop(send);
            applied.into_iter().for_each(drop); // until the applier is done
        });
        for (items, mut decoded) in items.chunks(DECODE_CHUNK).zip(decoded) {
            for (item, decoded) in items.iter().zip(&mut decoded) {
                apply(item, decoded)?;
            }
            // The decoder outlives this send (it reads until `give_back` is dropped).
            let _ = give_back.send(decoded);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_every_item_in_order_and_stops_at_the_first_error() {
        for len in [0, 1, DECODE_AHEAD_FROM - 1, DECODE_AHEAD_FROM, 1000] {
            let items: Vec<u64> = (0..len as u64).collect();
            let mut seen = Vec::new();
            decode_ahead(
                &items,
                |item| item * 2,
                |item, doubled| {
                    assert_eq!(*doubled, item * 2);
                    seen.push(*item);
                    Ok::<_, ()>(())
                },
            )
            .unwrap();
            assert_eq!(seen, items);

            let mut applied = 0;
            let failed = decode_ahead(
                &items,
                |item| *item,
                |_, item| {
                    applied += 1;
                    if *item == 40 { Err(*item) } else { Ok(()) }
                },
            );
            assert_eq!(failed, if len > 40 { Err(40) } else { Ok(()) });
            assert_eq!(applied, len.min(41));
        }
    }
}
