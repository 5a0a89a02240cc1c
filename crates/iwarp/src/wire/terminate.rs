//! The RDMAP Terminate message body, RFC 5040 §4.8, and the error codes of
//! RFC 5040 §7, RFC 5041 §7 and RFC 5044 §8 (with RFC 6581's additions).
//!
//! Body: `Terminate Control(4) = Layer(4b) EType(4b) ErrorCode(8b) M D R
//! rsvd(13b)`, then, when D is set, the DDP Segment Length (2, the MPA
//! ULPDU_Length of the offending segment) and its DDP header (14 or 18),
//! then, when R is set, the RDMA Read Request header (28).

use core::fmt;

use super::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::rdmap::READ_REQUEST_LEN;

/// The layer that detected the error, RFC 5040 §4.8 (an open newtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layer(pub u8);

impl Layer {
    /// RDMAP, RFC 5040 §7.
    pub const RDMAP: Layer = Layer(0);
    /// DDP, RFC 5041 §7.
    pub const DDP: Layer = Layer(1);
    /// The lower layer protocol (MPA), RFC 5044 §8.
    pub const LLP: Layer = Layer(2);
}

/// Layer, error type and error code of a Terminate, as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermError {
    /// Layer (4 bits).
    pub layer: Layer,
    /// Error type (4 bits).
    pub etype: u8,
    /// Error code.
    pub code: u8,
}

