//! Decodes NFSv3 call arguments, MOUNT arguments and NFSv3 results from
//! arbitrary bytes; must never panic, and whatever decodes must re-encode
//! to the bytes it came from.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs::ulb::{NfsV3Binding, UpperLayerBinding};
use nfs::v3::{self, Args3, Nfsproc3};
use xdr::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let proc = u32::from(selector % 23);
    let shared = Bytes::copy_from_slice(rest);
    if let Ok(args) = Args3::decode(Nfsproc3(proc), rest) {
        assert_eq!(xdr::to_bytes(&args)[..], rest[..]);
    }
    let mut dec = Decoder::from_bytes(&shared);
    let _ = Args3::decode_from(Nfsproc3(proc), &mut dec);
    let _ = NfsV3Binding.reply_size_estimate(v3::NFS_PROGRAM, 3, proc, rest);
    let _ = match selector % 8 {
        0 => xdr::from_slice::<v3::Readdirplus3Res>(rest).map(drop),
        1 => xdr::from_slice::<v3::Readdir3Res>(rest).map(drop),
        2 => xdr::from_slice::<v3::Lookup3Res>(rest).map(drop),
        3 => xdr::from_slice::<v3::Write3Res>(rest).map(drop),
        4 => xdr::from_slice::<v3::Read3Res>(rest).map(drop),
        5 => xdr::from_slice::<nfs::mount::Mountres3>(rest).map(drop),
        6 => xdr::from_slice::<nfs::mount::Exports>(rest).map(drop),
        _ => xdr::from_slice::<v3::Create3Res>(rest).map(drop),
    };
});
