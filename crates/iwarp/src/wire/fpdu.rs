//! MPA FPDU framing without markers, RFC 5044 §4:
//! `ULPDU_Length(2) | ULPDU | pad to 4 | CRC(4)`.
//!
//! The CRC is CRC32c over the length field, the ULPDU and the pad
//! (RFC 5044 §4.4). Linux siw and Wireshark put the CRC value on the wire
//! least significant byte first (kpeer step 5b, "Good CRC32" in tshark).
//! When CRC was not negotiated the field is sent as zero and not checked.

use core::fmt;

/// Length of the ULPDU_Length field.
pub const LEN_FIELD: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// Framing overhead for a ULPDU of length 0 (length field + pad + CRC).
pub const MIN_FPDU_LEN: usize = 8;

/// Pad bytes after a ULPDU of `ulpdu_len` so that the FPDU is a multiple of
/// 4 bytes, RFC 5044 §4.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (ulpdu_len + LEN_FIELD) % 4) % 4
}

/// Total FPDU length for a ULPDU of `ulpdu_len` bytes.
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    LEN_FIELD + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// An incremental MPA CRC32c (RFC 5044 §4.4) over length, ULPDU and pad.
/// The IO shell can update it over payload it placed directly in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crc(u32);

impl Crc {
    /// A CRC over no bytes yet.
    pub const fn new() -> Self {
        Crc(0)
    }

    /// Adds `data` to the CRC.
    pub fn update(&mut self, data: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, data);
    }

    /// The CRC32c value so far.
    pub const fn value(&self) -> u32 {
        self.0
    }

    /// The 4 bytes the CRC field carries.
    pub const fn to_wire(&self) -> [u8; 4] {
        self.0.to_le_bytes()
    }

    /// Whether the received CRC field matches. Under `cfg(fuzzing)` every CRC
    /// matches so that the fuzzer reaches the layers above.
    pub fn matches(&self, field: [u8; 4]) -> bool {
        cfg!(fuzzing) || self.to_wire() == field
    }
}

/// Errors of the FPDU framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FpduError {
    /// Fewer bytes than the announced FPDU.
    #[error("FPDU truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the FPDU needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The CRC field does not match the computed CRC32c.
    #[error("MPA CRC mismatch: computed {computed:#010x}, received {received:#010x}")]
    BadCrc {
        /// CRC32c over the FPDU.
        computed: u32,
        /// The field as received (little-endian).
        received: u32,
    },
    /// ULPDU longer than the negotiated maximum (MULPDU).
    #[error("ULPDU length {len} exceeds the maximum {max}")]
    TooLong {
        /// Announced ULPDU length.
        len: usize,
        /// Maximum accepted.
        max: usize,
    },
    /// The output buffer is not `fpdu_len` bytes.
    #[error("emit buffer is {have} bytes, FPDU needs {need}")]
    BufferSize {
        /// Bytes the FPDU needs.
        need: usize,
        /// Bytes offered.
        have: usize,
    },
}

/// A view of one FPDU at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the whole FPDU is present.
    pub fn new_checked(buffer: T) -> Result<Self, FpduError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the length field and the whole FPDU are present.
    pub fn check_len(&self) -> Result<(), FpduError> {
        let have = self.buffer.as_ref().len();
        if have < LEN_FIELD {
            return Err(FpduError::Truncated {
                need: MIN_FPDU_LEN,
                have,
            });
        }
        let need = self.fpdu_len();
        if have < need {
            return Err(FpduError::Truncated { need, have });
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// ULPDU_Length.
    pub fn ulpdu_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The FPDU length implied by the length field.
    pub fn fpdu_len(&self) -> usize {
        fpdu_len(usize::from(self.ulpdu_len()))
    }

    /// The ULPDU (DDP segment).
    pub fn ulpdu(&self) -> &[u8] {
        let n = usize::from(self.ulpdu_len());
        &self.buffer.as_ref()[LEN_FIELD..LEN_FIELD + n]
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        let n = usize::from(self.ulpdu_len());
        let start = LEN_FIELD + n;
        &self.buffer.as_ref()[start..start + pad_len(n)]
    }

    /// The CRC field as received.
    pub fn crc_field(&self) -> [u8; 4] {
        let end = self.fpdu_len();
        let b = &self.buffer.as_ref()[end - CRC_LEN..end];
        [b[0], b[1], b[2], b[3]]
    }

    /// CRC32c over length field, ULPDU and pad.
    pub fn compute_crc(&self) -> Crc {
        let mut c = Crc::new();
        c.update(&self.buffer.as_ref()[..self.fpdu_len() - CRC_LEN]);
        c
    }

    /// Checks the CRC field against the computed CRC.
    pub fn verify_crc(&self) -> Result<(), FpduError> {
        let c = self.compute_crc();
        let field = self.crc_field();
        if c.matches(field) {
            Ok(())
        } else {
            Err(FpduError::BadCrc {
                computed: c.value(),
                received: u32::from_le_bytes(field),
            })
        }
    }
}

/// An FPDU to emit: the ULPDU and whether to fill in the CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// The ULPDU (DDP segment) bytes.
    pub ulpdu: &'a [u8],
    /// Fill the CRC field (CRC negotiated); otherwise it is zero.
    pub crc: bool,
}

