//! Decodes arbitrary bytes as RPC call and reply messages, and runs them
//! through the server core with the echo service; must never panic.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oncrpc::client::decode_reply;
use oncrpc::echo::EchoService;
use oncrpc::msg::{AuthSys, CallHeader, Credential, ReplyHeader};
use oncrpc::{PeerInfo, Server, TransportKind};
use xdr::Decoder;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = ReplyHeader::decode(&mut Decoder::new(data));
    let _ = decode_reply(&bytes);
    let _ = AuthSys::decode_body(&bytes);
    if let Ok(h) = CallHeader::decode(&mut Decoder::new(data)) {
        let _ = Credential::from_opaque(&h.cred);
    }
    let mut server = Server::new();
    server.register(EchoService::new(4096));
    let peer = PeerInfo {
        conn_id: 1,
        addr: None,
        transport: TransportKind::Other,
        security: oncrpc::TransportSecurity::None,
    };
    // The echo service never waits, so one poll completes the call.
    let mut fut = pin!(server.handle_call(bytes, &peer));
    let mut cx = Context::from_waker(Waker::noop());
    if let Poll::Ready(Some(reply)) = fut.as_mut().poll(&mut cx) {
        let flat = reply.to_bytes();
        assert!(ReplyHeader::decode(&mut Decoder::new(&flat)).is_ok());
    }
});
