//! RPC-over-RDMA transport headers (RFC 8166 §4, RFC 8166 §5 XDR, the
//! version 2 draft §3–§6) and the RFC 8797 connection private data.
//!
//! The shared pieces live here: the four fixed words every version starts
//! with ([`Prefix`], [`PrefixPacket`]), RDMA segments and chunk lists
//! ([`RdmaSegment`], [`ReadSegment`], [`WriteChunk`], [`ChunkLists`]) whose
//! XDR is the same in versions 1 and 2, the decode [`Limits`] and the typed
//! [`HeaderError`].

pub mod cm;
pub mod v1;
pub mod v2;

use core::fmt;

use xdr::{Decoder, Encode, Encoder};

/// Length in bytes of the fixed header prefix: xid, vers, credit, proc.
pub const PREFIX_LEN: usize = 16;
/// Encoded length of one [`RdmaSegment`].
pub const SEGMENT_LEN: usize = 16;
/// Encoded length of one [`ReadSegment`] (position plus segment).
pub const READ_SEGMENT_LEN: usize = 20;

/// Errors found while decoding a transport header. Every variant maps to a
/// wire error a responder can send back (see [`v1::error_body_for`] and
/// [`v2::error_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer than 16 bytes: not even the fixed prefix is present, so there
    /// is no XID to answer.
    #[error("message of {0} bytes is shorter than the 16-byte header prefix")]
    NoPrefix(usize),
    /// The header body is truncated or not valid XDR.
    #[error("malformed transport header: {0}")]
    Xdr(#[from] xdr::Error),
    /// The rdma_vers field names a version this decoder does not handle.
    #[error("unsupported RPC-over-RDMA version {0}")]
    UnsupportedVersion(u32),
    /// The rdma_proc / rdma_htype field is not a known message type.
    #[error("unknown message type {0}")]
    UnknownType(u32),
    /// The read list holds more segments than the configured limit.
    #[error("read list longer than {max} segments")]
    TooManyReadSegments {
        /// The configured limit.
        max: u32,
    },
    /// The write list holds more chunks than the configured limit.
    #[error("write list longer than {max} chunks")]
    TooManyWriteChunks {
        /// The configured limit.
        max: u32,
    },
    /// A write or reply chunk has more segments than the configured limit.
    #[error("chunk with {count} segments, limit {max}")]
    TooManySegments {
        /// The segment count in the header.
        count: u32,
        /// The configured limit.
        max: u32,
    },
    /// A version 2 connection property list is longer than the limit.
    #[error("property list longer than {max} entries")]
    TooManyProperties {
        /// The configured limit.
        max: u32,
    },
}

/// Bounds applied while decoding chunk lists, so a peer cannot make the
/// decoder allocate without limit. Exceeding one is a typed
/// [`HeaderError`], answered with ERR_CHUNK (RFC 8166 §4.4.2) or the
/// matching RDMA2_ERROR code (v2 draft §5.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest number of entries in the read list.
    pub max_read_segments: u32,
    /// Largest number of chunks in the write list.
    pub max_write_chunks: u32,
    /// Largest number of segments in one write or reply chunk.
    pub max_segments_per_chunk: u32,
    /// Largest number of properties in an RDMA2_CONNPROP message.
    pub max_properties: u32,
    /// Largest rdma_data of one property, in bytes.
    pub max_property_len: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_read_segments: 64,
            max_write_chunks: 8,
            max_segments_per_chunk: 64,
            max_properties: 32,
            max_property_len: 256,
        }
    }
}

/// The four 32-bit words that start every RPC-over-RDMA header in every
/// version (RFC 8166 §4.1; v2 draft §3.1 `rpcrdma_common`). Peeking it
/// apart from the body lets a receiver answer an unknown version with
/// ERR_VERS even when the rest is garbage (RFC 8166 §4.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// rdma_xid: the XID of the RPC message this header carries.
    pub xid: u32,
    /// rdma_vers: the protocol version.
    pub vers: u32,
    /// rdma_credit: credits requested (calls) or granted (replies)
    /// (RFC 8166 §3.3).
    pub credits: u32,
    /// rdma_proc (v1) / rdma_htype (v2): the message type, raw.
    pub msg_type: u32,
}

