//! The sans-IO responder (`rpcrdma::endpoint::responder`) driven directly
//! by arbitrary event sequences: received messages (raw bytes, or headers
//! built from the input so they pass the decode), calls answered with
//! replies of arbitrary shape, refused, or dropped. The driver and its
//! checks are shared with `crates/rpcrdma/tests/endpoint_events.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/rpcrdma/tests/support/responder_events.rs"]
mod events;

fuzz_target!(|data: &[u8]| {
    events::drive(data);
});
