//! Hostile requesters against the RPC-over-RDMA server over softrnic (real
//! iWARP on 127.0.0.1): calls whose read chunks are never pulled because
//! the peer never answers the server's RDMA Read Requests (it offers an IRD
//! of zero), calls beyond the credits granted, read chunks larger than the
//! server accepts, a peer that sends calls but never reads its replies, and
//! one that answers back-channel calls the server never made.
//! Each bound holds, is counted, and a normal client is served afterwards.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::limits::trips;
use oncrpc::Server;
use rnic::{QueuePair, RecvWr, SendWr, WcOpcode};
use rpcrdma::transport::{
    Backchannel, Backchannels, RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig,
    MAX_BACKCHANNEL_WAITERS,
};
use rpcrdma::wire::{v1, ChunkLists, Limits};
use softrnic::SoftQp;

#[path = "support/raw.rs"]
mod raw;

use raw::{echo_call, soft, Raw};

async fn serve(seed: u64, config: RdmaServerConfig) -> SocketAddr {
    raw::serve_one(seed, config, EchoService::default()).await
}

/// The raw requester of these tests offers IRD 0: the server's RDMA Reads
/// of its chunks never run.
async fn connect(seed: u64, addr: SocketAddr) -> Raw {
    Raw::connect(seed, 0, addr).await
}

impl Raw {
    /// Sends an RDMA_NOMSG call whose RPC message (an echo of `n` bytes)
    /// is in a Position-Zero Read chunk of `claimed` bytes.
    fn call_with_read_chunk(&mut self, n: usize, claimed: u32) -> u32 {
        let xid = self.xid();
        // Only the message is registered: the claim may name more.
        let reads = self.position_zero(&echo_call(xid, n), claimed);
        let lists = ChunkLists {
            reads,
            ..ChunkLists::default()
        };
        self.send(xid, 64, v1::Body::NoMsg(lists), Bytes::new());
        xid
    }

    /// The next transport header the server sends.
    async fn answer(&self) -> v1::Header {
        self.header_within(Duration::from_secs(5))
            .await
            .expect("an answer in time")
    }
}