impl Prefix {
    /// Reads the prefix from the first 16 bytes of a received message
    /// without looking at anything after it.
    pub fn peek(buf: &[u8]) -> Result<Self, HeaderError> {
        let p = PrefixPacket::new_checked(buf)?;
        Ok(Self {
            xid: p.xid(),
            vers: p.vers(),
            credits: p.credits(),
            msg_type: p.msg_type(),
        })
    }

    /// Writes the prefix into the first 16 bytes of `buf`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut PrefixPacket<T>) {
        p.set_xid(self.xid);
        p.set_vers(self.vers);
        p.set_credits(self.credits);
        p.set_msg_type(self.msg_type);
    }
}

impl Encode for Prefix {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.xid);
        enc.put_u32(self.vers);
        enc.put_u32(self.credits);
        enc.put_u32(self.msg_type);
    }
}

mod field {
    use core::ops::Range;
    pub(super) const XID: Range<usize> = 0..4;
    pub(super) const VERS: Range<usize> = 4..8;
    pub(super) const CREDIT: Range<usize> = 8..12;
    pub(super) const PROC: Range<usize> = 12..16;
}

/// A view of the fixed 16-byte prefix over any buffer (smoltcp-style
/// packet layer): getters never panic once [`PrefixPacket::new_checked`]
/// succeeded (RFC 8166 §4.1).
#[derive(Debug, Clone)]
pub struct PrefixPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> PrefixPacket<T> {
    /// Wraps `buf` after checking that it holds at least 16 bytes.
    pub fn new_checked(buf: T) -> Result<Self, HeaderError> {
        let len = buf.as_ref().len();
        if len < PREFIX_LEN {
            return Err(HeaderError::NoPrefix(len));
        }
        Ok(Self { buf })
    }

    fn word(&self, r: core::ops::Range<usize>) -> u32 {
        let b = self.buf.as_ref();
        let mut w = [0u8; 4];
        if let Some(s) = b.get(r) {
            w.copy_from_slice(s);
        }
        u32::from_be_bytes(w)
    }

    /// rdma_xid.
    pub fn xid(&self) -> u32 {
        self.word(field::XID)
    }
    /// rdma_vers.
    pub fn vers(&self) -> u32 {
        self.word(field::VERS)
    }
    /// rdma_credit.
    pub fn credits(&self) -> u32 {
        self.word(field::CREDIT)
    }
    /// rdma_proc / rdma_htype.
    pub fn msg_type(&self) -> u32 {
        self.word(field::PROC)
    }
    /// The bytes after the prefix.
    pub fn body(&self) -> &[u8] {
        self.buf.as_ref().get(PREFIX_LEN..).unwrap_or(&[])
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PrefixPacket<T> {
    fn set_word(&mut self, r: core::ops::Range<usize>, v: u32) {
        if let Some(s) = self.buf.as_mut().get_mut(r) {
            s.copy_from_slice(&v.to_be_bytes());
        }
    }
    /// Sets rdma_xid.
    pub fn set_xid(&mut self, v: u32) {
        self.set_word(field::XID, v)
    }
    /// Sets rdma_vers.
    pub fn set_vers(&mut self, v: u32) {
        self.set_word(field::VERS, v)
    }
    /// Sets rdma_credit.
    pub fn set_credits(&mut self, v: u32) {
        self.set_word(field::CREDIT, v)
    }
    /// Sets rdma_proc / rdma_htype.
    pub fn set_msg_type(&mut self, v: u32) {
        self.set_word(field::PROC, v)
    }
}

/// One registered memory region of the requester, as a chunk names it
/// (RFC 8166 §3.4.3 "RDMA segment": handle, length, offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdmaSegment {
    /// rdma_handle: the STag / R_key.
    pub handle: u32,
    /// rdma_length: bytes in the segment.
    pub length: u32,
    /// rdma_offset: the tagged offset of the first byte.
    pub offset: u64,
}

impl RdmaSegment {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, xdr::Error> {
        Ok(Self {
            handle: dec.u32()?,
            length: dec.u32()?,
            offset: dec.u64()?,
        })
    }
}

impl Encode for RdmaSegment {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.handle);
        enc.put_u32(self.length);
        enc.put_u64(self.offset);
    }
}

