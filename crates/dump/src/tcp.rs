//! Link, IP and TCP headers (with `etherparse`), and per-direction TCP
//! stream reassembly by sequence number with a bounded out-of-order store.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use crate::capture::Link;

/// The TCP part of one frame.
#[derive(Debug, Clone)]
pub(crate) struct Segment<'a> {
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) seq: u32,
    pub(crate) syn: bool,
    pub(crate) ack: bool,
    pub(crate) payload: &'a [u8],
}

/// What a frame holds below TCP.
#[derive(Debug)]
pub(crate) enum Parsed<'a> {
    /// A TCP segment.
    Tcp(Segment<'a>),
    /// A well-formed frame of another protocol (ARP, ICMP, UDP, ...).
    Other(&'static str),
    /// Link type this decoder does not read.
    UnknownLink(u32),
    /// The headers do not parse.
    Malformed(String),
}

/// Parses the link, IP and TCP headers of `data`.
pub(crate) fn parse(link: Link, data: &[u8]) -> Parsed<'_> {
    let sliced = match link {
        Link::Ethernet => SlicedPacket::from_ethernet(data),
        Link::LinuxSll => SlicedPacket::from_linux_sll(data),
        Link::RawIp => SlicedPacket::from_ip(data),
        Link::Null => match data.get(4..) {
            Some(rest) => SlicedPacket::from_ip(rest),
            None => return Parsed::Malformed("loopback header truncated".into()),
        },
        Link::Other(n) => return Parsed::UnknownLink(n),
    };
    let p = match sliced {
        Ok(p) => p,
        Err(e) => return Parsed::Malformed(e.to_string()),
    };
    let (src, dst) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (
            IpAddr::V4(v4.header().source_addr()),
            IpAddr::V4(v4.header().destination_addr()),
        ),
        Some(NetSlice::Ipv6(v6)) => (
            IpAddr::V6(v6.header().source_addr()),
            IpAddr::V6(v6.header().destination_addr()),
        ),
        _ => return Parsed::Other("non-IP"),
    };
    match p.transport {
        Some(TransportSlice::Tcp(t)) => Parsed::Tcp(Segment {
            src: SocketAddr::new(src, t.source_port()),
            dst: SocketAddr::new(dst, t.destination_port()),
            seq: t.sequence_number(),
            syn: t.syn(),
            ack: t.ack(),
            payload: t.payload(),
        }),
        Some(TransportSlice::Udp(_)) => Parsed::Other("UDP"),
        Some(TransportSlice::Icmpv4(_)) | Some(TransportSlice::Icmpv6(_)) => Parsed::Other("ICMP"),
        None => Parsed::Other("IP"),
    }
}

/// Result of pushing one segment into a direction's reassembler.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// In-order bytes were appended to the output (possibly none).
    Ok,
    /// The out-of-order store overflowed: bytes were lost and the stream
    /// cannot be followed any more.
    Gap,
}

/// One direction of a TCP connection: delivers bytes in sequence order.
/// Retransmitted bytes are dropped; segments ahead of the next expected
/// byte wait in a store of at most `max_pending` bytes.
#[derive(Debug)]
pub(crate) struct Reassembler {
    next: Option<u32>,
    pending: BTreeMap<u32, Vec<u8>>,
    pending_bytes: usize,
    max_pending: usize,
    lost: bool,
}

impl Reassembler {
    pub(crate) fn new(max_pending: usize) -> Self {
        Self {
            next: None,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            max_pending,
            lost: false,
        }
    }

    /// True once bytes were lost for good.
    pub(crate) fn lost(&self) -> bool {
        self.lost
    }

    /// Takes one segment; appends newly in-order bytes to `out`.
    pub(crate) fn push(&mut self, seg: &Segment<'_>, out: &mut Vec<u8>) -> Pushed {
        if self.lost {
            return Pushed::Gap;
        }
        let seq = if seg.syn {
            self.next = Some(seg.seq.wrapping_add(1));
            seg.seq.wrapping_add(1)
        } else {
            seg.seq
        };
        let next = *self.next.get_or_insert(seq);
        if seg.payload.is_empty() {
            return Pushed::Ok;
        }
        let ahead = seq.wrapping_sub(next) as i32;
        if ahead > 0 {
            if self.pending_bytes + seg.payload.len() > self.max_pending {
                self.lost = true;
                self.pending.clear();
                return Pushed::Gap;
            }
            if let Some(old) = self.pending.insert(seq, seg.payload.to_vec()) {
                self.pending_bytes -= old.len();
            }
            self.pending_bytes += seg.payload.len();
            return Pushed::Ok;
        }
        self.take(seq, seg.payload, out);
        self.drain(out);
        Pushed::Ok
    }

    fn take(&mut self, seq: u32, data: &[u8], out: &mut Vec<u8>) {
        let Some(next) = self.next else { return };
        let skip = next.wrapping_sub(seq) as usize;
        if let Some(new) = data.get(skip..) {
            out.extend_from_slice(new);
            self.next = Some(next.wrapping_add(new.len() as u32));
        }
    }

    /// Delivers stored segments (keyed by absolute sequence number) that
    /// the stream has caught up with.
    fn drain(&mut self, out: &mut Vec<u8>) {
        while let Some(next) = self.next {
            let ready = self
                .pending
                .keys()
                .copied()
                .find(|&s| s.wrapping_sub(next) as i32 <= 0);
            let Some(seq) = ready else { break };
            let Some(data) = self.pending.remove(&seq) else {
                break;
            };
            self.pending_bytes -= data.len();
            self.take(seq, &data, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, syn: bool, payload: &[u8]) -> Segment<'_> {
        Segment {
            src: "127.0.0.1:1".parse().unwrap(),
            dst: "127.0.0.1:2".parse().unwrap(),
            seq,
            syn,
            ack: false,
            payload,
        }
    }

    #[test]
    fn reorders_and_drops_retransmissions_across_wrap() {
        let mut r = Reassembler::new(1024);
        let mut out = vec![];
        let isn = u32::MAX - 2;
        r.push(&seg(isn, true, b""), &mut out);
        let s = isn.wrapping_add(1);
        assert_eq!(
            r.push(&seg(s.wrapping_add(4), false, b"efgh"), &mut out),
            Pushed::Ok
        );
        assert!(out.is_empty());
        r.push(&seg(s, false, b"abcd"), &mut out);
        r.push(&seg(s.wrapping_add(2), false, b"cdefghij"), &mut out);
        assert_eq!(out, b"abcdefghij");
    }

    #[test]
    fn a_hostile_stream_of_gaps_is_bounded() {
        let mut r = Reassembler::new(100);
        let mut out = vec![];
        r.push(&seg(0, true, b""), &mut out);
        let mut gap = false;
        for i in 0..1000u32 {
            if r.push(&seg(10 + i * 60, false, &[0; 50]), &mut out) == Pushed::Gap {
                gap = true;
                break;
            }
        }
        assert!(gap && r.lost());
        assert!(r.pending.is_empty());
        assert_eq!(r.push(&seg(1, false, b"x"), &mut out), Pushed::Gap);
    }
}
