//! Version 2 over softrnic (real iWARP over TCP on 127.0.0.1): reverse
//! calls and replies with chunks (GENL, v2 draft §4.2.2) and Send With
//! Invalidate in the reverse direction (§8.4.1), and a call resent with
//! larger resources (§5.3.3).
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::client::DdpReplyHint;
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, Server};
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use xdr::{Decoder, Encoder, XdrBuf};

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 17 + i / 307) as u8))
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genl_backchannel_and_resend_over_iwarp() {
    let cfg = SoftConfig {
        crc: true,
        ..SoftConfig::default()
    };
    let sdev = SoftDevice::new(cfg, 700);
    let cdev = SoftDevice::new(cfg, 701);
    let mut server = Server::new();
    server.register(EchoService::default());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server_cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), server_cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    let backchannels = listener.backchannels();
    listener.spawn();
    let mut callbacks = Server::new();
    callbacks.register(EchoService::default());
    let client_cfg = RdmaClientConfig {
        version: Version::V2,
        ..RdmaClientConfig::default()
    };
    let client =
        RdmaClient::connect_with_backchannel(&cdev, &addr, client_cfg, Arc::new(callbacks))
            .await
            .unwrap();
    EchoClient::new(client.clone()).null().await.unwrap();
    let id = backchannels.conn_ids()[0];
    let cb = EchoClient::new(backchannels.get(id).unwrap());
    for (i, n) in [700usize, 5000, 100_000].into_iter().enumerate() {
        let data = pattern(n, i as u8);
        let got = cb.echo(data.clone()).await;
        assert!(
            got.as_ref().is_ok_and(|g| *g == data),
            "{n}: {:?}",
            got.err()
        );
    }
    assert_eq!(client.stats().backchannel_calls, 3);

    // A write chunk of 100 bytes for a 50 000-byte result: resent once.
    let data = pattern(50_000, 9);
    let mut args = XdrBuf::new();
    args.put_bulk(data.clone(), true);
    let call = RpcCall {
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        proc_: PROC_ECHO,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len: 5000,
            ddp: Some(DdpReplyHint {
                position: 4,
                max_len: 100,
            }),
        },
    };
    let results = client.call(call).await.unwrap();
    let mut dec = Decoder::from_bytes(&results);
    assert_eq!(dec.opaque_bytes(50_000).unwrap(), data);
    assert_eq!(client.stats().resource_resends, 1);
    assert_eq!(client.version(), Version::V2);
    client.close();
}
