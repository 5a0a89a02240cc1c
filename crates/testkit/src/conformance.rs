//! Device behaviour tests, written once and run on every [`Device`].
//!
//! Test support, not protocol code: each function drives two devices through
//! one RNIC behaviour and panics (like `assert!`) when the device misbehaves.
//! [`conformance_suite!`](crate::conformance_suite) turns them into `#[test]`s
//! for a device crate (it needs `tokio` as a dev-dependency of the caller).
//!
//! The behaviours are those of DESIGN.md, "The software RDMA device", from
//! RFC 5040 §5 and §7: checked tagged access that touches no memory on error,
//! fatal Sends without a fitting buffer, flush on disconnect, remote
//! invalidation, and private data in connection management.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};

use rnic::{
    Access, AccessError, CloseReason, CmError, CompletionQueue, ConnectRequest, Connected, Device,
    Listener, MrState, PostError, ProtectionDomain, QpConfig, QpState, QueuePair, ReadWr, RecvWr,
    SendWr, Stag, TerminateCause, WcOpcode, WcStatus, WorkCompletion, WriteWr,
};

/// Supplies devices to the behaviour tests.
pub trait Harness: Sync {
    /// The device under test.
    type Dev: Device;

    /// Two devices, as two hosts (client, server).
    fn pair(&self) -> (Self::Dev, Self::Dev);

    /// An address the server device can listen on (connect goes to the
    /// listener's [`local_addr`](Listener::local_addr)).
    fn listen_addr(&self) -> <Self::Dev as Device>::Addr;
}

/// Runs two futures to completion concurrently, without naming a runtime.
pub async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = pin!(a);
    let mut b = pin!(b);
    let (mut ra, mut rb) = (None, None);
    poll_fn(move |cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                Poll::Pending
            }
        }
    })
    .await
}

/// A connected pair with its domains.
pub struct Pair<D: Device> {
    /// The connecting device.
    pub client: D,
    /// The accepting device.
    pub server: D,
    /// Client protection domain.
    pub client_pd: ProtectionDomain,
    /// Server protection domain.
    pub server_pd: ProtectionDomain,
    /// Client queue pair.
    pub cqp: D::Qp,
    /// Server queue pair.
    pub sqp: D::Qp,
}

fn recvs(n: u64, size: usize) -> Vec<RecvWr> {
    (0..n)
        .map(|i| RecvWr {
            wr_id: 1000 + i,
            buf: BytesMut::with_capacity(size),
        })
        .collect()
}

/// Connects a pair; each side starts with `client_recvs` / `server_recvs`
/// 256-byte receive buffers posted.
pub async fn connect_pair<H: Harness>(h: &H, client_recvs: u64, server_recvs: u64) -> Pair<H::Dev> {
    let (client, server) = h.pair();
    let client_pd = client.alloc_pd();
    let server_pd = server.alloc_pd();
    let mut listener = server.listen(&h.listen_addr()).await.expect("listen");
    let addr = listener.local_addr();
    let mut ccfg = QpConfig::new(CompletionQueue::new(256));
    ccfg.initial_recvs = recvs(client_recvs, 256);
    let mut scfg = QpConfig::new(CompletionQueue::new(256));
    scfg.initial_recvs = recvs(server_recvs, 256);
    let (c, s) = join(client.connect(&client_pd, &addr, ccfg), async {
        let req = listener.accept_request().await.expect("request");
        req.accept(&server_pd, scfg).await
    })
    .await;
    let Connected { qp: cqp, .. } = c.expect("connect");
    let sqp = s.expect("accept");
    Pair {
        client,
        server,
        client_pd,
        server_pd,
        cqp,
        sqp,
    }
}

async fn next(cq: &CompletionQueue) -> WorkCompletion {
    cq.next().await.expect("completion queue overflowed")
}

/// Waits for `n` flushed receives on `qp` and checks their buffers came back.
async fn expect_flushed_recvs<Q: QueuePair>(qp: &Q, n: u64) {
    for _ in 0..n {
        let wc = next(qp.recv_cq()).await;
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.status, WcStatus::FlushError, "{wc:?}");
        assert!(wc.buf.is_some(), "flushed receive hands its buffer back");
    }
}