impl fmt::Display for RdmaSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{:#x}:{:#x}", self.length, self.handle, self.offset)
    }
}

/// One entry of a read list: an RDMA segment plus the XDR position of the
/// data it carries (RFC 8166 §3.4.5). Entries with equal positions form
/// one read chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadSegment {
    /// rdma_position: offset in the full XDR stream; zero names the
    /// Position-Zero Read chunk (RFC 8166 §3.5.3).
    pub position: u32,
    /// rdma_target.
    pub target: RdmaSegment,
}

impl Encode for ReadSegment {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.position);
        self.target.encode(enc);
    }
}

/// A write or reply chunk: a counted array of segments (RFC 8166 §3.4.6,
/// §3.4.7). In a reply the responder sets each length to the bytes it
/// actually wrote.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct WriteChunk {
    /// The segments, in order.
    pub segments: Vec<RdmaSegment>,
}

impl WriteChunk {
    /// Sum of the segment lengths.
    pub fn total_len(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.length)).sum()
    }

    fn decode(dec: &mut Decoder<'_>, limits: &Limits) -> Result<Self, HeaderError> {
        let at = dec.position();
        let count = dec.u32()?;
        if count > limits.max_segments_per_chunk {
            return Err(HeaderError::TooManySegments {
                count,
                max: limits.max_segments_per_chunk,
            });
        }
        let needed = count as usize * SEGMENT_LEN;
        if needed > dec.remaining() {
            return Err(HeaderError::Xdr(xdr::Error::new(
                xdr::ErrorKind::UnexpectedEof {
                    needed,
                    available: dec.remaining(),
                },
                at,
                "write chunk",
            )));
        }
        let mut segments = Vec::with_capacity(count as usize);
        for _ in 0..count {
            segments.push(RdmaSegment::decode(dec)?);
        }
        Ok(Self { segments })
    }
}

impl Encode for WriteChunk {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_array_len(self.segments.len());
        for s in &self.segments {
            s.encode(enc);
        }
    }
}

impl fmt::Display for WriteChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{s}")?;
        }
        f.write_str("]")
    }
}

/// The three chunk lists of an RDMA_MSG / RDMA_NOMSG header
/// (RFC 8166 §4.2: `rdma_reads`, `rdma_writes`, `rdma_reply`); the same
/// XDR forms the tail of v2's `rpcrdma2_chunk_lists` (v2 draft §3.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ChunkLists {
    /// The read list, in wire order.
    pub reads: Vec<ReadSegment>,
    /// The write list.
    pub writes: Vec<WriteChunk>,
    /// The reply chunk, if any.
    pub reply: Option<WriteChunk>,
}

impl ChunkLists {
    /// True when all three lists are empty.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// True when the read list holds a Position-Zero Read chunk
    /// (RFC 8166 §3.5.3).
    pub fn has_position_zero(&self) -> bool {
        self.reads.iter().any(|r| r.position == 0)
    }

    /// Decodes the three lists (RFC 8166 §4.2), enforcing `limits`.
    pub fn decode(dec: &mut Decoder<'_>, limits: &Limits) -> Result<Self, HeaderError> {
        let mut reads = Vec::new();
        while dec.bool()? {
            if reads.len() as u32 >= limits.max_read_segments {
                return Err(HeaderError::TooManyReadSegments {
                    max: limits.max_read_segments,
                });
            }
            let position = dec.u32()?;
            let target = RdmaSegment::decode(dec)?;
            reads.push(ReadSegment { position, target });
        }
        let mut writes = Vec::new();
        while dec.bool()? {
            if writes.len() as u32 >= limits.max_write_chunks {
                return Err(HeaderError::TooManyWriteChunks {
                    max: limits.max_write_chunks,
                });
            }
            writes.push(WriteChunk::decode(dec, limits)?);
        }
        let reply = if dec.bool()? {
            Some(WriteChunk::decode(dec, limits)?)
        } else {
            None
        };
        Ok(Self {
            reads,
            writes,
            reply,
        })
    }
}

