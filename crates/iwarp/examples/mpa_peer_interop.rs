//! Interop with kpeer's `mpa_peer.py` (a stdlib Python iWARP peer checked
//! against the Linux kernel's siw), over 127.0.0.1.
//!
//! - `mpa_peer_interop connect PORT [--crc] [--delay-ms N] [--p2p write|read]
//!   [--bad-write]` (then an RDMA Write to an unknown STag, answered by a Terminate):
//!   our initiator
//!   against `mpa_peer.py listen --port PORT --reply accept --answer-null`
//!   (or against knfsd over siw in the kpeer VM, with `--delay-ms 200`);
//!   sends an RPC-over-RDMA NFSv3 NULL call as an RDMAP Send and expects
//!   the reply Send.
//! - `mpa_peer_interop listen PORT [N]`: our responder for
//!   `mpa_peer.py connect --port PORT --null-call N [--crc]`; answers each
//!   Send with a Send carrying an RPC NULL reply.
//!
//! Exits non-zero on any protocol error.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use iwarp::conn::{Config, Connection, Event, PlaceTarget, RemoteAccess, SendKind};
use iwarp::negotiation::{
    FrameReader, Initiator, InitiatorConfig, ReplyOutcome, RequestReceived, ResponderConfig,
    RtrKind,
};
use iwarp::segment::PayloadRef;
use rnic::{Access, AccessError, Stag, WcOpcode};

/// No registered memory: every tagged access is refused.
struct NoMem;

impl RemoteAccess for NoMem {
    fn check(&self, stag: Stag, _to: u64, _len: u64, _need: Access) -> Result<(), AccessError> {
        Err(AccessError::UnknownStag(stag))
    }
    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError> {
        Err(AccessError::UnknownStag(stag))
    }
}

const RPCRDMA_PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03];

fn be(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// RPC-over-RDMA v1 RDMA_MSG header (no chunks) + RPC NULL call, RFC 8166.
fn null_call(xid: u32) -> Vec<u8> {
    let mut m = be(&[xid, 1, 32, 0, 0, 0, 0]);
    m.extend(be(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]));
    m
}

/// RPC-over-RDMA v1 RDMA_MSG header + RPC accepted reply, SUCCESS.
fn null_reply(xid: u32) -> Vec<u8> {
    let mut m = be(&[xid, 1, 32, 0, 0, 0, 0]);
    m.extend(be(&[xid, 1, 0, 0, 0, 0]));
    m
}

fn read_frame(sock: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut rd = FrameReader::new();
    loop {
        let need = rd.needed().map_err(std::io::Error::other)?;
        let mut tmp = vec![0u8; need.max(1)];
        sock.read_exact(&mut tmp)?;
        if let (_, Some(f)) = rd.feed(&tmp).map_err(std::io::Error::other)? {
            return Ok(f);
        }
    }
}

/// Sends every pending FPDU; `payload` holds the bytes of each Send WR.
fn flush(
    sock: &mut TcpStream,
    conn: &mut Connection,
    payload: &dyn Fn(u64) -> Vec<u8>,
) -> std::io::Result<()> {
    while let Some(t) = conn.poll_transmit() {
        let p = match t.payload {
            Some(PayloadRef::Wr { wr_id, offset, len }) => {
                payload(wr_id)[offset..offset + len].to_vec()
            }
            _ => vec![],
        };
        sock.write_all(&t.to_vec(&p))?;
    }
    Ok(())
}

/// Reads until a receive completes; returns (wr_id, bytes).
fn receive(
    sock: &mut TcpStream,
    conn: &mut Connection,
    bufs: &mut [Vec<u8>],
) -> Result<(u64, Vec<u8>), String> {
    let mut tmp = [0u8; 8192];
    loop {
        while let Some(e) = conn.poll_event() {
            println!("event: {e:?}");
            match e {
                Event::Completion(c) if c.opcode == WcOpcode::Recv => {
                    let b = &bufs[c.wr_id as usize];
                    return Ok((c.wr_id, b[..c.byte_len as usize].to_vec()));
                }
                Event::TerminateSent(t) | Event::TerminateReceived(t) => {
                    return Err(format!("terminate: {t}"))
                }
                _ => {}
            }
        }
        let n = sock.read(&mut tmp).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("peer closed".into());
        }
        let mut input = &tmp[..n];
        while !input.is_empty() {
            let used = conn
                .handle_bytes(input, &mut NoMem)
                .map_err(|e| e.to_string())?;
            input = &input[used..];
            if let Some(p) = conn.poll_placement() {
                let k = p.len.min(input.len());
                if let PlaceTarget::Recv { wr_id, offset } = p.target {
                    bufs[wr_id as usize][offset..offset + k].copy_from_slice(&input[..k]);
                }
                conn.placed(&input[..k]).map_err(|e| e.to_string())?;
                input = &input[k..];
            }
        }
    }
}