/// A Send with a gather list lands in the first posted receive, with its
/// length and solicited flag (RFC 5040 §5.3).
pub async fn send_delivers_into_posted_receive<H: Harness>(h: &H) {
    let p = connect_pair(h, 0, 2).await;
    let wr = SendWr {
        wr_id: 7,
        data: vec![Bytes::from_static(b"hello, "), Bytes::from_static(b"rdma")],
        solicited: true,
        invalidate: None,
    };
    p.cqp.post_send(wr).expect("post send");
    let sent = next(p.cqp.send_cq()).await;
    assert_eq!(
        (sent.wr_id, sent.opcode, sent.status, sent.byte_len),
        (7, WcOpcode::Send, WcStatus::Success, 11)
    );
    let got = next(p.sqp.recv_cq()).await;
    assert_eq!(
        (got.wr_id, got.status, got.byte_len, got.solicited),
        (1000, WcStatus::Success, 11, true)
    );
    assert_eq!(got.buf.as_deref(), Some(&b"hello, rdma"[..]));
    assert_eq!(got.invalidated, None);
    assert_eq!(p.sqp.state(), QpState::Rts);
}

/// An RDMA Write is placed into the target region once (RFC 5040 §5.1):
/// straight from the source, or copied from the receive side's staging
/// buffer when it arrived in one socket read with the FPDUs around it
/// (softrnic); the placement counters count each byte once.
pub async fn remote_write_is_placed_directly<H: Harness>(h: &H) {
    let p = connect_pair(h, 0, 1).await;
    let mr = p
        .server_pd
        .register_at(BytesMut::zeroed(64), Access::REMOTE_WRITE, 0x4000)
        .expect("register");
    let before = p.server.mr_table().stats();
    let data = Bytes::from(vec![0x42u8; 32]);
    p.cqp
        .post_write(WriteWr {
            wr_id: 1,
            data: vec![data.slice(..10), data.slice(10..)],
            remote_stag: mr.stag(),
            remote_to: 0x4010,
        })
        .expect("post write");
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!(
        (wc.opcode, wc.status, wc.byte_len),
        (WcOpcode::RdmaWrite, WcStatus::Success, 32)
    );
    // Order after the write: a Send completes only after the write was placed.
    p.cqp
        .post_send(SendWr {
            wr_id: 2,
            data: vec![Bytes::from_static(b"done")],
            ..Default::default()
        })
        .expect("send");
    assert_eq!(next(p.sqp.recv_cq()).await.status, WcStatus::Success);
    let after = p.server.mr_table().stats();
    assert_eq!(placed_bytes(after) - placed_bytes(before), 32);
    let buf = mr.invalidate().buf;
    assert_eq!(&buf[..16], &[0; 16]);
    assert_eq!(&buf[16..48], &[0x42; 32]);
    assert_eq!(&buf[48..], &[0; 16]);
}

/// An RDMA Read copies the peer's region into a local sink region
/// (RFC 5040 §5.2).
pub async fn remote_read_fetches_region<H: Harness>(h: &H) {
    let p = connect_pair(h, 0, 0).await;
    let src = p
        .server_pd
        .register(BytesMut::from(&b"0123456789"[..]), Access::REMOTE_READ)
        .expect("register");
    let sink = p
        .client_pd
        .register_at(BytesMut::zeroed(8), Access::LOCAL_WRITE, 0x100)
        .expect("register");
    p.cqp
        .post_read(ReadWr {
            wr_id: 3,
            local_stag: sink.stag(),
            local_to: 0x102,
            len: 5,
            remote_stag: src.stag(),
            remote_to: 4,
        })
        .expect("post read");
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!(
        (wc.opcode, wc.status, wc.byte_len),
        (WcOpcode::RdmaRead, WcStatus::Success, 5)
    );
    assert_eq!(&sink.invalidate().buf[..], b"\0\x0045678\0");
    assert_eq!(placed_bytes(p.client.mr_table().stats()), 5);
}

