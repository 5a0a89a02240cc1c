//! Emit side: cutting an RDMAP message into DDP segments that fit the MULPDU
//! (RFC 5041 §5.2: tagged segments advance the TO, untagged ones the MO, L is
//! set on the last), and the gather form of one outgoing FPDU.

use core::ops::Range;

use crate::wire::ddp::{Buffer, Repr as DdpRepr};
use crate::wire::fpdu::{self, Crc};
use crate::wire::rdmap::Opcode;

/// Where a message goes: a tagged buffer or an untagged queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Tagged buffer at (STag, TO), RFC 5041 §4.2.
    Tagged {
        /// Data sink STag.
        stag: u32,
        /// Tagged Offset of the message's first byte.
        to: u64,
    },
    /// Untagged queue, RFC 5041 §4.3.
    Untagged {
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number of this message.
        msn: u32,
        /// RsvdULP: STag to invalidate (Send with Invalidate), else 0.
        inv_stag: u32,
    },
}

/// Errors building a segmenter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The MULPDU leaves no room for payload after the DDP header.
    #[error("MULPDU {0} leaves no room for payload")]
    MulpduTooSmall(usize),
    /// An untagged message longer than the 32-bit MO can address.
    #[error("message of {0} bytes is too long for DDP")]
    TooLong(usize),
    /// TO + length wraps 64 bits (RFC 5041 §7: TO wrap).
    #[error("tagged offset wraps")]
    ToWrap,
    /// The opcode's buffer model does not match the target.
    #[error("{0} cannot go to this target")]
    BufferModel(Opcode),
}

/// One segment to send: its header and the range of the message payload it
/// carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutSegment {
    /// The DDP/RDMAP header.
    pub header: DdpRepr,
    /// Payload bytes of the message carried by this segment.
    pub payload: Range<usize>,
}

/// Iterator over the segments of one message.
#[derive(Debug, Clone)]
pub struct Segmenter {
    opcode: Opcode,
    target: Target,
    total: usize,
    sent: usize,
    max_payload: usize,
    done: bool,
}

impl Segmenter {
    /// Segments a message of `total` payload bytes into ULPDUs of at most
    /// `mulpdu` bytes (header included).
    pub fn new(
        opcode: Opcode,
        target: Target,
        total: usize,
        mulpdu: usize,
    ) -> Result<Self, SegmentError> {
        let (hlen, tagged) = match target {
            Target::Tagged { to, .. } => {
                if to.checked_add(total as u64).is_none() {
                    return Err(SegmentError::ToWrap);
                }
                (crate::wire::ddp::TAGGED_HEADER_LEN, true)
            }
            Target::Untagged { .. } => {
                if u32::try_from(total).is_err() {
                    return Err(SegmentError::TooLong(total));
                }
                (crate::wire::ddp::UNTAGGED_HEADER_LEN, false)
            }
        };
        if tagged != opcode.is_tagged() {
            return Err(SegmentError::BufferModel(opcode));
        }
        let mulpdu = mulpdu.min(usize::from(u16::MAX));
        if mulpdu <= hlen {
            return Err(SegmentError::MulpduTooSmall(mulpdu));
        }
        Ok(Segmenter {
            opcode,
            target,
            total,
            sent: 0,
            max_payload: mulpdu - hlen,
            done: false,
        })
    }

    /// Payload bytes not yet handed out.
    pub fn remaining(&self) -> usize {
        self.total - self.sent
    }
}

impl Iterator for Segmenter {
    type Item = OutSegment;

    fn next(&mut self) -> Option<OutSegment> {
        if self.done {
            return None;
        }
        let start = self.sent;
        let n = self.max_payload.min(self.total - start);
        let end = start + n;
        let last = end == self.total;
        let buffer = match self.target {
            // Overflow was excluded in `new`.
            Target::Tagged { stag, to } => Buffer::Tagged {
                stag,
                to: to.wrapping_add(start as u64),
            },
            Target::Untagged { qn, msn, inv_stag } => Buffer::Untagged {
                inv_stag,
                qn,
                msn,
                mo: start as u32,
            },
        };
        self.sent = end;
        self.done = last;
        Some(OutSegment {
            header: DdpRepr {
                last,
                opcode: self.opcode,
                buffer,
            },
            payload: start..end,
        })
    }
}

/// Where the payload of an outgoing FPDU comes from; the IO shell gathers it
/// (no copy into the header buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadRef {
    /// Bytes `offset..offset + len` of the posted work request `wr_id`.
    Wr {
        /// The work request.
        wr_id: u64,
        /// Offset in its data.
        offset: usize,
        /// Length.
        len: usize,
    },
    /// Bytes of a registered region (an RDMA Read source, already checked
    /// for remote read access).
    Region {
        /// STag of the source region.
        stag: u32,
        /// Tagged Offset of the first byte.
        to: u64,
        /// Length.
        len: usize,
    },
}

impl PayloadRef {
    /// Payload length.
    pub const fn len(&self) -> usize {
        match *self {
            PayloadRef::Wr { len, .. } | PayloadRef::Region { len, .. } => len,
        }
    }

    /// Whether the payload is empty.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The pad and CRC that close an FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    bytes: [u8; 7],
    len: usize,
}

impl AsRef<[u8]> for Trailer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// One FPDU to send, in gather form: `head` (ULPDU_Length, DDP header and
/// any inline body), then the payload the shell fetches, then the trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// ULPDU_Length, the DDP/RDMAP header and inline body bytes.
    pub head: Vec<u8>,
    /// Payload to gather after `head`, if any.
    pub payload: Option<PayloadRef>,
    crc: bool,
}

