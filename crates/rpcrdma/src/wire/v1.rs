//! RPC-over-RDMA version 1 transport header (RFC 8166 §4, XDR in
//! RFC 8166 §5).
//!
//! [`Header::parse`] decodes a received header and returns its length: the
//! RPC message (for RDMA_MSG) follows it in the same Send. [`Header::emit`]
//! writes one into a buffer of [`Header::buffer_len`] bytes. Decoding
//! failures are [`HeaderError`]s; [`error_body_for`] turns one into the
//! RDMA_ERROR body a responder sends back.

use core::fmt;

use xdr::{Decoder, Encode, Encoder};

use super::{emit_into, BufferTooSmall, ChunkLists, HeaderError, Limits, Prefix, PREFIX_LEN};

/// The protocol version this module speaks (RFC 8166 §4.1).
pub const VERSION: u32 = 1;

xdr::open_code! {
    /// rdma_proc: the version 1 message type (RFC 8166 §4.1, §5).
    pub struct Proc {
        /// An RPC message follows the header inline (RFC 8166 §5.1).
        RDMA_MSG = 0,
        /// The RPC message is conveyed entirely in chunks (RFC 8166 §5.1).
        RDMA_NOMSG = 1,
        /// Padded inline message: no longer sent (RFC 8166 §4.5.1).
        RDMA_MSGP = 2,
        /// Chunk release signal: no longer sent (RFC 8166 §4.5.2).
        RDMA_DONE = 3,
        /// Transport error report (RFC 8166 §4.4).
        RDMA_ERROR = 4,
    }
}

xdr::open_code! {
    /// rdma_err: the version 1 error code (RFC 8166 §4.4, §5).
    pub struct ErrCode {
        /// The sender does not support the received version (RFC 8166 §4.4.1).
        ERR_VERS = 1,
        /// The header or its chunks could not be decoded (RFC 8166 §4.4.2).
        ERR_CHUNK = 2,
    }
}

/// The body of an RDMA_ERROR message (RFC 8166 §4.4, `rpcrdma1_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorBody {
    /// ERR_VERS with the inclusive range of versions the sender supports
    /// (RFC 8166 §4.4.1).
    Vers {
        /// rdma_vers_low.
        low: u32,
        /// rdma_vers_high.
        high: u32,
    },
    /// ERR_CHUNK: the header could not be parsed (RFC 8166 §4.4.2).
    Chunk,
}

/// The message-type-specific part of a version 1 header
/// (RFC 8166 §5, `rpcrdma1_body`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Body {
    /// RDMA_MSG: chunk lists, then the RPC message inline.
    Msg(ChunkLists),
    /// RDMA_NOMSG: chunk lists only; the RPC message is in a
    /// Position-Zero Read chunk or the Reply chunk (RFC 8166 §3.5.3).
    NoMsg(ChunkLists),
    /// RDMA_MSGP (RFC 8166 §4.5.1): decoded so it can be reported, but
    /// never sent by this implementation; a responder answers it with
    /// ERR_CHUNK ([`Header::check_supported`]).
    MsgP {
        /// rdma_align.
        align: u32,
        /// rdma_thresh.
        thresh: u32,
        /// The chunk lists.
        chunks: ChunkLists,
    },
    /// RDMA_DONE (RFC 8166 §4.5.2): void body, treated like RDMA_MSGP.
    Done,
    /// RDMA_ERROR (RFC 8166 §4.4).
    Error(ErrorBody),
}

/// A decoded version 1 transport header (RFC 8166 §4.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// rdma_xid.
    pub xid: u32,
    /// rdma_credit (RFC 8166 §3.3).
    pub credits: u32,
    /// The body selected by rdma_proc.
    pub body: Body,
}

impl Header {
    /// The rdma_proc value for this header's body.
    pub fn proc_(&self) -> Proc {
        match self.body {
            Body::Msg(_) => Proc::RDMA_MSG,
            Body::NoMsg(_) => Proc::RDMA_NOMSG,
            Body::MsgP { .. } => Proc::RDMA_MSGP,
            Body::Done => Proc::RDMA_DONE,
            Body::Error(_) => Proc::RDMA_ERROR,
        }
    }