/// Bytes placed into a table's regions, straight or by a staging copy.
pub fn placed_bytes(s: rnic::PlacementStats) -> u64 {
    s.bytes_placed_direct + s.bytes_copied_staging
}

/// Shared body of the refused-write tests: the Write completes once
/// transmitted (iWARP has no acknowledgements), the target refuses it and
/// sends a Terminate with `expected`, both sides flush and close, and the
/// target memory is untouched.
async fn refused_write<H: Harness>(
    h: &H,
    access: Access,
    make_stag: impl FnOnce(Stag) -> Stag,
    to: u64,
    len: usize,
    expected: impl FnOnce(Stag) -> AccessError,
) {
    let p = connect_pair(h, 1, 1).await;
    let mr = p
        .server_pd
        .register(BytesMut::from(&[0x11u8; 16][..]), access)
        .expect("register");
    let stag = make_stag(mr.stag());
    p.cqp
        .post_write(WriteWr {
            wr_id: 9,
            data: vec![Bytes::from(vec![0xeeu8; len])],
            remote_stag: stag,
            remote_to: to,
        })
        .expect("post write");
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!(
        (wc.wr_id, wc.status),
        (9, WcStatus::Success),
        "a Write completes once transmitted"
    );
    expect_flushed_recvs(&p.cqp, 1).await;
    expect_flushed_recvs(&p.sqp, 1).await;
    let expected = expected(stag);
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(expected)))
    );
    // The initiator learns the DDP tagged-buffer code (RFC 5041 §7.2).
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(TerminateCause::ddp_tagged(
            expected
        )))
    );
    assert_eq!(p.cqp.state(), QpState::Error);
    assert_eq!(p.sqp.state(), QpState::Error);
    assert_eq!(
        p.cqp.post_send(SendWr::default()),
        Err(PostError::InvalidState(QpState::Error))
    );
    assert_eq!(
        &mr.invalidate().buf[..],
        &[0x11u8; 16],
        "target memory untouched"
    );
}

/// A write with the right index but a wrong key is refused (RFC 5040 §4.8, Invalid STag).
pub async fn rejects_write_with_wrong_key<H: Harness>(h: &H) {
    refused_write(
        h,
        Access::REMOTE_WRITE,
        |s| Stag::new(s.index(), s.key().wrapping_add(1)),
        0,
        4,
        AccessError::KeyMismatch,
    )
    .await;
}

/// A write reaching past the end of the region is refused and places nothing
/// (RFC 5040 §4.8, base or bounds violation).
pub async fn rejects_write_out_of_bounds<H: Harness>(h: &H) {
    refused_write(
        h,
        Access::REMOTE_WRITE,
        |s| s,
        12,
        8,
        |stag| AccessError::BoundsViolation {
            stag,
            to: 12,
            len: 8,
        },
    )
    .await;
}

/// A write to a region without the remote-write right is refused
/// (RFC 5040 §4.8, access rights violation).
pub async fn rejects_write_without_right<H: Harness>(h: &H) {
    refused_write(
        h,
        Access::REMOTE_READ,
        |s| s,
        0,
        4,
        AccessError::AccessRights,
    )
    .await;
}

/// A write to an STag of another protection domain is refused
/// (RFC 5040 §4.8, STag not associated with the RDMAP stream).
pub async fn rejects_write_to_other_pd<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 1).await;
    let other = p.server.alloc_pd();
    let mr = other
        .register(BytesMut::zeroed(8), Access::REMOTE_WRITE)
        .expect("register");
    let stag = mr.stag();
    p.cqp
        .post_write(WriteWr {
            wr_id: 1,
            data: vec![Bytes::from_static(b"x")],
            remote_stag: stag,
            remote_to: 0,
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.sqp, 1).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(
            AccessError::PdMismatch(stag)
        )))
    );
    assert_eq!(&mr.invalidate().buf[..], &[0u8; 8]);
}

