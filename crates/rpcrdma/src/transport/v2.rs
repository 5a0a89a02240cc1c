//! Version 2 rules of the endpoints that are not header coding
//! (draft-cel-nfsv4-rpcrdma-version-two-09): the size of the first
//! message (§7.1), the requester's answer to a resource error (§5.3.3)
//! and the reverse-direction support level (§4.2.2).

use bytes::Bytes;
use oncrpc::client::DdpReplyHint;

use crate::endpoint::requester::{Ddp, Resources};
use crate::plan::Version;
use crate::wire::v2::{self, ChunkLists2, Flags, RvReqSup};
use crate::wire::{v1, ChunkLists};

/// v2 draft §7.1: until the peer's version is known, a requester's first
/// message is at most 1024 bytes (the version 1 default inline size), so
/// a version 1 responder can receive it and answer ERR_VERS.
pub(super) const FIRST_MESSAGE_MAX: usize = 1024;

/// The first message of a version 2 connection (RDMA2_CONNPROP), refused
/// when it exceeds [`FIRST_MESSAGE_MAX`] (v2 draft §7.1).
pub(super) fn first_message(header: Bytes) -> Result<Bytes, rnic::PostError> {
    if header.len() > FIRST_MESSAGE_MAX {
        return Err(rnic::PostError::TooLong {
            len: header.len() as u64,
            max: FIRST_MESSAGE_MAX as u64,
        });
    }
    Ok(header)
}

/// The Reverse Request Support a requester advertises (v2 draft §4.2.2):
/// NONE without a backchannel; with one, GENL when it takes
/// reverse-direction calls with chunks, else INLINE.
pub(super) fn client_level(has_backchannel: bool, chunks: bool) -> RvReqSup {
    match (has_backchannel, chunks) {
        (false, _) => RvReqSup::RDMA2_RVREQSUP_NONE,
        (true, false) => RvReqSup::RDMA2_RVREQSUP_INLINE,
        (true, true) => RvReqSup::RDMA2_RVREQSUP_GENL,
    }
}

/// The requester's resources of `hint`, sans IO.
pub(super) fn resources(hint: oncrpc::ReplyHint) -> Resources {
    Resources {
        max_reply_len: hint.max_reply_len,
        ddp: hint.ddp.map(|d| Ddp {
            position: d.position,
            max_len: d.max_len,
        }),
    }
}

/// The reply hint of `r`.
pub(super) fn reply_hint(r: Resources) -> oncrpc::ReplyHint {
    oncrpc::ReplyHint {
        max_reply_len: r.max_reply_len,
        ddp: r.ddp.map(|d| DdpReplyHint {
            position: d.position,
            max_len: d.max_len,
        }),
    }
}

/// Whether a reverse-direction call of `len` bytes inline, or with
/// chunks when `chunks`, may be sent to a peer that advertised `level`
/// (v2 draft §4.2.2): NONE refuses every reverse-direction call, INLINE
/// accepts only those that fit its receive buffer, GENL accepts chunks too.
pub(super) fn reverse_allowed(level: RvReqSup, chunks: bool, len: usize, peer_rbs: usize) -> bool {
    match level {
        RvReqSup::RDMA2_RVREQSUP_INLINE => !chunks && len <= peer_rbs,
        RvReqSup::RDMA2_RVREQSUP_GENL => chunks || len <= peer_rbs,
        _ => false,
    }
}

/// The header of an inline reverse-direction message in the
/// connection's version: a call (`response` false) or a reply. In
/// version 2, RPCRDMA2_F_RESPONSE follows the RPC msg_type (v2 draft
/// §3.2) and rdma_inv_handle is zero, as there are no chunks to
/// invalidate (§3.3, §8.4.1).
pub(super) fn reverse_header(version: Version, xid: u32, credits: u32, response: bool) -> Bytes {
    match version {
        Version::V1 => xdr::to_bytes(&v1::Header {
            xid,
            credits,
            body: v1::Body::Msg(ChunkLists::default()),
        }),
        Version::V2 => xdr::to_bytes(&v2::Header {
            xid,
            credits,
            flags: if response {
                Flags::RESPONSE
            } else {
                Flags::default()
            },
            body: v2::Body::Msg(ChunkLists2::default()),
        }),
    }
}

