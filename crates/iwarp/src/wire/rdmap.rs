//! RDMAP (RFC 5040) opcodes and the RDMA Read Request header.

use core::fmt;

/// RDMAP version carried in the RDMAP control field, RFC 5040 §4.1.
pub const RDMAP_VERSION: u8 = 1;

/// RDMAP message opcode, RFC 5040 §4.1 (4 bits; 8..15 are reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// RDMA Write (tagged).
    Write = 0,
    /// RDMA Read Request (untagged, queue 1).
    ReadRequest = 1,
    /// RDMA Read Response (tagged).
    ReadResponse = 2,
    /// Send (untagged, queue 0).
    Send = 3,
    /// Send with Invalidate.
    SendInvalidate = 4,
    /// Send with Solicited Event.
    SendSolicited = 5,
    /// Send with Solicited Event and Invalidate.
    SendSolicitedInvalidate = 6,
    /// Terminate (untagged, queue 2).
    Terminate = 7,
}

impl Opcode {
    /// Decodes the 4-bit opcode; reserved values give `None`.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0 => Opcode::Write,
            1 => Opcode::ReadRequest,
            2 => Opcode::ReadResponse,
            3 => Opcode::Send,
            4 => Opcode::SendInvalidate,
            5 => Opcode::SendSolicited,
            6 => Opcode::SendSolicitedInvalidate,
            7 => Opcode::Terminate,
            _ => return None,
        })
    }

    /// Whether the message uses the tagged buffer model (RFC 5040 §4.3,
    /// Table of DDP header usage): Write and Read Response.
    pub const fn is_tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The untagged queue number, RFC 5040 §5: Sends on queue 0, Read
    /// Requests on queue 1, Terminate on queue 2; `None` for tagged messages.
    pub const fn queue(self) -> Option<u32> {
        match self {
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSolicited
            | Opcode::SendSolicitedInvalidate => Some(QN_SEND),
            Opcode::ReadRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            Opcode::Write | Opcode::ReadResponse => None,
        }
    }

    /// Whether the message carries an STag to invalidate (RFC 5040 §4.1).
    pub const fn invalidates(self) -> bool {
        matches!(
            self,
            Opcode::SendInvalidate | Opcode::SendSolicitedInvalidate
        )
    }

    /// Whether the message is one of the four Send variants.
    pub const fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::Send
                | Opcode::SendInvalidate
                | Opcode::SendSolicited
                | Opcode::SendSolicitedInvalidate
        )
    }

    /// Whether the Send asks for a solicited event.
    pub const fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSolicited | Opcode::SendSolicitedInvalidate
        )
    }

    /// Name as Wireshark prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Write => "RDMA Write",
            Opcode::ReadRequest => "RDMA Read Request",
            Opcode::ReadResponse => "RDMA Read Response",
            Opcode::Send => "Send",
            Opcode::SendInvalidate => "Send with Invalidate",
            Opcode::SendSolicited => "Send with Solicited Event",
            Opcode::SendSolicitedInvalidate => "Send with Solicited Event and Invalidate",
            Opcode::Terminate => "Terminate",
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Untagged queue of Sends, RFC 5040 §5.
pub const QN_SEND: u32 = 0;
/// Untagged queue of RDMA Read Requests, RFC 5040 §5.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue of Terminate messages, RFC 5040 §5.
pub const QN_TERMINATE: u32 = 2;

/// Length of the RDMA Read Request header, RFC 5040 §4.4.
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub(crate) const SINK_STAG: Range<usize> = 0..4;
    pub(crate) const SINK_TO: Range<usize> = 4..12;
    pub(crate) const SIZE: Range<usize> = 12..16;
    pub(crate) const SRC_STAG: Range<usize> = 16..20;
    pub(crate) const SRC_TO: Range<usize> = 20..28;
}

/// Error of an RDMA Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadRequestError {
    /// The untagged payload is not exactly 28 bytes.
    #[error("RDMA Read Request header is {0} bytes, expected 28")]
    BadLength(usize),
}

/// A view of the RDMA Read Request header (the untagged payload of a Read
/// Request message), RFC 5040 §4.4.
#[derive(Debug, Clone)]
pub struct ReadRequestPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> ReadRequestPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        ReadRequestPacket { buffer }
    }

    /// Wraps a buffer that must be exactly 28 bytes.
    pub fn new_checked(buffer: T) -> Result<Self, ReadRequestError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the length (exactly 28 bytes: the message has no other payload).
    pub fn check_len(&self) -> Result<(), ReadRequestError> {
        let n = self.buffer.as_ref().len();
        if n != READ_REQUEST_LEN {
            return Err(ReadRequestError::BadLength(n));
        }
        Ok(())
    }

    /// Data Sink STag.
    pub fn sink_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SINK_STAG])
    }
    /// Data Sink Tagged Offset.
    pub fn sink_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SINK_TO])
    }
    /// RDMA Read Message Size.
    pub fn size(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SIZE])
    }
    /// Data Source STag.
    pub fn source_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SRC_STAG])
    }
    /// Data Source Tagged Offset.
    pub fn source_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SRC_TO])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReadRequestPacket<T> {
    /// Sets the Data Sink STag.
    pub fn set_sink_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::SINK_STAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Data Sink Tagged Offset.
    pub fn set_sink_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::SINK_TO].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the RDMA Read Message Size.
    pub fn set_size(&mut self, v: u32) {
        self.buffer.as_mut()[field::SIZE].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Data Source STag.
    pub fn set_source_stag(&mut self, v: u32) {
        self.buffer.as_mut()[field::SRC_STAG].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the Data Source Tagged Offset.
    pub fn set_source_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::SRC_TO].copy_from_slice(&v.to_be_bytes());
    }
}