/// A write to a region its owner invalidated fails; the buffer the owner took
/// back is untouched (RFC 5040 §2.1 invalidation).
pub async fn rejects_write_after_invalidation<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 1).await;
    let mr = p
        .server_pd
        .register(BytesMut::zeroed(8), Access::REMOTE_WRITE)
        .expect("register");
    let stag = mr.stag();
    let back = mr.invalidate();
    p.cqp
        .post_write(WriteWr {
            wr_id: 1,
            data: vec![Bytes::from_static(b"late")],
            remote_stag: stag,
            remote_to: 0,
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.sqp, 1).await;
    assert!(matches!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(_)))
    ));
    assert_eq!(&back.buf[..], &[0u8; 8]);
}

/// An RDMA Read of a region without the remote-read right is refused.
pub async fn rejects_read_without_right<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 1).await;
    let src = p
        .server_pd
        .register(BytesMut::zeroed(8), Access::REMOTE_WRITE)
        .expect("register");
    let sink = p
        .client_pd
        .register(BytesMut::from(&[7u8; 8][..]), Access::LOCAL_WRITE)
        .expect("register");
    p.cqp
        .post_read(ReadWr {
            wr_id: 4,
            local_stag: sink.stag(),
            local_to: 0,
            len: 8,
            remote_stag: src.stag(),
            remote_to: 0,
        })
        .expect("post");
    assert_eq!(
        next(p.cqp.send_cq()).await.status,
        WcStatus::RemoteAccessError
    );
    expect_flushed_recvs(&p.sqp, 1).await;
    expect_flushed_recvs(&p.cqp, 1).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(
            AccessError::AccessRights(src.stag())
        )))
    );
    // The requester learns the RDMAP protection code (RFC 5040 §4.8).
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(
            TerminateCause::rdmap_protection(AccessError::AccessRights(src.stag()))
        ))
    );
    assert_eq!(&sink.invalidate().buf[..], &[7u8; 8], "sink untouched");
}

/// A Send that finds no posted receive buffer terminates the connection
/// (RFC 5040 §5.3; RFC 5041 §7.2 "no buffer available").
pub async fn send_without_receive_terminates<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 0).await;
    p.cqp
        .post_send(SendWr {
            wr_id: 5,
            data: vec![Bytes::from_static(b"hi")],
            ..Default::default()
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.cqp, 1).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::NoReceiveBuffer))
    );
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(
            TerminateCause::NoReceiveBuffer
        ))
    );
}

/// A Send larger than the receive buffer terminates the connection; the
/// buffer completes with `LocalLengthError` (RFC 5041 §7.2).
pub async fn send_larger_than_receive_terminates<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 2).await;
    p.cqp
        .post_send(SendWr {
            wr_id: 6,
            data: vec![Bytes::from(vec![1u8; 300])],
            ..Default::default()
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    let first = next(p.sqp.recv_cq()).await;
    assert_eq!(
        (first.wr_id, first.status),
        (1000, WcStatus::LocalLengthError)
    );
    expect_flushed_recvs(&p.sqp, 1).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::MessageTooLong))
    );
    expect_flushed_recvs(&p.cqp, 1).await;
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(
            TerminateCause::MessageTooLong
        ))
    );
}

/// A disconnect flushes every outstanding work request on both sides and
/// refuses new send work.
pub async fn disconnect_flushes_outstanding<H: Harness>(h: &H) {
    let p = connect_pair(h, 3, 2).await;
    p.cqp
        .post_recv(RecvWr {
            wr_id: 77,
            buf: BytesMut::with_capacity(16),
        })
        .expect("post recv");
    p.cqp.disconnect();
    expect_flushed_recvs(&p.cqp, 4).await;
    expect_flushed_recvs(&p.sqp, 2).await;
    assert_eq!(p.cqp.close_reason(), Some(CloseReason::LocalDisconnect));
    assert_eq!(p.sqp.close_reason(), Some(CloseReason::PeerDisconnect));
    assert_eq!(p.cqp.state(), QpState::Error);
    assert_eq!(p.sqp.state(), QpState::Error);
    let r = p.sqp.post_write(WriteWr {
        wr_id: 1,
        data: vec![],
        remote_stag: Stag(0x100),
        remote_to: 0,
    });
    assert_eq!(r, Err(PostError::InvalidState(QpState::Error)));
}

