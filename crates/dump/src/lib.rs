//! Sans-IO decoder of packet captures of NFS traffic, for `nfsrdma dump`.
//!
//! Frames go in ([`Dump::frame`]), printable [`Line`]s come out
//! ([`Dump::poll_line`]), and [`Dump::finish`] gives the [`Report`]: counts
//! per message kind and a summary per connection. No file or socket IO:
//! [`capture::Frames`] walks a pcap or pcapng file held in memory.
//!
//! Layers, each from the workspace crate that owns its codec:
//! - Ethernet / Linux cooked / raw IP, IPv4/IPv6 and TCP (`etherparse`),
//!   TCP reassembly per direction with a bounded out-of-order store;
//! - iWARP (`iwarp`): MPA Request/Reply (RFC 5044 §7.1, RFC 6581), FPDUs
//!   across TCP segments with the CRC checked when negotiated
//!   (RFC 5044 §4), DDP segments (RFC 5041) and RDMAP messages
//!   (RFC 5040): Send variants, RDMA Write, Read Request/Response,
//!   Terminate;
//! - RPC-over-RDMA v1 (RFC 8166) and v2 headers (`rpcrdma`), chunk lists,
//!   CONNPROP, errors, RFC 8797 private data; READ replies paired with the
//!   RDMA Writes that carried their data, by STag;
//! - ONC RPC (RFC 5531) over RDMA and over TCP record marking, with NFSv3,
//!   MOUNT and NFSv4.x COMPOUND operation names (`nfs`).
//!
//! Bytes that fit no known protocol are [`Verdict::Unknown`]; bytes that
//! break a protocol's rules are [`Verdict::Malformed`]. Nothing panics and
//! every buffer a capture can grow is bounded.
#![forbid(unsafe_code)]

pub mod capture;
pub mod report;

mod calls;
mod chunks;
mod conn;
mod iwarp;
mod rdma;
mod rpc;
mod rpctcp;
mod sink;
mod tcp;

use std::collections::HashMap;
use std::net::SocketAddr;

pub use capture::{CaptureError, Frame, Frames, Link};
pub use report::{ConnSummary, Dir, DirStats, Line, Report, Verdict};

use conn::Conn;
use sink::Sink;
use tcp::Parsed;

/// Most TCP connections followed; later ones are counted as unknown.
pub const MAX_CONNS: usize = 4096;

/// The decoder: feed frames in capture order.
#[derive(Debug, Default)]
pub struct Dump {
    sink: Sink,
    conns: Vec<Conn>,
    index: HashMap<(SocketAddr, SocketAddr), usize>,
    frames: u64,
    tcp_frames: u64,
    other_frames: u64,
    capture_error: Option<String>,
}

impl Dump {
    /// A decoder with nothing seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one captured frame.
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.frames += 1;
        self.sink.frame = f.number;
        if (f.data.len() as u64) < u64::from(f.orig_len) {
            self.sink.line(
                0,
                None,
                Verdict::Malformed,
                format!(
                    "frame cut to {} of {} bytes by the snap length",
                    f.data.len(),
                    f.orig_len
                ),
            );
        }
        match tcp::parse(f.link, &f.data) {
            Parsed::Tcp(seg) => {
                self.tcp_frames += 1;
                self.tcp(&seg);
            }
            Parsed::Other(what) => {
                self.other_frames += 1;
                self.sink.count(format!("frame {what}"));
            }
            Parsed::UnknownLink(n) => {
                self.sink
                    .line(0, None, Verdict::Unknown, format!("link type {n}"))
            }
            Parsed::Malformed(e) => self.sink.line(0, None, Verdict::Malformed, e),
        }
    }

    fn tcp(&mut self, seg: &tcp::Segment<'_>) {
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let idx = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                if seg.payload.is_empty() && !seg.syn {
                    return;
                }
                if self.conns.len() >= MAX_CONNS {
                    self.sink.line(
                        0,
                        None,
                        Verdict::Unknown,
                        format!("connection beyond the {MAX_CONNS} followed"),
                    );
                    return;
                }
                let (client, server) = roles(seg);
                let id = self.conns.len() + 1;
                self.conns.push(Conn::new(id, client, server));
                self.index.insert(key, id - 1);
                id - 1
            }
        };
        self.conns[idx].segment(&mut self.sink, seg);
    }

    /// The next line to print.
    pub fn poll_line(&mut self) -> Option<Line> {
        self.sink.lines.pop_front()
    }

    /// Records why the capture could not be read to its end.
    pub fn capture_error(&mut self, e: &CaptureError) {
        self.capture_error = Some(e.to_string());
        self.sink.malformed += 1;
    }

    /// Ends the capture: flags streams that stopped inside a message; the
    /// lines this adds are polled as usual.
    pub fn end(&mut self) {
        for c in &self.conns {
            c.finish(&mut self.sink);
        }
    }

    /// The counts and per-connection summaries.
    pub fn finish(self) -> Report {
        Report {
            frames: self.frames,
            tcp_frames: self.tcp_frames,
            other_frames: self.other_frames,
            unknown_frames: self.sink.unknown,
            malformed_frames: self.sink.malformed,
            counts: self.sink.counts,
            conns: self.conns.iter().map(Conn::summary).collect(),
            capture_error: self.capture_error,
        }
    }
}

/// Client and server of a new connection: the SYN's sender opens it
/// (a SYN-ACK's sender accepts it); otherwise the side on the lower port,
/// where servers listen (2049, 20049), is taken as the server.
fn roles(seg: &tcp::Segment<'_>) -> (SocketAddr, SocketAddr) {
    if seg.syn && !seg.ack {
        (seg.src, seg.dst)
    } else if seg.syn || seg.src.port() < seg.dst.port() {
        (seg.dst, seg.src)
    } else {
        (seg.src, seg.dst)
    }
}

/// Decodes a whole capture held in memory: every line to `line`, then the
/// report.
pub fn decode_capture(bytes: &[u8], mut line: impl FnMut(Line)) -> Result<Report, CaptureError> {
    let mut d = Dump::new();
    for f in Frames::new(bytes)? {
        match f {
            Ok(f) => d.frame(&f),
            Err(e) => d.capture_error(&e),
        }
        while let Some(l) = d.poll_line() {
            line(l);
        }
    }
    d.end();
    while let Some(l) = d.poll_line() {
        line(l);
    }
    Ok(d.finish())
}