    /// The fixed prefix of this header.
    pub fn prefix(&self) -> Prefix {
        Prefix {
            xid: self.xid,
            vers: VERSION,
            credits: self.credits,
            msg_type: self.proc_().0,
        }
    }

    /// The chunk lists for RDMA_MSG, RDMA_NOMSG and RDMA_MSGP.
    pub fn chunks(&self) -> Option<&ChunkLists> {
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) | Body::MsgP { chunks: c, .. } => Some(c),
            Body::Done | Body::Error(_) => None,
        }
    }

    /// Decodes a header from the start of `buf` and returns it with its
    /// encoded length; the RPC message of an RDMA_MSG starts there.
    ///
    /// A version other than 1 is [`HeaderError::UnsupportedVersion`], an
    /// unknown rdma_proc is [`HeaderError::UnknownType`] (RFC 8166 §4.4).
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<(Self, usize), HeaderError> {
        let prefix = Prefix::peek(buf)?;
        if prefix.vers != VERSION {
            return Err(HeaderError::UnsupportedVersion(prefix.vers));
        }
        let mut dec = Decoder::new(buf);
        dec.skip(PREFIX_LEN)?;
        let body = match Proc(prefix.msg_type) {
            Proc::RDMA_MSG => Body::Msg(ChunkLists::decode(&mut dec, limits)?),
            Proc::RDMA_NOMSG => Body::NoMsg(ChunkLists::decode(&mut dec, limits)?),
            Proc::RDMA_MSGP => {
                let align = dec.u32()?;
                let thresh = dec.u32()?;
                let chunks = ChunkLists::decode(&mut dec, limits)?;
                Body::MsgP {
                    align,
                    thresh,
                    chunks,
                }
            }
            Proc::RDMA_DONE => Body::Done,
            Proc::RDMA_ERROR => {
                let code = ErrCode(dec.u32()?);
                match code {
                    ErrCode::ERR_VERS => Body::Error(ErrorBody::Vers {
                        low: dec.u32()?,
                        high: dec.u32()?,
                    }),
                    ErrCode::ERR_CHUNK => Body::Error(ErrorBody::Chunk),
                    ErrCode(other) => {
                        return Err(HeaderError::Xdr(xdr::Error::new(
                            xdr::ErrorKind::InvalidEnum(other),
                            PREFIX_LEN,
                            "rdma_err",
                        )))
                    }
                }
            }
            Proc(other) => return Err(HeaderError::UnknownType(other)),
        };
        let len = dec.position();
        Ok((
            Self {
                xid: prefix.xid,
                credits: prefix.credits,
                body,
            },
            len,
        ))
    }

    /// Bytes [`Header::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        self.encoded_len()
    }

    /// Writes the header into the front of `buf` and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        emit_into(self, buf)
    }

    /// A receiver's check that the message type is one it acts on:
    /// RDMA_MSGP and RDMA_DONE are no longer part of the protocol
    /// (RFC 8166 §4.5) and are answered with ERR_CHUNK.
    pub fn check_supported(&self) -> Result<(), ErrorBody> {
        match self.body {
            Body::MsgP { .. } | Body::Done => Err(ErrorBody::Chunk),
            _ => Ok(()),
        }
    }

    /// The RDMA_ERROR header a responder sends for this error
    /// (RFC 8166 §4.4): same XID, version 1, the responder's current
    /// credit grant.
    pub fn error_reply(xid: u32, credits: u32, body: ErrorBody) -> Self {
        Self {
            xid,
            credits,
            body: Body::Error(body),
        }
    }
}

/// The RDMA_ERROR body answering a header that failed to decode:
/// ERR_VERS (advertising 1..=1) for an unknown version
/// (RFC 8166 §4.4.1), ERR_CHUNK for everything else (RFC 8166 §4.4.2).
/// [`HeaderError::NoPrefix`] gets `None`: without an XID there is no one
/// to answer.
pub fn error_body_for(err: &HeaderError) -> Option<ErrorBody> {
    match err {
        HeaderError::NoPrefix(_) => None,
        HeaderError::UnsupportedVersion(_) => Some(ErrorBody::Vers {
            low: VERSION,
            high: VERSION,
        }),
        _ => Some(ErrorBody::Chunk),
    }
}