/// Send With Invalidate revokes the receiver's STag before the receive
/// completes, reports it in the completion, and the owner gets its buffer
/// back without a local invalidation (RFC 5040 §5.3, §6.7.2).
pub async fn send_with_invalidate_reports_and_revokes<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 2).await;
    let mr = p
        .server_pd
        .register(BytesMut::from(&b"reply buffer"[..]), Access::REMOTE_WRITE)
        .expect("register");
    let stag = mr.stag();
    p.cqp
        .post_send(SendWr {
            wr_id: 8,
            data: vec![Bytes::from_static(b"inv")],
            solicited: false,
            invalidate: Some(stag),
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    let wc = next(p.sqp.recv_cq()).await;
    assert_eq!((wc.status, wc.invalidated), (WcStatus::Success, Some(stag)));
    assert_eq!(mr.state(), MrState::RemotelyInvalidated);
    // The STag is dead: a later write to it is refused with a Terminate.
    p.cqp
        .post_write(WriteWr {
            wr_id: 9,
            data: vec![Bytes::from_static(b"x")],
            remote_stag: stag,
            remote_to: 0,
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.sqp, 1).await;
    expect_flushed_recvs(&p.cqp, 1).await;
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(TerminateCause::ddp_tagged(
            AccessError::Invalidated(stag)
        )))
    );
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(
            AccessError::Invalidated(stag)
        )))
    );
    assert_eq!(&mr.invalidate().buf[..], b"reply buffer");
}

/// Send With Invalidate naming an STag the receiver cannot invalidate
/// terminates the connection (RFC 5040 §4.8, STag cannot be invalidated).
pub async fn send_with_invalidate_of_unknown_stag_terminates<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 2).await;
    let bogus = Stag::new(0x00ab_cdef, 0x12);
    p.cqp
        .post_send(SendWr {
            wr_id: 8,
            data: vec![Bytes::from_static(b"inv")],
            solicited: false,
            invalidate: Some(bogus),
        })
        .expect("post");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.sqp, 2).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(
            TerminateCause::CannotInvalidate(AccessError::UnknownStag(bogus))
        ))
    );
    expect_flushed_recvs(&p.cqp, 1).await;
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::TerminateReceived(
            TerminateCause::CANNOT_INVALIDATE_ON_WIRE
        ))
    );
}

/// The acceptor reads the connector's private data before deciding; the
/// connector receives the acceptor's (RFC 5044 §7.1); IRD/ORD are paired
/// (RFC 6581 §4).
pub async fn private_data_and_ird_ord_are_exchanged<H: Harness>(h: &H) {
    let (client, server) = h.pair();
    let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
    let mut listener = server.listen(&h.listen_addr()).await.expect("listen");
    let addr = listener.local_addr();
    let mut ccfg = QpConfig::new(CompletionQueue::new(8));
    ccfg.private_data = b"client hello".to_vec();
    ccfg.ord = 4;
    ccfg.ird = 2;
    let mut scfg = QpConfig::new(CompletionQueue::new(8));
    scfg.private_data = vec![0xab; rnic::MAX_PRIVATE_DATA];
    scfg.ird = 3;
    scfg.ord = 8;
    let (c, s) = join(client.connect(&cpd, &addr, ccfg), async {
        let req = listener.accept_request().await.expect("request");
        assert_eq!(req.private_data(), b"client hello");
        assert_eq!(req.peer_ird_ord(), (2, 4));
        req.accept(&spd, scfg).await
    })
    .await;
    let c = c.expect("connect");
    let sqp = s.expect("accept");
    assert_eq!(c.private_data, vec![0xab; rnic::MAX_PRIVATE_DATA]);
    let (ca, sa) = (c.qp.attrs(), sqp.attrs());
    assert_eq!((ca.ord, sa.ird), (3, 3), "client ORD limited by server IRD");
    assert_eq!((sa.ord, ca.ird), (2, 2), "server ORD limited by client IRD");
}

