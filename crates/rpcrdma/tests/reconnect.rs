//! Connection loss mid-RPC on the loopback device and on softrnic: the
//! client reconnects and sends the call again with the same XID; the
//! server's duplicate-request cache answers a call it already executed
//! (RFC 5531 §8; RFC 8166 §3.3.1, §3.4.3). The server device is wrapped so
//! that it drops the connection once, at a chosen operation: its RDMA Read
//! of a read chunk, or the Send of the reply.
#![cfg(feature = "transport")]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::client::DdpReplyHint;
use oncrpc::drc::DrcConfig;
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall, RpcError, Server};
use rnic::loopback::LoopbackNetwork;
use rnic::{
    CloseReason, CmError, CompletionQueue, ConnectRequest, Connected, Device, Listener, MrTable,
    PostError, ProtectionDomain, QpAttrs, QpConfig, QpNum, QpState, QueuePair, ReadWr, RecvWr,
    SendWr, WriteWr,
};
use rpcrdma::transport::{
    RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig, ReconnectPolicy,
};
use softrnic::{SoftConfig, SoftDevice};
use tokio::task::JoinHandle;
use xdr::{Decoder, Encoder, XdrBuf};

/// Where the wrapped device drops its connection (once).
const TRIP_NONE: u8 = 0;
const TRIP_READ: u8 = 1;
const TRIP_SEND: u8 = 2;

/// A device whose queue pairs drop the connection at the armed operation,
/// and whose connection requests report a fixed peer address.
#[derive(Clone)]
struct Flaky<D> {
    dev: D,
    trip: Arc<AtomicU8>,
}

struct FlakyQp<Q> {
    qp: Q,
    trip: Arc<AtomicU8>,
}

impl<Q: QueuePair> FlakyQp<Q> {
    /// Drops the connection if `op` is armed (and disarms).
    fn fire(&self, op: u8) {
        if self
            .trip
            .compare_exchange(op, TRIP_NONE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.qp.disconnect();
        }
    }
}

impl<Q: QueuePair> QueuePair for FlakyQp<Q> {
    fn qp_num(&self) -> QpNum {
        self.qp.qp_num()
    }
    fn pd(&self) -> rnic::PdId {
        self.qp.pd()
    }
    fn state(&self) -> QpState {
        self.qp.state()
    }
    fn close_reason(&self) -> Option<CloseReason> {
        self.qp.close_reason()
    }
    fn attrs(&self) -> QpAttrs {
        self.qp.attrs()
    }
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.fire(TRIP_SEND);
        self.qp.post_send(wr)
    }
    fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        self.qp.post_write(wr)
    }
    fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        self.fire(TRIP_READ);
        self.qp.post_read(wr)
    }
    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.qp.post_recv(wr)
    }
    fn send_cq(&self) -> &CompletionQueue {
        self.qp.send_cq()
    }
    fn recv_cq(&self) -> &CompletionQueue {
        self.qp.recv_cq()
    }
    fn disconnect(&self) {
        self.qp.disconnect()
    }
}

struct FlakyListener<L> {
    l: L,
    trip: Arc<AtomicU8>,
}

struct FlakyRequest<R> {
    r: R,
    trip: Arc<AtomicU8>,
}

/// The address every wrapped connection request reports.
fn client_addr() -> SocketAddr {
    "192.0.2.7:700".parse().unwrap()
}

impl<R: ConnectRequest> ConnectRequest for FlakyRequest<R> {
    type Qp = FlakyQp<R::Qp>;
    fn private_data(&self) -> &[u8] {
        self.r.private_data()
    }
    fn peer_ird_ord(&self) -> (u32, u32) {
        self.r.peer_ird_ord()
    }
    fn peer_addr(&self) -> Option<SocketAddr> {
        Some(client_addr())
    }
    fn accept(
        self,
        pd: &ProtectionDomain,
        config: QpConfig,
    ) -> impl Future<Output = Result<Self::Qp, CmError>> + Send {
        let trip = self.trip;
        let fut = self.r.accept(pd, config);
        async move {
            Ok(FlakyQp {
                qp: fut.await?,
                trip,
            })
        }
    }
    fn reject(self, private_data: &[u8]) -> impl Future<Output = Result<(), CmError>> + Send {
        self.r.reject(private_data)
    }
}

