//! RPC-over-RDMA version 2 on the wire (draft-cel-nfsv4-rpcrdma-version-two-09):
//! a hand-driven requester sends hand-built version 2 headers to an
//! [`RdmaListener`] over the loopback device and checks each answer: the
//! RDMA2_ERROR bodies of §5.3.3, RDMA2_CONNPROP (§4.1, §4.2, §5.3.4), the
//! reply version (§7) and remote invalidation by rdma_inv_handle (§3.3).
#![cfg(feature = "transport")]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::echo::{EchoService, ECHO_PROGRAM, ECHO_VERSION, PROC_ECHO, PROC_NULL};
use oncrpc::Server;
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use rnic::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpConfig, QueuePair, RecvWr,
    SendWr, Stag, WcOpcode,
};
use rpcrdma::transport::{Backchannels, RdmaListener, RdmaServerConfig};
use rpcrdma::wire::v2::{
    Body, ChunkLists2, ErrorBody, Flags, Header, PropId, PropVal, Properties, RvReqSup,
};
use rpcrdma::wire::{v1, ChunkLists, Limits, RdmaSegment, ReadSegment, WriteChunk};

type Qp = <LoopbackDevice as Device>::Qp;

/// A requester that speaks raw headers.
struct Raw {
    qp: Qp,
    pd: ProtectionDomain,
    next: u64,
    backchannels: Backchannels<Qp>,
}

/// The received message and the STag its Send With Invalidate named.
struct Received {
    bytes: BytesMut,
    invalidated: Option<Stag>,
}

impl Raw {
    async fn connect(seed: u64, config: RdmaServerConfig) -> Self {
        let net = LoopbackNetwork::new(seed);
        let (sdev, cdev) = (net.device(), net.device());
        let mut server = Server::new();
        server.register(EchoService::default());
        let listener = RdmaListener::bind(&sdev, &String::new(), Arc::new(server), config)
            .await
            .unwrap();
        let addr = listener.local_addr();
        let backchannels = listener.backchannels();
        listener.spawn();
        let pd = cdev.alloc_pd();
        let mut cfg = QpConfig::new(CompletionQueue::new(64));
        cfg.initial_recvs = (0..8)
            .map(|i| RecvWr {
                wr_id: i,
                buf: BytesMut::with_capacity(4096),
            })
            .collect();
        let qp = cdev.connect(&pd, &addr, cfg).await.unwrap().qp;
        Self {
            qp,
            pd,
            next: 100,
            backchannels,
        }
    }

    /// Sends `msg` and waits for the next received message.
    async fn exchange(&mut self, msg: Vec<Bytes>) -> Received {
        self.next += 1;
        self.qp
            .post_send(SendWr {
                wr_id: self.next,
                data: msg,
                solicited: false,
                invalidate: None,
            })
            .unwrap();
        loop {
            let wc = self.qp.recv_cq().next().await.unwrap();
            if wc.opcode == WcOpcode::Recv {
                let mut bytes = wc.buf.unwrap();
                bytes.truncate(wc.byte_len as usize);
                self.qp
                    .post_recv(RecvWr {
                        wr_id: self.next + 1000,
                        buf: BytesMut::with_capacity(4096),
                    })
                    .unwrap();
                return Received {
                    bytes,
                    invalidated: wc.invalidated,
                };
            }
        }
    }

    /// Sends `msg` and decodes the version 2 answer, checking the XID
    /// and RPCRDMA2_F_RESPONSE (v2 draft §3.2).
    async fn answer(&mut self, xid: u32, msg: Vec<Bytes>) -> (Header, Received) {
        let r = self.exchange(msg).await;
        let (h, _) = Header::parse(&r.bytes, &Limits::default()).unwrap();
        assert_eq!(h.xid, xid);
        assert!(h.flags.is_response(), "RPCRDMA2_F_RESPONSE on {h:?}");
        assert!(h.credits >= 1);
        (h, r)
    }

    fn region(&self, len: usize) -> MemoryRegion {
        self.pd
            .register(BytesMut::zeroed(len), Access::REMOTE_WRITE)
            .unwrap()
    }
}

fn header(xid: u32, body: Body) -> Bytes {
    xdr::to_bytes(&Header {
        xid,
        credits: 8,
        flags: Flags::default(),
        body,
    })
}