/// An RDMA Read Request, RFC 5040 §4.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRequest {
    /// Data Sink STag (the requester's buffer, target of the Read Response).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size in bytes.
    pub size: u32,
    /// Data Source STag (the responder's buffer).
    pub source_stag: u32,
    /// Data Source Tagged Offset.
    pub source_to: u64,
}

impl ReadRequest {
    /// Parses a checked 28-byte header.
    pub fn parse<T: AsRef<[u8]>>(p: &ReadRequestPacket<T>) -> Result<Self, ReadRequestError> {
        p.check_len()?;
        Ok(ReadRequest {
            sink_stag: p.sink_stag(),
            sink_to: p.sink_to(),
            size: p.size(),
            source_stag: p.source_stag(),
            source_to: p.source_to(),
        })
    }

    /// Parses from a byte slice of exactly 28 bytes.
    pub fn parse_bytes(b: &[u8]) -> Result<Self, ReadRequestError> {
        Self::parse(&ReadRequestPacket::new_checked(b)?)
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }

    /// Writes the header into a buffer of exactly 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut ReadRequestPacket<T>,
    ) -> Result<(), ReadRequestError> {
        p.check_len()?;
        p.set_sink_stag(self.sink_stag);
        p.set_sink_to(self.sink_to);
        p.set_size(self.size);
        p.set_source_stag(self.source_stag);
        p.set_source_to(self.source_to);
        Ok(())
    }

    /// The 28 bytes.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        let mut p = ReadRequestPacket::new_unchecked(&mut b[..]);
        p.set_sink_stag(self.sink_stag);
        p.set_sink_to(self.sink_to);
        p.set_size(self.size);
        p.set_source_stag(self.source_stag);
        p.set_source_to(self.source_to);
        b
    }
}

impl fmt::Display for ReadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RDMA Read Request sink {:#010x}@{:#x} size {} source {:#010x}@{:#x}",
            self.sink_stag, self.sink_to, self.size, self.source_stag, self.source_to
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    /// Read Request body: sink 0x11223344@0x1000, 102400 bytes, source
    /// 0x55667788@0x2000.
    const RREQ: &str = "11223344 0000000000001000 00019000 55667788 0000000000002000";

    fn repr() -> ReadRequest {
        ReadRequest {
            sink_stag: 0x11223344,
            sink_to: 0x1000,
            size: 102400,
            source_stag: 0x55667788,
            source_to: 0x2000,
        }
    }

    #[test]
    fn deconstructs_read_request() {
        let b = hex(RREQ);
        let p = ReadRequestPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.sink_stag(), 0x11223344);
        assert_eq!(p.sink_to(), 0x1000);
        assert_eq!(p.size(), 102400);
        assert_eq!(p.source_stag(), 0x55667788);
        assert_eq!(p.source_to(), 0x2000);
    }

    #[test]
    fn constructs_read_request() {
        let mut b = vec![0xa5u8; READ_REQUEST_LEN];
        let mut p = ReadRequestPacket::new_unchecked(&mut b[..]);
        p.set_sink_stag(0x11223344);
        p.set_sink_to(0x1000);
        p.set_size(102400);
        p.set_source_stag(0x55667788);
        p.set_source_to(0x2000);
        assert_eq!(b, hex(RREQ));
    }

    #[test]
    fn parses_and_emits_read_request() {
        assert_eq!(ReadRequest::parse_bytes(&hex(RREQ)), Ok(repr()));
        let mut b = vec![0xa5u8; READ_REQUEST_LEN];
        repr()
            .emit(&mut ReadRequestPacket::new_unchecked(&mut b[..]))
            .unwrap();
        assert_eq!(b, hex(RREQ));
        assert_eq!(repr().to_bytes().to_vec(), hex(RREQ));
    }

    #[test]
    fn rejects_read_request_of_wrong_length() {
        let b = hex(RREQ);
        assert_eq!(
            ReadRequest::parse_bytes(&b[..27]),
            Err(ReadRequestError::BadLength(27))
        );
    }

    #[test]
    fn maps_opcodes_to_queues() {
        assert_eq!(Opcode::Send.queue(), Some(QN_SEND));
        assert_eq!(Opcode::SendSolicitedInvalidate.queue(), Some(QN_SEND));
        assert_eq!(Opcode::ReadRequest.queue(), Some(QN_READ_REQUEST));
        assert_eq!(Opcode::Terminate.queue(), Some(QN_TERMINATE));
        assert_eq!(Opcode::Write.queue(), None);
        assert!(Opcode::ReadResponse.is_tagged());
        assert_eq!(Opcode::from_bits(9), None);
        for b in 0..8 {
            assert_eq!(Opcode::from_bits(b).map(|o| o as u8), Some(b));
        }
    }
}