impl<L: Listener> Listener for FlakyListener<L> {
    type Addr = L::Addr;
    type Qp = FlakyQp<L::Qp>;
    type Request = FlakyRequest<L::Request>;
    fn local_addr(&self) -> Self::Addr {
        self.l.local_addr()
    }
    fn accept_request(&mut self) -> impl Future<Output = Result<Self::Request, CmError>> + Send {
        let trip = Arc::clone(&self.trip);
        let fut = self.l.accept_request();
        async move {
            Ok(FlakyRequest {
                r: fut.await?,
                trip,
            })
        }
    }
}

impl<D: Device> Device for Flaky<D> {
    type Addr = D::Addr;
    type Qp = FlakyQp<D::Qp>;
    type Listener = FlakyListener<D::Listener>;
    fn mr_table(&self) -> &Arc<MrTable> {
        self.dev.mr_table()
    }
    fn listen(
        &self,
        addr: &Self::Addr,
    ) -> impl Future<Output = Result<Self::Listener, CmError>> + Send {
        let trip = Arc::clone(&self.trip);
        let fut = self.dev.listen(addr);
        async move {
            Ok(FlakyListener {
                l: fut.await?,
                trip,
            })
        }
    }
    fn connect(
        &self,
        pd: &ProtectionDomain,
        addr: &Self::Addr,
        config: QpConfig,
    ) -> impl Future<Output = Result<Connected<Self::Qp>, CmError>> + Send {
        let trip = Arc::clone(&self.trip);
        let fut = self.dev.connect(pd, addr, config);
        async move {
            let c = fut.await?;
            Ok(Connected {
                qp: FlakyQp { qp: c.qp, trip },
                private_data: c.private_data,
            })
        }
    }
}

const COUNTER_PROGRAM: u32 = 0x2000_0200;

/// A non-idempotent procedure: each execution increments the counter and
/// returns the new count with the argument bytes (DDP-eligible both ways).
struct Counter(Arc<AtomicU32>);

impl oncrpc::RpcService for Counter {
    fn program(&self) -> u32 {
        COUNTER_PROGRAM
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }
    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        proc_ == 1
    }
    async fn call(
        &self,
        ctx: oncrpc::CallContext,
        args: Bytes,
    ) -> Result<XdrBuf, oncrpc::ServiceError> {
        if ctx.proc_ != 1 {
            return Err(oncrpc::ServiceError::ProcUnavail);
        }
        let mut dec = Decoder::from_bytes(&args);
        let data = dec.opaque_bytes(1 << 20)?;
        dec.finish()?;
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        let mut out = XdrBuf::new();
        out.put_u32(n);
        out.put_bulk(data, true);
        Ok(out)
    }
}

/// `services` served over `dev` at `addr` on their own task (the default
/// server configuration); the address it listens on, and the task.
async fn listen<D: Device>(
    dev: &D,
    addr: &D::Addr,
    services: Arc<Server>,
) -> (D::Addr, JoinHandle<Result<(), CmError>>) {
    let listener = RdmaListener::bind(dev, addr, services, RdmaServerConfig::default())
        .await
        .unwrap();
    (listener.local_addr(), listener.spawn())
}

/// A client of `dev` connected to `addr` that reconnects up to
/// `max_attempts` times, `delay_ms` apart.
async fn reconnecting<D: Device + Clone>(
    dev: &D,
    addr: &D::Addr,
    max_attempts: u32,
    delay_ms: u64,
) -> RdmaClient<D> {
    let policy = ReconnectPolicy {
        max_attempts,
        delay: Duration::from_millis(delay_ms),
    };
    RdmaClient::connect_with_reconnect(dev, addr, RdmaClientConfig::default(), policy)
        .await
        .unwrap()
}

