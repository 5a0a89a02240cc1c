//! The RPC-over-RDMA endpoints over softrnic: real iWARP (MPA/DDP/RDMAP)
//! over TCP on 127.0.0.1, byte-exact echo across every conveyance, with
//! and without MPA CRC, both protocol versions, and the backchannel.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::Server;
use rpcrdma::plan::Version;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 13 + i / 509) as u8))
        .collect::<Vec<u8>>()
        .into()
}

async fn run(crc: bool, version: Version, seed: u64) {
    let cfg = SoftConfig {
        crc,
        ..SoftConfig::default()
    };
    let sdev = SoftDevice::new(cfg, seed);
    let cdev = SoftDevice::new(cfg, seed + 1);
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
        version,
        ..RdmaClientConfig::default()
    };
    let client =
        RdmaClient::connect_with_backchannel(&cdev, &addr, client_cfg, Arc::new(callbacks))
            .await
            .unwrap();
    let echo = EchoClient::new(client.clone());
    echo.null().await.unwrap();
    for (i, n) in [0usize, 1, 3990, 4024, 4025, 4097, 65_537, 102_400, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "size {n}");
    }
    let s = client.stats();
    assert!(
        s.inline_calls > 0 && s.read_chunk_calls > 0 && s.write_chunk_replies > 0,
        "{s:?}"
    );
    assert_eq!(s.in_place_replies, s.write_chunk_replies, "{s:?}");
    // softrnic hands each reply to the client on its receive task.
    assert!(s.handled_on_device >= 10, "{s:?}");
    assert_eq!(client.version(), version);
    let id = backchannels.conn_ids()[0];
    let cb = EchoClient::new(backchannels.get(id).unwrap());
    let small = pattern(700, 5);
    assert_eq!(cb.echo(small.clone()).await.unwrap(), small);
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_over_iwarp_without_crc() {
    run(false, Version::V1, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_over_iwarp_with_crc() {
    run(true, Version::V1, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_over_iwarp_version_two() {
    run(false, Version::V2, 300).await;
}

/// Each reply leaves the server in one socket write, its RDMA Writes and
/// its Send together (issue 19: written apart, the Send of a small READ
/// reply waited for the kernel client's delayed ACK); each call leaves the
/// client in one. A call with a read chunk adds the server's Read Request
/// and the client's Read Response: one write each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_socket_write_per_reply_and_per_call() {
    let cfg = SoftConfig {
        first_send_delay: std::time::Duration::ZERO,
        ..SoftConfig::default()
    };
    let sdev = SoftDevice::new(cfg, 400);
    let cdev = SoftDevice::new(cfg, 401);
    let mut server = Server::new();
    server.register(EchoService::default());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), RdmaServerConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let client = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    let echo = EchoClient::new(client.clone());
    echo.null().await.unwrap();
    // (size, server writes, client writes) per call: inline both ways
    // (small, and close to the 4 KiB threshold); a read chunk in the call
    // and a write chunk in the reply.
    for (n, server_writes, client_writes) in [(100usize, 1, 1), (3000, 1, 1), (20_000, 2, 2)] {
        for round in 0..4 {
            let (s0, c0) = (sdev.socket_writes(), cdev.socket_writes());
            let data = pattern(n, round);
            assert_eq!(echo.echo(data.clone()).await.unwrap(), data);
            assert_eq!(
                (sdev.socket_writes() - s0, cdev.socket_writes() - c0),
                (server_writes, client_writes),
                "echo of {n} bytes, round {round}: (server, client) socket writes"
            );
        }
    }
    let s = client.stats();
    assert_eq!((s.read_chunk_calls, s.write_chunk_replies), (4, 4), "{s:?}");
    client.close();
}

/// An RDMA client of an ECHO server, each on its own soft device (ids
/// `id` and `id + 1`, kept alive with the client), default configurations.
async fn echo_client(id: u64) -> ((SoftDevice, SoftDevice), RdmaClient<SoftDevice>) {
    let (sdev, cdev) = (
        SoftDevice::new(SoftConfig::default(), id),
        SoftDevice::new(SoftConfig::default(), id + 1),
    );
    let mut server = Server::new();
    server.register(EchoService::default());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), RdmaServerConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let client = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    ((sdev, cdev), client)
}

/// The server reuses the buffers it pulls read chunks into
/// (`RdmaServerConfig::pull_pool_bytes`): a call shorter than the last one
/// in the same buffer sees none of the last one's bytes. Its XDR padding
/// sits where the earlier call's data was, and a non-zero pad is refused
/// as garbage arguments, so every length here must still echo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_pull_buffers_show_nothing_of_the_previous_call() {
    let (_devices, client) = echo_client(300).await;
    let echo = EchoClient::new(client.clone());
    for round in 0..4u8 {
        for n in [100_003usize, 100_001, 100_002, 99_999, 100_000] {
            let fill = Bytes::from(vec![0xff ^ round; n]);
            assert_eq!(echo.echo(fill.clone()).await.unwrap(), fill, "size {n}");
        }
    }
    assert!(client.stats().read_chunk_calls >= 20);
    client.close();
}

/// The client posts its receives again in the buffers of replies their
/// callers dropped (docs/bench.md, "Receive buffers reused"): replies still
/// held are never written over, and a short reply in a reused buffer shows
/// nothing of the longer one before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_receive_buffers_never_touch_a_reply_still_held() {
    let (_devices, client) = echo_client(310).await;
    let echo = EchoClient::new(client.clone());
    // Inline replies of falling then rising lengths: each held until the
    // end, while as many more are received as the client posts receives.
    let held_n = 300usize;
    let mut held = Vec::with_capacity(held_n);
    for i in 0..held_n {
        let data = pattern(3000 - (i * 7) % 2900, i as u8);
        let reply = echo.echo(data.clone()).await.unwrap();
        held.push((data, reply));
    }
    // The held replies are their receive buffers' bytes (no copy), so
    // none of those buffers was posted again.
    let while_held = client.stats().reused_receive_buffers;
    assert_eq!(while_held, 0, "{:?}", client.stats());
    // Replies dropped as they come: their buffers are reused.
    for i in 0..held_n {
        let data = pattern(1 + (i * 11) % 3000, (i as u8).wrapping_mul(3));
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "call {i}");
    }
    for (i, (data, reply)) in held.iter().enumerate() {
        assert_eq!(reply, data, "held reply {i}");
    }
    let s = client.stats();
    assert!(s.reused_receive_buffers >= 200, "{s:?}");
    client.close();
}
