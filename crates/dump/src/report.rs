//! What the decoder produces: one [`Line`] per decoded message, and a
//! [`Report`] of counts and per-connection summaries at the end.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

/// Direction of a message within its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// From the side that opened the connection.
    ToServer,
    /// From the side that accepted it.
    ToClient,
}

impl Dir {
    pub(crate) fn index(self) -> usize {
        match self {
            Self::ToServer => 0,
            Self::ToClient => 1,
        }
    }

    pub(crate) fn rev(self) -> Self {
        match self {
            Self::ToServer => Self::ToClient,
            Self::ToClient => Self::ToServer,
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ToServer => "C>S",
            Self::ToClient => "S>C",
        })
    }
}

/// How a line judges what it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Decoded.
    Ok,
    /// Bytes of a protocol this decoder does not know.
    Unknown,
    /// Bytes that break the rules of a protocol it knows.
    Malformed,
}

/// One printed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The frame that completed the message.
    pub frame: u64,
    /// Connection number (0 for lines about no connection).
    pub conn: usize,
    /// Direction, when the line is about a connection.
    pub dir: Option<Dir>,
    /// The judgement.
    pub verdict: Verdict,
    /// The text.
    pub text: String,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>6} ", self.frame)?;
        match self.dir {
            Some(d) => write!(f, "c{} {d} ", self.conn)?,
            None => f.write_str("-      ")?,
        }
        match self.verdict {
            Verdict::Ok => {}
            Verdict::Unknown => f.write_str("UNKNOWN ")?,
            Verdict::Malformed => f.write_str("MALFORMED ")?,
        }
        f.write_str(&self.text)
    }
}

/// Credit values seen in one direction (RFC 8166 §3.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credits {
    /// Headers seen.
    pub seen: u64,
    /// Smallest rdma_credit value.
    pub min: u32,
    /// Largest rdma_credit value.
    pub max: u32,
    /// The last value.
    pub last: u32,
}

impl Credits {
    pub(crate) fn note(&mut self, v: u32) {
        if self.seen == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.last = v;
        self.seen += 1;
    }
}

/// Per-direction figures of one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Bytes of TCP payload.
    pub bytes: u64,
    /// Messages by kind ("Send", "RDMA Write", "RDMA_MSG", "call", ...).
    pub counts: BTreeMap<String, u64>,
    /// rdma_credit in the headers this side sent.
    pub credits: Credits,
    /// Inline threshold this side announced: RFC 8797 private data
    /// (max send / max receive), or a v2 Receive Buffer Size.
    pub inline: Option<String>,
    /// Largest Send message.
    pub largest_send: usize,
    /// Read list entries, write chunks and reply chunks in its headers.
    pub read_segments: u64,
    /// Write chunks.
    pub write_chunks: u64,
    /// Reply chunks.
    pub reply_chunks: u64,
    /// Bytes carried by RDMA Write.
    pub write_bytes: u64,
    /// Bytes carried by RDMA Read Response.
    pub read_response_bytes: u64,
}

impl DirStats {
    pub(crate) fn count(&mut self, what: impl Into<String>) {
        *self.counts.entry(what.into()).or_default() += 1;
    }
}

/// The summary of one TCP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSummary {
    /// Connection number, as in the lines.
    pub id: usize,
    /// The side that opened it.
    pub client: SocketAddr,
    /// The side that accepted it.
    pub server: SocketAddr,
    /// What it carried: "iWARP ..." , "RPC over TCP", "unknown", "none".
    pub protocol: String,
    /// Client-to-server, then server-to-client figures.
    pub dirs: [DirStats; 2],
    /// Calls without a reply in the capture.
    pub unanswered: u64,
}

impl fmt::Display for ConnSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "c{} {} -> {}: {}",
            self.id, self.client, self.server, self.protocol
        )?;
        for (name, d) in [("C>S", &self.dirs[0]), ("S>C", &self.dirs[1])] {
            write!(f, "  {name} {} bytes", d.bytes)?;
            if let Some(i) = &d.inline {
                write!(f, ", inline {i}")?;
            }
            if d.credits.seen > 0 {
                let c = d.credits;
                write!(f, ", credits {}..{} (last {})", c.min, c.max, c.last)?;
            }
            if d.largest_send > 0 {
                write!(f, ", largest Send {}", d.largest_send)?;
            }
            if d.read_segments + d.write_chunks + d.reply_chunks > 0 {
                write!(
                    f,
                    ", chunks: {} read segments, {} write chunks, {} reply chunks",
                    d.read_segments, d.write_chunks, d.reply_chunks
                )?;
            }
            if d.write_bytes > 0 {
                write!(f, ", {} bytes by RDMA Write", d.write_bytes)?;
            }
            if d.read_response_bytes > 0 {
                write!(f, ", {} bytes by Read Response", d.read_response_bytes)?;
            }
            writeln!(f)?;
            if !d.counts.is_empty() {
                let list: Vec<String> = d.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
                writeln!(f, "      {}", list.join(", "))?;
            }
        }
        if self.unanswered > 0 {
            writeln!(f, "  {} calls unanswered in the capture", self.unanswered)?;
        }
        Ok(())
    }
}

/// Everything counted over a capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Frames read.
    pub frames: u64,
    /// Frames with a TCP header.
    pub tcp_frames: u64,
    /// Frames of other protocols (ARP, UDP, ICMP, ...).
    pub other_frames: u64,
    /// Frames judged unknown (each counted once).
    pub unknown_frames: u64,
    /// Frames judged malformed (each counted once).
    pub malformed_frames: u64,
    /// Messages by kind over all connections, e.g. "rdmap Send",
    /// "rpcrdma1 RDMA_MSG", "rpc call NFSv3 READ".
    pub counts: BTreeMap<String, u64>,
    /// Per connection, in order of appearance.
    pub conns: Vec<ConnSummary>,
    /// Why reading stopped early, if it did.
    pub capture_error: Option<String>,
}

impl Report {
    /// The count of one kind (0 if never seen).
    pub fn count(&self, what: &str) -> u64 {
        self.counts.get(what).copied().unwrap_or(0)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} frames: {} TCP, {} other, {} unknown, {} malformed",
            self.frames,
            self.tcp_frames,
            self.other_frames,
            self.unknown_frames,
            self.malformed_frames
        )?;
        if let Some(e) = &self.capture_error {
            writeln!(f, "capture: {e}")?;
        }
        for c in &self.conns {
            write!(f, "{c}")?;
        }
        for (k, v) in &self.counts {
            writeln!(f, "{v:>8}  {k}")?;
        }
        Ok(())
    }
}
