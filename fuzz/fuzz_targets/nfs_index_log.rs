//! The handle index log's decoder (`nfs_server::localfs::index_log`) on
//! arbitrary bytes, as a whole log (header and records) and as records
//! alone: it never panics, stops at the first record that does not
//! decode with a typed error, never reads past the input, and every
//! record it accepts encodes to the bytes it took and decodes back to
//! itself (under `cfg(fuzzing)` the checksum is not checked, so the
//! body decoder sees every input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs_server::localfs::index_log::{Record, Replay, FRAME_LEN, HEADER_LEN};

fn check(r: &Record<'_>, taken: &[u8], epoch: u64) {
    let mut again = Vec::new();
    r.encode(epoch, &mut again)
        .expect("a decoded record encodes");
    assert_eq!(again.len(), taken.len());
    assert_eq!(again[FRAME_LEN..], taken[FRAME_LEN..], "body round trip");
    let (back, used) = Record::decode(&again, epoch).expect("an encoded record decodes");
    assert_eq!((back, used), (*r, again.len()));
}

fuzz_target!(|data: &[u8]| {
    // A whole log.
    if let Ok(mut replay) = Replay::new(data) {
        let epoch = replay.epoch;
        let mut at = HEADER_LEN;
        while let Some(r) = replay.next() {
            let end = replay.offset();
            assert!(at < end && end <= data.len());
            check(&r, &data[at..end], epoch);
            at = end;
        }
        if let Some((stop, _)) = replay.stopped {
            assert_eq!(stop, at);
        }
    }
    // Records from the first byte, epoch 0.
    let mut rest = data;
    while let Ok((r, used)) = Record::decode(rest, 0) {
        assert!(used >= FRAME_LEN && used <= rest.len());
        check(&r, &rest[..used], 0);
        rest = &rest[used..];
    }
});
