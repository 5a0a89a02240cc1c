//! One decode of each received message (RFC 8166 §4; RFC 8167 §4; v2
//! draft §3, §5): the header is parsed once and the message sorted into
//! one [`Kind`] by the receiving end's [`Role`], so the IO shells never
//! try one classifier after another.

use crate::plan::Version;
use crate::wire::v2::{self, PropError, Properties};
use crate::wire::{v1, AnyHeader, ChunkLists, HeaderError, Limits, Prefix};

/// Which end of the connection receives the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The client: it receives forward replies and reverse-direction
    /// calls.
    Requester,
    /// The server: it receives forward calls and replies to its
    /// reverse-direction calls.
    Responder,
}

/// The chunk lists of an RDMA_MSG / RDMA_NOMSG (either version).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rpc {
    /// RDMA_NOMSG: the RPC message is in a Position-Zero Read chunk or the
    /// reply chunk, not after the header.
    pub nomsg: bool,
    /// The read, write and reply chunks.
    pub lists: ChunkLists,
    /// Version 2 rdma_inv_handle (v2 draft §3.3); zero in version 1.
    pub inv_handle: u32,
}

impl Rpc {
    /// No chunks and the RPC message inline.
    pub fn is_inline(&self) -> bool {
        !self.nomsg && self.lists.is_empty()
    }
}

/// An RDMA_ERROR (version 1) or RDMA2_ERROR (version 2) body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody {
    /// Version 1 (RFC 8166 §4.4), or the version 1 ERR_VERS a version 1
    /// responder sends to a version 2 requester.
    V1(v1::ErrorBody),
    /// Version 2 (v2 draft §5.3.3).
    V2(v2::ErrorBody),
}

impl ErrorBody {
    /// ERR_VERS naming a range that includes version 1: the peer speaks
    /// version 1 (v2 draft §7.2).
    pub fn refuses_v2(&self) -> bool {
        match *self {
            Self::V1(v1::ErrorBody::Vers { low, .. })
            | Self::V2(v2::ErrorBody::Vers { low, .. }) => low <= v1::VERSION,
            _ => false,
        }
    }

    /// The error's name for a call's failure.
    pub fn name(&self) -> &'static str {
        match self {
            Self::V1(v1::ErrorBody::Chunk) => "RDMA_ERROR ERR_CHUNK",
            Self::V1(v1::ErrorBody::Vers { .. }) => "RDMA_ERROR ERR_VERS",
            Self::V2(e) => e.code().name().unwrap_or("RDMA2_ERROR"),
        }
    }
}

/// What a received message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A forward-direction call, to the responder.
    Call(Rpc),
    /// A reply to one of the requester's calls.
    Reply(Rpc),
    /// A reverse-direction call (RFC 8167 §4), to the requester: inline
    /// of msg_type CALL in either version, or a version 2 message with
    /// chunks and RPCRDMA2_F_RESPONSE clear (v2 draft §3.2, §4.2.2).
    ReverseCall(Rpc),
    /// A reply to one of the responder's reverse-direction calls: inline
    /// of msg_type REPLY, or a version 2 message with chunks and
    /// RPCRDMA2_F_RESPONSE set; `Err` for an RDMA2_ERROR with the flag
    /// set (the requester's answer as responder, v2 draft §5.3.3).
    ReverseReply(Result<Rpc, v2::ErrorBody>),
    /// An RDMA_ERROR / RDMA2_ERROR in the forward direction.
    Error(ErrorBody),
    /// RDMA2_CONNPROP, interpreted (v2 draft §4.1): `Err` for a known
    /// property with an ill-typed value.
    ConnProp(Result<Properties, PropError>),
    /// RDMA_MSGP / RDMA_DONE: no longer part of the protocol
    /// (RFC 8166 §4.5).
    Obsolete,
}

/// A received message, decoded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The header's version.
    pub version: Version,
    /// rdma_xid.
    pub xid: u32,
    /// rdma_credits: a request (to a responder) or a grant (to a
    /// requester).
    pub credits: u32,
    /// Header length: the RPC message of an RDMA_MSG starts here.
    pub len: usize,
    /// What it is.
    pub kind: Kind,
}