/// A well-behaved client: echoes inline and through read and write chunks.
async fn normal_client_is_served(seed: u64, addr: SocketAddr) {
    let started = Instant::now();
    let client = RdmaClient::connect(&soft(seed, 16), &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    let echo = EchoClient::new(client.clone());
    for n in [10usize, 100_000] {
        let data: Bytes = vec![3u8; n].into();
        assert_eq!(echo.echo(data.clone()).await.unwrap(), data);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_rdma_reads_close_the_connection_after_the_timeout() {
    let addr = serve(
        10,
        RdmaServerConfig {
            read_timeout: Duration::from_millis(300),
            ..RdmaServerConfig::default()
        },
    )
    .await;
    let timeouts = trips("rdma.read_timeout");
    let mut raw = connect(11, addr).await;
    // The server's timer starts when it posts its first Read, after this;
    // on a busy machine posting the calls may take longer than the
    // timeout, so the close is timed from here, not after the calls.
    let sent = Instant::now();
    for _ in 0..4 {
        raw.call_with_read_chunk(1 << 20, 1 << 20);
    }
    assert!(
        raw.closed_within(Duration::from_secs(3)).await,
        "still open long after the read timeout"
    );
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "closed {:?} after the calls, before the 300 ms timeout",
        sent.elapsed()
    );
    assert!(trips("rdma.read_timeout") > timeouts);
    normal_client_is_served(12, addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_read_budget_wait_and_then_complete() {
    // Eight 300 KB calls at once against a 1 MiB budget: at most three
    // pull at a time, the others wait, and every one is answered.
    let addr = serve(
        20,
        RdmaServerConfig {
            read_bytes_per_conn: 1 << 20,
            ..RdmaServerConfig::default()
        },
    )
    .await;
    let waits = trips("rdma.read_bytes_per_conn");
    let client = RdmaClient::connect(&soft(21, 16), &addr, RdmaClientConfig::default())
        .await
        .unwrap();
    let echo = EchoClient::new(client.clone());
    let calls = (0..8u8).map(|i| {
        let echo = echo.clone();
        async move {
            let data: Bytes = vec![i; 300_000].into();
            assert_eq!(echo.echo(data.clone()).await.unwrap(), data);
        }
    });
    tokio::time::timeout(Duration::from_secs(10), futures_join_all(calls))
        .await
        .expect("every call answered");
    assert!(trips("rdma.read_bytes_per_conn") > waits);
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_peer_holds_at_most_the_read_budget() {
    // Calls claiming 1 MiB each against a 2 MiB budget: the third waits
    // (counted) instead of allocating, and the connection still closes
    // at the read timeout.
    let addr = serve(
        30,
        RdmaServerConfig {
            read_bytes_per_conn: 2 << 20,
            read_timeout: Duration::from_millis(500),
            ..RdmaServerConfig::default()
        },
    )
    .await;
    let waits = trips("rdma.read_bytes_per_conn");
    let mut raw = connect(31, addr).await;
    for _ in 0..6 {
        raw.call_with_read_chunk(100, 1 << 20);
    }
    let end = Instant::now() + Duration::from_secs(2);
    while trips("rdma.read_bytes_per_conn") == waits && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(trips("rdma.read_bytes_per_conn") > waits);
    assert!(raw.closed_within(Duration::from_secs(3)).await);
    normal_client_is_served(32, addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_credits_closes_the_connection() {
    let addr = serve(
        40,
        RdmaServerConfig {
            credits: 4,
            read_timeout: Duration::from_secs(20),
            ..RdmaServerConfig::default()
        },
    )
    .await;
    let over = trips("rdma.calls_beyond_credits");
    let mut raw = connect(41, addr).await;
    // Four stalled calls: as many as the credits; the connection stays.
    for _ in 0..4 {
        raw.call_with_read_chunk(100, 4096);
    }
    // (The trip counter is process-wide: a_peer_that_never_reads_its_
    // replies_is_cut_off may raise it at the same time, so only the
    // connection tells here.)
    assert!(!raw.closed_within(Duration::from_millis(300)).await);
    // A fifth while none was answered violates RFC 8166 §3.3.1.
    raw.call_with_read_chunk(100, 4096);
    assert!(raw.closed_within(Duration::from_secs(2)).await);
    assert!(trips("rdma.calls_beyond_credits") > over);
    normal_client_is_served(42, addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_chunk_beyond_the_call_limit_is_refused_before_allocating() {
    let addr = serve(50, RdmaServerConfig::default()).await;
    let big = trips("rdma.max_read_bytes");
    let mut raw = connect(51, addr).await;
    // 4 GiB - 1 claimed, no byte registered behind most of it.
    let xid = raw.call_with_read_chunk(100, u32::MAX);
    let h = raw.answer().await;
    assert_eq!(h.xid, xid);
    assert!(
        matches!(h.body, v1::Body::Error(v1::ErrorBody::Chunk)),
        "{h:?}"
    );
    assert!(trips("rdma.max_read_bytes") > big);
    normal_client_is_served(52, addr).await;
}

/// Runs the futures concurrently to completion.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    fs: impl Iterator<Item = F>,
) {
    let tasks: Vec<_> = fs.map(tokio::spawn).collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Bytes of the server's replies that sit unread in the peer's socket.
fn unread(s: &tokio::net::TcpStream) -> u64 {
    rustix::io::ioctl_fionread(s).unwrap_or(0)
}

/// Paces the deaf peer while its receive buffer still takes replies:
/// waits until replies to all but 32 of the `sent` calls have arrived
/// (unread), so the server is never more than 32 calls behind however
/// slow the machine. `true` once the replies stop coming for 300 ms (the
/// buffer is full and the server's sends stall); the peer then paces by
/// time.
async fn wait_for_replies(s: &tokio::net::TcpStream, sent: u32) -> bool {
    // More than an echo reply of 3800 bytes takes with its headers, so
    // the count of replies seen is never overestimated.
    const REPLY_MAX: u64 = 4200;
    let mut last = (unread(s), Instant::now());
    loop {
        let now = unread(s);
        if u64::from(sent).saturating_sub(now / REPLY_MAX) <= 32 {
            return false;
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(300) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A peer that speaks MPA and writes Send FPDUs built by the `iwarp` engine
/// but never reads its socket: the server's replies pile up.
async fn deaf_peer(addr: SocketAddr) -> tokio::net::TcpStream {
    use iwarp::negotiation::{Initiator, InitiatorConfig, ReplyOutcome};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A small fixed receive buffer (no autotuning): the replies back up
    // into the server quickly.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(64 * 1024).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let cfg = InitiatorConfig {
        crc: false,
        ird: 4,
        ord: 4,
        rtr_offer: vec![],
        // RFC 8797: 4 KiB inline both ways, like the server.
        private_data: rpcrdma::wire::cm::CmPrivateData::new(
            rpcrdma::wire::cm::CmFlags::default(),
            4096,
            4096,
        )
        .to_bytes()
        .to_vec(),
        large_fpdu: false,
    };
    let (awaiting, req) = Initiator::start(cfg).unwrap();
    s.write_all(&req).await.unwrap();
    let mut reply = vec![0u8; 20];
    s.read_exact(&mut reply).await.unwrap();
    let pd_len = usize::from(u16::from_be_bytes([reply[18], reply[19]]));
    reply.resize(20 + pd_len, 0);
    s.read_exact(&mut reply[20..]).await.unwrap();
    let ReplyOutcome::Accepted(est) = awaiting.handle_reply(&reply).unwrap() else {
        panic!("MPA rejected");
    };
    let mut engine = iwarp::conn::Connection::new(iwarp::conn::Config::from_established(&est));
    // Echo calls of 3800 bytes inline: each reply is as long.
    let mut wire = Vec::new();
    let mut stalled = false;
    for xid in 1..=6000u32 {
        let header = xdr::to_bytes(&v1::Header {
            xid,
            credits: 64,
            body: v1::Body::Msg(ChunkLists::default()),
        });
        let msg = [header, echo_call(xid, 3800)].concat();
        engine
            .post_send(u64::from(xid), iwarp::conn::SendKind::Send, msg.len())
            .unwrap();
        while let Some(t) = engine.poll_transmit() {
            let payload = match t.payload {
                Some(iwarp::segment::PayloadRef::Wr { offset, len, .. }) => {
                    &msg[offset..offset + len]
                }
                _ => &[][..],
            };
            wire.extend_from_slice(&t.to_vec(payload));
        }
        while engine.poll_event().is_some() {}
        // Batches of 16 calls, paced so that the server keeps up (on a
        // busy machine too): only the replies it cannot send may make its
        // calls pile up, after `rdma.unsent_replies` has tripped.
        if xid % 16 == 0 {
            if s.write_all(&wire).await.is_err() {
                return s;
            }
            wire.clear();
            if stalled {
                // About 500 calls a second: a debug build at load 20 keeps up.
                tokio::time::sleep(Duration::from_millis(30)).await;
            } else {
                stalled = wait_for_replies(&s, xid).await;
            }
        }
    }
    let _ = s.write_all(&wire).await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_its_replies_is_cut_off() {
    let addr = serve(60, RdmaServerConfig::default()).await;
    let (over, unsent) = (
        trips("rdma.calls_beyond_credits"),
        trips("rdma.unsent_replies"),
    );
    // Writing stops when the server resets the connection.
    let s = tokio::time::timeout(Duration::from_secs(15), deaf_peer(addr))
        .await
        .expect("the server neither cut the connection off nor kept reading");
    // The replies the peer does not read held their calls in flight, so
    // its next calls exceeded the credits and the connection was closed.
    let end = Instant::now() + Duration::from_secs(5);
    while trips("rdma.calls_beyond_credits") == over && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(trips("rdma.calls_beyond_credits") > over);
    assert!(trips("rdma.unsent_replies") > unsent);
    drop(s);
    normal_client_is_served(61, addr).await;
}

/// A listener whose connections carry a backchannel of `credits`
/// (RFC 8167), with the registry of those backchannels.
async fn serve_backchannel(
    seed: u64,
    credits: u32,
    reply_wait: Duration,
) -> (SocketAddr, Backchannels<SoftQp>) {
    let mut server = Server::new();
    server.register(EchoService::default());
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let config = RdmaServerConfig {
        backchannel_credits: credits,
        backchannel_reply_wait: reply_wait,
        ..RdmaServerConfig::default()
    };
    let listener = RdmaListener::bind(&soft(seed, 16), &any, Arc::new(server), config)
        .await
        .unwrap();
    let addr = listener.local_addr();
    let backchannels = listener.backchannels();
    listener.spawn();
    (addr, backchannels)
}

/// The backchannel of the listener's one connection, once it is up.
async fn the_backchannel(bcs: &Backchannels<SoftQp>) -> Backchannel<SoftQp> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(id) = bcs.conn_ids().first() {
            return bcs.get(*id).unwrap();
        }
        assert!(Instant::now() < end, "no backchannel registered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `f`'s output, failing the test if it takes 20 s (a failure guard,
/// never a measure).
async fn guard<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("ended within the 20 s guard")
}

/// Waits (a failure guard of 20 s, never a measure) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Raw {
    /// The next reverse-direction call the server sends (RFC 8167 §4: an
    /// RDMA_MSG whose RPC message is a CALL): its xid.
    async fn reverse_call(&self) -> u32 {
        let wc = loop {
            let wc = tokio::time::timeout(Duration::from_secs(20), self.qp.recv_cq().next())
                .await
                .expect("a reverse call in time")
                .unwrap();
            // (Our replies' Sends complete on the same queue.)
            if wc.opcode == WcOpcode::Recv {
                break wc;
            }
        };
        let mut b = wc.buf.unwrap();
        b.truncate(wc.byte_len as usize);
        let (h, len) = v1::Header::parse(&b, &Limits::default()).unwrap();
        assert!(matches!(h.body, v1::Body::Msg(_)), "{h:?}");
        let word =
            |i: usize| u32::from_be_bytes(b[len + 4 * i..len + 4 * i + 4].try_into().unwrap());
        assert_eq!((word(0), word(1)), (h.xid, 0), "an RPC CALL");
        // Every receive consumed is posted again, as a client must.
        self.qp
            .post_recv(RecvWr {
                wr_id: 100 + u64::from(h.xid),
                buf: BytesMut::with_capacity(4096),
            })
            .unwrap();
        h.xid
    }

    /// Replies to the reverse call `xid` (accepted, SUCCESS, no results:
    /// a NULL reply), granting `credits` backchannel credits.
    fn reverse_reply(&self, xid: u32, credits: u32) {
        let mut out = xdr::to_bytes(&v1::Header {
            xid,
            credits,
            body: v1::Body::Msg(ChunkLists::default()),
        })
        .to_vec();
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
        for w in [xid, 1, 0, 0, 0, 0] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                data: vec![Bytes::from(out)],
                ..Default::default()
            })
            .unwrap();
    }
}

/// A client that never answers the server's reverse-direction calls: once
/// its one credit is held, at most `MAX_BACKCHANNEL_WAITERS` calls wait for
/// it, one more is refused at once and counted, and all end when the
/// connection does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_calls_waiting_behind_a_silent_client_are_bounded() {
    let (addr, bcs) = serve_backchannel(70, 2, Duration::from_secs(600)).await;
    let refused = trips("rdma.backchannel_waiters");
    let raw = connect(71, addr).await;
    let bc = the_backchannel(&bcs).await;
    let mut calls = tokio::task::JoinSet::new();
    let first = EchoClient::new(bc.clone());
    calls.spawn(async move { first.null().await });
    // The first call goes out on the one credit a new connection has.
    raw.reverse_call().await;
    for _ in 0..MAX_BACKCHANNEL_WAITERS {
        let cb = EchoClient::new(bc.clone());
        calls.spawn(async move { cb.null().await });
    }
    until("every call waiting", || {
        bc.waiting() == MAX_BACKCHANNEL_WAITERS
    })
    .await;
    assert_eq!(bc.outstanding(), 1);
    let err = guard(EchoClient::new(bc.clone()).null()).await.unwrap_err();
    assert_eq!(err, oncrpc::RpcError::TooManyInFlight);
    assert!(trips("rdma.backchannel_waiters") > refused);
    assert_eq!(bc.waiting(), MAX_BACKCHANNEL_WAITERS);
    // The client goes: every call ends, none is left waiting.
    raw.qp.disconnect();
    let mut ended = 0;
    while let Some(r) = tokio::time::timeout(Duration::from_secs(20), calls.join_next())
        .await
        .expect("every call ends with the connection")
    {
        assert_eq!(r.unwrap().unwrap_err(), oncrpc::RpcError::ConnectionClosed);
        ended += 1;
    }
    assert_eq!(ended, MAX_BACKCHANNEL_WAITERS + 1);
    assert_eq!(bc.waiting(), 0);
}

/// A reverse-direction call the client never answers times out (counted)
/// and keeps its credit (RFC 8166 §3.3.1: the client's receive buffer is
/// still taken), so the next call is not sent and times out too; the late
/// reply returns the credit and calls go out and complete again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_backchannel_call_times_out_and_its_late_reply_frees_its_credit() {
    let (addr, bcs) = serve_backchannel(80, 2, Duration::from_secs(2)).await;
    let timeouts = trips("rdma.backchannel_reply_wait");
    let raw = connect(81, addr).await;
    let bc = the_backchannel(&bcs).await;
    let echo = EchoClient::new(bc.clone());
    let first = tokio::spawn({
        let echo = echo.clone();
        async move { echo.null().await }
    });
    let abandoned = raw.reverse_call().await;
    assert_eq!(guard(first).await.unwrap(), Err(oncrpc::RpcError::TimedOut));
    assert!(trips("rdma.backchannel_reply_wait") > timeouts);
    assert_eq!(bc.outstanding(), 1, "the abandoned call keeps its credit");
    // No credit: the second call waits for one, then times out unsent.
    let timeouts = trips("rdma.backchannel_reply_wait");
    assert_eq!(guard(echo.null()).await, Err(oncrpc::RpcError::TimedOut));
    assert!(trips("rdma.backchannel_reply_wait") > timeouts);
    assert_eq!(bc.outstanding(), 1);
    assert_eq!(bc.waiting(), 0);
    // The late reply returns the credit (and grants two).
    raw.reverse_reply(abandoned, 2);
    until("the late reply frees the credit", || bc.outstanding() == 0).await;
    // A second reply to the same call changes nothing.
    raw.reverse_reply(abandoned, 2);
    let (a, b) = (echo.clone(), echo.clone());
    let both = tokio::spawn(async move { tokio::join!(a.null(), b.null()) });
    // Both go out at once on the two credits; the next message the client
    // sees is one of them, not the second call, which never left.
    let x = raw.reverse_call().await;
    let y = raw.reverse_call().await;
    assert!(x != abandoned && y != abandoned && x != y);
    raw.reverse_reply(x, 2);
    raw.reverse_reply(y, 2);
    let (a, b) = guard(both).await.unwrap();
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert_eq!(bc.outstanding(), 0);
}

/// A client that sends reverse-direction REPLYs no call of the server's
/// waits for (an xid never sent, then a second reply to one answered):
/// each is dropped and counted, grants nothing (a new connection's one
/// credit stays one), and the connection keeps serving calls both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_replies_to_no_call_are_counted_and_change_nothing() {
    let (addr, bcs) = serve_backchannel(90, 2, Duration::from_secs(600)).await;
    let mut raw = connect(91, addr).await;
    let bc = the_backchannel(&bcs).await;
    let before = trips("rdma.unexpected_reply");
    raw.reverse_reply(0x5eed_0001, 2);
    until("the made-up reply is counted", || {
        trips("rdma.unexpected_reply") > before
    })
    .await;
    // Its grant of two was not taken: one call goes out, one waits.
    let echo = EchoClient::new(bc.clone());
    let (a, b) = (echo.clone(), echo.clone());
    let both = tokio::spawn(async move { tokio::join!(a.null(), b.null()) });
    let x = raw.reverse_call().await;
    until("the second call waiting", || bc.waiting() == 1).await;
    assert_eq!(bc.outstanding(), 1);
    raw.reverse_reply(x, 2);
    let y = raw.reverse_call().await;
    assert_ne!(x, y);
    raw.reverse_reply(y, 2);
    assert_eq!(guard(both).await.unwrap(), (Ok(()), Ok(())));
    assert_eq!(bc.outstanding(), 0);
    // A second reply to an answered call: counted, dropped.
    let before = trips("rdma.unexpected_reply");
    raw.reverse_reply(x, 2);
    until("the second reply is counted", || {
        trips("rdma.unexpected_reply") > before
    })
    .await;
    assert_eq!(bc.outstanding(), 0);
    // The connection still serves the client's calls...
    let xid = raw.next;
    raw.next += 1;
    let header = xdr::to_bytes(&v1::Header {
        xid,
        credits: 64,
        body: v1::Body::Msg(ChunkLists::default()),
    });
    raw.qp
        .post_send(SendWr {
            wr_id: u64::from(xid),
            data: vec![header, echo_call(xid, 12)],
            ..Default::default()
        })
        .unwrap();
    let h = raw.answer().await;
    assert_eq!(h.xid, xid);
    assert!(matches!(h.body, v1::Body::Msg(_)), "{h:?}");
    // ...and the server's.
    let call = tokio::spawn(async move { echo.null().await });
    let z = raw.reverse_call().await;
    raw.reverse_reply(z, 2);
    assert_eq!(guard(call).await.unwrap(), Ok(()));
}