impl Encode for ChunkLists {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        for r in &self.reads {
            enc.put_bool(true);
            r.encode(enc);
        }
        enc.put_bool(false);
        for w in &self.writes {
            enc.put_bool(true);
            w.encode(enc);
        }
        enc.put_bool(false);
        match &self.reply {
            Some(c) => {
                enc.put_bool(true);
                c.encode(enc);
            }
            None => enc.put_bool(false),
        }
    }
}

impl fmt::Display for ChunkLists {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("reads=[")?;
        for (i, r) in self.reads.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}:{}", r.position, r.target)?;
        }
        f.write_str("] writes=[")?;
        for (i, w) in self.writes.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{w}")?;
        }
        f.write_str("] reply=")?;
        match &self.reply {
            Some(c) => write!(f, "{c}"),
            None => f.write_str("-"),
        }
    }
}

/// A header of either version, for receivers that accept both (and for
/// printing captures).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AnyHeader {
    /// Version 1 (RFC 8166).
    V1(v1::Header),
    /// Version 2 (v2 draft).
    V2(v2::Header),
}

impl AnyHeader {
    /// Peeks the version (RFC 8166 §4.1: the version word sits at the same
    /// place in every version) and decodes with the matching codec.
    /// Versions other than 1 and 2 are [`HeaderError::UnsupportedVersion`].
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<(Self, usize), HeaderError> {
        match Prefix::peek(buf)?.vers {
            v1::VERSION => v1::Header::parse(buf, limits).map(|(h, n)| (Self::V1(h), n)),
            v2::VERSION => v2::Header::parse(buf, limits).map(|(h, n)| (Self::V2(h), n)),
            other => Err(HeaderError::UnsupportedVersion(other)),
        }
    }

    /// rdma_xid.
    pub fn xid(&self) -> u32 {
        match self {
            Self::V1(h) => h.xid,
            Self::V2(h) => h.xid,
        }
    }
}

impl fmt::Display for AnyHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V1(h) => h.fmt(f),
            Self::V2(h) => h.fmt(f),
        }
    }
}

/// Returned by the slice `emit` functions when the buffer is shorter than
/// the encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("buffer of {available} bytes, {needed} needed")]
pub struct BufferTooSmall {
    /// Bytes the encoding needs.
    pub needed: usize,
    /// Bytes the buffer has.
    pub available: usize,
}

/// Encodes `value` into the front of `buf`, returning the bytes written;
/// nothing is written when `buf` is too short.
pub(crate) fn emit_into<T: Encode + ?Sized>(
    value: &T,
    buf: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let needed = value.encoded_len();
    let available = buf.len();
    let Some(dst) = buf.get_mut(..needed) else {
        return Err(BufferTooSmall { needed, available });
    };
    let mut w = SliceWriter { dst, pos: 0 };
    value.encode(&mut w);
    Ok(needed)
}

struct SliceWriter<'b> {
    dst: &'b mut [u8],
    pos: usize,
}

