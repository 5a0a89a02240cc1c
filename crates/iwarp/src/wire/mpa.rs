//! MPA connection set-up frames: the MPA Request and MPA Reply (RFC 5044 §7.1)
//! with the enhanced connection set-up words of RFC 6581.
//!
//! The frame is `key(16) | flags(1) | rev(1) | pd_length(2) | private data`.
//! With revision 2 and the enhanced flag set, the private data begins with
//! the two 16-bit IRD/ORD words of RFC 6581; what follows is the upper
//! layer's private data (for NFS/RDMA, the RFC 8797 message).

use core::fmt;

/// Key of an MPA Request frame, RFC 5044 §7.1.
pub const KEY_REQUEST: &[u8; 16] = b"MPA ID Req Frame";
/// Key of an MPA Reply frame, RFC 5044 §7.1.
pub const KEY_REPLY: &[u8; 16] = b"MPA ID Rep Frame";
/// Length of the fixed frame header (key, flags, revision, PD_Length).
pub const HEADER_LEN: usize = 20;
/// Largest private data an MPA frame may carry, RFC 5044 §7.1.
pub const MAX_PRIVATE_DATA: usize = 512;
/// Largest private data Linux siw accepts (`RDMA_MAX_PRIVATE_DATA`); a longer
/// frame makes siw close the connection (kpeer step 5b).
pub const SIW_MAX_PRIVATE_DATA: usize = 256;
/// Length of the RFC 6581 IRD/ORD words at the start of the private data.
pub const IRD_ORD_LEN: usize = 4;

/// Flag bits of the MPA frame, RFC 5044 §7.1 (M, C, R) and the enhanced
/// connection set-up bit Linux (siw, cxgb4) sets for RFC 6581.
pub mod flags {
    /// M: markers wanted, RFC 5044 §7.1.
    pub const MARKERS: u8 = 0x80;
    /// C: CRC wanted, RFC 5044 §7.1.
    pub const CRC: u8 = 0x40;
    /// R: connection rejected (Reply only), RFC 5044 §7.1.
    pub const REJECT: u8 = 0x20;
    /// Enhanced connection set-up: the private data starts with the
    /// RFC 6581 IRD/ORD words (Linux `MPA_RR_FLAG_ENHANCED`).
    pub const ENHANCED: u8 = 0x10;
    /// The remaining reserved bits.
    pub const RESERVED: u8 = 0x0f;
    /// A reserved bit Linux `siw` uses as an experimental extension
    /// (`MPA_RR_FLAG_GSO_EXP`, set with its `try_gso` option, revision 2
    /// only): the sender of the frame takes FPDUs larger than the
    /// 32762-byte ULPDUs siw sends by default, up to the 16-bit MPA length.
    /// RFC 5044 §7.1 has reserved bits sent as zero and not checked on
    /// reception, so a peer that does not know it ignores it.
    pub const LARGE_FPDU: u8 = 0x08;
}

mod field {
    use core::ops::Range;
    pub(crate) const KEY: Range<usize> = 0..16;
    pub(crate) const FLAGS: usize = 16;
    pub(crate) const REV: usize = 17;
    pub(crate) const PD_LEN: Range<usize> = 18..20;
    pub(crate) const fn private_data(pd_len: usize) -> Range<usize> {
        super::HEADER_LEN..super::HEADER_LEN + pd_len
    }
}

/// Errors in an MPA Request or Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MpaError {
    /// Fewer bytes than the header or the announced private data.
    #[error("MPA frame truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The key is neither the Request nor the Reply key.
    #[error("not an MPA Request or Reply key")]
    BadKey,
    /// PD_Length over the RFC 5044 §7.1 limit of 512.
    #[error("MPA private data length {0} exceeds 512")]
    PrivateDataTooLong(usize),
    /// Revision 2 with the enhanced flag but fewer than 4 private data bytes.
    #[error("enhanced MPA frame without the IRD/ORD words")]
    MissingIrdOrd,
    /// An IRD or ORD value above the 14-bit field.
    #[error("IRD/ORD value {0} does not fit 14 bits")]
    IrdOrdTooLarge(u16),
    /// The output buffer is not `buffer_len()` bytes.
    #[error("emit buffer is {have} bytes, frame needs {need}")]
    BufferSize {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes offered.
        have: usize,
    },
}

