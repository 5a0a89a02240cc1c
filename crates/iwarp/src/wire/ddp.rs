//! DDP segment headers (RFC 5041 §4) with the RDMAP control field in DDP's
//! first ULP octet (RFC 5040 §4.1).
//!
//! Tagged (14 bytes): `T L rsvd DV | RV rsvd opcode | STag(4) | TO(8)`.
//! Untagged (18 bytes): `T L rsvd DV | RV rsvd opcode | RsvdULP(4) | QN(4) |
//! MSN(4) | MO(4)`; RsvdULP carries the STag to invalidate for Send with
//! Invalidate (RFC 5040 §4.1).

use core::fmt;

use super::rdmap::{Opcode, RDMAP_VERSION};

/// DDP version, RFC 5041 §4.2.
pub const DDP_VERSION: u8 = 1;
/// Length of a tagged DDP header, RFC 5041 §4.2.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged DDP header, RFC 5041 §4.3.
pub const UNTAGGED_HEADER_LEN: usize = 18;

mod field {
    use core::ops::Range;
    pub(crate) const DDP_CTRL: usize = 0;
    pub(crate) const RDMAP_CTRL: usize = 1;
    pub(crate) const STAG: Range<usize> = 2..6;
    pub(crate) const TO: Range<usize> = 6..14;
    pub(crate) const INV_STAG: Range<usize> = 2..6;
    pub(crate) const QN: Range<usize> = 6..10;
    pub(crate) const MSN: Range<usize> = 10..14;
    pub(crate) const MO: Range<usize> = 14..18;
}

const T_BIT: u8 = 0x80;
const L_BIT: u8 = 0x40;
const DV_MASK: u8 = 0x03;
const RV_SHIFT: u8 = 6;
const OPCODE_MASK: u8 = 0x0f;

/// Errors of a DDP/RDMAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdpError {
    /// Fewer bytes than the header.
    #[error("DDP header truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the header needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// DDP version other than 1 (RFC 5041 §4.2).
    #[error("DDP version {0} is not 1")]
    DdpVersion(u8),
    /// RDMAP version other than 1 (RFC 5040 §4.1).
    #[error("RDMAP version {0} is not 1")]
    RdmapVersion(u8),
    /// A reserved RDMAP opcode (8..15).
    #[error("reserved RDMAP opcode {0}")]
    Opcode(u8),
    /// The opcode and the T bit disagree (e.g. an untagged RDMA Write).
    #[error("{opcode} with the wrong buffer model (tagged={tagged})")]
    BufferModel {
        /// The opcode.
        opcode: Opcode,
        /// The T bit as received.
        tagged: bool,
    },
    /// The output buffer is shorter than the header.
    #[error("emit buffer is {have} bytes, header needs {need}")]
    BufferSize {
        /// Bytes needed.
        need: usize,
        /// Bytes offered.
        have: usize,
    },
}

