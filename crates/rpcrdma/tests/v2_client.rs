//! The version 2 requester (draft-cel-nfsv4-rpcrdma-version-two-09):
//! resending with larger resources (§5.3.3), the first message (§7.1),
//! no renegotiation loop after ERR_VERS and a reconnect (§7.2), and
//! interop with the project's own version 1 server (§7).
#![cfg(feature = "transport")]

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::client::DdpReplyHint;
use oncrpc::echo::{EchoClient, EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, RpcError, Server};
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rnic::{
    CompletionQueue, ConnectRequest, Device, Listener, QpConfig, QueuePair, RecvWr, SendWr,
    WcOpcode,
};
use rpcrdma::plan::Version;
use rpcrdma::transport::{
    RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig, ReconnectPolicy,
};
use rpcrdma::wire::v2::{self, ErrorBody, Flags, Header, Properties, RvReqSup};
use rpcrdma::wire::{v1, Limits, Prefix};
use xdr::{Decoder, Encoder, XdrBuf};

fn v2_config() -> RdmaClientConfig {
    RdmaClientConfig {
        version: Version::V2,
        ..RdmaClientConfig::default()
    }
}

async fn serve(net: &LoopbackNetwork, max_version: u32) -> String {
    let sdev = net.device();
    let mut server = Server::new();
    server.register(EchoService::default());
    let cfg = RdmaServerConfig {
        max_version,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), cfg)
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    addr
}

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 13 + i / 241) as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// An ECHO call of `data` whose reply hint is `hint` (deliberately wrong
/// in these tests).
fn echo_call(data: &Bytes, hint: ReplyHint) -> RpcCall {
    let mut args = XdrBuf::new();
    args.put_bulk(data.clone(), true);
    RpcCall {
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        proc_: PROC_ECHO,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: hint,
    }
}

fn echoed(results: &Bytes, len: usize) -> Bytes {
    let mut dec = Decoder::from_bytes(results);
    let out = dec.opaque_bytes(len).unwrap();
    dec.finish().unwrap();
    out
}

/// v2 draft §5.3.3: a write chunk of 100 bytes for a 6000-byte result is
/// answered RDMA2_ERR_WRITE_RESOURCE; the client sends the call again
/// with a 6000-byte write chunk and the call succeeds.
#[tokio::test]
async fn resends_with_a_larger_write_chunk_after_write_resource() {
    let net = LoopbackNetwork::new(41);
    let addr = serve(&net, 2).await;
    let client = RdmaClient::connect(&net.device(), &addr, v2_config())
        .await
        .unwrap();
    let data = pattern(6000, 3);
    let hint = ReplyHint {
        max_reply_len: 5000,
        ddp: Some(DdpReplyHint {
            position: 4,
            max_len: 100,
        }),
    };
    let results = client.call(echo_call(&data, hint)).await.unwrap();
    assert_eq!(echoed(&results, 6000), data);
    let s = client.stats();
    assert_eq!((s.resource_resends, s.error_replies), (1, 0));
    assert_eq!(s.write_chunk_replies, 1);
    assert_eq!(client.version(), Version::V2);
}

/// v2 draft §5.3.3: a call with no reply chunk whose reply does not fit
/// inline is answered RDMA2_ERR_REPLY_RESOURCE; the client sends it
/// again with a reply chunk of the length needed.
#[tokio::test]
async fn resends_with_a_reply_chunk_after_reply_resource() {
    let net = LoopbackNetwork::new(42);
    let addr = serve(&net, 2).await;
    let client = RdmaClient::connect(&net.device(), &addr, v2_config())
        .await
        .unwrap();
    let data = pattern(6000, 4);
    let hint = ReplyHint {
        max_reply_len: 64,
        ddp: None,
    };
    let results = client.call(echo_call(&data, hint)).await.unwrap();
    assert_eq!(echoed(&results, 6000), data);
    let s = client.stats();
    assert_eq!(s.resource_resends, 1);
    assert_eq!(s.reply_chunk_replies, 1);
}