/// Which of the two set-up frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// MPA Request, sent by the initiator.
    Request,
    /// MPA Reply, sent by the responder.
    Reply,
}

impl FrameKind {
    fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => KEY_REQUEST,
            FrameKind::Reply => KEY_REPLY,
        }
    }
}

/// A read/write view of an MPA Request or Reply frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short
    /// buffer. Use only on buffers sized by `Repr::buffer_len`.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the header and the announced private
    /// data are present.
    pub fn new_checked(buffer: T) -> Result<Self, MpaError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that no accessor can panic. PD_Length over 512 is an error.
    pub fn check_len(&self) -> Result<(), MpaError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(MpaError::Truncated {
                need: HEADER_LEN,
                have,
            });
        }
        let pd = usize::from(self.pd_len());
        if pd > MAX_PRIVATE_DATA {
            return Err(MpaError::PrivateDataTooLong(pd));
        }
        if have < HEADER_LEN + pd {
            return Err(MpaError::Truncated {
                need: HEADER_LEN + pd,
                have,
            });
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-byte key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// Request or Reply, from the key; `None` for any other key.
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == KEY_REQUEST => Some(FrameKind::Request),
            k if k == KEY_REPLY => Some(FrameKind::Reply),
            _ => None,
        }
    }

    /// The flags octet (M, C, R, enhanced, reserved).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The revision octet.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length.
    pub fn pd_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Total frame length: header plus private data.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_len())
    }

    /// The whole private data (IRD/ORD words included).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::private_data(usize::from(self.pd_len()))]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the key of `kind`.
    pub fn set_kind(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(kind.key());
    }

    /// Writes the flags octet.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Writes the revision octet.
    pub fn set_revision(&mut self, value: u8) {
        self.buffer.as_mut()[field::REV] = value;
    }

    /// Writes PD_Length.
    pub fn set_pd_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::PD_LEN].copy_from_slice(&value.to_be_bytes());
    }

    /// The private data, writable (PD_Length must be set first).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let pd = usize::from(self.pd_len());
        &mut self.buffer.as_mut()[field::private_data(pd)]
    }
}

/// The RFC 6581 IRD/ORD words: IRD and ORD (14 bits each), the
/// peer-to-peer bit and the ready-to-receive (RTR) message types.
///
/// Word 1 = `P2P(0x8000) | Send-RTR(0x4000) | IRD`, word 2 =
/// `Write-RTR(0x8000) | Read-RTR(0x4000) | ORD` (RFC 6581, "Enhanced MPA Request/Reply Frames": flags A, B, C, D;
/// as Linux siw and cxgb4 encode it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth.
    pub ird: u16,
    /// Outbound RDMA Read queue depth.
    pub ord: u16,
    /// Peer-to-peer mode requested (an RTR message follows the Reply).
    pub peer_to_peer: bool,
    /// A zero-length Send may serve as the RTR message.
    pub rtr_send: bool,
    /// A zero-length RDMA Write may serve as the RTR message.
    pub rtr_write: bool,
    /// A zero-length RDMA Read may serve as the RTR message.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Largest IRD or ORD value (14 bits).
    pub const MAX: u16 = 0x3fff;
    const P2P: u16 = 0x8000;
    const RTR_SEND: u16 = 0x4000;
    const RTR_WRITE: u16 = 0x8000;
    const RTR_READ: u16 = 0x4000;

    /// Decodes the 4 bytes (RFC 6581 IRD/ORD words).
    pub fn from_bytes(b: [u8; 4]) -> Self {
        let w1 = u16::from_be_bytes([b[0], b[1]]);
        let w2 = u16::from_be_bytes([b[2], b[3]]);
        IrdOrd {
            ird: w1 & Self::MAX,
            ord: w2 & Self::MAX,
            peer_to_peer: w1 & Self::P2P != 0,
            rtr_send: w1 & Self::RTR_SEND != 0,
            rtr_write: w2 & Self::RTR_WRITE != 0,
            rtr_read: w2 & Self::RTR_READ != 0,
        }
    }

    /// Encodes the 4 bytes; IRD or ORD above 14 bits is an error.
    pub fn to_bytes(&self) -> Result<[u8; 4], MpaError> {
        for v in [self.ird, self.ord] {
            if v > Self::MAX {
                return Err(MpaError::IrdOrdTooLarge(v));
            }
        }
        let mut w1 = self.ird;
        let mut w2 = self.ord;
        if self.peer_to_peer {
            w1 |= Self::P2P;
        }
        if self.rtr_send {
            w1 |= Self::RTR_SEND;
        }
        if self.rtr_write {
            w2 |= Self::RTR_WRITE;
        }
        if self.rtr_read {
            w2 |= Self::RTR_READ;
        }
        let [a, b] = w1.to_be_bytes();
        let [c, d] = w2.to_be_bytes();
        Ok([a, b, c, d])
    }
}

