//! Decodes a mix of XDR types from arbitrary bytes; must never panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use xdr::{Bounded, Decode, Decoder, FixedOpaque};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let shared = Bytes::copy_from_slice(rest);
    let mut dec = Decoder::from_bytes(&shared);
    // Each selector bit picks the next operation; loop until input ends.
    let mut op = u32::from(selector);
    for round in 0..64u32 {
        let r = match (op + round) % 16 {
            0 => dec.u32().map(drop),
            1 => dec.i64().map(drop),
            2 => dec.bool().map(drop),
            3 => dec.enum_checked(|v| v < 3).map(drop),
            4 => dec.opaque(64).map(drop),
            5 => dec.opaque_bytes(1 << 20).map(drop),
            6 => dec.str_utf8(255).map(drop),
            7 => dec.opaque_fixed(usize::from(selector % 13)).map(drop),
            8 => Vec::<u64>::decode(&mut dec).map(drop),
            9 => Bounded::<Vec<Option<Bytes>>, 16>::decode(&mut dec).map(drop),
            10 => dec
                .sub(usize::from(selector))
                .and_then(|mut s| s.array::<u32>(8))
                .map(drop),
            11 => <[u32; 3]>::decode(&mut dec).map(drop),
            12 => FixedOpaque::<5>::decode(&mut dec).map(drop),
            13 => Option::<String>::decode(&mut dec).map(drop),
            14 => dec.array_len(1000, 12).map(drop),
            _ => dec.clone().finish(),
        };
        if r.is_err() || dec.is_empty() {
            break;
        }
        op = op.rotate_left(3) ^ round;
    }
});
