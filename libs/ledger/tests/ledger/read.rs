//! The ordered reader: where a read starts and stops, filters, batches, and gaps.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use toolledger_ledger::{
    Error, OrderedReader, ReadSpec, StreamMessage, last_sequence, message, read_all, read_range,
    stored_message,
};
use toolledger_testkit::NatsFixture;

const STREAM: &str = "TEST_LEDGER";

/// A stream like the ledger, but one whose messages a test may delete.
async fn stream_with(js: &jetstream::Context, count: u64) {
    js.create_stream(stream::Config {
        name: STREAM.to_owned(),
        subjects: vec!["test.ledger.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    append(js, 1, count).await;
}

/// Publishes messages `from..=to`: payload `entry <n>`, tenant `even` or `odd` by n.
async fn append(js: &jetstream::Context, from: u64, to: u64) {
    for n in from..=to {
        let tenant = if n % 2 == 0 { "even" } else { "odd" };
        js.publish(format!("test.ledger.{tenant}.x"), format!("entry {n}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

async fn drain(reader: &mut OrderedReader) -> Vec<StreamMessage> {
    let mut out = Vec::new();
    while let Some(message) = reader.next().await.unwrap() {
        out.push(message);
    }
    out
}

fn seqs(messages: &[StreamMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.seq).collect()
}

#[tokio::test]
async fn a_pass_to_the_tail_stops_at_the_tail_it_saw_when_opened() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 10).await;

    let mut reader = OrderedReader::open(&js, STREAM, ReadSpec::to_tail(4))
        .await
        .unwrap();
    assert_eq!(reader.last(), Some(10));
    append(&js, 11, 12).await;
    let read = drain(&mut reader).await;
    assert_eq!(seqs(&read), (4..=10).collect::<Vec<_>>());
    assert_eq!(read[0].payload, Bytes::from("entry 4"));
    assert_eq!(read[0].subject.as_str(), "test.ledger.even.x");
    assert!(reader.next().await.unwrap().is_none(), "stays ended");

    // From beyond the tail: nothing, at once.
    let mut past = OrderedReader::open(&js, STREAM, ReadSpec::to_tail(13))
        .await
        .unwrap();
    assert!(past.next().await.unwrap().is_none());
    assert_eq!(read_all(&js, STREAM).await.unwrap().len(), 12);
    assert_eq!(last_sequence(&js, STREAM).await.unwrap(), 12);
}

#[tokio::test]
async fn a_range_reads_exactly_its_sequences_and_refuses_one_the_stream_lacks() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 10).await;

    let range = read_range(&js, STREAM, 3, 7).await.unwrap();
    assert_eq!(
        range.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![3, 4, 5, 6, 7]
    );
    assert_eq!(range[4].1, Bytes::from("entry 7"));
    assert!(read_range(&js, STREAM, 8, 7).await.unwrap().is_empty());

    let error = OrderedReader::open(&js, STREAM, ReadSpec::range(5, 11))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::BeyondTail {
                wanted: 11,
                last: 10,
                ..
            }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_following_read_waits_for_new_messages_and_batches_what_is_ready() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 5).await;

    let mut reader = OrderedReader::open(&js, STREAM, ReadSpec::follow(3))
        .await
        .unwrap();
    assert_eq!(reader.last(), None);
    let mut got = Vec::new();
    while got.len() < 3 {
        let batch = reader.next_batch(2).await.unwrap();
        assert!(!batch.is_empty() && batch.len() <= 2, "{} messages", batch.len());
        got.extend(batch);
    }
    assert_eq!(seqs(&got), vec![3, 4, 5]);
    assert_eq!(got[2].pending, 0, "the last message leaves nothing pending");

    // Nothing new: the read waits (a select's other branch wins); a new message then arrives.
    let waited = tokio::time::timeout(Duration::from_millis(300), reader.next()).await;
    assert!(waited.is_err(), "a following read waits for the next message");
    append(&js, 6, 6).await;
    let next = tokio::time::timeout(Duration::from_secs(10), reader.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((next.seq, next.payload), (6, Bytes::from("entry 6")));
}

#[tokio::test]
async fn a_filtered_read_returns_matching_subjects_and_ends_without_waiting() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 9).await;

    let spec = ReadSpec::to_tail(1).subjects("test.ledger.even.>");
    let mut reader = OrderedReader::open(&js, STREAM, spec).await.unwrap();
    assert_eq!(seqs(&drain(&mut reader).await), vec![2, 4, 6, 8]);

    // No match at all: ends at once rather than after the stall limit.
    let started = Instant::now();
    let spec = ReadSpec::to_tail(1)
        .subjects("test.ledger.none.>")
        .stall_after(Duration::from_secs(20));
    let mut reader = OrderedReader::open(&js, STREAM, spec).await.unwrap();
    assert!(reader.next().await.unwrap().is_none());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_gap_is_an_error_naming_the_missing_seq_unless_the_reader_reports_gaps_itself() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 8).await;
    let handle = js.get_stream(STREAM).await.unwrap();
    handle.delete_message(4).await.unwrap();

    let mut strict = OrderedReader::open(&js, STREAM, ReadSpec::to_tail(1))
        .await
        .unwrap();
    let mut read = Vec::new();
    let error = loop {
        match strict.next().await {
            Ok(Some(message)) => read.push(message.seq),
            Ok(None) => panic!("the read ended without noticing the gap"),
            Err(error) => break error,
        }
    };
    assert_eq!(read, vec![1, 2, 3]);
    assert!(
        matches!(
            error,
            Error::SequenceGap {
                expected: 4,
                found: 5,
                ..
            }
        ),
        "{error}"
    );
    let error = read_range(&js, STREAM, 2, 6).await.unwrap_err();
    assert!(matches!(error, Error::SequenceGap { expected: 4, .. }), "{error}");

    let spec = ReadSpec::to_tail(1).allow_gaps();
    let mut lenient = OrderedReader::open(&js, STREAM, spec).await.unwrap();
    assert_eq!(seqs(&drain(&mut lenient).await), vec![1, 2, 3, 5, 6, 7, 8]);

    // The last message gone: the pass ends early, and says which sequences are missing.
    handle.delete_message(8).await.unwrap();
    let mut strict = OrderedReader::open(&js, STREAM, ReadSpec::to_tail(5))
        .await
        .unwrap();
    let error = loop {
        match strict.next().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the read ended without noticing the missing tail"),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, Error::EndsEarly { from: 8, to: 8, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn single_messages_come_back_by_sequence_the_stored_one_with_its_raw_headers() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    stream_with(&js, 3).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("B-Second", "2");
    headers.append("A-First", "1");
    js.publish_with_headers("test.ledger.odd.x", headers, "with headers".into())
        .await
        .unwrap()
        .await
        .unwrap();

    assert_eq!(message(&js, STREAM, 2).await.unwrap(), Bytes::from("entry 2"));
    let error = message(&js, STREAM, 99).await.unwrap_err();
    assert!(matches!(error, Error::NoSuchMessage { seq: 99, .. }), "{error}");

    let stored = stored_message(&js, STREAM, 4).await.unwrap().unwrap();
    assert_eq!(stored.seq, 4);
    assert_eq!(stored.subject, "test.ledger.odd.x");
    assert_eq!(stored.payload, Bytes::from("with headers"));
    let names: Vec<String> = stored.header_lines().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(stored_message(&js, STREAM, 99).await.unwrap().is_none());
}

#[tokio::test]
async fn a_missing_stream_is_a_stream_error_that_keeps_its_cause() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let error = OrderedReader::open(&js, "NO_SUCH_STREAM", ReadSpec::to_tail(1))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Stream { .. }), "{error}");
    assert!(std::error::Error::source(&error).is_some());
    let text = toolledger_ledger::with_causes(&error);
    assert!(text.starts_with("stream NO_SUCH_STREAM: opening: "), "{text}");
}
