//! Capture files: classic pcap and pcapng, read from a byte slice with
//! `pcap-file`'s parsers (no IO here; the caller reads the file).

use std::borrow::Cow;
use std::time::Duration;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::PcapError;

/// Link-layer header types this decoder understands (tcpdump LINKTYPE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_LINUX_SLL (113), what `tcpdump -i any` writes.
    LinuxSll,
    /// LINKTYPE_RAW (101) and LINKTYPE_IPV4/IPV6 (228, 229): bare IP.
    RawIp,
    /// LINKTYPE_NULL (0) and LINKTYPE_LOOP (108): a 4-byte family word.
    Null,
    /// Anything else, with its number: its frames count as unknown.
    Other(u32),
}

impl Link {
    /// Maps a LINKTYPE_* number.
    pub fn from_linktype(v: u32) -> Self {
        match v {
            1 => Self::Ethernet,
            113 => Self::LinuxSll,
            101 | 228 | 229 => Self::RawIp,
            0 | 108 => Self::Null,
            other => Self::Other(other),
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub number: u64,
    /// Capture time since the epoch.
    pub ts: Duration,
    /// The link-layer type of the interface it was captured on.
    pub link: Link,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: Cow<'a, [u8]>,
    /// The length of the frame on the wire.
    pub orig_len: u32,
}

/// Why a capture file could not be read (further).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// Neither a pcap nor a pcapng file.
    #[error("not a pcap or pcapng file")]
    NotACapture,
    /// The file ends inside a record.
    #[error("capture truncated after frame {0}")]
    Truncated(u64),
    /// A record that does not parse.
    #[error("bad capture record after frame {after}: {reason}")]
    BadRecord {
        /// The last good frame number.
        after: u64,
        /// The parser's message.
        reason: String,
    },
}

enum Format {
    Pcap(PcapParser, Link),
    PcapNg(PcapNgParser),
    Done,
}

/// An iterator over the frames of a capture held in memory. It stops at the
/// first error, which it yields once.
pub struct Frames<'a> {
    src: &'a [u8],
    format: Format,
    number: u64,
}

const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0x4d, 0x3c, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl<'a> Frames<'a> {
    /// Opens a capture: classic pcap (either byte order, micro- or
    /// nanosecond) or pcapng, told apart by the first four bytes.
    pub fn new(src: &'a [u8]) -> Result<Self, CaptureError> {
        let magic: [u8; 4] = src
            .get(..4)
            .and_then(|m| m.try_into().ok())
            .ok_or(CaptureError::NotACapture)?;
        let (rest, format) = if PCAP_MAGICS.contains(&magic) {
            let (rest, p) = PcapParser::new(src).map_err(|_| CaptureError::NotACapture)?;
            let link = Link::from_linktype(u32::from(p.header().datalink));
            (rest, Format::Pcap(p, link))
        } else if magic == PCAPNG_MAGIC {
            let (rest, p) = PcapNgParser::new(src).map_err(|_| CaptureError::NotACapture)?;
            (rest, Format::PcapNg(p))
        } else {
            return Err(CaptureError::NotACapture);
        };
        Ok(Self {
            src: rest,
            format,
            number: 0,
        })
    }

    fn error(&mut self, e: PcapError) -> CaptureError {
        self.format = Format::Done;
        match e {
            PcapError::IncompleteBuffer => CaptureError::Truncated(self.number),
            other => CaptureError::BadRecord {
                after: self.number,
                reason: other.to_string(),
            },
        }
    }

    fn next_pcapng(&mut self) -> Option<Result<Frame<'a>, CaptureError>> {
        loop {
            if self.src.is_empty() {
                return None;
            }
            let Format::PcapNg(p) = &mut self.format else {
                return None;
            };
            let (rest, block) = match p.next_block(self.src) {
                Ok(v) => v,
                Err(e) => return Some(Err(self.error(e))),
            };
            self.src = rest;
            let Format::PcapNg(p) = &self.format else {
                return None;
            };
            let (link, ts, data, orig_len) = match block {
                Block::EnhancedPacket(b) => {
                    let link = p
                        .packet_interface(&b)
                        .map(|i| Link::from_linktype(u32::from(i.linktype)))
                        .unwrap_or(Link::Other(u32::MAX));
                    (link, b.timestamp, b.data, b.original_len)
                }
                Block::SimplePacket(b) => {
                    let link = p
                        .interfaces()
                        .first()
                        .map(|i| Link::from_linktype(u32::from(i.linktype)))
                        .unwrap_or(Link::Other(u32::MAX));
                    (link, Duration::ZERO, b.data, b.original_len)
                }
                _ => continue,
            };
            self.number += 1;
            return Some(Ok(Frame {
                number: self.number,
                ts,
                link,
                data,
                orig_len,
            }));
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.format {
            Format::Done => None,
            Format::PcapNg(_) => self.next_pcapng(),
            Format::Pcap(p, link) => {
                if self.src.is_empty() {
                    return None;
                }
                let link = *link;
                match p.next_packet(self.src) {
                    Ok((rest, pkt)) => {
                        self.src = rest;
                        self.number += 1;
                        Some(Ok(Frame {
                            number: self.number,
                            ts: pkt.timestamp,
                            link,
                            data: pkt.data,
                            orig_len: pkt.orig_len,
                        }))
                    }
                    Err(e) => Some(Err(self.error(e))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_file_that_is_no_capture() {
        assert_eq!(Frames::new(b"hello").err(), Some(CaptureError::NotACapture));
        assert_eq!(Frames::new(b"").err(), Some(CaptureError::NotACapture));
    }

    #[test]
    fn reports_a_truncated_record_once() {
        // A pcap header (Ethernet) and a record header promising 100 bytes.
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&100u32.to_le_bytes());
        f.extend_from_slice(&100u32.to_le_bytes());
        f.extend_from_slice(&[0; 10]);
        let mut it = Frames::new(&f).unwrap();
        assert_eq!(it.next().unwrap().err(), Some(CaptureError::Truncated(0)));
        assert!(it.next().is_none());
    }
}