/// A view of a DDP segment (header and payload) inside one ULPDU.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the header is present.
    pub fn new_checked(buffer: T) -> Result<Self, DdpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the length against the header length implied by the T bit.
    pub fn check_len(&self) -> Result<(), DdpError> {
        let have = self.buffer.as_ref().len();
        if have < 1 {
            return Err(DdpError::Truncated {
                need: TAGGED_HEADER_LEN,
                have,
            });
        }
        let need = self.header_len();
        if have < need {
            return Err(DdpError::Truncated { need, have });
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// T: tagged buffer model.
    pub fn tagged(&self) -> bool {
        self.buffer.as_ref()[field::DDP_CTRL] & T_BIT != 0
    }
    /// L: last segment of the message.
    pub fn last(&self) -> bool {
        self.buffer.as_ref()[field::DDP_CTRL] & L_BIT != 0
    }
    /// DV: DDP version.
    pub fn ddp_version(&self) -> u8 {
        self.buffer.as_ref()[field::DDP_CTRL] & DV_MASK
    }
    /// RV: RDMAP version.
    pub fn rdmap_version(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP_CTRL] >> RV_SHIFT
    }
    /// The 4-bit RDMAP opcode.
    pub fn opcode_bits(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP_CTRL] & OPCODE_MASK
    }
    /// Header length by the T bit: 14 tagged, 18 untagged.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
    /// Tagged: STag.
    pub fn stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::STAG])
    }
    /// Tagged: Tagged Offset.
    pub fn to(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.buffer.as_ref()[field::TO]);
        u64::from_be_bytes(a)
    }
    /// Untagged: RsvdULP / Invalidate STag.
    pub fn inv_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::INV_STAG])
    }
    /// Untagged: Queue Number.
    pub fn qn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::QN])
    }
    /// Untagged: Message Sequence Number.
    pub fn msn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::MSN])
    }
    /// Untagged: Message Offset.
    pub fn mo(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::MO])
    }
    /// The segment payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the DDP control octet from T, L and DV (reserved bits zero).
    pub fn set_ddp_control(&mut self, tagged: bool, last: bool, version: u8) {
        let mut b = version & DV_MASK;
        if tagged {
            b |= T_BIT;
        }
        if last {
            b |= L_BIT;
        }
        self.buffer.as_mut()[field::DDP_CTRL] = b;
    }
    /// Sets the RDMAP control octet (reserved bits zero).
    pub fn set_rdmap_control(&mut self, version: u8, opcode: u8) {
        self.buffer.as_mut()[field::RDMAP_CTRL] = (version << RV_SHIFT) | (opcode & OPCODE_MASK);
    }
    /// Sets the STag (tagged).
    pub fn set_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::STAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Tagged Offset.
    pub fn set_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::TO].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets RsvdULP / Invalidate STag (untagged).
    pub fn set_inv_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::INV_STAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Queue Number.
    pub fn set_qn(&mut self, v: u32) {
        self.buffer.as_mut()[field::QN].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Message Sequence Number.
    pub fn set_msn(&mut self, v: u32) {
        self.buffer.as_mut()[field::MSN].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Message Offset.
    pub fn set_mo(&mut self, v: u32) {
        self.buffer.as_mut()[field::MO].copy_from_slice(&v.to_be_bytes());
    }
}

/// The buffer model part of a DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// Tagged buffer: placed at (STag, TO), RFC 5041 §4.2.
    Tagged {
        /// Steering Tag of the target buffer.
        stag: u32,
        /// Tagged Offset of this segment's first byte.
        to: u64,
    },
    /// Untagged buffer: queue, message sequence number and offset,
    /// RFC 5041 §4.3.
    Untagged {
        /// RsvdULP: the STag to invalidate for Send with Invalidate, else 0.
        inv_stag: u32,
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number (starts at 1 per queue, RFC 5041 §5.1).
        msn: u32,
        /// Message Offset of this segment's first byte.
        mo: u32,
    },
}

/// A parsed DDP/RDMAP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// L: last segment of the message.
    pub last: bool,
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// Tagged or untagged fields.
    pub buffer: Buffer,
}

