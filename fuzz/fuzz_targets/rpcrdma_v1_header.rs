//! Decodes arbitrary bytes as an RPC-over-RDMA version 1 header (and as
//! RFC 8797 private data, and through the version dispatch of
//! `AnyHeader`); whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::cm::CmPrivateData;
use rpcrdma::wire::v1::{error_body_for, peek_foreign_err_vers, Header};
use rpcrdma::wire::{AnyHeader, Limits, Prefix};

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
    if let Ok((any, len)) = AnyHeader::parse(data, &limits) {
        let bytes = match &any {
            AnyHeader::V1(h) => xdr::to_bytes(h),
            AnyHeader::V2(h) => xdr::to_bytes(h),
        };
        assert_eq!(&bytes[..], &data[..len]);
    }
    if let Some((xid, _, _, _)) = peek_foreign_err_vers(data) {
        assert_eq!(Prefix::peek(data).map(|p| p.xid), Ok(xid));
    }
    if let Ok(pd) = CmPrivateData::parse(data) {
        assert_eq!(&pd.to_bytes()[..], &data[..8]);
    }
});
