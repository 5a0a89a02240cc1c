//! The RPC-over-RDMA v1 client and server over the rnic loopback device:
//! NULL and ECHO byte-exact across every conveyance boundary (inline,
//! read chunk, Position-Zero Read chunk, write chunk, reply chunk).
#![cfg(feature = "transport")]

use std::sync::Arc;

use bytes::Bytes;
use oncrpc::client::DdpReplyHint;
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, Server};
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use xdr::{Decoder, Encoder, XdrBuf};

async fn setup(seed: u64, server_cfg: RdmaServerConfig) -> RdmaClient<LoopbackDevice> {
    setup_with(seed, server_cfg, RdmaClientConfig::default()).await
}

async fn setup_with(
    seed: u64,
    server_cfg: RdmaServerConfig,
    client_cfg: RdmaClientConfig,
) -> RdmaClient<LoopbackDevice> {
    let net = LoopbackNetwork::new(seed);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), server_cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    RdmaClient::connect(&cdev, &addr, client_cfg).await.unwrap()
}

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 7 + i / 251) as u8))
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn null_call_round_trips_inline() {
    let client = setup(1, RdmaServerConfig::default()).await;
    let echo = EchoClient::new(client.clone());
    echo.null().await.unwrap();
    let s = client.stats();
    assert_eq!(s.inline_calls, 1);
    assert_eq!(s.reply_chunk_replies + s.write_chunk_replies, 0);
    // The loopback device has no completion handlers: the reply is polled.
    assert_eq!(s.handled_on_device, 0);
    assert_eq!(client.thresholds().send, 4096);
    assert_eq!(client.credits().0, 64, "server grants its posted receives");
}

#[tokio::test]
async fn echo_is_byte_exact_across_inline_and_chunk_boundaries() {
    let client = setup(2, RdmaServerConfig::default()).await;
    let echo = EchoClient::new(client.clone());
    // Around the 4096-byte inline threshold (header 28 + RPC header 40 +
    // length word), then well into chunks.
    let sizes = [
        0,
        1,
        3,
        4,
        5,
        1000,
        3960,
        3990,
        4000,
        4023,
        4024,
        4025,
        4096,
        4097,
        8192,
        65_537,
        102_400,
        1 << 20,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(n, i as u8);
        let got = echo.echo(data.clone()).await.unwrap();
        assert_eq!(got, data, "size {n}");
    }
    let s = client.stats();
    assert!(s.inline_calls > 0, "{s:?}");
    assert!(s.read_chunk_calls > 0, "{s:?}");
    assert!(s.write_chunk_replies > 0, "{s:?}");
    // Every write-chunk reply was rebuilt around the placed data, with
    // no copy of it (odd sizes included: their padding is rezeroed).
    assert_eq!(s.in_place_replies, s.write_chunk_replies, "{s:?}");
}

/// A call whose large argument is not marked DDP-eligible cannot use a
/// read chunk: it travels as a Long call in a Position-Zero Read chunk.
#[tokio::test]
async fn long_call_uses_position_zero_read_chunk() {
    let client = setup(3, RdmaServerConfig::default()).await;
    for n in [5000usize, 70_001] {
        let data = pattern(n, 9);
        let mut args = XdrBuf::new();
        args.put_bulk(data.clone(), false);
        let results = client
            .call(RpcCall {
                prog: ECHO_PROGRAM,
                vers: ECHO_VERSION,
                proc_: PROC_ECHO,
                cred: OpaqueAuth::NONE,
                args,
                reply_hint: ReplyHint {
                    max_reply_len: 64 + xdr::padded_len(n),
                    ddp: Some(DdpReplyHint {
                        position: 4,
                        max_len: n,
                    }),
                },
            })
            .await
            .unwrap();
        let mut dec = Decoder::from_bytes(&results);
        assert_eq!(dec.opaque_bytes(n).unwrap(), data);
    }
    assert_eq!(client.stats().position_zero_calls, 2);
}

/// Without a write chunk for the result, a large reply comes back whole in
/// the reply chunk as RDMA_NOMSG.
#[tokio::test]
async fn long_reply_uses_reply_chunk() {
    let client = setup(4, RdmaServerConfig::default()).await;
    for n in [4100usize, 33_333] {
        let data = pattern(n, 3);
        let mut args = XdrBuf::new();
        args.put_bulk(data.clone(), true);
        let results = client
            .call(RpcCall {
                prog: ECHO_PROGRAM,
                vers: ECHO_VERSION,
                proc_: PROC_ECHO,
                cred: OpaqueAuth::NONE,
                args,
                reply_hint: ReplyHint {
                    max_reply_len: 64 + xdr::padded_len(n),
                    ddp: None,
                },
            })
            .await
            .unwrap();
        let mut dec = Decoder::from_bytes(&results);
        assert_eq!(dec.opaque_bytes(n).unwrap(), data);
    }
    let s = client.stats();
    assert_eq!(s.reply_chunk_replies, 2, "{s:?}");
    assert_eq!(s.write_chunk_replies, 0, "{s:?}");
}