impl<'a> Repr<'a> {
    /// Parses a checked FPDU, verifying the CRC if `crc` is set.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        crc: bool,
    ) -> Result<Self, FpduError> {
        packet.check_len()?;
        if crc {
            packet.verify_crc()?;
        }
        let buf: &'a [u8] = packet.buffer.as_ref();
        let n = usize::from(packet.ulpdu_len());
        Ok(Repr {
            ulpdu: &buf[LEN_FIELD..LEN_FIELD + n],
            crc,
        })
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        fpdu_len(self.ulpdu.len())
    }

    /// Writes the FPDU into a buffer of exactly `buffer_len()` bytes. The
    /// ULPDU must fit the 16-bit length field.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), FpduError> {
        let n = self.ulpdu.len();
        let len16 = u16::try_from(n).map_err(|_| FpduError::TooLong {
            len: n,
            max: usize::from(u16::MAX),
        })?;
        let need = self.buffer_len();
        let buf = packet.buffer.as_mut();
        if buf.len() != need {
            return Err(FpduError::BufferSize {
                need,
                have: buf.len(),
            });
        }
        let (body, crc_field) = buf.split_at_mut(need - CRC_LEN);
        body[..LEN_FIELD].copy_from_slice(&len16.to_be_bytes());
        body[LEN_FIELD..LEN_FIELD + n].copy_from_slice(self.ulpdu);
        body[LEN_FIELD + n..].fill(0);
        let field = if self.crc {
            let mut c = Crc::new();
            c.update(body);
            c.to_wire()
        } else {
            [0; 4]
        };
        crc_field.copy_from_slice(&field);
        Ok(())
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, FpduError> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut Packet::new_unchecked(&mut v[..]))?;
        Ok(v)
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MPA FPDU ULPDU {} bytes, pad {}",
            self.ulpdu.len(),
            pad_len(self.ulpdu.len())
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    /// NFS NULL call sent to knfsd with CRC negotiated (kpeer 5b-b2).
    const CALL: &str = "0056 4143 00000000 00000000 00000001 00000000 6b700001 00000001 00000020
        00000000 00000000 00000000 00000000 6b700001 00000000 00000002 000186a3
        00000004 00000000 00000000 00000000 00000000 00000000 0f262c56";
    /// knfsd's reply, CRC computed by Linux siw (kpeer 5b-b2).
    const REPLY: &str = "0046 4143 00000000 00000000 00000001 00000000 6b700001 00000001 00000040
        00000000 00000000 00000000 00000000 6b700001 00000001 00000000 00000000
        00000000 00000000 c5e723a2";

    #[test]
    fn deconstructs_fpdu() {
        let b = hex(CALL);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.ulpdu_len(), 0x56);
        assert_eq!(p.fpdu_len(), 92);
        assert_eq!(p.ulpdu().len(), 86);
        assert!(p.pad().is_empty());
        assert_eq!(p.crc_field(), [0x0f, 0x26, 0x2c, 0x56]);
    }

    #[test]
    fn verifies_crc_known_answers_from_linux_siw() {
        for s in [CALL, REPLY] {
            let b = hex(s);
            let p = Packet::new_checked(&b[..]).unwrap();
            p.verify_crc().unwrap();
            let r = Repr::parse(&p, true).unwrap();
            assert_eq!(r.to_vec().unwrap(), b);
        }
    }

    #[test]
    fn constructs_and_emits_fpdu_with_crc() {
        let b = hex(CALL);
        let ulpdu = &b[2..88];
        let r = Repr { ulpdu, crc: true };
        let mut out = vec![0xa5u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, b);
        assert_eq!(r.to_string(), "MPA FPDU ULPDU 86 bytes, pad 0");
    }

    #[test]
    fn emits_zero_crc_when_not_negotiated() {
        let r = Repr {
            ulpdu: &[1, 2, 3],
            crc: false,
        };
        let v = r.to_vec().unwrap();
        assert_eq!(v, [0, 3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn incremental_crc_matches_one_shot() {
        let b = hex(REPLY);
        let mut c = Crc::new();
        for chunk in b[..72].chunks(5) {
            c.update(chunk);
        }
        assert_eq!(c.to_wire(), [0xc5, 0xe7, 0x23, 0xa2]);
    }

    #[test]
    fn rejects_corrupted_crc() {
        let mut b = hex(REPLY);
        b[30] ^= 1;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(matches!(p.verify_crc(), Err(FpduError::BadCrc { .. })));
    }

    #[test]
    fn rejects_truncated_fpdu() {
        let b = hex(REPLY);
        assert_eq!(
            Packet::new_checked(&b[..75]).err(),
            Some(FpduError::Truncated { need: 76, have: 75 })
        );
        assert!(Packet::new_checked(&b[..1]).is_err());
    }

    #[test]
    fn pads_to_four_bytes() {
        assert_eq!(pad_len(0), 2);
        assert_eq!(pad_len(2), 0);
        assert_eq!(pad_len(86), 0);
        assert_eq!(pad_len(70), 0);
        assert_eq!(pad_len(3), 3);
        assert_eq!(fpdu_len(18), 24);
    }
}
