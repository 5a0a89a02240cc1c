//! Decodes arbitrary bytes as an RPC-over-RDMA version 2 header; whatever
//! decodes must re-encode to the same bytes, and property sets must
//! interpret without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::v2::{error_for, Body, Header, Properties};
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
            if let Body::ConnProp(props) = &h.body {
                let _ = Properties::from_propset(props);
            }
        }
        Err(e) => {
            let answer = error_for(&e, (1, 2));
            assert_eq!(answer.is_some(), Prefix::peek(data).is_ok());
        }
    }
});
