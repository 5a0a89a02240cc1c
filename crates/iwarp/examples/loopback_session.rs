//! A real 127.0.0.1 TCP session between two `iwarp` engines, for capture with
//! tcpdump and checking with Wireshark's dissectors
//! (`scripts/tshark-iwarp-check.sh`).
//!
//! Usage: `cargo run -p iwarp --example loopback_session -- [--crc]
//! [--terminate] [--p2p write|read] [--port N]`
//!
//! MPA Request/Reply (rev 2, enhanced, RFC 8797 private data), then Send,
//! Send with Solicited Event, Send with Invalidate, an RDMA Write and an RDMA
//! Read of several segments, a Send back, and with `--terminate` an RDMA
//! Write to an unknown STag that the responder answers with a Terminate.
//! Exits non-zero if any byte or completion is wrong.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use iwarp::conn::{Config, Connection, Event, PlaceTarget, RemoteAccess, SendKind};
use iwarp::negotiation::{
    FrameReader, Initiator, InitiatorConfig, ReplyOutcome, RequestReceived, ResponderConfig,
    RtrKind,
};
use iwarp::segment::PayloadRef;
use rnic::{Access, AccessError, Stag, WcStatus};

struct Region {
    data: Vec<u8>,
    access: Access,
    valid: bool,
}

#[derive(Default)]
struct Mem {
    regions: HashMap<u32, Region>,
    sends: HashMap<u64, Vec<u8>>,
    recvs: HashMap<u64, Vec<u8>>,
}

impl RemoteAccess for Mem {
    fn check(&self, stag: Stag, to: u64, len: u64, need: Access) -> Result<(), AccessError> {
        let r = self
            .regions
            .get(&stag.0)
            .ok_or(AccessError::UnknownStag(stag))?;
        if !r.valid {
            return Err(AccessError::Invalidated(stag));
        }
        if !r.access.contains(need) {
            return Err(AccessError::AccessRights(stag));
        }
        match to.checked_add(len) {
            Some(end) if end <= r.data.len() as u64 => Ok(()),
            _ => Err(AccessError::BoundsViolation { stag, to, len }),
        }
    }
    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError> {
        let r = self
            .regions
            .get_mut(&stag.0)
            .ok_or(AccessError::UnknownStag(stag))?;
        r.valid = false;
        Ok(())
    }
}

struct Peer {
    sock: TcpStream,
    conn: Connection,
    mem: Mem,
    buf: Vec<u8>,
    events: Vec<Event>,
    closed: bool,
}

impl Peer {
    fn flush(&mut self) -> std::io::Result<()> {
        while let Some(t) = self.conn.poll_transmit() {
            let payload = match t.payload {
                Some(PayloadRef::Wr { wr_id, offset, len }) => {
                    self.mem.sends[&wr_id][offset..offset + len].to_vec()
                }
                Some(PayloadRef::Region { stag, to, len }) => {
                    self.mem.regions[&stag].data[to as usize..to as usize + len].to_vec()
                }
                None => vec![],
            };
            // Gather write: head, payload, trailer.
            self.sock.write_all(&t.head)?;
            self.sock.write_all(&payload)?;
            self.sock.write_all(t.trailer(&payload).as_ref())?;
        }
        Ok(())
    }

    fn poll_input(&mut self) -> std::io::Result<()> {
        let mut tmp = [0u8; 65536];
        match self.sock.read(&mut tmp) {
            Ok(0) => self.closed = true,
            Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let mut input = &self.buf[..];
        while !input.is_empty() && self.conn.is_open() {
            let n = match self.conn.handle_bytes(input, &mut self.mem) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("engine: {e}");
                    break;
                }
            };
            input = &input[n..];
            if let Some(p) = self.conn.poll_placement() {
                let k = p.len.min(input.len());
                match p.target {
                    PlaceTarget::Tagged { stag, to } => {
                        let r = self.mem.regions.get_mut(&stag.0).expect("checked region");
                        r.data[to as usize..to as usize + k].copy_from_slice(&input[..k]);
                    }
                    PlaceTarget::Recv { wr_id, offset } => {
                        let b = self.mem.recvs.get_mut(&wr_id).expect("posted receive");
                        b[offset..offset + k].copy_from_slice(&input[..k]);
                    }
                }
                if self.conn.placed(&input[..k]).is_err() {
                    break;
                }
                input = &input[k..];
            } else if n == 0 {
                break;
            }
        }
        let used = self.buf.len() - input.len();
        self.buf.drain(..used);
        while let Some(e) = self.conn.poll_event() {
            println!("event: {e:?}");
            self.events.push(e);
        }
        Ok(())
    }

    fn successes(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::Completion(c) if c.status == WcStatus::Success))
            .count()
    }
}