/// A reject carries private data to the connector, and oversized private
/// data is refused locally.
pub async fn reject_carries_private_data<H: Harness>(h: &H) {
    let (client, server) = h.pair();
    let cpd = client.alloc_pd();
    let mut listener = server.listen(&h.listen_addr()).await.expect("listen");
    let addr = listener.local_addr();
    let mut big = QpConfig::new(CompletionQueue::new(8));
    big.private_data = vec![0; rnic::MAX_PRIVATE_DATA + 1];
    assert_eq!(
        client.connect(&cpd, &addr, big).await.err(),
        Some(CmError::PrivateDataTooLong(rnic::MAX_PRIVATE_DATA + 1))
    );
    let mut ccfg = QpConfig::new(CompletionQueue::new(8));
    ccfg.private_data = b"may I".to_vec();
    let (c, s) = join(client.connect(&cpd, &addr, ccfg), async {
        let req = listener.accept_request().await.expect("request");
        assert_eq!(req.private_data(), b"may I");
        req.reject(b"no: try v2").await
    })
    .await;
    s.expect("reject");
    assert_eq!(
        c.err(),
        Some(CmError::Rejected {
            private_data: b"no: try v2".to_vec()
        })
    );
}

/// A request dropped without a decision reaches the connector as a reject
/// without private data; once the listener is gone, connecting is refused.
pub async fn dropped_request_rejects_and_closed_listener_refuses<H: Harness>(h: &H) {
    let (client, server) = h.pair();
    let cpd = client.alloc_pd();
    let mut listener = server.listen(&h.listen_addr()).await.expect("listen");
    let addr = listener.local_addr();
    let (c, ()) = join(
        client.connect(&cpd, &addr, QpConfig::new(CompletionQueue::new(8))),
        async {
            drop(listener.accept_request().await.expect("request"));
        },
    )
    .await;
    assert_eq!(
        c.err(),
        Some(CmError::Rejected {
            private_data: Vec::new()
        })
    );
    drop(listener);
    let c = client
        .connect(&cpd, &addr, QpConfig::new(CompletionQueue::new(8)))
        .await;
    assert_eq!(c.err(), Some(CmError::Refused));
}

/// Many messages in both directions keep their order and content, and the
/// receive completions come in posting order (RFC 5040 §5.3, RFC 5041 §5.1
/// MSN order).
pub async fn messages_keep_order_in_both_directions<H: Harness>(h: &H) {
    let p = connect_pair(h, 32, 32).await;
    for i in 0..32u64 {
        let body = Bytes::from(format!("c{i}"));
        p.cqp
            .post_send(SendWr {
                wr_id: i,
                data: vec![body],
                ..Default::default()
            })
            .expect("client send");
        let body = Bytes::from(format!("s{i}"));
        p.sqp
            .post_send(SendWr {
                wr_id: i,
                data: vec![body],
                ..Default::default()
            })
            .expect("server send");
    }
    // Each side's queue pair uses one completion queue for both queues.
    for (qp, tag) in [(&p.sqp, 'c'), (&p.cqp, 's')] {
        let (mut recvs, mut sends) = (Vec::new(), 0);
        while recvs.len() < 32 || sends < 32 {
            let wc = next(qp.recv_cq()).await;
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            match wc.opcode {
                WcOpcode::Recv => recvs.push((wc.wr_id, wc.buf)),
                _ => sends += 1,
            }
        }
        for (i, (wr_id, buf)) in recvs.into_iter().enumerate() {
            assert_eq!(wr_id, 1000 + i as u64);
            assert_eq!(buf.as_deref(), Some(format!("{tag}{i}").as_bytes()));
        }
    }
}