fn connect(
    port: u16,
    crc: bool,
    delay_ms: u64,
    rtr_offer: Vec<RtrKind>,
    bad_write: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut sock = TcpStream::connect(("127.0.0.1", port))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let (wait, req) = Initiator::start(InitiatorConfig {
        crc,
        ird: 16,
        ord: 16,
        rtr_offer,
        private_data: RPCRDMA_PD.to_vec(),
        large_fpdu: false,
    })?;
    sock.write_all(&req)?;
    let reply = read_frame(&mut sock)?;
    let ReplyOutcome::Accepted(est) = wait.handle_reply(&reply)? else {
        return Err("rejected".into());
    };
    println!("established: {est:?}");
    let mut conn = Connection::new(Config::from_established(&est));
    let mut bufs = vec![vec![0u8; 4096]];
    conn.post_recv(0, 4096)?;
    // Linux siw as responder hands the socket to the QP only after sending
    // the MPA Reply; an FPDU arriving in that window waits (kpeer bug B).
    std::thread::sleep(Duration::from_millis(delay_ms));
    let call = null_call(0x6977_0001);
    conn.post_send(1, SendKind::Send, call.len())?;
    flush(&mut sock, &mut conn, &|_| call.clone())?;
    let (_, got) = receive(&mut sock, &mut conn, &mut bufs)?;
    println!("reply: {} bytes, xid {:02x?}", got.len(), &got[..4]);
    if got.get(..4) != Some(&call[..4]) || got.get(32..36) != Some(&[0, 0, 0, 1]) {
        return Err("not the NULL reply".into());
    }
    println!("RESULT: NULL call answered by the peer");
    if bad_write {
        // An RDMA Write to an STag the peer never advertised: the peer must
        // answer with a Terminate (RFC 5040 §7, RFC 5041 §7).
        conn.post_write(2, Stag(0xdead_beef), 0, 16)?;
        flush(&mut sock, &mut conn, &|_| vec![0x5a; 16])?;
        match receive(&mut sock, &mut conn, &mut bufs) {
            Err(e) if e.starts_with("terminate") => {
                println!("RESULT: peer answered the bad Write with {e}")
            }
            other => return Err(format!("expected a Terminate, got {other:?}").into()),
        }
    }
    Ok(())
}

fn listen(port: u16, calls: usize) -> Result<(), Box<dyn std::error::Error>> {
    let l = TcpListener::bind(("127.0.0.1", port))?;
    let (mut sock, _) = l.accept()?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let req = read_frame(&mut sock)?;
    let r = RequestReceived::parse(&req)?;
    println!("request: {r:?}");
    let (reply, est) = r.accept(&ResponderConfig {
        crc: false,
        ird: 16,
        ord: 16,
        rtr_support: vec![],
        private_data: RPCRDMA_PD.to_vec(),
        large_fpdu: false,
    })?;
    sock.write_all(&reply)?;
    println!("established: {est:?}");
    let mut conn = Connection::new(Config::from_established(&est));
    let mut bufs = vec![vec![0u8; 4096]; calls];
    for i in 0..calls {
        conn.post_recv(i as u64, 4096)?;
    }
    for i in 0..calls {
        let (_, call) = receive(&mut sock, &mut conn, &mut bufs)?;
        let xid = u32::from_be_bytes(call.get(..4).ok_or("short call")?.try_into()?);
        println!("call {i}: {} bytes, xid {xid:#010x}", call.len());
        let rep = null_reply(xid);
        conn.post_send(100 + i as u64, SendKind::Send, rep.len())?;
        flush(&mut sock, &mut conn, &|_| rep.clone())?;
    }
    println!("RESULT: answered {calls} NULL call(s) from mpa_peer.py");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(2).ok_or("usage: connect|listen PORT")?.parse()?;
    match args.get(1).map(String::as_str) {
        Some("connect") => {
            let delay = args
                .iter()
                .position(|a| a == "--delay-ms")
                .and_then(|i| args.get(i + 1))
                .map(|d| d.parse())
                .transpose()?
                .unwrap_or(0);
            let rtr = match args
                .iter()
                .position(|a| a == "--p2p")
                .and_then(|i| args.get(i + 1))
                .map(String::as_str)
            {
                Some("write") => vec![RtrKind::Write],
                Some("read") => vec![RtrKind::Read],
                _ => vec![],
            };
            let crc = args.iter().any(|a| a == "--crc");
            connect(
                port,
                crc,
                delay,
                rtr,
                args.iter().any(|a| a == "--bad-write"),
            )
        }
        Some("listen") => listen(
            port,
            args.get(3).map(|n| n.parse()).transpose()?.unwrap_or(2),
        ),
        _ => Err("usage: connect|listen PORT".into()),
    }
}