/// A reply of `n` bytes of results, none of it DDP-eligible (so it goes
/// inline or in a reply chunk).
async fn echo_no_ddp(client: &RdmaClient<LoopbackDevice>, n: usize) -> Bytes {
    let mut args = XdrBuf::new();
    args.put_bulk(pattern(n, 9), true);
    client
        .call(RpcCall {
            prog: ECHO_PROGRAM,
            vers: ECHO_VERSION,
            proc_: PROC_ECHO,
            cred: OpaqueAuth::NONE,
            args,
            reply_hint: ReplyHint {
                max_reply_len: 64 + xdr::padded_len(n),
                ddp: None,
            },
        })
        .await
        .unwrap()
}

/// The server's inline size is what its private data advertises (RFC 8797
/// §5), and what it sends inline to a peer that receives as much: a 6000
/// byte call and its reply travel inline between two 8 KiB ends; when
/// either end keeps 4 KiB (the Linux client's default) the call's data goes
/// in a read chunk and the reply in a reply chunk.
#[tokio::test]
async fn larger_inline_size_is_advertised_and_used_only_when_both_ends_have_it() {
    let big = RdmaClientConfig {
        inline_size: 8192,
        ..RdmaClientConfig::default()
    };
    let server_8k = RdmaServerConfig {
        inline_size: 8192,
        ..RdmaServerConfig::default()
    };
    let cases = [
        (server_8k, big, 8192, 1, 0),
        (server_8k, RdmaClientConfig::default(), 4096, 0, 1),
        (RdmaServerConfig::default(), big, 4096, 0, 1),
    ];
    for (i, (server_cfg, client_cfg, send, inline, chunked)) in cases.into_iter().enumerate() {
        let client = setup_with(40 + i as u64, server_cfg, client_cfg).await;
        assert_eq!(client.thresholds().send, send, "case {i}");
        let got = echo_no_ddp(&client, 6000).await;
        let mut dec = Decoder::from_bytes(&got);
        assert_eq!(
            dec.opaque_bytes(6000).unwrap(),
            pattern(6000, 9),
            "case {i}"
        );
        let s = client.stats();
        assert_eq!(s.reply_chunk_replies, chunked, "case {i}: {s:?}");
        assert_eq!(s.inline_calls, inline, "case {i}: {s:?}");
        assert_eq!(
            s.read_chunk_calls + s.position_zero_calls,
            chunked,
            "case {i}: {s:?}"
        );
    }
}

