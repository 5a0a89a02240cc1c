//! Feeds the record-marking deframer arbitrary bytes in arbitrary chunks;
//! it must never panic and never hold more than the bound plus one chunk.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oncrpc::record::RecordDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let max = 64 + usize::from(split) * 8;
    let chunk = usize::from(split % 17) + 1;
    let mut d = RecordDecoder::new(max);
    let mut total = 0usize;
    for piece in rest.chunks(chunk) {
        d.feed(piece);
        loop {
            match d.next_record() {
                Ok(Some(r)) => {
                    assert!(r.len() <= max);
                    total += r.len();
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(d.buffered() <= max + 4 + chunk + 4);
    }
    assert!(total <= rest.len());
});
