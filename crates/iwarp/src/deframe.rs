//! A sans-IO FPDU deframer (RFC 5044 §4, markers off) that lets the IO
//! shell place payload straight from the socket into memory.
//!
//! The stream is cut into three phases per FPDU:
//! 1. header: ULPDU_Length and the DDP/RDMAP header, buffered here (at most
//!    20 bytes) and reported as [`RxEvent::Segment`];
//! 2. payload: `payload_len` bytes the shell either hands over
//!    ([`Deframer::advance`] reports them as [`RxEvent::Payload`]) or reads
//!    itself into the target buffer and reports with [`Deframer::placed`],
//!    which folds them into the CRC;
//! 3. trailer: pad and CRC, checked when CRC was negotiated, reported as
//!    [`RxEvent::End`].
//!
//! The ULPDU length is bounded by the receiver's MULPDU, so a peer cannot
//! announce more than that.

use crate::wire::ddp::{self, DdpError, Repr as DdpRepr};
use crate::wire::fpdu::{self, Crc};

/// Errors of the deframer; the stream cannot continue after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeframeError {
    /// ULPDU_Length over the receiver's maximum.
    #[error("ULPDU length {len} exceeds the maximum {max}")]
    TooLong {
        /// Announced ULPDU length.
        len: usize,
        /// Maximum accepted.
        max: usize,
    },
    /// ULPDU shorter than the DDP header its T bit implies.
    #[error("ULPDU of {0} bytes is shorter than its DDP header")]
    ShortUlpdu(usize),
    /// The DDP/RDMAP header is invalid.
    #[error("bad DDP/RDMAP header: {0}")]
    Ddp(#[from] DdpError),
    /// The CRC field does not match (RFC 5044 §4.4).
    #[error("MPA CRC mismatch: computed {computed:#010x}, received {received:#010x}")]
    BadCrc {
        /// CRC32c computed.
        computed: u32,
        /// CRC field as received.
        received: u32,
    },
    /// `placed` was called with more bytes than the segment has left, or
    /// outside the payload phase.
    #[error("placed {got} payload bytes, {left} expected")]
    PlacedTooMuch {
        /// Bytes reported.
        got: usize,
        /// Bytes the segment had left.
        left: usize,
    },
}

/// What the deframer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxEvent {
    /// A segment header; `payload_len` payload bytes follow in the stream.
    Segment {
        /// The DDP/RDMAP header.
        header: DdpRepr,
        /// Payload bytes of this segment.
        payload_len: usize,
    },
    /// The first `len` bytes of the input passed to `advance` are payload
    /// (and were consumed).
    Payload {
        /// Payload bytes at the start of the input.
        len: usize,
    },
    /// The segment ended; the CRC (if negotiated) matched.
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Header,
    Payload,
    Trailer,
}

/// Largest header the deframer buffers: length field + untagged DDP header.
pub const MAX_HEADER: usize = fpdu::LEN_FIELD + ddp::UNTAGGED_HEADER_LEN;

/// The framing of one FPDU, read from its first [`SHAPE_PREFIX`] bytes
/// (ULPDU_Length and the DDP control octet, whose T bit sizes the DDP
/// header: RFC 5044 §4.2, RFC 5041 §4.2-4.3): what an IO shell needs to
/// size its reads before the deframer sees the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduShape {
    /// The ULPDU_Length field.
    pub ulpdu_len: usize,
    /// Length field plus DDP/RDMAP header: 16 tagged, 20 untagged.
    pub header_len: usize,
    /// Pad and CRC after the ULPDU.
    pub trailer_len: usize,
    /// The whole FPDU on the wire (markers off).
    pub fpdu_len: usize,
    /// The DDP T bit (tagged buffer model).
    pub tagged: bool,
}

/// Bytes [`shape`] needs: the length field and the DDP control octet.
pub const SHAPE_PREFIX: usize = fpdu::LEN_FIELD + 1;