/// A parsed MPA Request or Reply, RFC 5044 §7.1 with RFC 6581 words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M flag.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag (reject; meaningful in a Reply).
    pub reject: bool,
    /// The enhanced connection set-up bit (0x10).
    pub enhanced: bool,
    /// Reserved low flag bits, kept so that a frame re-encodes unchanged.
    pub reserved: u8,
    /// The revision (1 or 2 in practice; kept as received).
    pub revision: u8,
    /// The RFC 6581 words, present when revision is 2 and the enhanced bit
    /// is set.
    pub ird_ord: Option<IrdOrd>,
    /// The upper layer's private data (after the IRD/ORD words, if any).
    pub private_data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a checked frame. The key must be a Request or Reply key; an
    /// enhanced revision 2 frame must carry the IRD/ORD words.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self, MpaError> {
        packet.check_len()?;
        let buf: &'a [u8] = packet.buffer.as_ref();
        let kind = packet.kind().ok_or(MpaError::BadKey)?;
        let f = packet.flags();
        let enhanced = f & flags::ENHANCED != 0;
        let revision = packet.revision();
        let pd: &'a [u8] = &buf[field::private_data(usize::from(packet.pd_len()))];
        let (ird_ord, private_data) = if revision == 2 && enhanced {
            match pd.split_first_chunk::<4>() {
                Some((words, rest)) => (Some(IrdOrd::from_bytes(*words)), rest),
                None => return Err(MpaError::MissingIrdOrd),
            }
        } else {
            (None, pd)
        };
        Ok(Repr {
            kind,
            markers: f & flags::MARKERS != 0,
            crc: f & flags::CRC != 0,
            reject: f & flags::REJECT != 0,
            enhanced,
            reserved: f & flags::RESERVED,
            revision,
            ird_ord,
            private_data,
        })
    }

    /// Parses a frame from the start of `bytes`, returning it and its length
    /// (bytes after the frame are not part of it).
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<(Self, usize), MpaError> {
        let p = Packet::new_checked(bytes)?;
        let r = Repr::parse(&p)?;
        Ok((r, p.frame_len()))
    }

    /// PD_Length this frame will carry (IRD/ORD words plus private data).
    pub fn pd_len(&self) -> usize {
        self.private_data.len()
            + if self.ird_ord.is_some() {
                IRD_ORD_LEN
            } else {
                0
            }
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_len()
    }

    /// The flags octet this frame carries.
    pub fn flags_octet(&self) -> u8 {
        let mut f = self.reserved & flags::RESERVED;
        if self.markers {
            f |= flags::MARKERS;
        }
        if self.crc {
            f |= flags::CRC;
        }
        if self.reject {
            f |= flags::REJECT;
        }
        if self.enhanced {
            f |= flags::ENHANCED;
        }
        f
    }

    /// Writes the frame into a buffer of exactly `buffer_len()` bytes. A frame
    /// whose PD_Length would not match its data, or exceed 512, is refused:
    /// this never writes a malformed frame (a malformed MPA Reply can crash a
    /// Linux siw initiator, kpeer bug A).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), MpaError> {
        let need = self.buffer_len();
        let have = packet.buffer.as_ref().len();
        if have != need {
            return Err(MpaError::BufferSize { need, have });
        }
        let pd_len = self.pd_len();
        if pd_len > MAX_PRIVATE_DATA {
            return Err(MpaError::PrivateDataTooLong(pd_len));
        }
        let words = match self.ird_ord {
            Some(w) => Some(w.to_bytes()?),
            None => None,
        };
        if self.ird_ord.is_some() != (self.revision == 2 && self.enhanced) {
            // The receiver decides by (revision, enhanced) whether the first
            // 4 bytes are IRD/ORD words; emitting otherwise would be misread.
            return Err(MpaError::MissingIrdOrd);
        }
        packet.set_kind(self.kind);
        packet.set_flags(self.flags_octet());
        packet.set_revision(self.revision);
        // pd_len <= 512 was checked above.
        packet.set_pd_len(pd_len as u16);
        let out = packet.private_data_mut();
        let rest = match words {
            Some(w) => {
                let (head, rest) = out.split_at_mut(IRD_ORD_LEN);
                head.copy_from_slice(&w);
                rest
            }
            None => out,
        };
        rest.copy_from_slice(self.private_data);
        Ok(())
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, MpaError> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut Packet::new_unchecked(&mut v[..]))?;
        Ok(v)
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            FrameKind::Request => "MPA Request",
            FrameKind::Reply => "MPA Reply",
        };
        write!(
            f,
            "{kind} rev {} M={} C={} R={} enh={}",
            self.revision,
            self.markers as u8,
            self.crc as u8,
            self.reject as u8,
            self.enhanced as u8
        )?;
        if let Some(w) = self.ird_ord {
            write!(f, " IRD={} ORD={}", w.ird, w.ord)?;
            if w.peer_to_peer {
                write!(
                    f,
                    " P2P rtr[send={} write={} read={}]",
                    w.rtr_send as u8, w.rtr_write as u8, w.rtr_read as u8
                )?;
            }
        }
        write!(f, " pd {} bytes", self.private_data.len())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    /// The MPA Request of the Linux xprtrdma client via siw (kpeer README).
    const REQUEST: &str = "4d504120494420526571204672616d65 10 02 000c 0080 0000 f6ab0e1801010303";
    /// knfsd's MPA Reply via siw (kpeer README).
    const REPLY: &str = "4d504120494420526570204672616d65 10 02 000c 0000 0080 f6ab0e1801000303";
    /// siw rejecting a revision 1 Request (kpeer results/5b-analysis.txt).
    const REJECT_REV1: &str = "4d504120494420526570204672616d65 20 01 0000";
    /// siw rejecting a Request with markers (kpeer results/5b-analysis.txt).
    const REJECT_MARKERS: &str = "4d504120494420526570204672616d65 30 02 0004 0000 0000";

    fn request_repr(pd: &[u8]) -> Repr<'_> {
        Repr {
            kind: FrameKind::Request,
            markers: false,
            crc: false,
            reject: false,
            enhanced: true,
            reserved: 0,
            revision: 2,
            ird_ord: Some(IrdOrd {
                ird: 128,
                ord: 0,
                ..IrdOrd::default()
            }),
            private_data: pd,
        }
    }

    #[test]
    fn deconstructs_siw_request() {
        let b = hex(REQUEST);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.kind(), Some(FrameKind::Request));
        assert_eq!(p.flags(), 0x10);
        assert_eq!(p.revision(), 2);
        assert_eq!(p.pd_len(), 12);
        assert_eq!(p.frame_len(), 32);
        assert_eq!(p.private_data(), &hex("0080 0000 f6ab0e1801010303")[..]);
    }

    #[test]
    fn constructs_siw_request() {
        let want = hex(REQUEST);
        let mut b = vec![0xa5u8; want.len()];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_kind(FrameKind::Request);
        p.set_flags(flags::ENHANCED);
        p.set_revision(2);
        p.set_pd_len(12);
        p.private_data_mut()
            .copy_from_slice(&hex("0080 0000 f6ab0e1801010303"));
        assert_eq!(b, want);
    }

    #[test]
    fn parses_siw_request() {
        let b = hex(REQUEST);
        let pd = hex("f6ab0e1801010303");
        let (r, len) = Repr::parse_bytes(&b).unwrap();
        assert_eq!(len, 32);
        assert_eq!(r, request_repr(&pd));
        assert_eq!(
            r.to_string(),
            "MPA Request rev 2 M=0 C=0 R=0 enh=1 IRD=128 ORD=0 pd 8 bytes"
        );
    }

    #[test]
    fn emits_siw_request() {
        let pd = hex("f6ab0e1801010303");
        let r = request_repr(&pd);
        let mut b = vec![0xa5u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        assert_eq!(b, hex(REQUEST));
    }

    #[test]
    fn round_trips_knfsd_reply_and_rejects() {
        for s in [REPLY, REJECT_REV1, REJECT_MARKERS] {
            let b = hex(s);
            let (r, len) = Repr::parse_bytes(&b).unwrap();
            assert_eq!(len, b.len());
            assert_eq!(r.kind, FrameKind::Reply);
            assert_eq!(r.to_vec().unwrap(), b, "{r}");
        }
        let b = hex(REPLY);
        let (r, _) = Repr::parse_bytes(&b).unwrap();
        assert_eq!(r.ird_ord.map(|w| (w.ird, w.ord)), Some((0, 128)));
        let b = hex(REJECT_MARKERS);
        let (r, _) = Repr::parse_bytes(&b).unwrap();
        assert!(r.reject && r.enhanced && !r.markers);
        let b = hex(REJECT_REV1);
        let (r, _) = Repr::parse_bytes(&b).unwrap();
        assert!(r.reject && r.ird_ord.is_none() && r.revision == 1);
    }

    #[test]
    fn rejects_truncated_header() {
        let b = hex(REQUEST);
        assert_eq!(
            Repr::parse_bytes(&b[..19]),
            Err(MpaError::Truncated { need: 20, have: 19 })
        );
        assert_eq!(
            Repr::parse_bytes(&b[..31]),
            Err(MpaError::Truncated { need: 32, have: 31 })
        );
    }

    #[test]
    fn rejects_private_data_over_512() {
        let mut b = hex(REQUEST);
        b[18..20].copy_from_slice(&513u16.to_be_bytes());
        b.resize(20 + 513, 0);
        assert_eq!(
            Repr::parse_bytes(&b),
            Err(MpaError::PrivateDataTooLong(513))
        );
    }

    #[test]
    fn rejects_unknown_key() {
        let mut b = hex(REQUEST);
        b[0] = b'X';
        assert_eq!(Repr::parse_bytes(&b), Err(MpaError::BadKey));
    }

    #[test]
    fn rejects_enhanced_frame_without_words() {
        let b = hex("4d504120494420526571204672616d65 10 02 0002 0000");
        assert_eq!(Repr::parse_bytes(&b), Err(MpaError::MissingIrdOrd));
    }

    #[test]
    fn refuses_to_emit_oversized_private_data() {
        let pd = vec![0u8; 509];
        let r = request_repr(&pd);
        assert_eq!(r.to_vec(), Err(MpaError::PrivateDataTooLong(513)));
    }

    #[test]
    fn refuses_to_emit_words_the_peer_would_not_expect() {
        let pd = [];
        let mut r = request_repr(&pd);
        r.revision = 1;
        assert_eq!(r.to_vec(), Err(MpaError::MissingIrdOrd));
    }

    #[test]
    fn encodes_rtr_bits() {
        let w = IrdOrd {
            ird: 16,
            ord: 16,
            peer_to_peer: true,
            rtr_send: false,
            rtr_write: true,
            rtr_read: false,
        };
        let b = w.to_bytes().unwrap();
        assert_eq!(b, [0x80, 0x10, 0x80, 0x10]);
        assert_eq!(IrdOrd::from_bytes(b), w);
        let big = IrdOrd {
            ird: 0x4000,
            ..IrdOrd::default()
        };
        assert_eq!(big.to_bytes(), Err(MpaError::IrdOrdTooLarge(0x4000)));
    }
}