/// Calls the counter; returns (count, echoed bytes).
async fn bump<T: ClientTransport>(t: &T, data: Bytes) -> Result<(u32, Bytes), RpcError> {
    let len = data.len();
    let mut args = XdrBuf::new();
    args.put_bulk(data, true);
    let call = RpcCall {
        prog: COUNTER_PROGRAM,
        vers: 1,
        proc_: 1,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len: 128 + xdr::padded_len(len),
            ddp: Some(DdpReplyHint {
                position: 8,
                max_len: len,
            }),
        },
    };
    let results = tokio::time::timeout(Duration::from_secs(20), t.call(call))
        .await
        .expect("call must not hang")?;
    let mut dec = Decoder::from_bytes(&results);
    let n = dec.u32()?;
    let out = dec.opaque_bytes(len)?;
    dec.finish()?;
    Ok((n, out))
}

fn pattern(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| seed.wrapping_add((i * 13 + i / 253) as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// Serves the counter on the wrapped `server` device and connects a
/// reconnecting client from `client`; drops the connection during a
/// read-chunk pull and while a reply is in flight, and checks that each
/// call completes once, byte-exact, executed once.
async fn drops_mid_rpc_are_survived<D: Device + Clone>(server: D, client: D, addr: D::Addr) {
    let trip = Arc::new(AtomicU8::new(TRIP_NONE));
    let sdev = Flaky {
        dev: server,
        trip: Arc::clone(&trip),
    };
    let count = Arc::new(AtomicU32::new(0));
    let mut services = Server::new().with_drc(DrcConfig {
        capacity: 64,
        max_reply_len: 1 << 20,
    });
    services.register(Counter(Arc::clone(&count)));
    let services = Arc::new(services);
    let (addr, _serving) = listen(&sdev, &addr, Arc::clone(&services)).await;
    let c = reconnecting(&client, &addr, 5, 10).await;

    // Warm up: the grant grows beyond one credit.
    let small = pattern(100, 1);
    assert_eq!(bump(&c, small.clone()).await.unwrap(), (1, small));

    // 1. Lost while the reply is in flight: executed once, the
    //    retransmission is answered from the duplicate-request cache.
    let data = pattern(100_000, 2);
    trip.store(TRIP_SEND, Ordering::SeqCst);
    let (n, got) = bump(&c, data.clone()).await.unwrap();
    assert_eq!(trip.load(Ordering::SeqCst), TRIP_NONE, "fault never fired");
    assert_eq!(n, 2);
    assert_eq!(got, data);
    assert_eq!(count.load(Ordering::SeqCst), 2, "executed exactly once");
    assert_eq!(services.drc().unwrap().hits(), 1);
    let s = c.stats();
    assert_eq!((s.reconnects, s.retransmissions), (1, 1), "{s:?}");

    // 2. Lost during the server's RDMA Read of the read chunk: not yet
    //    executed; the retransmission runs it once.
    let data = pattern(200_001, 3);
    trip.store(TRIP_READ, Ordering::SeqCst);
    let (n, got) = bump(&c, data.clone()).await.unwrap();
    assert_eq!(trip.load(Ordering::SeqCst), TRIP_NONE, "fault never fired");
    assert_eq!(n, 3);
    assert_eq!(got, data);
    assert_eq!(count.load(Ordering::SeqCst), 3);
    assert_eq!(services.drc().unwrap().hits(), 1);
    let s = c.stats();
    assert_eq!((s.reconnects, s.retransmissions), (2, 2), "{s:?}");
    assert_eq!(s.in_place_replies, s.write_chunk_replies, "{s:?}");
    // RFC 8166 §3.4.3: no region of the lost connections' calls, nor of
    // the completed ones, is left remotely accessible.
    assert_eq!(client.mr_table().valid_regions(), 0);

    // The new connection carries ordinary calls.
    let data = pattern(5000, 4);
    assert_eq!(bump(&c, data.clone()).await.unwrap(), (4, data));
    c.close();
    let after = bump(&c, pattern(10, 5)).await;
    assert_eq!(after, Err(RpcError::ConnectionClosed));
    assert_eq!(c.stats().reconnects, 2, "no reconnection after close");
}

#[tokio::test]
async fn loopback_connection_lost_mid_rpc_is_retransmitted_with_same_xid() {
    let net = LoopbackNetwork::new(41);
    drops_mid_rpc_are_survived(net.device(), net.device(), String::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn softrnic_connection_lost_mid_rpc_is_retransmitted_with_same_xid() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let s = SoftDevice::new(SoftConfig::default(), 11);
    let c = SoftDevice::new(SoftConfig::default(), 12);
    drops_mid_rpc_are_survived(s, c, any).await;
}

/// Without a fault, and with several calls in flight when the connection
/// drops, every call completes once: the backlog is resent within the
/// new connection's credits (one at first, RFC 8166 §3.3.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_at_a_loss_all_complete_once() {
    let net = LoopbackNetwork::new(42);
    let trip = Arc::new(AtomicU8::new(TRIP_NONE));
    let sdev = Flaky {
        dev: net.device(),
        trip: Arc::clone(&trip),
    };
    let count = Arc::new(AtomicU32::new(0));
    let mut services = Server::new().with_drc(DrcConfig {
        capacity: 256,
        max_reply_len: 1 << 20,
    });
    services.register(Counter(Arc::clone(&count)));
    let (addr, _serving) = listen(&sdev, &String::new(), Arc::new(services)).await;
    let c = reconnecting(&net.device(), &addr, 5, 5).await;
    bump(&c, pattern(10, 0)).await.unwrap();
    trip.store(TRIP_SEND, Ordering::SeqCst);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24usize {
        let c = c.clone();
        tasks.spawn(async move {
            let data = pattern(i * 4099 % 70_000, i as u8);
            let (_, got) = bump(&c, data.clone()).await.unwrap();
            assert_eq!(got, data);
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert_eq!(count.load(Ordering::SeqCst), 25, "each call executed once");
    assert_eq!(c.stats().reconnects, 1);
    assert_eq!(c.credits().1, 0);
}

/// Random connection losses (loopback fault injection, about one in 25
/// operations on every connection, reconnections included): every call
/// still completes once, byte-exact, executed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_losses_never_lose_or_repeat_a_call() {
    use rnic::loopback::{FaultConfig, LoopbackConfig};
    let faults = FaultConfig {
        drop_after_ops: None,
        drop_one_in: Some(25),
    };
    let net = LoopbackNetwork::with_faults(43, faults, LoopbackConfig::default());
    let sdev = Flaky {
        dev: net.device(),
        trip: Arc::new(AtomicU8::new(TRIP_NONE)),
    };
    let count = Arc::new(AtomicU32::new(0));
    let mut services = Server::new().with_drc(DrcConfig {
        capacity: 256,
        max_reply_len: 1 << 20,
    });
    services.register(Counter(Arc::clone(&count)));
    let services = Arc::new(services);
    let (addr, _serving) = listen(&sdev, &String::new(), Arc::clone(&services)).await;
    let cdev = net.device();
    let c = reconnecting(&cdev, &addr, 100, 2).await;
    let calls = 60u32;
    for i in 0..calls {
        let data = pattern((i as usize * 7919) % 150_000, i as u8);
        let (n, got) = bump(&c, data.clone()).await.unwrap();
        assert_eq!(got, data, "call {i}");
        assert_eq!(n, i + 1, "call {i} executed once");
    }
    assert_eq!(count.load(Ordering::SeqCst), calls);
    let s = c.stats();
    assert!(s.reconnects >= 3, "too few losses injected: {s:?}");
    assert_eq!(cdev.mr_table().valid_regions(), 0);
}

/// When every reconnection attempt fails (the listener is gone), the call
/// in flight completes with an error the caller sees, and so do later
/// calls.
#[tokio::test]
async fn failed_reconnection_fails_the_calls_in_flight() {
    let net = LoopbackNetwork::new(44);
    let trip = Arc::new(AtomicU8::new(TRIP_NONE));
    let sdev = Flaky {
        dev: net.device(),
        trip: Arc::clone(&trip),
    };
    let count = Arc::new(AtomicU32::new(0));
    let mut services = Server::new();
    services.register(Counter(Arc::clone(&count)));
    let (addr, serving) = listen(&sdev, &String::new(), Arc::new(services)).await;
    let cdev = net.device();
    let c = reconnecting(&cdev, &addr, 3, 5).await;
    bump(&c, pattern(10, 0)).await.unwrap();
    // Stop listening; the established connection lives on until the
    // reply of the next call is lost.
    serving.abort();
    let _ = serving.await;
    trip.store(TRIP_SEND, Ordering::SeqCst);
    let r = bump(&c, pattern(50_000, 1)).await;
    assert_eq!(r, Err(RpcError::ConnectionClosed));
    assert_eq!(c.stats().reconnects, 0);
    assert_eq!(
        bump(&c, pattern(10, 2)).await,
        Err(RpcError::ConnectionClosed)
    );
    assert_eq!(cdev.mr_table().valid_regions(), 0);
}

/// RPCSEC_GSS across a reconnection (stand-in mechanism): each
/// retransmission carries a new sequence number and arguments protected
/// for it (RFC 2203 §5.3.3.1), so the server does not drop it as a
/// replay; a call whose reply was lost is answered from the
/// duplicate-request cache (same XID, same arguments once unprotected)
/// with the reply protected for the first transmission's number, which the
/// client still accepts; a call lost before it ran runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gss_retransmissions_take_a_new_sequence_number() {
    use oncrpc::gss::fake::{FakeAcceptor, FakeInitiator};
    use oncrpc::gss::{GssClient, GssConfig, GssServer, GssService};
    let net = LoopbackNetwork::new(44);
    let trip = Arc::new(AtomicU8::new(TRIP_NONE));
    let sdev = Flaky {
        dev: net.device(),
        trip: Arc::clone(&trip),
    };
    let count = Arc::new(AtomicU32::new(0));
    let acceptor = FakeAcceptor { key: 7, rounds: 1 };
    let mut services = Server::new()
        .with_drc(DrcConfig {
            capacity: 64,
            max_reply_len: 1 << 20,
        })
        .with_gss(Arc::new(GssServer::new(
            Arc::new(acceptor),
            GssConfig::default(),
        )));
    services.register(Counter(Arc::clone(&count)));
    let services = Arc::new(services);
    let (addr, _serving) = listen(&sdev, &String::new(), Arc::clone(&services)).await;
    let c = reconnecting(&net.device(), &addr, 5, 5).await;
    let initiator = FakeInitiator {
        principal: "alice@FAKE".into(),
        key: 7,
    };
    let mut expected = 0;
    let mut hits = 0;
    for service in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let gss = GssClient::establish(c.clone(), &initiator, "nfs@x", COUNTER_PROGRAM, 1, service)
            .await
            .unwrap();
        expected += 1;
        assert_eq!(bump(&gss, pattern(10, 0)).await.unwrap().0, expected);
        for (op, data) in [
            (TRIP_SEND, pattern(90_000, 1)),
            (TRIP_READ, pattern(150_001, 2)),
        ] {
            let before = c.stats();
            trip.store(op, Ordering::SeqCst);
            let (n, got) = bump(&gss, data.clone()).await.unwrap();
            assert_eq!(trip.load(Ordering::SeqCst), TRIP_NONE, "fault never fired");
            expected += 1;
            assert_eq!((n, got), (expected, data), "{service:?} trip {op}");
            assert_eq!(count.load(Ordering::SeqCst), expected, "executed once");
            let s = c.stats();
            assert_eq!(s.retransmissions, before.retransmissions + 1, "{s:?}");
            if op == TRIP_SEND {
                hits += 1;
            }
            assert_eq!(
                services.drc().unwrap().hits(),
                hits,
                "{service:?} trip {op}"
            );
        }
    }
    c.close();
}