fn msg(xid: u32, inv_handle: u32, lists: ChunkLists) -> Bytes {
    header(xid, Body::Msg(ChunkLists2 { inv_handle, lists }))
}

/// An RPC call to the echo program, AUTH_NONE, with `data` as argument.
fn rpc_call(xid: u32, proc_: u32, data: &[u8]) -> Bytes {
    let mut v = Vec::new();
    for w in [xid, 0, 2, ECHO_PROGRAM, ECHO_VERSION, proc_, 0, 0, 0, 0] {
        v.extend_from_slice(&u32::to_be_bytes(w));
    }
    if proc_ == PROC_ECHO {
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v.resize(v.len().next_multiple_of(4), 0);
    }
    v.into()
}

fn seg(handle: u32, length: u32) -> RdmaSegment {
    RdmaSegment {
        handle,
        length,
        offset: 0x1000,
    }
}

fn connprop(xid: u32, props: Vec<PropVal>) -> Bytes {
    header(xid, Body::ConnProp(props))
}

fn rbsiz(size: u32) -> PropVal {
    PropVal {
        which: PropId::RDMA2_PROPID_RBSIZ,
        data: Bytes::copy_from_slice(&size.to_be_bytes()),
    }
}

/// v2 draft §5.3.3, §5.2: an unknown header type is RDMA2_ERR_INVAL_HTYPE.
#[tokio::test]
async fn unknown_header_type_is_answered_with_inval_htype() {
    let mut raw = Raw::connect(21, RdmaServerConfig::default()).await;
    let bytes: Vec<u8> = [0x21u32, 2, 8, 9, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    let (h, r) = raw.answer(0x21, vec![bytes.into()]).await;
    assert_eq!(h.body, Body::Error(ErrorBody::InvalHtype));
    // The error is version 2 with a void body: prefix, flags, code.
    assert_eq!(
        &r.bytes[..],
        &[
            0,
            0,
            0,
            0x21,
            0,
            0,
            0,
            2,
            0,
            0,
            0,
            h.credits as u8,
            0,
            0,
            0,
            4,
            0,
            0,
            0,
            1,
            0,
            0,
            0,
            3
        ]
    );
}

/// v2 draft §5.3.3: a header that does not decode is RDMA2_ERR_BAD_XDR.
#[tokio::test]
async fn truncated_chunk_lists_are_answered_with_bad_xdr() {
    let mut raw = Raw::connect(22, RdmaServerConfig::default()).await;
    // RDMA2_MSG, flags 0, inv_handle 0, a read list entry cut short.
    let bytes: Vec<u8> = [0x22u32, 2, 8, 0, 0, 0, 1, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    let (h, _) = raw.answer(0x22, vec![bytes.into()]).await;
    assert_eq!(h.body, Body::Error(ErrorBody::BadXdr));
}

/// v2 draft §4.1: a property value that does not fit its type is
/// RDMA2_ERR_BAD_XDR; unknown properties are ignored.
#[tokio::test]
async fn ill_typed_property_is_bad_xdr_and_unknown_property_is_ignored() {
    let mut raw = Raw::connect(23, RdmaServerConfig::default()).await;
    let short = PropVal {
        which: PropId::RDMA2_PROPID_RBSIZ,
        data: Bytes::from_static(&[0, 1]),
    };
    let (h, _) = raw.answer(0x23, vec![connprop(0x23, vec![short])]).await;
    assert_eq!(h.body, Body::Error(ErrorBody::BadXdr));

    let unknown = PropVal {
        which: PropId(99),
        data: Bytes::from_static(b"whatever"),
    };
    let (h, _) = raw
        .answer(0x24, vec![connprop(0x24, vec![unknown, rbsiz(8192)])])
        .await;
    let Body::ConnProp(props) = &h.body else {
        panic!("not RDMA2_CONNPROP: {h:?}");
    };
    let p = Properties::from_propset(props).unwrap();
    assert_eq!(p.receive_buffer_size, 4096);
    assert_eq!(p.reverse_request_support, RvReqSup::RDMA2_RVREQSUP_NONE);
}

/// v2 draft §4.2.2: a server that issues reverse-direction calls says it
/// takes their replies in general form (inline or in its reply chunk).
#[tokio::test]
async fn server_with_backchannel_advertises_genl_reverse_support() {
    let cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let mut raw = Raw::connect(24, cfg).await;
    let (h, _) = raw.answer(7, vec![connprop(7, vec![rbsiz(4096)])]).await;
    let Body::ConnProp(props) = &h.body else {
        panic!("not RDMA2_CONNPROP: {h:?}");
    };
    let p = Properties::from_propset(props).unwrap();
    assert_eq!(p.reverse_request_support, RvReqSup::RDMA2_RVREQSUP_GENL);
}

/// v2 draft §5.3.3: RDMA2_ERR_READ_CHUNKS, RDMA2_ERR_WRITE_CHUNKS and
/// RDMA2_ERR_SEGMENTS carry the responder's limits.
#[tokio::test]
async fn too_many_chunks_or_segments_are_answered_with_the_limits() {
    let mut raw = Raw::connect(25, RdmaServerConfig::default()).await;
    let limits = Limits::default();
    let reads = ChunkLists {
        reads: (0..=limits.max_read_segments)
            .map(|i| ReadSegment {
                position: 40,
                target: seg(i + 1, 8),
            })
            .collect(),
        ..ChunkLists::default()
    };
    let writes = ChunkLists {
        writes: (0..=limits.max_write_chunks)
            .map(|i| WriteChunk {
                segments: vec![seg(i + 1, 64)],
            })
            .collect(),
        ..ChunkLists::default()
    };
    let segments = ChunkLists {
        reply: Some(WriteChunk {
            segments: (0..=limits.max_segments_per_chunk)
                .map(|i| seg(i + 1, 64))
                .collect(),
        }),
        ..ChunkLists::default()
    };
    let cases = [
        (
            reads,
            ErrorBody::ReadChunks {
                max_chunks: limits.max_read_segments,
            },
        ),
        (
            writes,
            ErrorBody::WriteChunks {
                max_chunks: limits.max_write_chunks,
            },
        ),
        (
            segments,
            ErrorBody::Segments {
                max_segments: limits.max_segments_per_chunk,
            },
        ),
    ];
    for (i, (lists, want)) in cases.into_iter().enumerate() {
        let xid = 0x30 + i as u32;
        let call = vec![msg(xid, 0, lists), rpc_call(xid, PROC_NULL, &[])];
        let (h, _) = raw.answer(xid, call).await;
        assert_eq!(h.body, Body::Error(want), "case {i}");
    }
}

/// v2 draft §5.3.3: a write chunk smaller than the DDP-eligible result is
/// RDMA2_ERR_WRITE_RESOURCE naming the chunk (1-based) and the length.
#[tokio::test]
async fn small_write_chunk_is_answered_with_write_resource() {
    let mut raw = Raw::connect(26, RdmaServerConfig::default()).await;
    let mr = raw.region(100);
    let lists = ChunkLists {
        writes: vec![WriteChunk {
            segments: vec![RdmaSegment {
                handle: mr.stag().0,
                length: 100,
                offset: mr.base_to(),
            }],
        }],
        ..ChunkLists::default()
    };
    let data = vec![0x5a; 2000];
    let call = vec![msg(0x40, 0, lists), rpc_call(0x40, PROC_ECHO, &data)];
    let (h, _) = raw.answer(0x40, call).await;
    assert_eq!(
        h.body,
        Body::Error(ErrorBody::WriteResource {
            chunk_index: 1,
            length_needed: 2000,
        })
    );
}

/// v2 draft §4.2.1, §5.3.3: after the requester says its receive buffers
/// are 1024 bytes, a 2028-byte reply needs a reply chunk; none, or one
/// too small, is RDMA2_ERR_REPLY_RESOURCE with the length needed; a large
/// enough one carries the reply (RDMA2_NOMSG).
#[tokio::test]
async fn small_reply_chunk_is_answered_with_reply_resource() {
    let mut raw = Raw::connect(27, RdmaServerConfig::default()).await;
    let (h, _) = raw.answer(1, vec![connprop(1, vec![rbsiz(1024)])]).await;
    assert!(matches!(h.body, Body::ConnProp(_)));
    let data = vec![0x3c; 2000];
    // RPC reply header (24) + length word (4) + data.
    let needed = 24 + 4 + 2000;
    let small = raw.region(100);
    let reply_chunk = |mr: &MemoryRegion, length| ChunkLists {
        reply: Some(WriteChunk {
            segments: vec![RdmaSegment {
                handle: mr.stag().0,
                length,
                offset: mr.base_to(),
            }],
        }),
        ..ChunkLists::default()
    };
    for (xid, lists) in [
        (0x50, ChunkLists::default()),
        (0x51, reply_chunk(&small, 100)),
    ] {
        let call = vec![msg(xid, 0, lists), rpc_call(xid, PROC_ECHO, &data)];
        let (h, _) = raw.answer(xid, call).await;
        assert_eq!(
            h.body,
            Body::Error(ErrorBody::ReplyResource {
                length_needed: needed
            })
        );
    }
    let big = raw.region(4096);
    let call = vec![
        msg(0x52, 0, reply_chunk(&big, 4096)),
        rpc_call(0x52, PROC_ECHO, &data),
    ];
    let (h, _) = raw.answer(0x52, call).await;
    let Body::NoMsg(c) = &h.body else {
        panic!("not RDMA2_NOMSG: {h:?}");
    };
    assert_eq!(
        c.lists.reply.as_ref().unwrap().total_len(),
        u64::from(needed)
    );
    let buf = big.invalidate().buf;
    assert_eq!(&buf[28..2028], &data[..]);
}

/// v2 draft §3.3, §8.4: the responder uses Send With Invalidate with the
/// handle the requester named in rdma_inv_handle, and never when it is
/// zero.
#[tokio::test]
async fn send_with_invalidate_names_rdma_inv_handle_and_never_zero() {
    let mut raw = Raw::connect(28, RdmaServerConfig::default()).await;
    raw.answer(1, vec![connprop(1, vec![rbsiz(1024)])]).await;
    let data = vec![0x11; 2000];
    for (xid, named) in [(0x60u32, true), (0x61, false)] {
        let mr = raw.region(4096);
        let lists = ChunkLists {
            reply: Some(WriteChunk {
                segments: vec![RdmaSegment {
                    handle: mr.stag().0,
                    length: 4096,
                    offset: mr.base_to(),
                }],
            }),
            ..ChunkLists::default()
        };
        let inv = if named { mr.stag().0 } else { 0 };
        let call = vec![msg(xid, inv, lists), rpc_call(xid, PROC_ECHO, &data)];
        let (h, r) = raw.answer(xid, call).await;
        assert!(matches!(h.body, Body::NoMsg(_)), "{h:?}");
        if named {
            assert_eq!(r.invalidated, Some(mr.stag()));
        } else {
            assert_eq!(r.invalidated, None);
        }
    }
    // An inline reply to a call with no chunks: rdma_inv_handle zero, no
    // invalidation.
    let call = vec![
        msg(0x62, 0, ChunkLists::default()),
        rpc_call(0x62, PROC_NULL, &[]),
    ];
    let (h, r) = raw.answer(0x62, call).await;
    assert!(matches!(h.body, Body::Msg(_)));
    assert_eq!(r.invalidated, None);
}

/// v2 draft §7: the server replies in the version the call used.
#[tokio::test]
async fn server_replies_in_the_version_of_the_call() {
    let mut raw = Raw::connect(29, RdmaServerConfig::default()).await;
    let v1_call = xdr::to_bytes(&v1::Header {
        xid: 0x70,
        credits: 8,
        body: v1::Body::Msg(ChunkLists::default()),
    });
    let r = raw
        .exchange(vec![v1_call, rpc_call(0x70, PROC_NULL, &[])])
        .await;
    let (h, len) = v1::Header::parse(&r.bytes, &Limits::default()).unwrap();
    assert_eq!(
        (h.xid, h.body),
        (0x70, v1::Body::Msg(ChunkLists::default()))
    );
    assert_eq!(&r.bytes[len + 4..len + 8], &[0, 0, 0, 1], "RPC REPLY");

    let call = vec![
        msg(0x71, 0, ChunkLists::default()),
        rpc_call(0x71, PROC_NULL, &[]),
    ];
    let (h, r) = raw.answer(0x71, call).await;
    let Body::Msg(c) = &h.body else {
        panic!("not RDMA2_MSG: {h:?}");
    };
    assert_eq!(c.inv_handle, 0);
    assert_eq!(
        &r.bytes[40..44],
        &[0, 0, 0, 1],
        "RPC REPLY after a 36-byte header"
    );
}

fn brs(level: RvReqSup) -> PropVal {
    PropVal {
        which: PropId::RDMA2_PROPID_BRS,
        data: Bytes::copy_from_slice(&level.0.to_be_bytes()),
    }
}

/// v2 draft §3.2, §4.2.2, §8.4.1: on a version 2 connection whose client
/// takes inline reverse-direction messages, the server's reverse call is
/// an RDMA2_MSG with RPCRDMA2_F_RESPONSE clear (msg_type CALL) and
/// rdma_inv_handle zero; the client's RDMA2_MSG reply with the flag set
/// completes it.
#[tokio::test]
async fn reverse_call_on_a_v2_connection_uses_v2_headers() {
    let cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let mut raw = Raw::connect(31, cfg).await;
    let props = vec![rbsiz(4096), brs(RvReqSup::RDMA2_RVREQSUP_INLINE)];
    raw.answer(1, vec![connprop(1, props)]).await;
    let ids = raw.backchannels.conn_ids();
    let bc = raw.backchannels.get(ids[0]).unwrap();
    let cb = oncrpc::echo::EchoClient::new(bc);
    let call = tokio::spawn(async move { cb.null().await });
    let r = loop {
        let wc = raw.qp.recv_cq().next().await.unwrap();
        if wc.opcode == WcOpcode::Recv {
            let mut b = wc.buf.unwrap();
            b.truncate(wc.byte_len as usize);
            break b;
        }
    };
    let (h, len) = Header::parse(&r, &Limits::default()).unwrap();
    assert_eq!(
        h.flags,
        Flags::default(),
        "a call: RPCRDMA2_F_RESPONSE clear"
    );
    assert_eq!(
        h.body,
        Body::Msg(ChunkLists2::default()),
        "inline, rdma_inv_handle 0"
    );
    assert_eq!(&r[len + 4..len + 8], &[0, 0, 0, 0], "msg_type CALL");
    let rpc_xid = u32::from_be_bytes([r[len], r[len + 1], r[len + 2], r[len + 3]]);
    assert_eq!(rpc_xid, h.xid);
    let mut reply = xdr::to_bytes(&Header {
        xid: h.xid,
        credits: 2,
        flags: Flags::RESPONSE,
        body: Body::Msg(ChunkLists2::default()),
    })
    .to_vec();
    for w in [h.xid, 1, 0, 0, 0, 0] {
        reply.extend_from_slice(&w.to_be_bytes());
    }
    raw.qp
        .post_send(SendWr {
            wr_id: 7,
            data: vec![reply.into()],
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    call.await.unwrap().unwrap();
}

/// v2 draft §4.2.2: a client that advertised RDMA2_RVREQSUP_NONE is
/// never sent a reverse-direction call.
#[tokio::test]
async fn no_reverse_call_to_a_client_that_said_none() {
    let cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let mut raw = Raw::connect(32, cfg).await;
    let props = vec![brs(RvReqSup::RDMA2_RVREQSUP_NONE)];
    raw.answer(1, vec![connprop(1, props)]).await;
    let ids = raw.backchannels.conn_ids();
    let bc = raw.backchannels.get(ids[0]).unwrap();
    let err = oncrpc::echo::EchoClient::new(bc).null().await.unwrap_err();
    assert_eq!(
        err,
        oncrpc::RpcError::Transport("client's Reverse Request Support is NONE")
    );
    // Nothing was sent: the next message is the answer to a forward call.
    let call = vec![
        msg(0x80, 0, ChunkLists::default()),
        rpc_call(0x80, PROC_NULL, &[]),
    ];
    let (h, _) = raw.answer(0x80, call).await;
    assert!(matches!(h.body, Body::Msg(_)));
}

/// v2 draft §3.3, §8.4.1, reverse direction with the server as
/// requester: to a GENL client, a reverse call too large for inline is an
/// RDMA2_NOMSG with a Position-Zero Read chunk whose STag is named in
/// rdma_inv_handle; the client's reply by Send With Invalidate of that
/// STag completes the call; one invalidating an STag the server does not
/// have ends the connection and fails the call.
#[tokio::test]
async fn reverse_call_names_its_read_chunk_for_remote_invalidation() {
    use rnic::ReadWr;
    let cfg = RdmaServerConfig {
        backchannel_credits: 2,
        ..RdmaServerConfig::default()
    };
    let mut raw = Raw::connect(33, cfg).await;
    let props = vec![rbsiz(1024), brs(RvReqSup::RDMA2_RVREQSUP_GENL)];
    raw.answer(1, vec![connprop(1, props)]).await;
    let ids = raw.backchannels.conn_ids();
    let bc = raw.backchannels.get(ids[0]).unwrap();
    let data = Bytes::from(vec![0x77; 2000]);
    for foreign in [false, true] {
        let cb = oncrpc::echo::EchoClient::new(bc.clone());
        let d = data.clone();
        let call = tokio::spawn(async move { cb.echo(d).await });
        let m = loop {
            let wc = raw.qp.recv_cq().next().await.unwrap();
            if wc.opcode == WcOpcode::Recv {
                let mut b = wc.buf.unwrap();
                b.truncate(wc.byte_len as usize);
                break b;
            }
        };
        raw.qp
            .post_recv(RecvWr {
                wr_id: 500,
                buf: BytesMut::with_capacity(4096),
            })
            .unwrap();
        let (h, len) = Header::parse(&m, &Limits::default()).unwrap();
        assert_eq!(len, m.len());
        assert_eq!(h.flags, Flags::default());
        let Body::NoMsg(c) = &h.body else {
            panic!("not RDMA2_NOMSG: {h:?}");
        };
        assert_eq!(c.lists.reads.len(), 1);
        let seg = c.lists.reads[0];
        assert_eq!(seg.position, 0, "Position-Zero Read chunk");
        assert_eq!(c.inv_handle, seg.target.handle, "names the read chunk");
        assert!(c.lists.writes.is_empty() && c.lists.reply.is_none());
        // Pull the call by RDMA Read.
        let local = raw
            .pd
            .register(
                BytesMut::zeroed(seg.target.length as usize),
                Access::LOCAL_WRITE,
            )
            .unwrap();
        raw.qp
            .post_read(ReadWr {
                wr_id: 600,
                local_stag: local.stag(),
                local_to: local.base_to(),
                len: seg.target.length,
                remote_stag: Stag(seg.target.handle),
                remote_to: seg.target.offset,
            })
            .unwrap();
        loop {
            let wc = raw.qp.recv_cq().next().await.unwrap();
            if wc.opcode == WcOpcode::RdmaRead {
                assert_eq!(wc.status, rnic::WcStatus::Success);
                break;
            }
        }
        let rpc = local.invalidate().buf;
        assert_eq!(&rpc[0..4], &h.xid.to_be_bytes());
        assert_eq!(&rpc[4..8], &[0, 0, 0, 0], "msg_type CALL");
        assert_eq!(&rpc[rpc.len() - 2000..], &data[..]);
        // Reply inline: RPC reply header, then the echoed opaque.
        let mut reply = xdr::to_bytes(&Header {
            xid: h.xid,
            credits: 2,
            flags: Flags::RESPONSE,
            body: Body::Msg(ChunkLists2::default()),
        })
        .to_vec();
        for w in [h.xid, 1, 0, 0, 0, 0, 2000] {
            reply.extend_from_slice(&w.to_be_bytes());
        }
        reply.extend_from_slice(&data);
        let other = raw.region(64);
        let invalidate = if foreign {
            other.stag()
        } else {
            Stag(c.inv_handle)
        };
        raw.qp
            .post_send(SendWr {
                wr_id: 700,
                data: vec![reply.into()],
                solicited: false,
                invalidate: Some(invalidate),
            })
            .unwrap();
        let got = call.await.unwrap();
        if foreign {
            // The server's device has no such STag: the Send With
            // Invalidate is a remote access error that terminates the
            // connection (RFC 5040 remote access error), and the call fails.
            assert_eq!(got.err(), Some(oncrpc::RpcError::ConnectionClosed));
        } else {
            assert!(got.as_ref().is_ok_and(|g| *g == data), "{:?}", got.err());
        }
    }
}