/// Decodes `buf` once and sorts it for `role`. Versions above
/// `max_version` are [`HeaderError::UnsupportedVersion`], except the
/// version 1 format ERR_VERS that Linux svcrdma sends echoing the refused
/// version, which is taken for what it is.
pub fn classify(
    buf: &[u8],
    limits: &Limits,
    max_version: u32,
    role: Role,
) -> Result<Message, HeaderError> {
    let pre = Prefix::peek(buf)?;
    let foreign =
        v1::peek_foreign_err_vers(buf).filter(|&(_, _, low, high)| is_err_vers_range(low, high));
    if let Some((xid, credits, low, high)) = foreign {
        return Ok(Message {
            version: Version::V1,
            xid,
            credits,
            len: buf.len(),
            kind: Kind::Error(ErrorBody::V1(v1::ErrorBody::Vers { low, high })),
        });
    }
    if pre.vers > max_version {
        return Err(HeaderError::UnsupportedVersion(pre.vers));
    }
    let (h, len) = AnyHeader::parse(buf, limits)?;
    // msg_type of the RPC message after the header (RFC 5531 §9: it
    // follows the XID).
    let msg_type = buf
        .get(len + 4..len + 8)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    let (version, xid, credits, kind) = match h {
        AnyHeader::V1(h) => {
            let kind = match h.body {
                v1::Body::Msg(lists) => rpc(
                    role,
                    None,
                    msg_type,
                    Rpc {
                        nomsg: false,
                        lists,
                        inv_handle: 0,
                    },
                ),
                v1::Body::NoMsg(lists) => rpc(
                    role,
                    None,
                    msg_type,
                    Rpc {
                        nomsg: true,
                        lists,
                        inv_handle: 0,
                    },
                ),
                v1::Body::Error(e) => Kind::Error(ErrorBody::V1(e)),
                v1::Body::MsgP { .. } | v1::Body::Done => Kind::Obsolete,
            };
            (Version::V1, h.xid, h.credits, kind)
        }
        AnyHeader::V2(h) => {
            let response = h.flags.is_response();
            let kind = match h.body {
                v2::Body::Msg(c) => rpc(
                    role,
                    Some(response),
                    msg_type,
                    Rpc {
                        nomsg: false,
                        lists: c.lists,
                        inv_handle: c.inv_handle,
                    },
                ),
                v2::Body::NoMsg(c) => rpc(
                    role,
                    Some(response),
                    msg_type,
                    Rpc {
                        nomsg: true,
                        lists: c.lists,
                        inv_handle: c.inv_handle,
                    },
                ),
                v2::Body::Error(e) if response && role == Role::Responder => {
                    Kind::ReverseReply(Err(e))
                }
                v2::Body::Error(e) => Kind::Error(ErrorBody::V2(e)),
                v2::Body::ConnProp(p) => Kind::ConnProp(Properties::from_propset(&p)),
            };
            (Version::V2, h.xid, h.credits, kind)
        }
    };
    Ok(Message {
        version,
        xid,
        credits,
        len,
        kind,
    })
}

/// Sorts an RDMA_MSG / RDMA_NOMSG by direction. `response` is version 2's
/// RPCRDMA2_F_RESPONSE (`None` in version 1), which must agree with the
/// RPC msg_type of an inline message (v2 draft §3.2); a message where
/// they disagree is taken for forward traffic. Version 1 has no flag: only
/// an inline message without chunks can travel in reverse (RFC 8167 §4),
/// told apart by its msg_type.
fn rpc(role: Role, response: Option<bool>, msg_type: Option<u32>, r: Rpc) -> Kind {
    // The msg_type a reverse-direction message arriving at `role` has, and
    // the flag that goes with it.
    let (reverse_type, reverse_flag) = match role {
        Role::Requester => (0, false),
        Role::Responder => (1, true),
    };
    let reverse = if r.is_inline() {
        msg_type == Some(reverse_type) && response.is_none_or(|f| f == reverse_flag)
    } else {
        response == Some(reverse_flag)
    };
    match (role, reverse) {
        (Role::Requester, false) => Kind::Reply(r),
        (Role::Requester, true) => Kind::ReverseCall(r),
        (Role::Responder, false) => Kind::Call(r),
        (Role::Responder, true) => Kind::ReverseReply(Ok(r)),
    }
}