/// Reads an ERR_VERS reply whose prefix carries a version other than 1:
/// Linux svcrdma copies the rdma_vers of the message it refuses into its
/// ERR_VERS reply (as the v2 draft §5.3.3 asks of every error), but keeps
/// the version 1 body. Returns `(xid, credits, low, high)` for exactly
/// such a 28-byte message (RFC 8166 §4.4.1, §5).
pub fn peek_foreign_err_vers(buf: &[u8]) -> Option<(u32, u32, u32, u32)> {
    if buf.len() != 28 {
        return None;
    }
    let pre = Prefix::peek(buf).ok()?;
    let mut dec = Decoder::new(buf.get(PREFIX_LEN..)?);
    let (code, low, high) = (dec.u32().ok()?, dec.u32().ok()?, dec.u32().ok()?);
    (pre.vers != VERSION
        && Proc(pre.msg_type) == Proc::RDMA_ERROR
        && ErrCode(code) == ErrCode::ERR_VERS)
        .then_some((pre.xid, pre.credits, low, high))
}

impl Encode for Header {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.prefix().encode(enc);
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.encode(enc),
            Body::MsgP {
                align,
                thresh,
                chunks,
            } => {
                enc.put_u32(*align);
                enc.put_u32(*thresh);
                chunks.encode(enc);
            }
            Body::Done => {}
            Body::Error(ErrorBody::Vers { low, high }) => {
                enc.put_u32(ErrCode::ERR_VERS.0);
                enc.put_u32(*low);
                enc.put_u32(*high);
            }
            Body::Error(ErrorBody::Chunk) => enc.put_u32(ErrCode::ERR_CHUNK.0),
        }
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rpcrdma1 {} xid={:#010x} credits={}",
            self.proc_(),
            self.xid,
            self.credits
        )?;
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => write!(f, " {c}"),
            Body::MsgP {
                align,
                thresh,
                chunks,
            } => write!(f, " align={align} thresh={thresh} {chunks}"),
            Body::Done => Ok(()),
            Body::Error(ErrorBody::Vers { low, high }) => write!(f, " ERR_VERS {low}..={high}"),
            Body::Error(ErrorBody::Chunk) => f.write_str(" ERR_CHUNK"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{RdmaSegment, ReadSegment, WriteChunk};

    /// nfsrdma-v3.pcap frame 75: NFSv3 WRITE of 100 KiB, RDMA_MSG with a
    /// read list of one segment at XDR position 112.
    const READ_LIST_CALL: [u8; 52] = [
        0xac, 0xa5, 0x24, 0x32, 0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 0, 0, // prefix
        0, 0, 0, 1, 0, 0, 0, 0x70, // read entry, position 112
        0xbe, 0xf3, 0x32, 0x01, 0, 1, 0x90, 0, // handle, length 102400
        0xac, 0xa5, 0x24, 0x32, 0x45, 0x3d, 0x40, 0, // offset
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // end of reads, no writes, no reply
    ];

    fn read_list_call() -> Header {
        Header {
            xid: 0xaca5_2432,
            credits: 128,
            body: Body::Msg(ChunkLists {
                reads: vec![ReadSegment {
                    position: 112,
                    target: RdmaSegment {
                        handle: 0xbef3_3201,
                        length: 102_400,
                        offset: 0xaca5_2432_453d_4000,
                    },
                }],
                writes: vec![],
                reply: None,
            }),
        }
    }

    #[test]
    fn parses_read_list_call() {
        let (h, len) = Header::parse(&READ_LIST_CALL, &Limits::default()).unwrap();
        assert_eq!(len, READ_LIST_CALL.len());
        assert_eq!(h, read_list_call());
    }

    #[test]
    fn emits_read_list_call() {
        let h = read_list_call();
        let mut buf = [0xa5u8; 60];
        assert_eq!(h.buffer_len(), 52);
        assert_eq!(h.emit(&mut buf), Ok(52));
        assert_eq!(&buf[..52], &READ_LIST_CALL);
        assert_eq!(&buf[52..], &[0xa5; 8]);
    }

    #[test]
    fn displays_one_line() {
        let s = read_list_call().to_string();
        assert_eq!(
            s,
            "rpcrdma1 RDMA_MSG xid=0xaca52432 credits=128 \
             reads=[112:102400@0xbef33201:0xaca52432453d4000] writes=[] reply=-"
        );
    }

    #[test]
    fn parse_stops_at_rpc_message() {
        let mut msg = READ_LIST_CALL.to_vec();
        msg.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let (_, len) = Header::parse(&msg, &Limits::default()).unwrap();
        assert_eq!(&msg[len..], &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn rejects_truncated_header() {
        for cut in 16..READ_LIST_CALL.len() {
            let err = Header::parse(&READ_LIST_CALL[..cut], &Limits::default()).unwrap_err();
            assert!(matches!(err, HeaderError::Xdr(_)), "cut {cut}: {err:?}");
            assert_eq!(error_body_for(&err), Some(ErrorBody::Chunk));
        }
    }

    #[test]
    fn answers_unknown_version_with_err_vers_despite_garbage_body() {
        let mut msg = READ_LIST_CALL.to_vec();
        msg[7] = 7;
        msg.truncate(20);
        let err = Header::parse(&msg, &Limits::default()).unwrap_err();
        assert_eq!(err, HeaderError::UnsupportedVersion(7));
        let body = error_body_for(&err).unwrap();
        let pre = Prefix::peek(&msg).unwrap();
        let reply = Header::error_reply(pre.xid, 64, body);
        let mut out = [0xa5u8; 28];
        assert_eq!(reply.emit(&mut out), Ok(28));
        assert_eq!(
            out,
            [
                0xac, 0xa5, 0x24, 0x32, 0, 0, 0, 1, 0, 0, 0, 64, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0,
                1, 0, 0, 0, 1
            ]
        );
    }

    #[test]
    fn rejects_unknown_proc() {
        let mut msg = READ_LIST_CALL.to_vec();
        msg[15] = 9;
        let err = Header::parse(&msg, &Limits::default()).unwrap_err();
        assert_eq!(err, HeaderError::UnknownType(9));
        assert_eq!(error_body_for(&err), Some(ErrorBody::Chunk));
    }

    #[test]
    fn decodes_msgp_and_done_but_refuses_them() {
        let msgp = Header {
            xid: 5,
            credits: 1,
            body: Body::MsgP {
                align: 4,
                thresh: 1024,
                chunks: ChunkLists::default(),
            },
        };
        let done = Header {
            xid: 6,
            credits: 1,
            body: Body::Done,
        };
        for h in [msgp, done] {
            let bytes = xdr::to_bytes(&h);
            let (back, len) = Header::parse(&bytes, &Limits::default()).unwrap();
            assert_eq!(len, bytes.len());
            assert_eq!(back, h);
            assert_eq!(back.check_supported(), Err(ErrorBody::Chunk));
        }
    }

    #[test]
    fn round_trips_err_chunk_and_rejects_unknown_error_code() {
        let h = Header::error_reply(1, 2, ErrorBody::Chunk);
        let bytes = xdr::to_bytes(&h);
        assert_eq!(&bytes[12..], &[0, 0, 0, 4, 0, 0, 0, 2]);
        assert_eq!(Header::parse(&bytes, &Limits::default()).unwrap().0, h);
        let mut bad = bytes.to_vec();
        bad[19] = 3;
        assert!(matches!(
            Header::parse(&bad, &Limits::default()),
            Err(HeaderError::Xdr(_))
        ));
    }

    #[test]
    fn reply_chunk_lengths_survive_round_trip() {
        let h = Header {
            xid: 1,
            credits: 64,
            body: Body::NoMsg(ChunkLists {
                reads: vec![],
                writes: vec![],
                reply: Some(WriteChunk {
                    segments: vec![RdmaSegment {
                        handle: 1,
                        length: 0,
                        offset: 2,
                    }],
                }),
            }),
        };
        let bytes = xdr::to_bytes(&h);
        assert_eq!(Header::parse(&bytes, &Limits::default()).unwrap().0, h);
    }

    #[test]
    fn reads_svcrdma_err_vers_that_echoes_version_two() {
        // What knfsd (Linux 6.1 svcrdma) sent to our version 2 call in the
        // kpeer VM: xid, the refused version 2, credits 64, RDMA_ERROR,
        // ERR_VERS 1..1.
        let bytes = unhex("00001000 00000002 00000040 00000004 00000001 00000001 00000001");
        assert_eq!(peek_foreign_err_vers(&bytes), Some((0x1000, 64, 1, 1)));
        assert!(crate::wire::v2::Header::parse(&bytes, &Limits::default()).is_err());
        let mut v1 = bytes.clone();
        v1[7] = 1;
        assert_eq!(
            peek_foreign_err_vers(&v1),
            None,
            "a v1 header parses normally"
        );
        assert_eq!(peek_foreign_err_vers(&bytes[..24]), None);
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn quartet(bytes: &[u8], want: &Header) {
        let (h, len) = Header::parse(bytes, &Limits::default()).unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(&h, want);
        let mut buf = vec![0xa5u8; bytes.len() + 4];
        assert_eq!(want.emit(&mut buf), Ok(bytes.len()));
        assert_eq!(&buf[..bytes.len()], bytes);
        assert_eq!(&buf[bytes.len()..], &[0xa5; 4]);
    }

    #[test]
    fn round_trips_kpeer_inline_null_call() {
        // nfsrdma-v3.pcap frame 32.
        let bytes = unhex("9da52432 00000001 00000080 00000000 00000000 00000000 00000000");
        quartet(
            &bytes,
            &Header {
                xid: 0x9da5_2432,
                credits: 128,
                body: Body::Msg(ChunkLists::default()),
            },
        );
    }

    #[test]
    fn round_trips_kpeer_read_call_with_write_list() {
        // nfsrdma-v3.pcap frame 99: NFSv3 READ of 102400 bytes.
        let bytes = unhex(
            "b0a52432 00000001 00000080 00000000 00000000 00000001 00000001
             bef33202 00019000 b0a52432 7fd0a000 00000000 00000000",
        );
        quartet(
            &bytes,
            &Header {
                xid: 0xb0a5_2432,
                credits: 128,
                body: Body::Msg(ChunkLists {
                    reads: vec![],
                    writes: vec![WriteChunk {
                        segments: vec![RdmaSegment {
                            handle: 0xbef3_3202,
                            length: 102_400,
                            offset: 0xb0a5_2432_7fd0_a000,
                        }],
                    }],
                    reply: None,
                }),
            },
        );
    }

    fn readdirplus_segments(lengths: [u32; 3]) -> WriteChunk {
        let raw = [
            (0xc222_af01, 0xa7a5_2432_426f_1000),
            (0x2031_5a01, 0xa7a5_2432_4237_2000),
            (0xb1cb_7801, 0xa7a5_2432_426f_107c),
        ];
        WriteChunk {
            segments: raw
                .iter()
                .zip(lengths)
                .map(|(&(handle, offset), length)| RdmaSegment {
                    handle,
                    length,
                    offset,
                })
                .collect(),
        }
    }

    #[test]
    fn round_trips_kpeer_readdirplus_call_with_reply_chunk() {
        // nfsrdma-v3.pcap frame 56.
        let bytes = unhex(
            "a7a52432 00000001 00000080 00000000 00000000 00000000 00000001 00000003
             c222af01 0000007c a7a52432 426f1000 20315a01 00010000 a7a52432 42372000
             b1cb7801 00000004 a7a52432 426f107c",
        );
        quartet(
            &bytes,
            &Header {
                xid: 0xa7a5_2432,
                credits: 128,
                body: Body::Msg(ChunkLists {
                    reads: vec![],
                    writes: vec![],
                    reply: Some(readdirplus_segments([0x7c, 0x1_0000, 4])),
                }),
            },
        );
    }

    #[test]
    fn round_trips_kpeer_nomsg_reply() {
        // nfsrdma-v3.pcap frame 61: the READDIRPLUS reply, written whole
        // into the reply chunk.
        let bytes = unhex(
            "a7a52432 00000001 00000040 00000001 00000000 00000000 00000001 00000003
             c222af01 0000007c a7a52432 426f1000 20315a01 000001dc a7a52432 42372000
             b1cb7801 00000000 a7a52432 426f107c",
        );
        quartet(
            &bytes,
            &Header {
                xid: 0xa7a5_2432,
                credits: 64,
                body: Body::NoMsg(ChunkLists {
                    reads: vec![],
                    writes: vec![],
                    reply: Some(readdirplus_segments([0x7c, 0x1dc, 0])),
                }),
            },
        );
    }
}
