//! Tests of `lmos/stream.rs`.

use super::*;

fn status(status: &str, chunk: Option<Chunk>) -> Value {
    let mut v = json!({"messageType": "actionStatus", "action": "a", "status": status});
    if let Some(c) = chunk {
        v[MEMBER] = c.to_value();
    }
    v
}

#[test]
fn chunks_round_trip() {
    for c in [
        Chunk::text(0, "tok"),
        Chunk::binary(5, "audio/pcm", &[0, 255, 7]),
        Chunk::end(9),
    ] {
        assert_eq!(Chunk::from_value(&c.to_value()).unwrap(), c);
    }
    assert_eq!(
        Chunk::binary(1, "audio/pcm", &[0, 255, 7]).bytes(),
        vec![0, 255, 7]
    );
}

#[test]
fn malformed_chunks_are_refused() {
    for (v, e) in [
        (json!({"data": "x"}), ChunkError::Malformed),
        (json!({"seq": -1, "data": "x"}), ChunkError::Malformed),
        (json!("x"), ChunkError::Malformed),
        (json!({"seq": 0}), ChunkError::NoData),
        (json!({"seq": 0, "data": "x", "end": 1}), ChunkError::BadEnd),
        (
            json!({"seq": 0, "data": "%%", "contentEncoding": "base64"}),
            ChunkError::BadBase64,
        ),
        (
            json!({"seq": 0, "data": "x", "contentEncoding": "gzip"}),
            ChunkError::UnknownEncoding("gzip".into()),
        ),
    ] {
        assert_eq!(Chunk::from_value(&v), Err(e), "{v}");
    }
}

#[test]
fn the_sequencer_finds_gaps_repeats_and_chunks_after_the_end() {
    let mut s = Sequencer::default();
    assert_eq!(
        s.check(&Chunk::text(0, "a"), false),
        Order::Next { end: false }
    );
    assert_eq!(
        s.check(&Chunk::text(2, "c"), false),
        Order::Gap {
            expected: 1,
            got: 2
        }
    );
    assert_eq!(s.next_seq(), 1, "a strict sequencer waits for 1");
    assert_eq!(
        s.check(&Chunk::text(0, "a"), false),
        Order::Stale {
            expected: 1,
            got: 0
        }
    );
    assert_eq!(
        s.check(&Chunk::text(1, "b"), false),
        Order::Next { end: false }
    );
    assert_eq!(s.check(&Chunk::end(2), false), Order::Next { end: true });
    assert!(s.ended());
    assert_eq!(s.next_seq(), 2, "two chunks");
    assert_eq!(s.check(&Chunk::text(2, "late"), false), Order::AfterEnd);
}

#[test]
fn the_reassembler_collects_in_order_and_reports_gaps() {
    let mut r = Reassembler::default();
    r.feed(&status("pending", None)).unwrap();
    for (i, t) in ["The ", "sky ", "is ", "blue"].iter().enumerate() {
        if i == 2 {
            continue; // lost
        }
        r.feed(&status("running", Some(Chunk::text(i as u64, *t))))
            .unwrap();
    }
    assert!(!r.ended());
    r.feed(&status("completed", Some(Chunk::end(4)))).unwrap();
    assert_eq!(r.payload, b"The sky blue");
    assert_eq!(r.chunks, 3);
    assert_eq!(r.gaps, vec![(2, 3)]);
    assert_eq!(r.ending, Some(Ending::Complete));
}

#[test]
fn a_lost_tail_shows_at_the_end_marker() {
    let mut r = Reassembler::default();
    r.feed(&status("running", Some(Chunk::text(0, "a"))))
        .unwrap();
    r.feed(&status("completed", Some(Chunk::end(3)))).unwrap();
    assert_eq!(r.gaps, vec![(1, 3)]);
}

#[test]
fn a_failed_status_or_an_error_breaks_the_stream() {
    let mut r = Reassembler::default();
    r.feed(&status("running", Some(Chunk::text(0, "a"))))
        .unwrap();
    r.feed(&status("failed", None)).unwrap();
    assert!(matches!(r.ending, Some(Ending::Broken(_))));
    let mut r = Reassembler::default();
    r.feed(&json!({"messageType": "error", "status": "503"}))
        .unwrap();
    assert!(matches!(r.ending, Some(Ending::Broken(_))));
}