/// The framing of the FPDU starting at `prefix`; `None` until `prefix`
/// holds [`SHAPE_PREFIX`] bytes or when the ULPDU is shorter than its own
/// DDP header (the deframer refuses that FPDU with
/// [`DeframeError::ShortUlpdu`]).
pub fn shape(prefix: &[u8]) -> Option<FpduShape> {
    let (&[l0, l1, ctrl], _) = prefix.split_first_chunk::<SHAPE_PREFIX>()?;
    let ulpdu_len = usize::from(u16::from_be_bytes([l0, l1]));
    let tagged = ctrl & 0x80 != 0;
    let ddp_len = if tagged {
        ddp::TAGGED_HEADER_LEN
    } else {
        ddp::UNTAGGED_HEADER_LEN
    };
    (ulpdu_len >= ddp_len).then(|| FpduShape {
        ulpdu_len,
        header_len: fpdu::LEN_FIELD + ddp_len,
        trailer_len: fpdu::pad_len(ulpdu_len) + fpdu::CRC_LEN,
        fpdu_len: fpdu::fpdu_len(ulpdu_len),
        tagged,
    })
}

/// The FPDU deframer state.
#[derive(Debug, Clone)]
pub struct Deframer {
    crc_on: bool,
    max_ulpdu: usize,
    phase: Phase,
    head: [u8; MAX_HEADER],
    head_len: usize,
    last_len: usize,
    ulpdu_len: usize,
    payload_left: usize,
    trailer: [u8; 7],
    trailer_len: usize,
    trailer_need: usize,
    crc: Crc,
}

impl Deframer {
    /// A deframer checking CRC when `crc` is set and refusing ULPDUs over
    /// `max_ulpdu` bytes (at most 65535, the length field's range).
    pub fn new(crc: bool, max_ulpdu: usize) -> Self {
        Deframer {
            crc_on: crc,
            max_ulpdu: max_ulpdu.min(usize::from(u16::MAX)),
            phase: Phase::Header,
            head: [0; MAX_HEADER],
            head_len: 0,
            last_len: 0,
            ulpdu_len: 0,
            payload_left: 0,
            trailer: [0; 7],
            trailer_len: 0,
            trailer_need: 0,
            crc: Crc::new(),
        }
    }

    /// Payload bytes still expected in the current segment (0 outside the
    /// payload phase).
    pub fn payload_remaining(&self) -> usize {
        if self.phase == Phase::Payload {
            self.payload_left
        } else {
            0
        }
    }

    /// Stream bytes the deframer can take before its next event: the rest of
    /// the header (3 bytes, then the rest of the DDP header), the payload,
    /// or the rest of the trailer. A shell that reads exactly this many bytes
    /// never reads payload into a staging buffer.
    pub fn bytes_wanted(&self) -> usize {
        match self.phase {
            Phase::Header if self.head_len < fpdu::LEN_FIELD + 1 => {
                fpdu::LEN_FIELD + 1 - self.head_len
            }
            Phase::Header => {
                let hlen = if self.head[fpdu::LEN_FIELD] & 0x80 != 0 {
                    ddp::TAGGED_HEADER_LEN
                } else {
                    ddp::UNTAGGED_HEADER_LEN
                };
                (fpdu::LEN_FIELD + hlen).saturating_sub(self.head_len)
            }
            Phase::Payload => self.payload_left,
            Phase::Trailer => self.trailer_need - self.trailer_len,
        }
    }

    /// Whether the deframer sits between FPDUs (no partial FPDU buffered).
    pub fn at_boundary(&self) -> bool {
        self.phase == Phase::Header && self.head_len == 0
    }

    /// The raw ULPDU_Length field and DDP header of the current (or last)
    /// segment, as a Terminate copies them (RFC 5040 §4.8).
    pub fn raw_header(&self) -> &[u8] {
        if self.head_len > 0 {
            &self.head[..self.head_len]
        } else {
            &self.head[..self.last_len]
        }
    }