/// A version 1 call gets ERR_CHUNK for the same mistake and is not sent
/// again (version 1 has no resource errors).
#[tokio::test]
async fn version_one_call_with_a_small_reply_chunk_is_not_resent() {
    let net = LoopbackNetwork::new(43);
    let addr = serve(&net, 2).await;
    let client = RdmaClient::connect(&net.device(), &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    let hint = ReplyHint {
        max_reply_len: 64,
        ddp: None,
    };
    let err = client
        .call(echo_call(&pattern(6000, 5), hint))
        .await
        .unwrap_err();
    assert_eq!(err, RpcError::Transport("RDMA_ERROR ERR_CHUNK"));
    assert_eq!(client.stats().resource_resends, 0);
}

/// A hand-driven responder: accepts one connection and returns its queue
/// pair.
async fn accept_one(
    listener: &mut <LoopbackDevice as Device>::Listener,
    pd: &rnic::ProtectionDomain,
) -> <LoopbackDevice as Device>::Qp {
    let req = listener.accept_request().await.unwrap();
    let mut cfg = QpConfig::new(CompletionQueue::new(64));
    cfg.initial_recvs = (0..16)
        .map(|i| RecvWr {
            wr_id: i,
            buf: BytesMut::with_capacity(4096),
        })
        .collect();
    cfg.private_data = vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];
    req.accept(pd, cfg).await.unwrap()
}

async fn next_msg(qp: &<LoopbackDevice as Device>::Qp) -> Option<Bytes> {
    loop {
        let wc = qp.recv_cq().next().await.ok()?;
        if wc.opcode == WcOpcode::Recv {
            let mut b = wc.buf?;
            b.truncate(wc.byte_len as usize);
            let _ = qp.post_recv(RecvWr {
                wr_id: 99,
                buf: BytesMut::with_capacity(4096),
            });
            return Some(b.freeze());
        }
    }
}

