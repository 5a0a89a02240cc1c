//! Decodes NFSv4.1/4.2 COMPOUND arguments and results, callback
//! COMPOUNDs and attribute lists from arbitrary bytes; must never panic,
//! and whatever decodes completely must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs::v4::attr::{Bitmap4, FileAttrs, KNOWN_ATTRS};
use nfs::v4::{cb, ulb, Compound4Args, Compound4Res, CompoundHeader, NfsArgop4};
use xdr::{Decode, Decoder};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 => {
            if let Ok(c) = xdr::from_slice::<Compound4Args>(rest) {
                let stopped = c
                    .argarray
                    .iter()
                    .any(|op| matches!(op, NfsArgop4::Unsupported(_) | NfsArgop4::Illegal(_)));
                if !stopped {
                    assert_eq!(xdr::to_bytes(&c)[..], rest[..]);
                }
                let _ = ulb::reply_size_estimate(&c, 1 << 20);
                let _ = ulb::pair_write_chunks(&c.argarray, &[0, 4096, 1]);
            }
        }
        1 => {
            if let Ok(r) = xdr::from_slice::<Compound4Res>(rest) {
                assert_eq!(xdr::to_bytes(&r)[..], rest[..]);
            }
        }
        2 => {
            // The server's op-at-a-time path.
            let mut dec = Decoder::new(rest);
            if let Ok(h) = CompoundHeader::decode(&mut dec) {
                for _ in 0..h.numops.min(64) {
                    if NfsArgop4::decode(&mut dec).is_err() {
                        break;
                    }
                }
            }
        }
        3 => {
            let _ = xdr::from_slice::<cb::CbCompound4Args>(rest);
            let _ = xdr::from_slice::<cb::CbCompound4Res>(rest);
        }
        _ => {
            if let Ok(f) = xdr::from_slice::<nfs::v4::Fattr4>(rest) {
                if let Ok(a) = FileAttrs::from_fattr4(&f) {
                    let again = a.to_fattr4(&Bitmap4::from_bits(KNOWN_ATTRS));
                    assert_eq!(FileAttrs::from_fattr4(&again), Ok(a));
                }
            }
        }
    }
});