    /// Consumes bytes from `input` up to the next event. Returns the bytes
    /// consumed and the event, if one completed. In the payload phase the
    /// consumed bytes are payload and the event is [`RxEvent::Payload`].
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, Option<RxEvent>), DeframeError> {
        match self.phase {
            Phase::Header => self.advance_header(input),
            Phase::Payload => {
                let n = self.payload_left.min(input.len());
                if n == 0 {
                    return Ok((0, None));
                }
                if self.crc_on {
                    self.crc.update(&input[..n]);
                }
                self.payload_left -= n;
                if self.payload_left == 0 {
                    self.enter_trailer();
                }
                Ok((n, Some(RxEvent::Payload { len: n })))
            }
            Phase::Trailer => self.advance_trailer(input),
        }
    }

    /// Reports payload the shell read itself (for example straight into a
    /// registered region): folds it into the CRC and advances.
    pub fn placed(&mut self, data: &[u8]) -> Result<(), DeframeError> {
        let left = self.payload_remaining();
        if data.len() > left {
            return Err(DeframeError::PlacedTooMuch {
                got: data.len(),
                left,
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        // RFC 5044 §4.4: without CRC the field is not checked, so the
        // payload is not summed either.
        if self.crc_on {
            self.crc.update(data);
        }
        self.payload_left -= data.len();
        if self.payload_left == 0 {
            self.enter_trailer();
        }
        Ok(())
    }

    /// Reports `n` payload bytes the shell placed without showing them
    /// (without CRC only: with it the payload must be summed).
    pub fn placed_unseen(&mut self, n: usize) -> Result<(), DeframeError> {
        let left = self.payload_remaining();
        if n > left || (self.crc_on && n > 0) {
            return Err(DeframeError::PlacedTooMuch { got: n, left });
        }
        self.payload_left -= n;
        if n > 0 && self.payload_left == 0 {
            self.enter_trailer();
        }
        Ok(())
    }

    fn advance_header(&mut self, input: &[u8]) -> Result<(usize, Option<RxEvent>), DeframeError> {
        let mut used = 0;
        // Length field plus the first DDP octet (the T bit sizes the header).
        while self.head_len < fpdu::LEN_FIELD + 1 {
            let Some(&b) = input.get(used) else {
                return Ok((used, None));
            };
            self.head[self.head_len] = b;
            self.head_len += 1;
            used += 1;
            if self.head_len == fpdu::LEN_FIELD {
                let len = usize::from(u16::from_be_bytes([self.head[0], self.head[1]]));
                if len > self.max_ulpdu {
                    return Err(DeframeError::TooLong {
                        len,
                        max: self.max_ulpdu,
                    });
                }
                self.ulpdu_len = len;
            }
        }
        let hlen = if self.head[fpdu::LEN_FIELD] & 0x80 != 0 {
            ddp::TAGGED_HEADER_LEN
        } else {
            ddp::UNTAGGED_HEADER_LEN
        };
        if self.ulpdu_len < hlen {
            return Err(DeframeError::ShortUlpdu(self.ulpdu_len));
        }
        let want = fpdu::LEN_FIELD + hlen;
        let n = (want - self.head_len).min(input.len() - used);
        self.head[self.head_len..self.head_len + n].copy_from_slice(&input[used..used + n]);
        self.head_len += n;
        used += n;
        if self.head_len < want {
            return Ok((used, None));
        }
        let (header, _) = DdpRepr::parse_bytes(&self.head[fpdu::LEN_FIELD..want])?;
        self.crc = Crc::new();
        if self.crc_on {
            self.crc.update(&self.head[..want]);
        }
        let payload_len = self.ulpdu_len - hlen;
        self.payload_left = payload_len;
        if payload_len == 0 {
            self.enter_trailer();
        } else {
            self.phase = Phase::Payload;
        }
        Ok((
            used,
            Some(RxEvent::Segment {
                header,
                payload_len,
            }),
        ))
    }

    fn enter_trailer(&mut self) {
        self.phase = Phase::Trailer;
        self.trailer_len = 0;
        self.trailer_need = fpdu::pad_len(self.ulpdu_len) + fpdu::CRC_LEN;
    }

    fn advance_trailer(&mut self, input: &[u8]) -> Result<(usize, Option<RxEvent>), DeframeError> {
        let n = (self.trailer_need - self.trailer_len).min(input.len());
        self.trailer[self.trailer_len..self.trailer_len + n].copy_from_slice(&input[..n]);
        self.trailer_len += n;
        if self.trailer_len < self.trailer_need {
            return Ok((n, None));
        }
        let pad = self.trailer_need - fpdu::CRC_LEN;
        if self.crc_on {
            self.crc.update(&self.trailer[..pad]);
            let field = [
                self.trailer[pad],
                self.trailer[pad + 1],
                self.trailer[pad + 2],
                self.trailer[pad + 3],
            ];
            if !self.crc.matches(field) {
                return Err(DeframeError::BadCrc {
                    computed: self.crc.value(),
                    received: u32::from_le_bytes(field),
                });
            }
        }
        self.phase = Phase::Header;
        self.last_len = self.head_len;
        self.head_len = 0;
        Ok((n, Some(RxEvent::End)))
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;
    use crate::wire::rdmap::Opcode;

    /// knfsd's NULL reply with CRC (kpeer 5b-b2).
    const REPLY: &str = "0046 4143 00000000 00000000 00000001 00000000 6b700001 00000001 00000040
        00000000 00000000 00000000 00000000 6b700001 00000001 00000000 00000000
        00000000 00000000 c5e723a2";

    fn run(
        d: &mut Deframer,
        mut input: &[u8],
        chunk: usize,
    ) -> Result<(Vec<RxEvent>, Vec<u8>), DeframeError> {
        let mut ev = vec![];
        let mut payload = vec![];
        while !input.is_empty() {
            let take = chunk.min(input.len());
            let mut part = &input[..take];
            while !part.is_empty() {
                let (n, e) = d.advance(part)?;
                if let Some(RxEvent::Payload { len }) = e {
                    payload.extend_from_slice(&part[..len]);
                }
                if let Some(e) = e {
                    ev.push(e);
                }
                part = &part[n..];
            }
            input = &input[take..];
        }
        Ok((ev, payload))
    }

    #[test]
    fn shape_sizes_tagged_and_untagged_fpdus_from_three_bytes() {
        // A tagged FPDU of 14 + 4096 bytes: no pad.
        let t = shape(&[0x10, 0x0e, 0x81]).unwrap();
        assert_eq!(
            t,
            FpduShape {
                ulpdu_len: 4110,
                header_len: 16,
                trailer_len: 4,
                fpdu_len: 2 + 4110 + 4,
                tagged: true,
            }
        );
        // An untagged FPDU of 18 + 1 bytes: 3 pad bytes, (2 + 19 + 3) % 4 == 0.
        let u = shape(&[0x00, 19, 0x41, 0xff]).unwrap();
        assert_eq!(
            (u.header_len, u.trailer_len, u.fpdu_len, u.tagged),
            (20, 3 + 4, 2 + 19 + 3 + 4, false)
        );
        assert_eq!(u.fpdu_len % 4, 0);
        // Too few bytes, or a ULPDU shorter than its header.
        assert_eq!(shape(&[0x00, 0x20]), None);
        assert_eq!(shape(&[0x00, 13, 0x80]), None);
        assert_eq!(shape(&[0x00, 17, 0x00]), None);
        // The deframer agrees on the header length.
        let mut d = Deframer::new(false, 65535);
        let _ = d.advance(&[0x10, 0x0e, 0x81]).unwrap();
        assert_eq!(d.bytes_wanted(), t.header_len - SHAPE_PREFIX);
    }

    #[test]
    fn deframes_a_crc_fpdu_in_any_chunking() {
        let b = hex(REPLY);
        for chunk in [1, 2, 3, 7, 19, 20, 76] {
            let mut d = Deframer::new(true, 4096);
            let (ev, payload) = run(&mut d, &b, chunk).unwrap();
            let RxEvent::Segment {
                header,
                payload_len,
            } = ev[0]
            else {
                panic!("no segment first");
            };
            assert_eq!(header.opcode, Opcode::Send);
            assert_eq!(payload_len, 52);
            assert_eq!(payload, &b[20..72]);
            assert_eq!(ev.last(), Some(&RxEvent::End));
            assert!(d.at_boundary());
        }
    }

    #[test]
    fn lets_the_shell_place_payload_itself() {
        let b = hex(REPLY);
        let mut d = Deframer::new(true, 4096);
        let (n, e) = d.advance(&b).unwrap();
        assert_eq!(n, 20);
        assert!(matches!(
            e,
            Some(RxEvent::Segment {
                payload_len: 52,
                ..
            })
        ));
        assert_eq!(d.payload_remaining(), 52);
        d.placed(&b[20..50]).unwrap();
        d.placed(&b[50..72]).unwrap();
        assert_eq!(
            d.placed(&[1]),
            Err(DeframeError::PlacedTooMuch { got: 1, left: 0 })
        );
        let (n, e) = d.advance(&b[72..]).unwrap();
        assert_eq!((n, e), (4, Some(RxEvent::End)));
    }

    #[test]
    fn tells_the_shell_how_much_to_read() {
        let b = hex(REPLY);
        let mut d = Deframer::new(true, 4096);
        let mut pos = 0;
        let mut wants = vec![];
        while pos < b.len() {
            let w = d.bytes_wanted();
            wants.push(w);
            let (n, _) = d.advance(&b[pos..pos + w]).unwrap();
            assert_eq!(n, w);
            pos += n;
        }
        // length + first DDP octet, rest of the untagged header, payload, CRC
        assert_eq!(wants, vec![3, 17, 52, 4]);
        assert!(d.at_boundary());
    }

    #[test]
    fn rejects_a_bad_crc() {
        let mut b = hex(REPLY);
        b[40] ^= 0x10;
        let mut d = Deframer::new(true, 4096);
        assert!(matches!(
            run(&mut d, &b, 5),
            Err(DeframeError::BadCrc { .. })
        ));
        // Without CRC negotiated the field is not checked.
        let mut d = Deframer::new(false, 4096);
        assert!(run(&mut d, &b, 5).is_ok());
    }

    #[test]
    fn rejects_ulpdu_over_the_maximum() {
        let b = hex(REPLY);
        let mut d = Deframer::new(true, 69);
        assert_eq!(
            d.advance(&b),
            Err(DeframeError::TooLong { len: 70, max: 69 })
        );
    }

    #[test]
    fn rejects_ulpdu_shorter_than_its_header() {
        let mut d = Deframer::new(false, 4096);
        assert_eq!(
            d.advance(&hex("0010 41")),
            Err(DeframeError::ShortUlpdu(16))
        );
        let mut d = Deframer::new(false, 4096);
        assert_eq!(
            d.advance(&hex("000d c1")),
            Err(DeframeError::ShortUlpdu(13))
        );
    }

    #[test]
    fn reports_header_errors_with_the_raw_header() {
        let mut b = hex(REPLY);
        b[3] = 0x4f;
        let mut d = Deframer::new(false, 4096);
        assert_eq!(d.advance(&b), Err(DeframeError::Ddp(DdpError::Opcode(15))));
        assert_eq!(d.raw_header().len(), 20);
    }
}