fn send(qp: &<LoopbackDevice as Device>::Qp, bytes: Bytes) {
    qp.post_send(SendWr {
        wr_id: 1000,
        data: vec![bytes],
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

/// ERR_VERS in version 1 format, as a version 1 server sends it.
fn err_vers(xid: u32) -> Bytes {
    xdr::to_bytes(&v1::Header::error_reply(
        xid,
        8,
        v1::ErrorBody::Vers { low: 1, high: 1 },
    ))
}

/// A version 1 RDMA_MSG reply with an empty RPC success reply.
fn v1_null_reply(xid: u32) -> Bytes {
    let mut out = xdr::to_bytes(&v1::Header {
        xid,
        credits: 8,
        body: v1::Body::Msg(Default::default()),
    })
    .to_vec();
    for w in [xid, 1, 0, 0, 0, 0] {
        out.extend_from_slice(&w.to_be_bytes());
    }
    out.into()
}

/// v2 draft §7.1, §4.2: the first message is an RDMA2_CONNPROP of at
/// most 1024 bytes carrying the client's receive buffer size and its
/// reverse-direction support (NONE without a backchannel, INLINE with an
/// inline-only one, GENL with one that takes chunks).
#[tokio::test]
async fn first_message_is_a_connprop_of_at_most_1024_bytes() {
    let net = LoopbackNetwork::new(44);
    let sdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    for (with_backchannel, chunks, level) in [
        (false, true, RvReqSup::RDMA2_RVREQSUP_NONE),
        (true, false, RvReqSup::RDMA2_RVREQSUP_INLINE),
        (true, true, RvReqSup::RDMA2_RVREQSUP_GENL),
    ] {
        let cdev = net.device();
        let connecting = async {
            let cfg = RdmaClientConfig {
                inline_size: 2048,
                backchannel_chunks: chunks,
                ..v2_config()
            };
            if with_backchannel {
                let mut svc = Server::new();
                svc.register(EchoService::default());
                RdmaClient::connect_with_backchannel(&cdev, &addr, cfg, Arc::new(svc)).await
            } else {
                RdmaClient::connect(&cdev, &addr, cfg).await
            }
        };
        let (qp, client) = tokio::join!(accept_one(&mut listener, &pd), connecting);
        let _client = client.unwrap();
        let first = next_msg(&qp).await.unwrap();
        assert!(first.len() <= 1024, "{} bytes", first.len());
        let (h, len) = Header::parse(&first, &Limits::default()).unwrap();
        assert_eq!(len, first.len());
        assert_eq!(h.flags, Flags::default(), "a requester's message");
        let v2::Body::ConnProp(props) = &h.body else {
            panic!("first message is not RDMA2_CONNPROP: {h:?}");
        };
        let p = Properties::from_propset(props).unwrap();
        assert_eq!(p.receive_buffer_size, 2048);
        assert_eq!(p.reverse_request_support, level);
    }
}

/// v2 draft §7.2: a client that saw ERR_VERS and then lost its
/// connection reconnects in version 1 (no RDMA2_CONNPROP, no version 2
/// call), so it cannot loop between versions.
#[tokio::test]
async fn after_err_vers_a_reconnect_stays_in_version_one() {
    let net = LoopbackNetwork::new(45);
    let sdev = net.device();
    let cdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let policy = ReconnectPolicy {
        max_attempts: 5,
        delay: Duration::from_millis(10),
    };
    let connecting = RdmaClient::connect_with_reconnect(&cdev, &addr, v2_config(), policy);
    let (qp1, client) = tokio::join!(accept_one(&mut listener, &pd), connecting);
    let client = client.unwrap();
    // Connection 1: a version 1 server refuses the CONNPROP.
    let first = next_msg(&qp1).await.unwrap();
    let pre = Prefix::peek(&first).unwrap();
    assert_eq!((pre.vers, pre.msg_type), (2, 5));
    send(&qp1, err_vers(pre.xid));
    // The first call may race the ERR_VERS: refused if version 2.
    let echo = EchoClient::new(client.clone());
    let (call1, seen1) = tokio::join!(echo.null(), async {
        let mut seen = Vec::new();
        loop {
            let m = next_msg(&qp1).await.unwrap();
            let pre = Prefix::peek(&m).unwrap();
            seen.push(pre.vers);
            if pre.vers == 1 {
                send(&qp1, v1_null_reply(pre.xid));
                return seen;
            }
            send(&qp1, err_vers(pre.xid));
        }
    });
    call1.unwrap();
    assert_eq!(seen1.last(), Some(&1));
    assert_eq!(client.version(), Version::V1);
    // The connection is lost; the client reconnects by itself.
    qp1.disconnect();
    let qp2 = accept_one(&mut listener, &pd).await;
    let (call2, first2) = tokio::join!(echo.null(), async {
        let m = next_msg(&qp2).await.unwrap();
        let pre = Prefix::peek(&m).unwrap();
        if pre.vers == 1 {
            send(&qp2, v1_null_reply(pre.xid));
        } else {
            send(&qp2, err_vers(pre.xid));
        }
        (pre.vers, pre.msg_type)
    });
    assert_eq!(first2, (1, 0), "first message after reconnect is a v1 call");
    call2.unwrap();
    assert_eq!(client.version(), Version::V1);
    assert_eq!(client.stats().reconnects, 1);
}

/// v2 draft §5.3.3: resending is bounded: a responder that keeps asking
/// for a larger write chunk gets the call twice more, then the caller
/// sees RDMA2_ERR_WRITE_RESOURCE.
#[tokio::test]
async fn resending_with_larger_resources_is_bounded() {
    let net = LoopbackNetwork::new(46);
    let sdev = net.device();
    let cdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let connecting = RdmaClient::connect(&cdev, &addr, v2_config());
    let (qp, client) = tokio::join!(accept_one(&mut listener, &pd), connecting);
    let client = client.unwrap();
    let peer = async {
        let mut offered = Vec::new();
        loop {
            let m = next_msg(&qp).await.unwrap();
            let (h, _) = Header::parse(&m, &Limits::default()).unwrap();
            let reply = match h.body {
                v2::Body::ConnProp(_) => {
                    let p = Properties::default().to_propset();
                    Header {
                        xid: h.xid,
                        credits: 8,
                        flags: Flags::RESPONSE,
                        body: v2::Body::ConnProp(p),
                    }
                }
                v2::Body::Msg(c) => {
                    let n = c.lists.writes[0].total_len() as u32;
                    offered.push(n);
                    Header::error_reply(
                        h.xid,
                        8,
                        ErrorBody::WriteResource {
                            chunk_index: 1,
                            length_needed: n + 1000,
                        },
                    )
                }
                other => panic!("unexpected {other:?}"),
            };
            send(&qp, xdr::to_bytes(&reply));
            if offered.len() == 3 {
                return offered;
            }
        }
    };
    let hint = ReplyHint {
        max_reply_len: 5000,
        ddp: Some(DdpReplyHint {
            position: 4,
            max_len: 100,
        }),
    };
    let (offered, r) = tokio::join!(peer, client.call(echo_call(&pattern(10, 1), hint)));
    assert_eq!(offered, [100, 1100, 2100]);
    assert_eq!(
        r.unwrap_err(),
        RpcError::Transport("RDMA2_ERR_WRITE_RESOURCE")
    );
    assert_eq!(client.stats().resource_resends, 2);
}

/// v2 draft §7: against the project's own version 1 server a version 2
/// client negotiates down and every conveyance works byte-exact.
#[tokio::test]
async fn version_two_client_works_against_a_version_one_only_server() {
    let net = LoopbackNetwork::new(47);
    let addr = serve(&net, 1).await;
    let client = RdmaClient::connect(&net.device(), &addr, v2_config())
        .await
        .unwrap();
    let echo = EchoClient::new(client.clone());
    echo.null().await.unwrap();
    for (i, n) in [0usize, 100, 3000, 5000, 70_000].into_iter().enumerate() {
        let data = pattern(n, i as u8);
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data, "{n} bytes");
    }
    assert_eq!(client.version(), Version::V1);
    let s = client.stats();
    assert!(
        s.read_chunk_calls >= 1 && s.write_chunk_replies >= 1,
        "{s:?}"
    );
}

/// A listener with a backchannel and a version 2 client with one
/// (`chunks`: GENL, else INLINE); returns both ends' handles.
async fn backchannel_pair(
    seed: u64,
    chunks: bool,
) -> (
    RdmaClient<LoopbackDevice>,
    EchoClient<rpcrdma::transport::Backchannel<<LoopbackDevice as Device>::Qp>>,
    [LoopbackDevice; 2],
) {
    let net = LoopbackNetwork::new(seed);
    let sdev = net.device();
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
    let mut svc = Server::new();
    svc.register(EchoService::default());
    let ccfg = RdmaClientConfig {
        backchannel_chunks: chunks,
        ..v2_config()
    };
    let cdev = net.device();
    let client = RdmaClient::connect_with_backchannel(&cdev, &addr, ccfg, Arc::new(svc))
        .await
        .unwrap();
    // The forward call is answered after the CONNPROP was read.
    EchoClient::new(client.clone()).null().await.unwrap();
    let ids = backchannels.conn_ids();
    let cb = EchoClient::new(backchannels.get(ids[0]).unwrap());
    (client, cb, [sdev, cdev])
}

/// v2 draft §4.2.2 GENL, RFC 8167: reverse-direction calls too large for
/// inline travel in a Position-Zero Read chunk the client pulls, and long
/// replies come back in the server's reply chunk, byte-exact; every region
/// of the server is fenced afterwards.
#[tokio::test]
async fn genl_backchannel_carries_calls_and_replies_in_chunks() {
    let (client, cb, devs) = backchannel_pair(48, true).await;
    for (i, n) in [10usize, 3000, 5000, 20_000, 100_000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        let got = cb.echo(data.clone()).await;
        assert!(
            got.as_ref().is_ok_and(|g| *g == data),
            "{n} bytes: {:?}",
            got.err()
        );
    }
    assert_eq!(client.version(), Version::V2);
    assert_eq!(client.stats().backchannel_calls, 5);
    for d in devs {
        assert_eq!(d.mr_table().valid_regions(), 0);
    }
}

/// v2 draft §4.2.2 INLINE: a client that takes inline reverse-direction
/// messages only is never sent chunks; a call too large for inline is
/// refused at the server.
#[tokio::test]
async fn inline_backchannel_refuses_calls_that_need_chunks() {
    let (client, cb, _) = backchannel_pair(49, false).await;
    let data = pattern(1000, 9);
    assert_eq!(cb.echo(data.clone()).await.unwrap(), data);
    let err = cb.echo(pattern(5000, 1)).await.err();
    assert_eq!(
        err,
        Some(RpcError::Transport(
            "backchannel call exceeds the inline threshold"
        ))
    );
    assert_eq!(client.stats().backchannel_calls, 1);
}

/// v2 draft §3.3, §8.4.1, reverse direction with the client as
/// responder: a reverse call with chunks is answered by Send With
/// Invalidate of the STag the server named in rdma_inv_handle, and by a
/// plain Send when that is zero.
#[tokio::test]
async fn reverse_reply_invalidates_the_named_stag_and_never_zero() {
    use rpcrdma::wire::v2::ChunkLists2;
    use rpcrdma::wire::{ChunkLists, RdmaSegment, ReadSegment};

    let net = LoopbackNetwork::new(50);
    let sdev = net.device();
    let cdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let mut svc = Server::new();
    svc.register(EchoService::default());
    let connecting = RdmaClient::connect_with_backchannel(&cdev, &addr, v2_config(), Arc::new(svc));
    let (qp, client) = tokio::join!(accept_one(&mut listener, &pd), connecting);
    let client = client.unwrap();
    let first = next_msg(&qp).await.unwrap();
    let (h, _) = Header::parse(&first, &Limits::default()).unwrap();
    let v2::Body::ConnProp(props) = &h.body else {
        panic!("not RDMA2_CONNPROP");
    };
    let level = Properties::from_propset(props)
        .unwrap()
        .reverse_request_support;
    assert_eq!(level, RvReqSup::RDMA2_RVREQSUP_GENL);
    for (xid, named) in [(0x9000u32, true), (0x9001, false)] {
        // A NULL call to the client's echo service, in a Position-Zero
        // Read chunk.
        let mut rpc = Vec::new();
        for w in [xid, 0, 2, ECHO_PROGRAM, ECHO_VERSION, 0, 0, 0, 0, 0] {
            rpc.extend_from_slice(&u32::to_be_bytes(w));
        }
        let len = rpc.len() as u32;
        let mr = pd.register_read_only(Bytes::from(rpc), 0).unwrap();
        let lists = ChunkLists {
            reads: vec![ReadSegment {
                position: 0,
                target: RdmaSegment {
                    handle: mr.stag().0,
                    length: len,
                    offset: mr.base_to(),
                },
            }],
            ..ChunkLists::default()
        };
        let inv_handle = if named { mr.stag().0 } else { 0 };
        let call = Header {
            xid,
            credits: 2,
            flags: Flags::default(),
            body: v2::Body::NoMsg(ChunkLists2 { inv_handle, lists }),
        };
        send(&qp, xdr::to_bytes(&call));
        let wc = loop {
            let wc = qp.recv_cq().next().await.unwrap();
            if wc.opcode == WcOpcode::Recv {
                break wc;
            }
        };
        let mut b = wc.buf.clone().unwrap();
        b.truncate(wc.byte_len as usize);
        let (h, hlen) = Header::parse(&b, &Limits::default()).unwrap();
        assert_eq!(h.xid, xid);
        assert!(h.flags.is_response(), "a reply: RPCRDMA2_F_RESPONSE set");
        assert!(matches!(h.body, v2::Body::Msg(_)), "{h:?}");
        assert_eq!(&b[hlen + 4..hlen + 8], &[0, 0, 0, 1], "msg_type REPLY");
        if named {
            assert_eq!(wc.invalidated, Some(mr.stag()));
        } else {
            assert_eq!(wc.invalidated, None);
            drop(mr.invalidate());
        }
        let _ = qp.post_recv(RecvWr {
            wr_id: 98,
            buf: BytesMut::with_capacity(4096),
        });
    }
    assert_eq!(client.stats().backchannel_calls, 2);
}

/// v2 draft §5.3.3 in the reverse direction: a reverse call whose reply
/// hint was too small gets no reply chunk; the client, as responder,
/// answers RDMA2_ERR_REPLY_RESOURCE and the server's call fails with it.
#[tokio::test]
async fn reverse_reply_too_long_for_its_resources_is_reply_resource() {
    let (_client, cb, _) = backchannel_pair(51, true).await;
    let hint = ReplyHint {
        max_reply_len: 64,
        ddp: None,
    };
    let r = cb
        .transport()
        .call(echo_call(&pattern(6000, 2), hint))
        .await;
    assert_eq!(
        r.err(),
        Some(RpcError::Transport("RDMA2_ERR_REPLY_RESOURCE"))
    );
    // The backchannel still works.
    let data = pattern(6000, 3);
    assert_eq!(cb.echo(data.clone()).await.unwrap(), data);
}

/// v2 draft §4.2.1: the server's Receive Buffer Size in its
/// RDMA2_CONNPROP lowers the client's send threshold below what the
/// connection private data said (4096 here).
#[tokio::test]
async fn client_sends_no_more_than_the_servers_receive_buffer_size() {
    let net = LoopbackNetwork::new(52);
    let sdev = net.device();
    let cdev = net.device();
    let mut listener = sdev.listen(&String::new()).await.unwrap();
    let addr = listener.local_addr();
    let pd = sdev.alloc_pd();
    let connecting = RdmaClient::connect(&cdev, &addr, v2_config());
    let (qp, client) = tokio::join!(accept_one(&mut listener, &pd), connecting);
    let client = client.unwrap();
    assert_eq!(client.thresholds().send, 4096);
    let first = next_msg(&qp).await.unwrap();
    let (h, _) = Header::parse(&first, &Limits::default()).unwrap();
    let props = Properties {
        receive_buffer_size: 1024,
        reverse_request_support: RvReqSup::RDMA2_RVREQSUP_NONE,
    };
    let answer = Header {
        xid: h.xid,
        credits: 8,
        flags: Flags::RESPONSE,
        body: v2::Body::ConnProp(props.to_propset()),
    };
    send(&qp, xdr::to_bytes(&answer));
    // A NULL call round trip orders the CONNPROP before the check.
    let echo = EchoClient::new(client.clone());
    let (r, ()) = tokio::join!(echo.null(), async {
        let m = next_msg(&qp).await.unwrap();
        let (h, len) = Header::parse(&m, &Limits::default()).unwrap();
        assert_eq!(m.len() - len, 40, "NULL call inline");
        let mut out = xdr::to_bytes(&Header {
            xid: h.xid,
            credits: 8,
            flags: Flags::RESPONSE,
            body: v2::Body::Msg(Default::default()),
        })
        .to_vec();
        for w in [h.xid, 1, 0, 0, 0, 0] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        send(&qp, out.into());
    });
    r.unwrap();
    assert_eq!(client.thresholds().send, 1024);
}