impl Repr {
    /// Parses a checked header: DDP and RDMAP version 1, a defined opcode,
    /// and the T bit matching the opcode (RFC 5040 §4.2). Reserved bits are
    /// ignored as RFC 5041 §4.2 asks of a receiver.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Self, DdpError> {
        p.check_len()?;
        if p.ddp_version() != DDP_VERSION {
            return Err(DdpError::DdpVersion(p.ddp_version()));
        }
        if p.rdmap_version() != RDMAP_VERSION {
            return Err(DdpError::RdmapVersion(p.rdmap_version()));
        }
        let opcode = Opcode::from_bits(p.opcode_bits()).ok_or(DdpError::Opcode(p.opcode_bits()))?;
        let tagged = p.tagged();
        if tagged != opcode.is_tagged() {
            return Err(DdpError::BufferModel { opcode, tagged });
        }
        let buffer = if tagged {
            Buffer::Tagged {
                stag: p.stag(),
                to: p.to(),
            }
        } else {
            Buffer::Untagged {
                inv_stag: p.inv_stag(),
                qn: p.qn(),
                msn: p.msn(),
                mo: p.mo(),
            }
        };
        Ok(Repr {
            last: p.last(),
            opcode,
            buffer,
        })
    }

    /// Parses the header at the start of `segment`; returns it and its length.
    pub fn parse_bytes(segment: &[u8]) -> Result<(Self, usize), DdpError> {
        let p = Packet::new_checked(segment)?;
        let r = Repr::parse(&p)?;
        Ok((r, p.header_len()))
    }

    /// Header length: 14 tagged, 18 untagged.
    pub const fn buffer_len(&self) -> usize {
        match self.buffer {
            Buffer::Tagged { .. } => TAGGED_HEADER_LEN,
            Buffer::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Writes the header into the first `buffer_len()` bytes of the packet.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), DdpError> {
        let need = self.buffer_len();
        let have = p.buffer.as_ref().len();
        if have < need {
            return Err(DdpError::BufferSize { need, have });
        }
        let tagged = matches!(self.buffer, Buffer::Tagged { .. });
        p.set_ddp_control(tagged, self.last, DDP_VERSION);
        p.set_rdmap_control(RDMAP_VERSION, self.opcode as u8);
        match self.buffer {
            Buffer::Tagged { stag, to } => {
                p.set_stag(stag);
                p.set_to(to);
            }
            Buffer::Untagged {
                inv_stag,
                qn,
                msn,
                mo,
            } => {
                p.set_inv_stag(inv_stag);
                p.set_qn(qn);
                p.set_msn(msn);
                p.set_mo(mo);
            }
        }
        Ok(())
    }

    /// The header bytes (14 or 18).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buffer_len()];
        // The buffer is exactly buffer_len() long, so emit cannot fail.
        let _ = self.emit(&mut Packet::new_unchecked(&mut v[..]));
        v
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.opcode)?;
        match self.buffer {
            Buffer::Tagged { stag, to } => write!(f, " tagged STag {stag:#010x} TO {to:#x}")?,
            Buffer::Untagged {
                inv_stag,
                qn,
                msn,
                mo,
            } => {
                write!(f, " QN {qn} MSN {msn} MO {mo}")?;
                if self.opcode.invalidates() {
                    write!(f, " inv STag {inv_stag:#010x}")?;
                }
            }
        }
        if self.last {
            f.write_str(" L")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    /// Untagged Send, QN 0, MSN 1, MO 0, L (kpeer 5b-b2).
    const SEND: &str = "4143 00000000 00000000 00000001 00000000";
    /// Send with Invalidate carrying STag 0x12345678.
    const SEND_INV: &str = "4144 12345678 00000000 00000007 00000000";
    /// Tagged RDMA Write, STag 0xdeadbeef, TO 0x1000, not last.
    const WRITE: &str = "0140 deadbeef 0000000000001000";

    #[test]
    fn deconstructs_untagged_send() {
        let b = hex(SEND);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(!p.tagged());
        assert!(p.last());
        assert_eq!(p.ddp_version(), 1);
        assert_eq!(p.rdmap_version(), 1);
        assert_eq!(p.opcode_bits(), 3);
        assert_eq!((p.qn(), p.msn(), p.mo()), (0, 1, 0));
        assert!(p.payload().is_empty());
    }

    #[test]
    fn constructs_tagged_write() {
        let mut b = vec![0xa5u8; TAGGED_HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_ddp_control(true, false, 1);
        p.set_rdmap_control(1, 0);
        p.set_stag(0xdeadbeef);
        p.set_to(0x1000);
        assert_eq!(b, hex("8140 deadbeef 0000000000001000"));
    }

    #[test]
    fn parses_headers() {
        let b = hex(SEND_INV);
        let (r, n) = Repr::parse_bytes(&b).unwrap();
        assert_eq!(n, 18);
        assert_eq!(
            r,
            Repr {
                last: true,
                opcode: Opcode::SendInvalidate,
                buffer: Buffer::Untagged {
                    inv_stag: 0x12345678,
                    qn: 0,
                    msn: 7,
                    mo: 0
                }
            }
        );
        assert_eq!(
            r.to_string(),
            "Send with Invalidate QN 0 MSN 7 MO 0 inv STag 0x12345678 L"
        );
    }

    #[test]
    fn emits_headers() {
        for s in [SEND, SEND_INV] {
            let b = hex(s);
            let (r, _) = Repr::parse_bytes(&b).unwrap();
            let mut out = vec![0xa5u8; r.buffer_len()];
            r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
            assert_eq!(out, b);
        }
        let r = Repr {
            last: false,
            opcode: Opcode::Write,
            buffer: Buffer::Tagged {
                stag: 0xdeadbeef,
                to: 0x1000,
            },
        };
        assert_eq!(r.to_vec(), hex("8140 deadbeef 0000000000001000"));
    }

    #[test]
    fn rejects_untagged_write() {
        let b = hex(WRITE);
        let mut u = b.clone();
        u.resize(18, 0);
        assert_eq!(
            Repr::parse_bytes(&u),
            Err(DdpError::BufferModel {
                opcode: Opcode::Write,
                tagged: false
            })
        );
    }

    #[test]
    fn rejects_bad_versions_and_opcodes() {
        let mut b = hex(SEND);
        b[0] = 0x42;
        assert_eq!(Repr::parse_bytes(&b), Err(DdpError::DdpVersion(2)));
        let mut b = hex(SEND);
        b[1] = 0x03;
        assert_eq!(Repr::parse_bytes(&b), Err(DdpError::RdmapVersion(0)));
        let mut b = hex(SEND);
        b[1] = 0x48;
        assert_eq!(Repr::parse_bytes(&b), Err(DdpError::Opcode(8)));
    }

    #[test]
    fn rejects_truncated_header() {
        let b = hex(SEND);
        assert_eq!(
            Repr::parse_bytes(&b[..17]),
            Err(DdpError::Truncated { need: 18, have: 17 })
        );
        assert!(Repr::parse_bytes(&[]).is_err());
        let t = hex("8140 deadbeef 00000000000010");
        assert_eq!(
            Repr::parse_bytes(&t),
            Err(DdpError::Truncated { need: 14, have: 13 })
        );
    }
}
