//! Decodes arbitrary bytes as an RPC-over-RDMA version 1 header (and as
//! RFC 8797 private data); whatever decodes must re-encode to the same
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::cm::CmPrivateData;
use rpcrdma::wire::v1::{error_body_for, Header};
use rpcrdma::wire::{Limits, Prefix};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    match Header::parse(data, &limits) {
        Ok((h, len)) => {
            assert!(len <= data.len());
            let mut out = vec![0xa5u8; h.buffer_len()];
            assert_eq!(h.emit(&mut out), Ok(len));
            assert_eq!(&out[..], &data[..len]);
            let _ = h.to_string();
            let _ = h.check_supported();
        }
        Err(e) => {
            let answer = error_body_for(&e);
            assert_eq!(answer.is_some(), Prefix::peek(data).is_ok());
        }
    }
    if let Ok(pd) = CmPrivateData::parse(data) {
        assert_eq!(&pd.to_bytes()[..], &data[..8]);
    }
});