/// Shared bytes registered read-only serve the peer's RDMA Reads without a
/// copy; a Write to them is an access rights violation and changes nothing.
pub async fn read_only_region_serves_reads_and_refuses_writes<H: Harness>(h: &H) {
    let p = connect_pair(h, 1, 1).await;
    let data = Bytes::from_static(b"read chunk payload");
    let ro = p
        .server_pd
        .register_read_only(data.clone(), 0x2000)
        .expect("register");
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(18), Access::LOCAL_WRITE)
        .expect("register");
    p.cqp
        .post_read(ReadWr {
            wr_id: 1,
            local_stag: sink.stag(),
            local_to: 0,
            len: 18,
            remote_stag: ro.stag(),
            remote_to: 0x2000,
        })
        .expect("post read");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    p.cqp
        .post_write(WriteWr {
            wr_id: 2,
            data: vec![Bytes::from_static(b"x")],
            remote_stag: ro.stag(),
            remote_to: 0x2000,
        })
        .expect("post write");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    expect_flushed_recvs(&p.sqp, 1).await;
    assert_eq!(
        p.sqp.close_reason(),
        Some(CloseReason::TerminateSent(TerminateCause::Access(
            AccessError::AccessRights(ro.stag())
        )))
    );
    assert_eq!(ro.invalidate().buf, data);
    assert_eq!(&sink.invalidate().buf[..], &data[..]);
}

/// Zero-length operations: a Send delivers an empty message; an RDMA Write or
/// Read of zero bytes places nothing and its remote STag is not validated
/// (the RFC 6581 ready-to-receive message is a zero-length Write to STag 0).
pub async fn zero_length_operations_complete<H: Harness>(h: &H) {
    let p = connect_pair(h, 0, 2).await;
    p.cqp
        .post_send(SendWr {
            wr_id: 1,
            data: vec![],
            ..Default::default()
        })
        .expect("send");
    let wc = next(p.sqp.recv_cq()).await;
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 0));
    assert_eq!(wc.buf.as_deref(), Some(&[][..]));
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    let bogus = Stag::new(0x00ab_cdef, 0x34);
    p.cqp
        .post_write(WriteWr {
            wr_id: 2,
            data: vec![],
            remote_stag: bogus,
            remote_to: 0,
        })
        .expect("write");
    assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(4), Access::LOCAL_WRITE)
        .expect("register");
    p.cqp
        .post_read(ReadWr {
            wr_id: 3,
            local_stag: sink.stag(),
            local_to: 0,
            len: 0,
            remote_stag: bogus,
            remote_to: 0,
        })
        .expect("read");
    let wc = next(p.cqp.send_cq()).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (3, WcStatus::Success, 0)
    );
    // The connection is still up: a later Send is delivered.
    p.cqp
        .post_send(SendWr {
            wr_id: 4,
            data: vec![Bytes::from_static(b"ok")],
            ..Default::default()
        })
        .expect("send");
    let wc = next(p.sqp.recv_cq()).await;
    assert_eq!(wc.buf.as_deref(), Some(&b"ok"[..]));
    assert_eq!(p.sqp.close_reason(), None);
}

/// Expands to one `#[tokio::test]` per behaviour, each calling the behaviour
/// with the harness built by `$harness` under a 20-second timeout.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@tests $harness;
            send_delivers_into_posted_receive,
            remote_write_is_placed_directly,
            remote_read_fetches_region,
            rejects_write_with_wrong_key,
            rejects_write_out_of_bounds,
            rejects_write_without_right,
            rejects_write_to_other_pd,
            rejects_write_after_invalidation,
            rejects_read_without_right,
            send_without_receive_terminates,
            send_larger_than_receive_terminates,
            disconnect_flushes_outstanding,
            send_with_invalidate_reports_and_revokes,
            send_with_invalidate_of_unknown_stag_terminates,
            private_data_and_ird_ord_are_exchanged,
            reject_carries_private_data,
            dropped_request_rejects_and_closed_listener_refuses,
            messages_keep_order_in_both_directions,
            read_only_region_serves_reads_and_refuses_writes,
            zero_length_operations_complete,
        );
    };
    (@tests $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let h = $harness;
                tokio::time::timeout(std::time::Duration::from_secs(20), $crate::conformance::$name(&h))
                    .await
                    .expect("behaviour test timed out");
            }
        )*
    };
}