/// Whether a reverse-direction call to a GENL client needs chunks
/// (v2 draft §4.2.2, RFC 8166 §3.5): the call of `call_len` bytes does
/// not fit the client's receive buffers (`peer_rbs`), or a reply of up to
/// `reply_max` bytes may not fit the server's own (`own_rbs`).
pub(super) fn reverse_needs_chunks(
    call_len: usize,
    peer_rbs: usize,
    reply_max: usize,
    own_rbs: usize,
) -> bool {
    call_len > peer_rbs || crate::plan::header_len(Version::V2, 0, &[], None) + reply_max > own_rbs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::message::{classify, Kind, Role, Rpc};
    use crate::endpoint::responder::server_level;
    use crate::wire::Limits;

    fn hint(max_reply_len: usize, ddp: Option<usize>) -> oncrpc::ReplyHint {
        oncrpc::ReplyHint {
            max_reply_len,
            ddp: ddp.map(|max_len| DdpReplyHint {
                position: 4,
                max_len,
            }),
        }
    }

    #[test]
    fn reply_hints_round_trip_through_resources() {
        for h in [hint(1100, Some(1000)), hint(200, None)] {
            assert_eq!(reply_hint(resources(h)), h);
        }
    }

    #[test]
    fn first_message_over_1024_bytes_is_refused() {
        assert!(first_message(Bytes::from(vec![0; 1024])).is_ok());
        assert!(first_message(Bytes::from(vec![0; 1025])).is_err());
    }

    #[test]
    fn reverse_headers_classify_as_reverse_messages() {
        for (version, response, msg_type, role) in [
            (Version::V1, false, 0u32, Role::Requester),
            (Version::V1, true, 1, Role::Responder),
            (Version::V2, false, 0, Role::Requester),
            (Version::V2, true, 1, Role::Responder),
        ] {
            let h = reverse_header(version, 0x77, 3, response);
            let mut m = h.to_vec();
            m.extend_from_slice(&[0, 0, 0, 0x77, 0, 0, 0, msg_type as u8]);
            let got = classify(&m, &Limits::default(), 2, role).unwrap();
            assert_eq!(
                (got.version, got.xid, got.credits, got.len),
                (version, 0x77, 3, h.len())
            );
            let inline = Rpc::default();
            let want = match role {
                Role::Requester => Kind::ReverseCall(inline),
                Role::Responder => Kind::ReverseReply(Ok(inline)),
            };
            assert_eq!(got.kind, want);
        }
    }

    #[test]
    fn v2_reverse_header_is_literal_rdma2_msg() {
        let h = reverse_header(Version::V2, 5, 2, false);
        let want: Vec<u8> = [5u32, 2, 2, 0, 0, 0, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(&h[..], &want[..]);
    }

    #[test]
    fn v2_message_whose_flag_contradicts_msg_type_is_not_reverse() {
        // A CALL with RPCRDMA2_F_RESPONSE set, and a REPLY without it.
        for (response, msg_type) in [(true, 0u8), (false, 1)] {
            let mut m = reverse_header(Version::V2, 9, 1, response).to_vec();
            m.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, msg_type]);
            let to_client = classify(&m, &Limits::default(), 2, Role::Requester).unwrap();
            assert!(matches!(to_client.kind, Kind::Reply(_)));
            let to_server = classify(&m, &Limits::default(), 2, Role::Responder).unwrap();
            assert!(matches!(to_server.kind, Kind::Call(_)));
        }
        // Truncated before msg_type.
        let m = reverse_header(Version::V2, 9, 1, false);
        let got = classify(&m, &Limits::default(), 2, Role::Requester).unwrap();
        assert!(matches!(got.kind, Kind::Reply(_)));
    }

    #[test]
    fn levels_advertised_follow_the_backchannel() {
        assert_eq!(client_level(true, false), RvReqSup::RDMA2_RVREQSUP_INLINE);
        assert_eq!(client_level(true, true), RvReqSup::RDMA2_RVREQSUP_GENL);
        assert_eq!(client_level(false, true), RvReqSup::RDMA2_RVREQSUP_NONE);
        assert_eq!(server_level(2), RvReqSup::RDMA2_RVREQSUP_GENL);
        assert_eq!(server_level(0), RvReqSup::RDMA2_RVREQSUP_NONE);
    }

    #[test]
    fn reverse_levels_gate_inline_and_chunked_calls() {
        use RvReqSup as L;
        assert!(!reverse_allowed(L::RDMA2_RVREQSUP_NONE, false, 10, 4096));
        assert!(reverse_allowed(L::RDMA2_RVREQSUP_INLINE, false, 4096, 4096));
        assert!(!reverse_allowed(
            L::RDMA2_RVREQSUP_INLINE,
            false,
            4097,
            4096
        ));
        assert!(!reverse_allowed(L::RDMA2_RVREQSUP_INLINE, true, 10, 4096));
        assert!(reverse_allowed(L::RDMA2_RVREQSUP_GENL, true, 10, 4096));
        assert!(reverse_allowed(L::RDMA2_RVREQSUP_GENL, false, 10, 4096));
        assert!(!reverse_allowed(L::RDMA2_RVREQSUP_GENL, false, 5000, 4096));
        assert!(!reverse_allowed(RvReqSup(7), false, 10, 4096));
    }
}