macro_rules! term_errors {
    ($( $(#[$m:meta])* $name:ident = ($l:expr, $t:expr, $c:expr, $desc:expr); )*) => {
        impl TermError {
            $( $(#[$m])* pub const $name: TermError = TermError { layer: Layer($l), etype: $t, code: $c }; )*

            /// The table's description, if the triple is a known one.
            pub fn description(&self) -> Option<&'static str> {
                // RDMAP local catastrophic errors carry any code (RFC 5040 §7).
                if self.layer == Layer::RDMAP && self.etype == 0 {
                    return Some("RDMAP local catastrophic error");
                }
                $( if (self.layer.0, self.etype, self.code) == ($l, $t, $c) { return Some($desc); } )*
                None
            }
        }
    };
}

term_errors! {
    /// RFC 5040 §7: local catastrophic error.
    RDMAP_CATASTROPHIC = (0, 0, 0, "RDMAP local catastrophic error");
    /// RFC 5040 §7: remote protection error, invalid STag.
    RDMAP_INVALID_STAG = (0, 1, 0x00, "RDMAP protection: invalid STag");
    /// RFC 5040 §7: remote protection error, base or bounds violation.
    RDMAP_BASE_BOUNDS = (0, 1, 0x01, "RDMAP protection: base or bounds violation");
    /// RFC 5040 §7: remote protection error, access rights violation.
    RDMAP_ACCESS_RIGHTS = (0, 1, 0x02, "RDMAP protection: access rights violation");
    /// RFC 5040 §7: STag not associated with the RDMAP stream.
    RDMAP_STAG_NOT_ASSOCIATED = (0, 1, 0x03, "RDMAP protection: STag not associated with RDMAP stream");
    /// RFC 5040 §7: Tagged Offset wrap.
    RDMAP_TO_WRAP = (0, 1, 0x04, "RDMAP protection: TO wrap");
    /// RFC 5040 §7: STag cannot be invalidated (protection).
    RDMAP_CANNOT_INVALIDATE_PROT = (0, 1, 0x09, "RDMAP protection: STag cannot be invalidated");
    /// RFC 5040 §7: unspecified protection error.
    RDMAP_PROT_UNSPECIFIED = (0, 1, 0xff, "RDMAP protection: unspecified");
    /// RFC 5040 §7: invalid RDMAP version.
    RDMAP_VERSION = (0, 2, 0x05, "RDMAP operation: invalid RDMAP version");
    /// RFC 5040 §7: unexpected opcode.
    RDMAP_UNEXPECTED_OPCODE = (0, 2, 0x06, "RDMAP operation: unexpected opcode");
    /// RFC 5040 §7: catastrophic error localized to the RDMAP stream.
    RDMAP_CATASTROPHIC_STREAM = (0, 2, 0x07, "RDMAP operation: catastrophic, localized to stream");
    /// RFC 5040 §7: catastrophic error, global.
    RDMAP_CATASTROPHIC_GLOBAL = (0, 2, 0x08, "RDMAP operation: catastrophic, global");
    /// RFC 5040 §7: STag cannot be invalidated (operation).
    RDMAP_CANNOT_INVALIDATE = (0, 2, 0x09, "RDMAP operation: STag cannot be invalidated");
    /// RFC 5040 §7: unspecified operation error.
    RDMAP_OP_UNSPECIFIED = (0, 2, 0xff, "RDMAP operation: unspecified");
    /// RFC 5041 §7: local catastrophic.
    DDP_CATASTROPHIC = (1, 0, 0x00, "DDP local catastrophic");
    /// RFC 5041 §7: tagged buffer, invalid STag.
    DDP_INVALID_STAG = (1, 1, 0x00, "DDP tagged: invalid STag");
    /// RFC 5041 §7: tagged buffer, base or bounds violation.
    DDP_BASE_BOUNDS = (1, 1, 0x01, "DDP tagged: base or bounds violation");
    /// RFC 5041 §7: STag not associated with the DDP stream.
    DDP_STAG_NOT_ASSOCIATED = (1, 1, 0x02, "DDP tagged: STag not associated with DDP stream");
    /// RFC 5041 §7: Tagged Offset wrap.
    DDP_TO_WRAP = (1, 1, 0x03, "DDP tagged: TO wrap");
    /// RFC 5041 §7: invalid DDP version (tagged).
    DDP_TAGGED_VERSION = (1, 1, 0x04, "DDP tagged: invalid DDP version");
    /// RFC 5041 §7: untagged buffer, invalid QN.
    DDP_INVALID_QN = (1, 2, 0x01, "DDP untagged: invalid QN");
    /// RFC 5041 §7: invalid MSN, no buffer available.
    DDP_NO_BUFFER = (1, 2, 0x02, "DDP untagged: invalid MSN, no buffer available");
    /// RFC 5041 §7: invalid MSN, MSN range is not valid.
    DDP_MSN_RANGE = (1, 2, 0x03, "DDP untagged: invalid MSN, range not valid");
    /// RFC 5041 §7: invalid MO.
    DDP_INVALID_MO = (1, 2, 0x04, "DDP untagged: invalid MO");
    /// RFC 5041 §7: message too long for the available buffer.
    DDP_MSG_TOO_LONG = (1, 2, 0x05, "DDP untagged: message too long for buffer");
    /// RFC 5041 §7: invalid DDP version (untagged).
    DDP_UNTAGGED_VERSION = (1, 2, 0x06, "DDP untagged: invalid DDP version");
    /// RFC 5044 §8: TCP connection closed, terminated or lost.
    LLP_CONNECTION_LOST = (2, 0, 0x01, "MPA: TCP connection lost");
    /// RFC 5044 §8: MPA CRC error.
    LLP_CRC = (2, 0, 0x02, "MPA: CRC error");
    /// RFC 5044 §8: marker and ULPDU length mismatch.
    LLP_MARKER = (2, 0, 0x03, "MPA: marker and ULPDU length mismatch");
    /// RFC 5044 §8: invalid MPA Request or Reply frame.
    LLP_INVALID_FRAME = (2, 0, 0x04, "MPA: invalid Request or Reply frame");
    /// RFC 6581 (MPA errors): local catastrophic.
    LLP_CATASTROPHIC = (2, 0, 0x05, "MPA: local catastrophic");
    /// RFC 6581 (MPA errors): insufficient IRD resources.
    LLP_INSUFFICIENT_IRD = (2, 0, 0x06, "MPA: insufficient IRD resources");
    /// RFC 6581 (MPA errors): no matching RTR.
    LLP_NO_MATCHING_RTR = (2, 0, 0x07, "MPA: no matching RTR");
}

impl fmt::Display for TermError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layer {} type {} code {:#04x}",
            self.layer.0, self.etype, self.code
        )?;
        if let Some(d) = self.description() {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// Length of the Terminate Control field.
pub const CONTROL_LEN: usize = 4;
/// Length of the DDP Segment Length field.
pub const SEGMENT_LENGTH_LEN: usize = 2;

const M_BIT: u32 = 0x8000;
const D_BIT: u32 = 0x4000;
const R_BIT: u32 = 0x2000;
/// Where Linux siw puts M, D and R: it fills the Terminate Control through
/// little-endian C bitfields, so the flags land in bits 0..2 of the third
/// octet and Layer/EType swap nibbles (seen on the wire from a 6.1 kernel,
/// `testdata/iwarp-initiator-to-knfsd-terminate.pcap`).
const SIW_FLAGS: u32 = 0x0700;
const SIW_M: u32 = 0x0100;
const SIW_D: u32 = 0x0200;
const SIW_R: u32 = 0x0400;

/// Bit layout of the Terminate Control field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// RFC 5040 §4.8: Layer in the high nibble of octet 0, M/D/R in the top
    /// bits of octet 2. What this crate sends (and Wireshark decodes).
    #[default]
    Rfc,
    /// Linux siw's little-endian bitfield layout: Layer in the low nibble of
    /// octet 0, EType in the high one, M/D/R in bits 0..2 of octet 2.
    /// Recognized on input only when a flag is set (otherwise the two
    /// layouts cannot be told apart).
    LinuxSiw,
}

/// Errors of a Terminate body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TerminateError {
    /// Shorter than its Terminate Control says.
    #[error("Terminate body truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// R set without D (a Read Request header without its DDP header).
    #[error("Terminate with R but not D")]
    RWithoutD,
    /// Emit buffer of the wrong size.
    #[error("emit buffer is {have} bytes, Terminate needs {need}")]
    BufferSize {
        /// Bytes needed.
        need: usize,
        /// Bytes offered.
        have: usize,
    },
    /// A copied DDP header whose length does not match its T bit, or a Read
    /// Request header that is not 28 bytes.
    #[error("copied header of {0} bytes has the wrong length")]
    CopiedHeader(usize),
}

/// A parsed Terminate body, RFC 5040 §4.8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Bit layout of the Terminate Control field.
    pub layout: Layout,
    /// Layer, error type and code.
    pub error: TermError,
    /// M: the DDP Segment Length field is valid.
    pub segment_length_valid: bool,
    /// DDP Segment Length of the terminated segment (present when D is set).
    pub segment_length: Option<u16>,
    /// The terminated DDP header (14 or 18 bytes) when D is set.
    pub ddp_header: Option<&'a [u8]>,
    /// The terminated RDMA Read Request header (28 bytes) when R is set.
    pub rdma_header: Option<&'a [u8]>,
}

impl<'a> Repr<'a> {
    /// A Terminate with no copied headers.
    pub const fn bare(error: TermError) -> Self {
        Repr {
            layout: Layout::Rfc,
            error,
            segment_length_valid: false,
            segment_length: None,
            ddp_header: None,
            rdma_header: None,
        }
    }

    /// Parses a Terminate body (the untagged payload of a Terminate message).
    /// Bytes after the copied headers are ignored.
    pub fn parse(body: &'a [u8]) -> Result<Self, TerminateError> {
        let Some((ctrl, rest)) = body.split_first_chunk::<4>() else {
            return Err(TerminateError::Truncated {
                need: CONTROL_LEN,
                have: body.len(),
            });
        };
        let c = u32::from_be_bytes(*ctrl);
        let siw = c & (M_BIT | D_BIT | R_BIT) == 0 && c & SIW_FLAGS != 0 && c & 0x18ff == 0;
        let (layout, hi, lo, m, d, r) = if siw {
            let (m, d, r) = (c & SIW_M != 0, c & SIW_D != 0, c & SIW_R != 0);
            (Layout::LinuxSiw, (c >> 24) & 0x0f, c >> 28, m, d, r)
        } else {
            let (m, d, r) = (c & M_BIT != 0, c & D_BIT != 0, c & R_BIT != 0);
            (Layout::Rfc, c >> 28, (c >> 24) & 0x0f, m, d, r)
        };
        let error = TermError {
            layer: Layer(hi as u8),
            etype: lo as u8,
            code: ((c >> 16) & 0xff) as u8,
        };
        if r && !d {
            return Err(TerminateError::RWithoutD);
        }
        let mut segment_length = None;
        let mut ddp_header = None;
        let mut rdma_header = None;
        let mut rest = rest;
        if d {
            let Some((len, after)) = rest.split_first_chunk::<2>() else {
                return Err(TerminateError::Truncated {
                    need: CONTROL_LEN + SEGMENT_LENGTH_LEN,
                    have: body.len(),
                });
            };
            segment_length = Some(u16::from_be_bytes(*len));
            let hlen = match after.first() {
                Some(b) if b & 0x80 != 0 => TAGGED_HEADER_LEN,
                _ => UNTAGGED_HEADER_LEN,
            };
            if after.len() < hlen {
                return Err(TerminateError::Truncated {
                    need: CONTROL_LEN + SEGMENT_LENGTH_LEN + hlen,
                    have: body.len(),
                });
            }
            let (h, after) = after.split_at(hlen);
            ddp_header = Some(h);
            rest = after;
        }
        if r {
            if rest.len() < READ_REQUEST_LEN {
                return Err(TerminateError::Truncated {
                    need: body.len() - rest.len() + READ_REQUEST_LEN,
                    have: body.len(),
                });
            }
            rdma_header = Some(&rest[..READ_REQUEST_LEN]);
        }
        Ok(Repr {
            layout,
            error,
            segment_length_valid: m,
            segment_length,
            ddp_header,
            rdma_header,
        })
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        let mut n = CONTROL_LEN;
        if let Some(h) = self.ddp_header {
            n += SEGMENT_LENGTH_LEN + h.len();
        }
        if let Some(h) = self.rdma_header {
            n += h.len();
        }
        n
    }

    /// Writes the body into a buffer of exactly `buffer_len()` bytes.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), TerminateError> {
        let need = self.buffer_len();
        if out.len() != need {
            return Err(TerminateError::BufferSize {
                need,
                have: out.len(),
            });
        }
        if self.rdma_header.is_some() && self.ddp_header.is_none() {
            return Err(TerminateError::RWithoutD);
        }
        let (layer, etype) = (
            u32::from(self.error.layer.0 & 0x0f),
            u32::from(self.error.etype & 0x0f),
        );
        let (m_bit, d_bit, r_bit) = match self.layout {
            Layout::Rfc => (M_BIT, D_BIT, R_BIT),
            Layout::LinuxSiw => (SIW_M, SIW_D, SIW_R),
        };
        let mut c = match self.layout {
            Layout::Rfc => (layer << 28) | (etype << 24),
            Layout::LinuxSiw => (etype << 28) | (layer << 24),
        } | (u32::from(self.error.code) << 16);
        if self.segment_length_valid {
            c |= m_bit;
        }
        let mut pos = CONTROL_LEN;
        if let Some(h) = self.ddp_header {
            let want = match h.first() {
                Some(b) if b & 0x80 != 0 => TAGGED_HEADER_LEN,
                _ => UNTAGGED_HEADER_LEN,
            };
            if h.len() != want {
                return Err(TerminateError::CopiedHeader(h.len()));
            }
            c |= d_bit;
            let len = self.segment_length.unwrap_or(0);
            out[pos..pos + SEGMENT_LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
            pos += SEGMENT_LENGTH_LEN;
            out[pos..pos + h.len()].copy_from_slice(h);
            pos += h.len();
        }
        if let Some(h) = self.rdma_header {
            if h.len() != READ_REQUEST_LEN {
                return Err(TerminateError::CopiedHeader(h.len()));
            }
            c |= r_bit;
            out[pos..pos + h.len()].copy_from_slice(h);
        }
        out[..CONTROL_LEN].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, TerminateError> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Terminate {}", self.error)?;
        if self.ddp_header.is_some() {
            f.write_str(" +DDP hdr")?;
        }
        if self.rdma_header.is_some() {
            f.write_str(" +RDMA hdr")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    /// DDP untagged "no buffer" error, M and D set, copying a Send header.
    const NO_BUFFER: &str = "1202c000 0056 4143 00000000 00000000 00000003 00000000";

    #[test]
    fn deconstructs_and_parses_terminate() {
        let b = hex(NO_BUFFER);
        // Layer/type/code and the M/D bits as raw bytes.
        assert_eq!(b[0], 0x12);
        assert_eq!(b[1], 0x02);
        assert_eq!(b[2], 0xc0);
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.error, TermError::DDP_NO_BUFFER);
        assert!(r.segment_length_valid);
        assert_eq!(r.segment_length, Some(0x56));
        assert_eq!(r.ddp_header, Some(&b[6..24]));
        assert_eq!(r.rdma_header, None);
        assert_eq!(
            r.to_string(),
            "Terminate layer 1 type 2 code 0x02 (DDP untagged: invalid MSN, no buffer available) +DDP hdr"
        );
    }

    #[test]
    fn constructs_and_emits_terminate() {
        let b = hex(NO_BUFFER);
        let hdr = &b[6..24];
        let r = Repr {
            layout: Layout::Rfc,
            error: TermError::DDP_NO_BUFFER,
            segment_length_valid: true,
            segment_length: Some(0x56),
            ddp_header: Some(hdr),
            rdma_header: None,
        };
        let mut out = vec![0xa5u8; r.buffer_len()];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn round_trips_read_request_terminate() {
        // RDMAP remote protection / base-bounds with D and R set, copying
        // the offending Read Request's DDP header and body.
        let b2 = hex("01016000 002e 4141 00000000 00000001 00000001 00000000
            11223344 0000000000001000 00019000 55667788 0000000000002000");
        let r = Repr::parse(&b2).unwrap();
        assert_eq!(r.error, TermError::RDMAP_BASE_BOUNDS);
        assert_eq!(r.rdma_header.map(<[u8]>::len), Some(28));
        assert_eq!(r.to_vec().unwrap(), b2);
    }

    #[test]
    fn parses_the_linux_siw_bitfield_layout() {
        // siw's Terminate for our RDMA Write to STag 0xdeadbeef (kpeer VM,
        // 6.1 kernel): M and D sit in bits 0..1 of octet 2.
        let b = hex("11000300 0010 c140deadbeef0000000000000000");
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.layout, Layout::LinuxSiw);
        assert_eq!(r.error, TermError::DDP_INVALID_STAG);
        assert!(r.segment_length_valid);
        assert_eq!(r.segment_length, Some(16));
        assert_eq!(r.ddp_header, Some(&b[6..20]));
        assert_eq!(r.to_vec().unwrap(), b);
        // Layer and EType swap nibbles in that layout: RDMAP (0) protection
        // error (1) with D set.
        let b = hex("10020200 0012 4140 00000000 00000000 00000001 00000000");
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.error, TermError::RDMAP_ACCESS_RIGHTS);
        assert_eq!(r.to_vec().unwrap(), b);
    }

    #[test]
    fn emits_bare_terminate() {
        let r = Repr::bare(TermError::LLP_CRC);
        assert_eq!(r.to_vec().unwrap(), hex("20020000"));
        assert_eq!(Repr::parse(&hex("20020000")).unwrap(), r);
    }

    #[test]
    fn rejects_truncated_terminate() {
        let b = hex(NO_BUFFER);
        assert!(matches!(
            Repr::parse(&b[..3]),
            Err(TerminateError::Truncated { .. })
        ));
        assert!(matches!(
            Repr::parse(&b[..23]),
            Err(TerminateError::Truncated { .. })
        ));
        assert_eq!(
            Repr::parse(&hex("01012000")),
            Err(TerminateError::RWithoutD)
        );
    }

    #[test]
    fn describes_every_table_entry() {
        assert_eq!(
            TermError::LLP_INSUFFICIENT_IRD.description(),
            Some("MPA: insufficient IRD resources")
        );
        let odd = TermError {
            layer: Layer(5),
            etype: 1,
            code: 1,
        };
        assert_eq!(odd.description(), None);
        assert!(TermError {
            layer: Layer::RDMAP,
            etype: 0,
            code: 0x42
        }
        .description()
        .is_some());
    }
}