/// Many concurrent calls against a small grant: the client never sends
/// more than the server's posted receives, or the loopback device would
/// terminate the connection (RFC 8166 §3.3.1, RFC 5040).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_respect_small_credit_grant() {
    let cfg = RdmaServerConfig {
        credits: 8,
        ..RdmaServerConfig::default()
    };
    let client = setup(5, cfg).await;
    let mut tasks = tokio::task::JoinSet::new();
    // 1,000 calls at once against a grant of 8: any Send beyond the grant
    // would find no posted receive and terminate the connection.
    for i in 0..1000usize {
        let c = client.clone();
        tasks.spawn(async move {
            let data = pattern(i * 997 % 20_000, i as u8);
            let got = EchoClient::new(c).echo(data.clone()).await.unwrap();
            assert_eq!(got, data);
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let (granted, outstanding) = client.credits();
    assert_eq!(granted, 8);
    assert_eq!(outstanding, 0);
}

/// A raw queue pair speaking to the server, to check its answers to
/// malformed headers (RFC 8166 §4.4, §4.5).
#[tokio::test]
async fn server_answers_bad_headers_with_rdma_error() {
    use rnic::{CompletionQueue, Device, QpConfig, QueuePair, RecvWr, SendWr, WcOpcode};
    use rpcrdma::wire::v1::{Body, ErrorBody, Header};
    use rpcrdma::wire::Limits;

    let net = LoopbackNetwork::new(6);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let listener = RdmaListener::bind(
        &sdev,
        &String::new(),
        Arc::new(server),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let pd = cdev.alloc_pd();
    let cq = CompletionQueue::new(64);
    let mut cfg = QpConfig::new(cq);
    cfg.initial_recvs = (0..8)
        .map(|i| RecvWr {
            wr_id: i,
            buf: bytes::BytesMut::with_capacity(1024),
        })
        .collect();
    let conn = cdev.connect(&pd, &addr, cfg).await.unwrap();
    assert_eq!(
        &conn.private_data[..],
        &[0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3],
        "knfsd-like private data"
    );
    let qp = conn.qp;
    let mut next = 100;
    let mut exchange = |bytes: Vec<u8>| {
        next += 1;
        qp.post_send(SendWr {
            wr_id: next,
            data: vec![Bytes::from(bytes)],
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    };
    let cases: [(Vec<u8>, ErrorBody); 4] = [
        // Version 7 with a garbage body: ERR_VERS 1..2.
        (
            [
                &[
                    0, 0, 0, 0x11, 0, 0, 0, 7, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff,
                ][..],
                &[0xee; 9][..],
            ]
            .concat(),
            ErrorBody::Vers { low: 1, high: 2 },
        ),
        // RDMA_MSG whose read list is truncated: ERR_CHUNK.
        (
            vec![
                0, 0, 0, 0x12, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
            ],
            ErrorBody::Chunk,
        ),
        // RDMA_DONE is no longer part of the protocol: ERR_CHUNK.
        (
            vec![0, 0, 0, 0x13, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 3],
            ErrorBody::Chunk,
        ),
        // A read chunk of 4 GiB - 1: refused before any allocation.
        (
            vec![
                0, 0, 0, 0x14, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, // prefix
                0, 0, 0, 1, 0, 0, 0, 0, // read entry at position 0
                0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, // segment
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // list ends
            ],
            ErrorBody::Chunk,
        ),
    ];
    for (i, (bytes, want)) in cases.into_iter().enumerate() {
        exchange(bytes);
        let reply = loop {
            let wc = qp.recv_cq().next().await.unwrap();
            if wc.opcode == WcOpcode::Recv {
                let mut b = wc.buf.unwrap();
                b.truncate(wc.byte_len as usize);
                break b;
            }
        };
        let (h, len) = Header::parse(&reply, &Limits::default()).unwrap();
        assert_eq!(len, reply.len());
        assert_eq!(h.xid, 0x11 + i as u32);
        assert_eq!(h.body, Body::Error(want), "case {i}");
        assert!(h.credits >= 1);
    }
}

/// Like svcrdma (kpeer README), the server replies with Send With
/// Invalidate to calls that carried chunks, only when the client's private
/// data allows it (RFC 8797 §4).
#[tokio::test]
async fn send_with_invalidate_only_when_client_allows() {
    for allow in [true, false] {
        let cfg = RdmaClientConfig {
            send_with_invalidate_ok: allow,
            ..RdmaClientConfig::default()
        };
        let client = setup_with(7, RdmaServerConfig::default(), cfg).await;
        let echo = EchoClient::new(client.clone());
        echo.null().await.unwrap();
        for n in [10_000usize, 200_000] {
            let data = pattern(n, 1);
            assert_eq!(echo.echo(data.clone()).await.unwrap(), data);
        }
        let s = client.stats();
        assert_eq!(s.remote_invalidations, if allow { 2 } else { 0 }, "{s:?}");
        assert_eq!(s.foreign_invalidations, 0);
    }
}

/// With the connection dropped after every possible number of operations,
/// each call either returns exactly its data or fails; none hangs and
/// none returns wrong bytes.
#[tokio::test]
async fn calls_fail_cleanly_when_the_connection_drops() {
    use rnic::loopback::{FaultConfig, LoopbackConfig};
    for drop_after in 0..16u64 {
        let faults = FaultConfig {
            drop_after_ops: Some(drop_after),
            drop_one_in: None,
        };
        let net = LoopbackNetwork::with_faults(drop_after, faults, LoopbackConfig::default());
        let sdev = net.device();
        let cdev = net.device();
        let mut server = Server::new();
        server.register(EchoService::default());
        let listener = RdmaListener::bind(
            &sdev,
            &String::new(),
            Arc::new(server),
            RdmaServerConfig::default(),
        )
        .await
        .unwrap();
        let addr = listener.local_addr();
        listener.spawn();
        let client = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
            .await
            .unwrap();
        let echo = EchoClient::new(client);
        let mut failed = false;
        for (i, n) in [10usize, 6000, 100_000, 5, 50_000].into_iter().enumerate() {
            let data = pattern(n, i as u8);
            let r =
                tokio::time::timeout(std::time::Duration::from_secs(10), echo.echo(data.clone()))
                    .await
                    .expect("call must not hang");
            match r {
                Ok(got) => {
                    assert!(!failed, "a call succeeded after the connection dropped");
                    assert_eq!(got, data);
                }
                Err(_) => failed = true,
            }
        }
        assert!(failed, "drop after {drop_after} ops never hit");
    }
}

/// A service whose procedure 1 waits until procedure 2 runs: only a server
/// that executes calls of one connection concurrently (and replies out of
/// order) completes both.
struct Gate(Arc<tokio::sync::Notify>);

impl oncrpc::RpcService for Gate {
    fn program(&self) -> u32 {
        0x2000_0100
    }

    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }

    async fn call(
        &self,
        ctx: oncrpc::CallContext,
        _args: Bytes,
    ) -> Result<XdrBuf, oncrpc::ServiceError> {
        match ctx.proc_ {
            1 => self.0.notified().await,
            2 => self.0.notify_one(),
            _ => return Err(oncrpc::ServiceError::ProcUnavail),
        }
        let mut out = XdrBuf::new();
        out.put_u32(ctx.proc_);
        Ok(out)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_runs_calls_of_one_connection_concurrently() {
    let net = LoopbackNetwork::new(8);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(Gate(Arc::new(tokio::sync::Notify::new())));
    let listener = RdmaListener::bind(
        &sdev,
        &String::new(),
        Arc::new(server),
        RdmaServerConfig::default(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let client = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    // The first call only borrows one credit; wait for the grant of 64.
    EchoClient::new(client.clone()).null().await.ok();
    let call = |proc_| RpcCall {
        prog: 0x2000_0100,
        vers: 1,
        proc_,
        cred: OpaqueAuth::NONE,
        args: XdrBuf::new(),
        reply_hint: ReplyHint {
            max_reply_len: 64,
            ddp: None,
        },
    };
    let c = client.clone();
    let waiter = tokio::spawn(async move { c.call(call(1)).await });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let release = tokio::time::timeout(std::time::Duration::from_secs(10), client.call(call(2)))
        .await
        .expect("second call answered while the first waits")
        .unwrap();
    assert_eq!(&release[..], &[0, 0, 0, 2]);
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
        .await
        .expect("first call released")
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], &[0, 0, 0, 1]);
}

async fn setup_versions(
    seed: u64,
    server_max: u32,
    client_version: rpcrdma::plan::Version,
) -> RdmaClient<LoopbackDevice> {
    let server_cfg = RdmaServerConfig {
        max_version: server_max,
        ..RdmaServerConfig::default()
    };
    let client_cfg = RdmaClientConfig {
        version: client_version,
        ..RdmaClientConfig::default()
    };
    setup_with(seed, server_cfg, client_cfg).await
}

/// Version 2 end to end: RDMA2_CONNPROP first, then every conveyance, with
/// remote invalidation of the handle named in rdma_inv_handle.
#[tokio::test]
async fn version_two_echo_is_byte_exact_across_boundaries() {
    use rpcrdma::plan::Version;
    let client = setup_versions(9, 2, Version::V2).await;
    let echo = EchoClient::new(client.clone());
    echo.null().await.unwrap();
    for (i, n) in [0usize, 100, 3990, 4100, 70_000, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "size {n}");
    }
    assert_eq!(client.version(), Version::V2);
    let s = client.stats();
    assert_eq!(s.version_fallbacks, 0);
    assert!(s.read_chunk_calls > 0 && s.write_chunk_replies > 0, "{s:?}");
    assert!(s.remote_invalidations > 0, "{s:?}");
    assert_eq!(s.foreign_invalidations, 0);
}

/// A version 2 client against a version 1 server falls back to version 1
/// (v2 draft §7.2) and every call still succeeds.
#[tokio::test]
async fn version_two_client_falls_back_to_version_one_server() {
    use rpcrdma::plan::Version;
    let client = setup_versions(10, 1, Version::V2).await;
    let echo = EchoClient::new(client.clone());
    for (i, n) in [10usize, 5000, 100_000].into_iter().enumerate() {
        let data = pattern(n, i as u8);
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "size {n}");
    }
    assert_eq!(client.version(), Version::V1);
}

/// A hand-written version 1 peer that ignores RDMA2_CONNPROP and answers
/// the first version 2 call with ERR_VERS: the client must resend that
/// very call as version 1 (same XID) and complete it (v2 draft §7.2).
#[tokio::test]
async fn version_two_call_is_resent_as_version_one_after_err_vers() {
    use rnic::{
        CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, RecvWr, SendWr,
        WcOpcode,
    };
    use rpcrdma::plan::Version;
    use rpcrdma::wire::v1::{Body, ErrorBody, Header};
    use rpcrdma::wire::{Limits, Prefix};

    let net = LoopbackNetwork::new(11);
    let sdev = net.device();
    let cdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let peer = tokio::spawn(async move {
        let req = listener.accept_request().await.unwrap();
        let mut cfg = QpConfig::new(CompletionQueue::new(64));
        cfg.initial_recvs = (0..8)
            .map(|i| RecvWr {
                wr_id: i,
                buf: bytes::BytesMut::with_capacity(4096),
            })
            .collect();
        cfg.private_data = vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];
        let qp = req.accept(&pd, cfg).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let wc = qp.recv_cq().next().await.unwrap();
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let mut b = wc.buf.unwrap();
            b.truncate(wc.byte_len as usize);
            let pre = Prefix::peek(&b).unwrap();
            seen.push((pre.vers, pre.msg_type, pre.xid));
            let reply: Vec<u8> = match (pre.vers, pre.msg_type) {
                (2, 5) => continue, // RDMA2_CONNPROP: a v1 peer would ERR_VERS; ignore it here
                // As Linux svcrdma: a version 1 ERR_VERS body, but the
                // refused version echoed in the prefix.
                (2, _) => {
                    let mut e = xdr::to_bytes(&Header::error_reply(
                        pre.xid,
                        8,
                        ErrorBody::Vers { low: 1, high: 1 },
                    ))
                    .to_vec();
                    e[7] = 2;
                    e
                }
                (1, 0) => {
                    let (h, _) = Header::parse(&b, &Limits::default()).unwrap();
                    assert_eq!(h.body, Body::Msg(Default::default()));
                    let hdr = Header {
                        xid: pre.xid,
                        credits: 8,
                        body: Body::Msg(Default::default()),
                    };
                    let mut out = xdr::to_bytes(&hdr).to_vec();
                    // RPC reply: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verf, SUCCESS.
                    for w in [pre.xid, 1, 0, 0, 0, 0] {
                        out.extend_from_slice(&w.to_be_bytes());
                    }
                    out
                }
                other => panic!("unexpected message {other:?}"),
            };
            qp.post_send(SendWr {
                wr_id: 1000,
                data: vec![Bytes::from(reply)],
                solicited: false,
                invalidate: None,
            })
            .unwrap();
            if pre.vers == 1 {
                return seen;
            }
        }
    });
    let cfg = RdmaClientConfig {
        version: Version::V2,
        ..RdmaClientConfig::default()
    };
    let client = RdmaClient::connect(&cdev, &addr, cfg).await.unwrap();
    EchoClient::new(client.clone()).null().await.unwrap();
    let seen = peer.await.unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!((seen[0].0, seen[0].1), (2, 5), "CONNPROP first");
    assert_eq!((seen[1].0, seen[2].0), (2, 1), "call as v2, then as v1");
    assert_eq!(seen[1].2, seen[2].2, "same XID");
    assert_eq!(client.version(), Version::V1);
    assert_eq!(client.stats().version_fallbacks, 1);
}

/// RFC 8167 backchannel: the server calls the client's echo service over
/// the same connection, inline, within the client's backchannel credits;
/// a reverse call too large for inline is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_calls_client_over_backchannel() {
    let net = LoopbackNetwork::new(12);
    let sdev = net.device();
    let cdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    let backchannels = listener.backchannels();
    listener.spawn();
    let mut callbacks = Server::new();
    callbacks.register(EchoService::default());
    let client = RdmaClient::connect_with_backchannel(
        &cdev,
        &addr,
        RdmaClientConfig::default(),
        Arc::new(callbacks),
    )
    .await
    .unwrap();
    // Forward traffic still works alongside.
    EchoClient::new(client.clone()).null().await.unwrap();
    let ids = backchannels.conn_ids();
    assert_eq!(ids.len(), 1);
    let bc = backchannels.get(ids[0]).unwrap();
    assert_eq!(bc.conn_id(), ids[0]);
    let cb = EchoClient::new(bc.clone());
    cb.null().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16usize {
        let cb = EchoClient::new(bc.clone());
        let fwd = EchoClient::new(client.clone());
        tasks.spawn(async move {
            let data = pattern(i * 200, i as u8);
            assert_eq!(cb.echo(data.clone()).await.unwrap(), data);
            let big = pattern(10_000 + i, i as u8);
            assert_eq!(fwd.echo(big.clone()).await.unwrap(), big);
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let err = cb.echo(pattern(5000, 1)).await.unwrap_err();
    assert_eq!(
        err,
        oncrpc::RpcError::Transport("backchannel call exceeds the inline threshold")
    );
    assert_eq!(client.stats().backchannel_calls, 17);
}
