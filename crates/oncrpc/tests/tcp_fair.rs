//! Fairness between connections when calls run inline: the TCP shell runs
//! a call on its connection's task up to the call's first wait, so a
//! service that never waits (a cached NFS READ, ECHO) runs entirely there.
//! A client pipelining thousands of such calls must not keep another
//! connection's call waiting until all of them are done, even when the
//! server has one worker thread (as when every worker is busy).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use oncrpc::msg::OpaqueAuth;
use oncrpc::tcp::{TcpConfig, TcpServer};
use oncrpc::{CallContext, RpcService, Server, ServiceError};
use xdr::XdrBuf;

const PROG: u32 = 0x2000_0f01;
const FLOOD: u32 = 1;
const PROBE: u32 = 2;
const FLOODS: usize = 4000;

/// Calls that finish on their first poll; the first FLOOD call holds the
/// server's thread until the test opens the gate.
#[derive(Default)]
struct Marks {
    floods: AtomicUsize,
    started: AtomicBool,
    gate: AtomicBool,
    /// FLOOD calls done when the PROBE call ran, plus one.
    probe_at: AtomicUsize,
}

impl Marks {
    /// Counts a FLOOD call; the first waits for the gate.
    fn flood(&self) {
        if self.floods.fetch_add(1, Ordering::SeqCst) == 0 {
            self.started.store(true, Ordering::SeqCst);
            while !self.gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

struct Inline(Arc<Marks>);

impl RpcService for Inline {
    fn program(&self) -> u32 {
        PROG
    }

    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }

    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        let m = &self.0;
        match ctx.proc_ {
            FLOOD => m.flood(),
            PROBE => m
                .probe_at
                .store(m.floods.load(Ordering::SeqCst) + 1, Ordering::SeqCst),
            _ => {}
        }
        Ok(XdrBuf::new())
    }
}

fn call(xid: u32, proc_: u32) -> Vec<u8> {
    testkit::rpc::call_record(xid, (PROG, 1, proc_), OpaqueAuth::NONE, &[])
}

/// Reads one whole record (a single fragment) from `s`.
fn read_record(s: &mut TcpStream) -> Vec<u8> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let len = (u32::from_be_bytes(h) & 0x7fff_ffff) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    body
}

/// A server with one worker thread serving [`Inline`].
fn start(marks: &Arc<Marks>) -> SocketAddr {
    let (tx, rx) = mpsc::channel();
    let marks = Arc::clone(marks);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut server = Server::new();
            server.register(Inline(marks));
            let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
                .await
                .unwrap();
            tx.send(srv.local_addr().unwrap()).unwrap();
            let _ = srv.serve().await;
        });
    });
    rx.recv().unwrap()
}

#[test]
fn a_connection_flooding_inline_calls_lets_another_connections_call_through() {
    let marks = Arc::new(Marks::default());
    let addr = start(&marks);
    let timeout = Some(Duration::from_secs(20));
    // B is connected and served before the flood starts.
    let mut b = TcpStream::connect(addr).unwrap();
    b.set_read_timeout(timeout).unwrap();
    b.write_all(&call(1, 0)).unwrap();
    read_record(&mut b);
    // A: FLOODS calls written by one thread, the replies drained by another.
    let a = TcpStream::connect(addr).unwrap();
    a.set_read_timeout(timeout).unwrap();
    let mut a_read = a.try_clone().unwrap();
    let drain = std::thread::spawn(move || (0..FLOODS).map(|_| read_record(&mut a_read)).count());
    let mut a_write = a;
    let flood = std::thread::spawn(move || {
        let mut all = Vec::new();
        for xid in 0..FLOODS as u32 {
            all.extend(call(1000 + xid, FLOOD));
        }
        a_write.write_all(&all).unwrap();
        a_write
    });
    // The server's thread is in A's first call; B's call arrives, then
    // the flood goes on.
    while !marks.started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    b.write_all(&call(2, PROBE)).unwrap();
    marks.gate.store(true, Ordering::SeqCst);
    read_record(&mut b);
    let at = marks.probe_at.load(Ordering::SeqCst);
    assert_eq!(drain.join().unwrap(), FLOODS, "every flood call answered");
    drop(flood.join().unwrap());
    assert!(at > 0, "the probe ran");
    // The connection yields every 32 calls (`CALLS_PER_TURN`): B's call
    // runs after 64 of A's. Without turns it ran after 376 (tokio's
    // cooperative budget); with a task per call, after 52.
    assert!(
        at <= 128,
        "B's call ran after {} of A's {FLOODS} calls",
        at - 1
    );
}