impl Encoder for SliceWriter<'_> {
    fn put_raw(&mut self, bytes: &[u8]) {
        let end = self.pos + bytes.len();
        if let Some(d) = self.dst.get_mut(self.pos..end) {
            d.copy_from_slice(bytes);
        }
        self.pos = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prefix of frame 32 of nfsrdma-v3.pcap: NULL call, credits 128.
    const PREFIX: [u8; 16] = [
        0x9d, 0xa5, 0x24, 0x32, 0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 0, 0,
    ];

    #[test]
    fn deconstructs_prefix() {
        let p = PrefixPacket::new_checked(&PREFIX[..]).unwrap();
        assert_eq!(p.xid(), 0x9da5_2432);
        assert_eq!(p.vers(), 1);
        assert_eq!(p.credits(), 128);
        assert_eq!(p.msg_type(), 0);
        assert!(p.body().is_empty());
    }

    #[test]
    fn constructs_prefix() {
        let mut buf = [0xa5u8; 16];
        let mut p = PrefixPacket::new_checked(&mut buf[..]).unwrap();
        p.set_xid(0x9da5_2432);
        p.set_vers(1);
        p.set_credits(128);
        p.set_msg_type(0);
        assert_eq!(buf, PREFIX);
    }

    #[test]
    fn parses_and_emits_prefix() {
        let pre = Prefix::peek(&PREFIX).unwrap();
        assert_eq!(
            pre,
            Prefix {
                xid: 0x9da5_2432,
                vers: 1,
                credits: 128,
                msg_type: 0
            }
        );
        let mut buf = [0xa5u8; 16];
        let mut p = PrefixPacket::new_checked(&mut buf[..]).unwrap();
        pre.emit(&mut p);
        assert_eq!(buf, PREFIX);
    }

    #[test]
    fn rejects_short_prefix() {
        assert_eq!(Prefix::peek(&PREFIX[..15]), Err(HeaderError::NoPrefix(15)));
    }

    #[test]
    fn rejects_write_chunk_over_segment_limit() {
        let limits = Limits {
            max_segments_per_chunk: 2,
            ..Limits::default()
        };
        let bytes = [0u8, 0, 0, 3];
        let mut dec = Decoder::new(&bytes);
        assert_eq!(
            WriteChunk::decode(&mut dec, &limits),
            Err(HeaderError::TooManySegments { count: 3, max: 2 })
        );
    }

    #[test]
    fn rejects_segment_count_beyond_input_before_allocating() {
        let bytes = [0u8, 0, 0, 40, 0, 0, 0, 0];
        let mut dec = Decoder::new(&bytes);
        let err = WriteChunk::decode(&mut dec, &Limits::default()).unwrap_err();
        assert!(matches!(err, HeaderError::Xdr(_)));
    }

    #[test]
    fn rejects_read_list_over_limit() {
        let limits = Limits {
            max_read_segments: 1,
            ..Limits::default()
        };
        let mut enc = Vec::new();
        let lists = ChunkLists {
            reads: vec![ReadSegment::default(); 2],
            ..ChunkLists::default()
        };
        lists.encode(&mut enc);
        let mut dec = Decoder::new(&enc);
        assert_eq!(
            ChunkLists::decode(&mut dec, &limits),
            Err(HeaderError::TooManyReadSegments { max: 1 })
        );
    }

    #[test]
    fn any_header_dispatches_on_version() {
        let v1 = v1::Header::error_reply(9, 1, v1::ErrorBody::Chunk);
        let v2 = v2::Header::error_reply(10, 1, v2::ErrorBody::System);
        let (a, _) = AnyHeader::parse(&xdr::to_bytes(&v1), &Limits::default()).unwrap();
        let (b, _) = AnyHeader::parse(&xdr::to_bytes(&v2), &Limits::default()).unwrap();
        assert_eq!((a.xid(), b.xid()), (9, 10));
        assert_eq!(a, AnyHeader::V1(v1));
        assert!(b.to_string().starts_with("rpcrdma2 RDMA2_ERROR"));
        let mut three = PREFIX.to_vec();
        three[7] = 3;
        assert_eq!(
            AnyHeader::parse(&three, &Limits::default()),
            Err(HeaderError::UnsupportedVersion(3))
        );
    }

    #[test]
    fn emit_into_refuses_short_buffer() {
        let seg = RdmaSegment::default();
        let mut buf = [0xa5u8; 15];
        assert_eq!(
            emit_into(&seg, &mut buf),
            Err(BufferTooSmall {
                needed: 16,
                available: 15
            })
        );
        assert_eq!(buf, [0xa5u8; 15]);
    }
}
