//! `ClientTransport::call_into` on RdmaClient: the caller's buffer is the
//! Write chunk, so the echoed (READ-like) data is placed there by the
//! server's RDMA Write, with no copy (RFC 8166 §3.4.6).
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::client::DdpReplyHint;
use oncrpc::echo::{EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, Server};
use rnic::loopback::LoopbackNetwork;
use rnic::Device;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use xdr::{Decoder, Encoder, XdrBuf};

fn echo_call(data: Bytes) -> RpcCall {
    let len = data.len();
    let mut args = XdrBuf::new();
    args.put_bulk(data, true);
    RpcCall {
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        proc_: PROC_ECHO,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len: 64 + xdr::padded_len(len),
            ddp: Some(DdpReplyHint {
                position: 4,
                max_len: len,
            }),
        },
    }
}

async fn data_lands_in_callers_buffer<D: Device>(server: D, client: D, addr: D::Addr) {
    let mut services = Server::new();
    services.register(EchoService::default());
    let listener = RdmaListener::bind(
        &server,
        &addr,
        Arc::new(services),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let c = RdmaClient::connect(&client, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    for (i, n) in [8192usize, 32 * 1024 + 3, 1 << 20].into_iter().enumerate() {
        let data: Bytes = (0..n)
            .map(|j| (j * 31 + i) as u8)
            .collect::<Vec<_>>()
            .into();
        let dst = BytesMut::with_capacity(n + 8192);
        let (lo, cap) = (dst.as_ptr() as usize, dst.capacity());
        let results = c.call_into(echo_call(data.clone()), dst).await.unwrap();
        let mut dec = Decoder::from_bytes(&results);
        let got = dec.opaque_bytes(n).unwrap();
        dec.finish().unwrap();
        assert_eq!(got, data, "size {n}");
        let at = got.as_ptr() as usize;
        assert!(
            at >= lo && at + n <= lo + cap,
            "size {n}: data not in the caller's buffer"
        );
    }
    let s = c.stats();
    assert_eq!(s.in_place_replies, 3, "{s:?}");
}

#[tokio::test]
async fn loopback_call_into_places_data_in_callers_buffer() {
    let net = LoopbackNetwork::new(90);
    data_lands_in_callers_buffer(net.device(), net.device(), String::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn softrnic_call_into_places_data_in_callers_buffer() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let s = SoftDevice::new(SoftConfig::default(), 91);
    let c = SoftDevice::new(SoftConfig::default(), 92);
    data_lands_in_callers_buffer(s, c, any).await;
}