impl Transmit {
    /// Builds the head of an FPDU whose ULPDU is `header + inline + payload`.
    /// The ULPDU must fit 16 bits (the segmenter guarantees it).
    pub(crate) fn new(
        header: &DdpRepr,
        inline: &[u8],
        payload: Option<PayloadRef>,
        crc: bool,
    ) -> Self {
        let plen = payload.map_or(0, |p| p.len());
        let ulpdu = header.buffer_len() + inline.len() + plen;
        let mut head = Vec::with_capacity(fpdu::LEN_FIELD + header.buffer_len() + inline.len());
        head.extend_from_slice(&(ulpdu.min(usize::from(u16::MAX)) as u16).to_be_bytes());
        head.extend_from_slice(&header.to_vec());
        head.extend_from_slice(inline);
        Transmit { head, payload, crc }
    }

    /// The FPDU of one segment whose payload is gathered from `payload`.
    pub fn for_segment(header: &DdpRepr, payload: PayloadRef, crc: bool) -> Self {
        let p = if payload.is_empty() {
            None
        } else {
            Some(payload)
        };
        Self::new(header, &[], p, crc)
    }

    /// ULPDU length.
    pub fn ulpdu_len(&self) -> usize {
        self.head.len() - fpdu::LEN_FIELD + self.payload.map_or(0, |p| p.len())
    }

    /// Total bytes on the wire.
    pub fn len(&self) -> usize {
        fpdu::fpdu_len(self.ulpdu_len())
    }

    /// Whether the FPDU is empty (never: it has at least the framing).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The pad and CRC, given the payload bytes the shell gathered (exactly
    /// `payload.len()` bytes). CRC32c covers head, payload and pad (RFC 5044
    /// §4.4); it is zero when CRC was not negotiated.
    pub fn trailer(&self, payload: &[u8]) -> Trailer {
        let pad = fpdu::pad_len(self.ulpdu_len());
        let mut bytes = [0u8; 7];
        if self.crc {
            let mut c = Crc::new();
            c.update(&self.head);
            c.update(payload);
            c.update(&bytes[..pad]);
            bytes[pad..pad + 4].copy_from_slice(&c.to_wire());
        }
        Trailer {
            bytes,
            len: pad + 4,
        }
    }

    /// The whole FPDU in one buffer.
    pub fn to_vec(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head);
        v.extend_from_slice(payload);
        v.extend_from_slice(self.trailer(payload).as_ref());
        v
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn segments_a_tagged_message_advancing_the_to() {
        let s = Segmenter::new(
            Opcode::Write,
            Target::Tagged { stag: 7, to: 100 },
            25,
            14 + 10,
        )
        .unwrap();
        let v: Vec<_> = s.collect();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].payload, 0..10);
        assert_eq!(v[2].payload, 20..25);
        assert_eq!(v[1].header.buffer, Buffer::Tagged { stag: 7, to: 110 });
        assert!(!v[0].header.last && !v[1].header.last && v[2].header.last);
    }

    #[test]
    fn segments_an_untagged_message_advancing_the_mo() {
        let t = Target::Untagged {
            qn: 0,
            msn: 4,
            inv_stag: 9,
        };
        let v: Vec<_> = Segmenter::new(Opcode::SendInvalidate, t, 20, 18 + 8)
            .unwrap()
            .collect();
        let mos: Vec<_> = v
            .iter()
            .map(|s| match s.header.buffer {
                Buffer::Untagged {
                    mo, msn, inv_stag, ..
                } => (mo, msn, inv_stag),
                Buffer::Tagged { .. } => panic!("tagged"),
            })
            .collect();
        assert_eq!(mos, vec![(0, 4, 9), (8, 4, 9), (16, 4, 9)]);
    }

    #[test]
    fn sends_a_zero_length_message_as_one_last_segment() {
        let v: Vec<_> = Segmenter::new(Opcode::Write, Target::Tagged { stag: 0, to: 0 }, 0, 100)
            .unwrap()
            .collect();
        assert_eq!(v.len(), 1);
        assert!(v[0].header.last);
        assert_eq!(v[0].payload, 0..0);
    }

    #[test]
    fn refuses_impossible_segmentations() {
        let t = Target::Tagged {
            stag: 1,
            to: u64::MAX - 3,
        };
        assert_eq!(
            Segmenter::new(Opcode::Write, t, 5, 100).err(),
            Some(SegmentError::ToWrap)
        );
        let u = Target::Untagged {
            qn: 0,
            msn: 1,
            inv_stag: 0,
        };
        assert_eq!(
            Segmenter::new(Opcode::Send, u, 5, 18).err(),
            Some(SegmentError::MulpduTooSmall(18))
        );
        assert_eq!(
            Segmenter::new(Opcode::Write, u, 5, 100).err(),
            Some(SegmentError::BufferModel(Opcode::Write))
        );
    }

    #[test]
    fn transmit_matches_the_linux_crc_fpdu() {
        // kpeer 5b-b2: the NFS NULL call with CRC.
        let payload = crate::testutil::hex(
            "6b700001 00000001 00000020 00000000 00000000 00000000 00000000 6b700001 00000000
             00000002 000186a3 00000004 00000000 00000000 00000000 00000000 00000000",
        );
        let h = DdpRepr {
            last: true,
            opcode: Opcode::Send,
            buffer: Buffer::Untagged {
                inv_stag: 0,
                qn: 0,
                msn: 1,
                mo: 0,
            },
        };
        let t = Transmit::new(
            &h,
            &[],
            Some(PayloadRef::Wr {
                wr_id: 1,
                offset: 0,
                len: payload.len(),
            }),
            true,
        );
        let v = t.to_vec(&payload);
        assert_eq!(v.len(), 92);
        assert_eq!(&v[88..], &[0x0f, 0x26, 0x2c, 0x56]);
    }
}