/// Whether the last two words of a 28-byte error that looks like a
/// version 1 ERR_VERS echoing version 2 (as Linux svcrdma sends) are a
/// version range. A version 2 RDMA2_ERROR of the same length
/// (READ_CHUNKS, WRITE_CHUNKS, SEGMENTS, REPLY_RESOURCE, v2 draft §5.3.3)
/// has RPCRDMA2_F_RESPONSE (1, the value of ERR_VERS) where the version 1
/// error code would be, and its own code, 4 or more, where rdma_vers_low
/// would be; a real ERR_VERS has rdma_vers_low a version (1 or 2, below
/// every such code) and no higher than rdma_vers_high.
pub fn is_err_vers_range(low: u32, high: u32) -> bool {
    (1..=v2::VERSION).contains(&low) && low <= high
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::v2::{ChunkLists2, Flags, PropVal};
    use crate::wire::{RdmaSegment, ReadSegment, WriteChunk};

    fn seg(handle: u32) -> RdmaSegment {
        RdmaSegment {
            handle,
            length: 100,
            offset: 0,
        }
    }

    fn pz() -> ChunkLists {
        ChunkLists {
            reads: vec![ReadSegment {
                position: 0,
                target: seg(9),
            }],
            ..ChunkLists::default()
        }
    }

    fn reply_chunk() -> ChunkLists {
        ChunkLists {
            reply: Some(WriteChunk {
                segments: vec![seg(5)],
            }),
            ..ChunkLists::default()
        }
    }

    /// A header followed by an RPC message's XID and msg_type.
    fn with_rpc(header: &[u8], msg_type: Option<u32>) -> Vec<u8> {
        let mut m = header.to_vec();
        if let Some(t) = msg_type {
            m.extend_from_slice(&7u32.to_be_bytes());
            m.extend_from_slice(&t.to_be_bytes());
        }
        m
    }

    fn v1(body: v1::Body, msg_type: Option<u32>) -> Vec<u8> {
        let h = xdr::to_bytes(&v1::Header {
            xid: 3,
            credits: 4,
            body,
        });
        with_rpc(&h, msg_type)
    }

    fn v2h(response: bool, body: v2::Body, msg_type: Option<u32>) -> Vec<u8> {
        let flags = if response {
            Flags::RESPONSE
        } else {
            Flags::default()
        };
        let h = xdr::to_bytes(&v2::Header {
            xid: 3,
            credits: 4,
            flags,
            body,
        });
        with_rpc(&h, msg_type)
    }

    fn kind(m: &[u8], role: Role) -> Kind {
        classify(m, &Limits::default(), 2, role).unwrap().kind
    }

    fn lists2(lists: ChunkLists, inv_handle: u32) -> ChunkLists2 {
        ChunkLists2 { inv_handle, lists }
    }

    #[test]
    fn v1_inline_messages_are_sorted_by_msg_type() {
        let call = v1(v1::Body::Msg(ChunkLists::default()), Some(0));
        let reply = v1(v1::Body::Msg(ChunkLists::default()), Some(1));
        let inline = Rpc::default();
        assert_eq!(kind(&call, Role::Responder), Kind::Call(inline.clone()));
        assert_eq!(
            kind(&call, Role::Requester),
            Kind::ReverseCall(inline.clone())
        );
        assert_eq!(kind(&reply, Role::Requester), Kind::Reply(inline.clone()));
        assert_eq!(
            kind(&reply, Role::Responder),
            Kind::ReverseReply(Ok(inline))
        );
        let m = classify(&call, &Limits::default(), 1, Role::Responder).unwrap();
        assert_eq!(
            (m.version, m.xid, m.credits, m.len),
            (Version::V1, 3, 4, call.len() - 8)
        );
    }

    #[test]
    fn v1_messages_with_chunks_travel_forward_only() {
        // RFC 8167 §4: version 1 reverse-direction messages are inline.
        for body in [v1::Body::Msg(pz()), v1::Body::NoMsg(reply_chunk())] {
            for t in [Some(0), Some(1), None] {
                let m = v1(body.clone(), t);
                assert!(matches!(kind(&m, Role::Responder), Kind::Call(_)));
                assert!(matches!(kind(&m, Role::Requester), Kind::Reply(_)));
            }
        }
        // No msg_type after the header: forward.
        let bare = v1(v1::Body::Msg(ChunkLists::default()), None);
        assert!(matches!(kind(&bare, Role::Requester), Kind::Reply(_)));
    }

    #[test]
    fn v2_chunked_messages_are_sorted_by_the_response_flag() {
        // v2 draft §3.2: RPCRDMA2_F_RESPONSE tells a reverse call with
        // chunks (clear, to a requester) from a reverse reply (set, to a
        // responder).
        let call = v2h(false, v2::Body::NoMsg(lists2(pz(), 9)), None);
        let want = Rpc {
            nomsg: true,
            lists: pz(),
            inv_handle: 9,
        };
        assert_eq!(
            kind(&call, Role::Requester),
            Kind::ReverseCall(want.clone())
        );
        assert_eq!(kind(&call, Role::Responder), Kind::Call(want.clone()));
        let reply = v2h(true, v2::Body::NoMsg(lists2(pz(), 9)), None);
        assert_eq!(
            kind(&reply, Role::Responder),
            Kind::ReverseReply(Ok(want.clone()))
        );
        assert_eq!(kind(&reply, Role::Requester), Kind::Reply(want));
        // Inline v2 messages need the flag and msg_type to agree.
        let rev_call = v2h(false, v2::Body::Msg(ChunkLists2::default()), Some(0));
        assert!(matches!(
            kind(&rev_call, Role::Requester),
            Kind::ReverseCall(_)
        ));
        let rev_reply = v2h(true, v2::Body::Msg(ChunkLists2::default()), Some(1));
        assert!(matches!(
            kind(&rev_reply, Role::Responder),
            Kind::ReverseReply(Ok(_))
        ));
        let odd = v2h(true, v2::Body::Msg(ChunkLists2::default()), Some(0));
        assert!(matches!(kind(&odd, Role::Responder), Kind::Call(_)));
    }

    #[test]
    fn v2_errors_with_the_flag_answer_reverse_calls() {
        let e = v2::ErrorBody::ReplyResource {
            length_needed: 9000,
        };
        let flagged = v2h(true, v2::Body::Error(e), None);
        assert_eq!(kind(&flagged, Role::Responder), Kind::ReverseReply(Err(e)));
        assert_eq!(
            kind(&flagged, Role::Requester),
            Kind::Error(ErrorBody::V2(e))
        );
        let plain = v2h(false, v2::Body::Error(e), None);
        assert_eq!(kind(&plain, Role::Responder), Kind::Error(ErrorBody::V2(e)));
    }

    #[test]
    fn versions_above_the_maximum_are_refused_but_svcrdma_err_vers_is_read() {
        let m = v2h(false, v2::Body::Msg(ChunkLists2::default()), Some(0));
        assert_eq!(
            classify(&m, &Limits::default(), 1, Role::Responder),
            Err(HeaderError::UnsupportedVersion(2))
        );
        // Linux svcrdma answers a version 2 call with a version 1 format
        // ERR_VERS whose rdma_vers echoes 2.
        let words = [3u32, 2, 4, 4, 1, 1, 1];
        let svc: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let got = classify(&svc, &Limits::default(), 1, Role::Requester).unwrap();
        let vers = ErrorBody::V1(v1::ErrorBody::Vers { low: 1, high: 1 });
        assert_eq!(got.kind, Kind::Error(vers));
        assert!(vers.refuses_v2());
        assert_eq!(vers.name(), "RDMA_ERROR ERR_VERS");
        // An RDMA2_ERROR of the same length is not taken for it.
        let rr = v2h(
            true,
            v2::Body::Error(v2::ErrorBody::ReplyResource {
                length_needed: 6028,
            }),
            None,
        );
        assert_eq!(rr.len(), 28);
        assert!(matches!(
            kind(&rr, Role::Requester),
            Kind::Error(ErrorBody::V2(_))
        ));
        assert!(!is_err_vers_range(8, 6028));
        assert!(!is_err_vers_range(6, 64));
        assert!(!is_err_vers_range(2, 1));
        assert!(is_err_vers_range(1, 2));
    }

    #[test]
    fn properties_obsolete_and_garbage() {
        let props = v2h(false, v2::Body::ConnProp(Vec::<PropVal>::new()), None);
        assert!(matches!(
            kind(&props, Role::Responder),
            Kind::ConnProp(Ok(_))
        ));
        let done = v1(v1::Body::Done, None);
        assert_eq!(kind(&done, Role::Responder), Kind::Obsolete);
        assert!(classify(&[0; 8], &Limits::default(), 2, Role::Responder).is_err());
        let mut cut = v1(v1::Body::Msg(pz()), None);
        cut.truncate(cut.len() - 4);
        assert!(classify(&cut, &Limits::default(), 2, Role::Requester).is_err());
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use crate::wire::v2::{ChunkLists2, Flags};
    use crate::wire::{RdmaSegment, ReadSegment, WriteChunk};
    use proptest::prelude::*;

    fn seg() -> impl Strategy<Value = RdmaSegment> {
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(handle, length, offset)| {
            RdmaSegment {
                handle,
                length,
                offset,
            }
        })
    }

    fn lists() -> impl Strategy<Value = ChunkLists> {
        (
            proptest::collection::vec((0u32..64, seg()), 0..3),
            proptest::collection::vec(proptest::collection::vec(seg(), 1..3), 0..2),
            proptest::option::of(seg()),
        )
            .prop_map(|(reads, writes, reply)| ChunkLists {
                reads: reads
                    .into_iter()
                    .map(|(position, target)| ReadSegment { position, target })
                    .collect(),
                writes: writes
                    .into_iter()
                    .map(|segments| WriteChunk { segments })
                    .collect(),
                reply: reply.map(|s| WriteChunk { segments: vec![s] }),
            })
    }

    proptest! {
        /// Every MSG/NOMSG decodes once into the chunks it was built from,
        /// and its direction follows RFC 8167 §4 / v2 draft §3.2: an inline
        /// message by its msg_type (and in version 2 the flag agreeing), a
        /// message with chunks only in version 2, by the flag.
        #[test]
        fn rpc_messages_keep_their_chunks_and_direction(
            v2h in any::<bool>(),
            nomsg in any::<bool>(),
            response in any::<bool>(),
            lists in lists(),
            inv_handle in any::<u32>(),
            msg_type in proptest::option::of(0u32..3),
            xid in any::<u32>(),
            credits in any::<u32>(),
        ) {
            let inv_handle = if v2h { inv_handle } else { 0 };
            let header = if v2h {
                let c = ChunkLists2 { inv_handle, lists: lists.clone() };
                let flags = if response { Flags::RESPONSE } else { Flags::default() };
                let body = if nomsg { v2::Body::NoMsg(c) } else { v2::Body::Msg(c) };
                xdr::to_bytes(&v2::Header { xid, credits, flags, body })
            } else {
                let body = if nomsg { v1::Body::NoMsg(lists.clone()) } else { v1::Body::Msg(lists.clone()) };
                xdr::to_bytes(&v1::Header { xid, credits, body })
            };
            let mut m = header.to_vec();
            if let Some(t) = msg_type {
                m.extend_from_slice(&xid.to_be_bytes());
                m.extend_from_slice(&t.to_be_bytes());
            }
            let want = Rpc { nomsg, lists, inv_handle };
            let inline = want.is_inline();
            let flag = if v2h { Some(response) } else { None };
            for role in [Role::Requester, Role::Responder] {
                let got = classify(&m, &Limits::default(), 2, role).unwrap();
                prop_assert_eq!((got.xid, got.credits, got.len), (xid, credits, header.len()));
                let (rev_type, rev_flag) = match role {
                    Role::Requester => (0, false),
                    Role::Responder => (1, true),
                };
                let reverse = if inline {
                    msg_type == Some(rev_type) && flag.is_none_or(|f| f == rev_flag)
                } else {
                    flag == Some(rev_flag)
                };
                let expected = match (role, reverse) {
                    (Role::Requester, false) => Kind::Reply(want.clone()),
                    (Role::Requester, true) => Kind::ReverseCall(want.clone()),
                    (Role::Responder, false) => Kind::Call(want.clone()),
                    (Role::Responder, true) => Kind::ReverseReply(Ok(want.clone())),
                };
                prop_assert_eq!(got.kind, expected);
            }
        }

        /// Arbitrary bytes: never a panic, and a message decodes exactly
        /// when its header does (or it is svcrdma's ERR_VERS).
        #[test]
        fn classify_agrees_with_the_header_codec(
            mut m in proptest::collection::vec(any::<u8>(), 0..96),
            vers in 0u32..4,
            max in 1u32..3,
        ) {
            if m.len() >= 8 {
                m[4..8].copy_from_slice(&vers.to_be_bytes());
            }
            let svc = v1::peek_foreign_err_vers(&m)
                .is_some_and(|(_, _, low, high)| is_err_vers_range(low, high));
            let parses = Prefix::peek(&m).is_ok_and(|p| p.vers <= max)
                && AnyHeader::parse(&m, &Limits::default()).is_ok();
            for role in [Role::Requester, Role::Responder] {
                let got = classify(&m, &Limits::default(), max, role);
                prop_assert_eq!(got.is_ok(), svc || parses);
            }
        }
    }
}
