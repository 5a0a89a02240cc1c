//! One TCP connection: reassembly of both directions and the protocol it
//! carries, recognised from its first bytes: an MPA Request (iWARP) or an
//! RPC record mark followed by a call.

use std::net::SocketAddr;

use crate::iwarp::Iwarp;
use crate::report::{ConnSummary, Dir, DirStats};
use crate::rpctcp::RpcTcp;
use crate::sink::Out;
use crate::tcp::{Pushed, Reassembler, Segment};

/// Out-of-order bytes held per direction before the stream is given up.
const MAX_PENDING: usize = 8 << 20;
/// Bytes looked at to recognise the protocol.
const DETECT_LEN: usize = 16;
const MPA_REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
const MPA_REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";

#[derive(Debug)]
enum Proto {
    Detect,
    Iwarp(Box<Iwarp>),
    Rpc(Box<RpcTcp>),
    Unknown,
}

#[derive(Debug)]
pub(crate) struct Conn {
    id: usize,
    pub(crate) client: SocketAddr,
    pub(crate) server: SocketAddr,
    tcp: [Reassembler; 2],
    bufs: [Vec<u8>; 2],
    proto: Proto,
    stats: [DirStats; 2],
    /// The last frame that brought payload, per direction.
    last_frame: [u64; 2],
}

impl Conn {
    pub(crate) fn new(id: usize, client: SocketAddr, server: SocketAddr) -> Self {
        Self {
            id,
            client,
            server,
            tcp: [Reassembler::new(MAX_PENDING), Reassembler::new(MAX_PENDING)],
            bufs: Default::default(),
            proto: Proto::Detect,
            stats: Default::default(),
            last_frame: [0; 2],
        }
    }

    /// Takes one segment of this connection.
    pub(crate) fn segment(&mut self, sink: &mut crate::sink::Sink, seg: &Segment<'_>) {
        let dir = if seg.src == self.client {
            Dir::ToServer
        } else {
            Dir::ToClient
        };
        let mut out = Out {
            sink,
            conn: self.id,
            dir,
        };
        let i = dir.index();
        let before = self.bufs[i].len();
        let was_lost = self.tcp[i].lost();
        if self.tcp[i].push(seg, &mut self.bufs[i]) == Pushed::Gap {
            if !was_lost {
                out.malformed("TCP: out-of-order store overflowed, stream lost".into());
            }
            return;
        }
        let new = self.bufs[i].len() - before;
        self.stats[i].bytes += new as u64;
        if new == 0 {
            return;
        }
        self.last_frame[i] = out.sink.frame;
        if let Proto::Detect = self.proto {
            self.detect(&mut out);
        }
        match &mut self.proto {
            Proto::Detect => {}
            Proto::Unknown => {
                out.unknown(format!("{new} bytes of TCP payload"));
                self.bufs = Default::default();
            }
            Proto::Iwarp(iw) => iw.process(&mut out, &mut self.bufs, &mut self.stats),
            Proto::Rpc(r) => {
                for d in [Dir::ToServer, Dir::ToClient] {
                    let data = std::mem::take(&mut self.bufs[d.index()]);
                    if !data.is_empty() {
                        r.process(&mut out.with_dir(d), &data, &mut self.stats[d.index()]);
                    }
                }
            }
        }
    }

    fn detect(&mut self, out: &mut Out<'_>) {
        let [c2s, s2c] = &self.bufs;
        if c2s.len() < DETECT_LEN && MPA_REQUEST_KEY.starts_with(c2s) && s2c.is_empty() {
            return;
        }
        if c2s.starts_with(MPA_REQUEST_KEY) {
            self.proto = Proto::Iwarp(Box::new(Iwarp::new()));
            return;
        }
        if s2c.starts_with(MPA_REPLY_KEY) {
            out.unknown("MPA Reply without the Request: capture started late".into());
            self.proto = Proto::Unknown;
            return;
        }
        if looks_like_rpc(c2s) || looks_like_rpc(s2c) {
            self.proto = Proto::Rpc(Box::new(RpcTcp::new()));
            return;
        }
        if c2s.len() >= 12 || s2c.len() >= 12 {
            self.proto = Proto::Unknown;
        }
    }

    /// At the end of the capture: bytes still waiting for the rest of a
    /// message mean the stream ended inside one (a truncated frame, or a
    /// capture stopped mid-message).
    pub(crate) fn finish(&self, sink: &mut crate::sink::Sink) {
        for d in [Dir::ToServer, Dir::ToClient] {
            let i = d.index();
            let left = match &self.proto {
                Proto::Iwarp(_) => self.bufs[i].len(),
                Proto::Rpc(r) => r.buffered(d),
                Proto::Detect if !self.bufs[i].is_empty() => {
                    sink.frame = self.last_frame[i];
                    sink.line(
                        self.id,
                        Some(d),
                        crate::report::Verdict::Unknown,
                        format!(
                            "{} bytes of TCP payload, protocol not recognised",
                            self.bufs[i].len()
                        ),
                    );
                    0
                }
                Proto::Detect | Proto::Unknown => 0,
            };
            if left > 0 {
                sink.frame = self.last_frame[i];
                sink.line(
                    self.id,
                    Some(d),
                    crate::report::Verdict::Malformed,
                    format!("stream ends inside a message: {left} bytes undecoded"),
                );
            }
        }
    }

    pub(crate) fn summary(&self) -> ConnSummary {
        let (protocol, unanswered) = match &self.proto {
            Proto::Detect => ("no data".to_string(), 0),
            Proto::Unknown => ("unknown".to_string(), 0),
            Proto::Iwarp(iw) => (
                format!("{}, RPC-over-RDMA", iw.describe),
                iw.rdma.calls.unanswered(),
            ),
            Proto::Rpc(r) => ("ONC RPC over TCP".to_string(), r.calls.unanswered()),
        };
        ConnSummary {
            id: self.id,
            client: self.client,
            server: self.server,
            protocol,
            dirs: self.stats.clone(),
            unanswered,
        }
    }
}

/// A record mark (RFC 5531 §11) then an RPC message: xid, msg_type 0 or 1.
fn looks_like_rpc(b: &[u8]) -> bool {
    if b.len() < 12 {
        return false;
    }
    let word = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let len = word(0) & 0x7fff_ffff;
    len >= 8 && word(8) <= 1
}
