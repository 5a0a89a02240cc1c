//! Reading Read Response payload ahead of its headers.
//!
//! While an RDMA Read of ours is outstanding, the peer's next FPDUs are
//! most likely the rest of its Read Responses (RFC 5040 §5.2): tagged
//! segments to our sink STag at consecutive TOs, each as long as the
//! response's earlier segments, the last one shorter and with the L bit
//! set (RFC 5041 §4.2, RFC 5044 §4.1). [`super::Connection::read_ahead`] gives
//! that prediction (after the rest of the segment in progress, when the
//! engine is inside one), so a shell can read a run of FPDUs from the socket in
//! one vectored read with each predicted payload going straight into the
//! sink (no staging copy). The shell then compares each header it read
//! with [`AheadSegment::header`] and hands the matching headers and
//! trailers to [`super::Connection::handle_bytes`] as usual, reporting the
//! payload between them with [`super::Connection::placed_unseen`]; from the first
//! header that differs on, it hands the bytes over as a stream.
//!
//! A wrong guess writes only inside the sink of the Read at the head of the
//! queue (`[to, to + left)`), which that Read's own responses overwrite
//! before it completes; the sink's contents are undefined until then
//! (RFC 5040 §5.2: the Read's data is delivered when it completes).
//!
//! Only without CRC: with it, the CRC covers the payload (RFC 5044 §4.4)
//! and the engine sums what it is shown.

use rnic::Stag;

use crate::wire::ddp::{Buffer, Repr as DdpRepr};
use crate::wire::fpdu;
use crate::wire::rdmap::Opcode;

/// Length of a tagged FPDU's head: the MPA length field and the DDP
/// tagged header (RFC 5044 §4.1, RFC 5041 §4.2).
pub const HEAD_LEN: usize = fpdu::LEN_FIELD + crate::wire::ddp::TAGGED_HEADER_LEN;

/// The rest of the Read Response at the head of the queue, as the engine
/// expects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadAhead {
    /// The sink STag of the Read.
    pub stag: Stag,
    /// The TO of the next byte to arrive.
    pub to: u64,
    /// Bytes of the Read still to arrive.
    pub left: u64,
    /// Payload length of the peer's earlier Read Response segments.
    pub seg: usize,
    /// Payload of the segment in progress still to come (0 between FPDUs):
    /// it goes to `to` first, then its trailer.
    pub pending: usize,
    /// Pad and CRC field of the segment in progress.
    pub pending_trailer: usize,
}

/// One predicted FPDU of a Read Response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadSegment {
    /// Its head as it would arrive (length field and DDP tagged header);
    /// `None` for the rest of the segment in progress, whose head was read.
    pub header: Option<[u8; HEAD_LEN]>,
    /// The TO of its payload.
    pub to: u64,
    /// Its payload length.
    pub len: usize,
    /// Pad and CRC field after the payload.
    pub trailer: usize,
}

impl ReadAhead {
    /// The next segments, at most `max` of them and at most `max_bytes`
    /// of payload in all (at least one segment when `max` > 0).
    pub fn segments(&self, max: usize, max_bytes: usize) -> Vec<AheadSegment> {
        let mut out = Vec::with_capacity(max.min(64));
        let mut to = self.to;
        let mut left = self.left;
        let mut bytes = 0usize;
        if self.pending > 0 && max > 0 {
            out.push(AheadSegment {
                header: None,
                to,
                len: self.pending,
                trailer: self.pending_trailer,
            });
            to = to.wrapping_add(self.pending as u64);
            left = left.saturating_sub(self.pending as u64);
            bytes = self.pending;
        }
        while out.len() < max && left > 0 && self.seg > 0 {
            let len = usize::try_from(left).map_or(self.seg, |l| l.min(self.seg));
            if !out.is_empty() && bytes + len > max_bytes {
                break;
            }
            let last = len as u64 == left;
            out.push(AheadSegment::new(self.stag, to, len, last));
            to = to.wrapping_add(len as u64);
            left -= len as u64;
            bytes += len;
        }
        out
    }
}

impl AheadSegment {
    fn new(stag: Stag, to: u64, len: usize, last: bool) -> Self {
        let ulpdu = crate::wire::ddp::TAGGED_HEADER_LEN + len;
        let mut header = [0u8; HEAD_LEN];
        // `seg` came from a segment the deframer accepted, so the ULPDU
        // length fits its 16-bit field.
        header[..fpdu::LEN_FIELD].copy_from_slice(&(ulpdu as u16).to_be_bytes());
        let h = DdpRepr {
            last,
            opcode: Opcode::ReadResponse,
            buffer: Buffer::Tagged { stag: stag.0, to },
        };
        header[fpdu::LEN_FIELD..].copy_from_slice(&h.to_vec());
        AheadSegment {
            header: Some(header),
            to,
            len,
            trailer: fpdu::fpdu_len(ulpdu) - fpdu::LEN_FIELD - ulpdu,
        }
    }
}