fn read_frame(sock: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut rd = FrameReader::new();
    loop {
        let need = rd
            .needed()
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
        let mut tmp = vec![0u8; need.max(1)];
        sock.read_exact(&mut tmp)?;
        let (_, f) = rd
            .feed(&tmp)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
        if let Some(f) = f {
            return Ok(f);
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let crc = args.iter().any(|a| a == "--crc");
    let terminate = args.iter().any(|a| a == "--terminate");
    // Peer-to-peer mode (RFC 6581): the initiator offers a zero-length
    // RDMA Write or Read as RTR, the responder picks one.
    let rtr_offer = match args
        .iter()
        .position(|a| a == "--p2p")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("write") => vec![RtrKind::Write],
        Some("read") => vec![RtrKind::Read],
        Some(other) => return Err(format!("--p2p write|read, not {other}").into()),
        None => vec![],
    };
    let port: u16 = args
        .iter()
        .position(|a| a == "--port")
        .and_then(|i| args.get(i + 1))
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}, crc={crc}");
    let mut a_sock = TcpStream::connect(addr)?;
    let (mut b_sock, _) = listener.accept()?;
    a_sock.set_nodelay(true)?;
    b_sock.set_nodelay(true)?;

    // MPA exchange (RFC 5044 §7.1, RFC 6581), RFC 8797 private data.
    let rpcrdma_pd = vec![0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
    let (wait, req) = Initiator::start(InitiatorConfig {
        crc,
        ird: 16,
        ord: 16,
        rtr_offer,
        private_data: rpcrdma_pd.clone(),
        large_fpdu: false,
    })?;
    a_sock.write_all(&req)?;
    let req = read_frame(&mut b_sock)?;
    let (reply, est_b) = RequestReceived::parse(&req)?.accept(&ResponderConfig {
        crc: false,
        ird: 16,
        ord: 16,
        rtr_support: vec![RtrKind::Write, RtrKind::Read],
        private_data: vec![0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03],
        large_fpdu: false,
    })?;
    b_sock.write_all(&reply)?;
    let reply = read_frame(&mut a_sock)?;
    let ReplyOutcome::Accepted(est_a) = wait.handle_reply(&reply)? else {
        return Err("rejected".into());
    };
    println!("initiator: {est_a:?}\nresponder: {est_b:?}");
    a_sock.set_nonblocking(true)?;
    b_sock.set_nonblocking(true)?;
    let mut cfg_a = Config::from_established(&est_a);
    cfg_a.mulpdu = 9000;
    let mut a = Peer {
        sock: a_sock,
        conn: Connection::new(cfg_a),
        mem: Mem::default(),
        buf: vec![],
        events: vec![],
        closed: false,
    };
    let mut b = Peer {
        sock: b_sock,
        conn: Connection::new(Config::from_established(&est_b)),
        mem: Mem::default(),
        buf: vec![],
        events: vec![],
        closed: false,
    };

    // Memory: b exposes 0x200 (writable), 0x300 (readable), 0x100 (to be
    // invalidated); a has the read sink 0x10.
    b.mem.regions.insert(
        0x200,
        Region {
            data: vec![0; 50_000],
            access: Access::REMOTE_WRITE,
            valid: true,
        },
    );
    b.mem.regions.insert(
        0x300,
        Region {
            data: pattern(70_000, 7),
            access: Access::REMOTE_READ,
            valid: true,
        },
    );
    b.mem.regions.insert(
        0x100,
        Region {
            data: vec![0; 16],
            access: Access::REMOTE_WRITE,
            valid: true,
        },
    );
    a.mem.regions.insert(
        0x10,
        Region {
            data: vec![0; 70_000],
            access: Access::LOCAL_WRITE,
            valid: true,
        },
    );
    for id in 0..3u64 {
        b.mem.recvs.insert(id, vec![0; 4096]);
        b.conn.post_recv(id, 4096)?;
    }
    a.mem.recvs.insert(50, vec![0; 4096]);
    a.conn.post_recv(50, 4096)?;

    let sends = [
        (1u64, SendKind::Send, 100usize),
        (2, SendKind::Solicited, 200),
        (3, SendKind::Invalidate(Stag(0x100)), 300),
    ];
    for (id, kind, len) in sends {
        a.mem.sends.insert(id, pattern(len, id as u8));
        a.conn.post_send(id, kind, len)?;
    }
    a.mem.sends.insert(4, pattern(50_000, 4));
    a.conn.post_write(4, Stag(0x200), 0, 50_000)?;
    a.conn.post_read(5, Stag(0x10), 0, Stag(0x300), 0, 70_000)?;
    b.mem.sends.insert(60, pattern(64, 60));
    b.conn.post_send(60, SendKind::Send, 64)?;

    let deadline = Instant::now() + Duration::from_secs(10);
    while a.successes() < 6 || b.successes() < 4 {
        if Instant::now() > deadline {
            return Err(format!("timeout: a {:?} b {:?}", a.events, b.events).into());
        }
        a.flush()?;
        b.flush()?;
        a.poll_input()?;
        b.poll_input()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut ok = true;
    for (id, _, len) in sends {
        ok &= b.mem.recvs[&(id - 1)][..len] == pattern(len, id as u8)[..];
    }
    ok &= !b.mem.regions[&0x100].valid;
    ok &= b.mem.regions[&0x200].data == pattern(50_000, 4);
    ok &= a.mem.regions[&0x10].data == pattern(70_000, 7);
    ok &= a.mem.recvs[&50][..64] == pattern(64, 60)[..];
    println!("data check: {}", if ok { "ok" } else { "MISMATCH" });

    if terminate {
        a.mem.sends.insert(7, pattern(10, 7));
        a.conn.post_write(7, Stag(0xdead), 0, 10)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.conn.is_open() && Instant::now() < deadline {
            a.flush()?;
            b.flush()?;
            a.poll_input()?;
            b.poll_input()?;
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = a
            .events
            .iter()
            .any(|e| matches!(e, Event::TerminateReceived(_)));
        println!("terminate received by initiator: {got}");
        ok &= got;
    }
    drop(a);
    drop(b);
    if ok {
        Ok(())
    } else {
        Err("session check failed".into())
    }
}
