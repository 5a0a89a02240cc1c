//! Version-generic header encoders of the endpoint (RFC 8166 §4; v2
//! draft §3, §5); the one decode of received headers is
//! [`super::message::classify`].

use bytes::Bytes;

use crate::plan::{PlanError, Version};
use crate::wire::v2::{self, ChunkLists2, Flags, Properties};
use crate::wire::{v1, ChunkLists, HeaderError, Prefix};

/// An RDMA_MSG / RDMA_NOMSG header. `response` sets RPCRDMA2_F_RESPONSE in
/// version 2 (v2 draft §3.2).
pub(crate) fn encode_rpc(
    version: Version,
    xid: u32,
    credits: u32,
    response: bool,
    nomsg: bool,
    lists: ChunkLists,
    inv_handle: u32,
) -> Bytes {
    match version {
        Version::V1 => {
            let body = if nomsg {
                v1::Body::NoMsg(lists)
            } else {
                v1::Body::Msg(lists)
            };
            xdr::to_bytes(&v1::Header { xid, credits, body })
        }
        Version::V2 => {
            let c = ChunkLists2 { inv_handle, lists };
            let body = if nomsg {
                v2::Body::NoMsg(c)
            } else {
                v2::Body::Msg(c)
            };
            let flags = if response {
                Flags::RESPONSE
            } else {
                Flags::default()
            };
            xdr::to_bytes(&v2::Header {
                xid,
                credits,
                flags,
                body,
            })
        }
    }
}

/// The error reply to a header that did not decode, or `None` when there
/// is no XID to answer. An unknown version is answered in version 1
/// format, which every peer reads (RFC 8166 §4.4.1; v2 draft §7.2).
pub(crate) fn encode_decode_error(
    buf: &[u8],
    err: &HeaderError,
    credits: impl FnOnce(u32) -> u32,
    max_version: u32,
) -> Option<Bytes> {
    let pre = Prefix::peek(buf).ok()?;
    let credits = credits(pre.credits);
    if pre.vers == v2::VERSION && max_version >= v2::VERSION {
        let body = v2::error_for(err, (v1::VERSION, max_version))?;
        return Some(xdr::to_bytes(&v2::Header::error_reply(
            pre.xid, credits, body,
        )));
    }
    let body = match err {
        HeaderError::UnsupportedVersion(_) => v1::ErrorBody::Vers {
            low: v1::VERSION,
            high: max_version,
        },
        e => v1::error_body_for(e)?,
    };
    Some(xdr::to_bytes(&v1::Header::error_reply(
        pre.xid, credits, body,
    )))
}

/// ERR_CHUNK (v1) or RDMA2_ERR_BAD_XDR (v2): the message is not usable.
pub(crate) fn encode_bad(version: Version, xid: u32, credits: u32) -> Bytes {
    match version {
        Version::V1 => xdr::to_bytes(&v1::Header::error_reply(xid, credits, v1::ErrorBody::Chunk)),
        Version::V2 => xdr::to_bytes(&v2::Header::error_reply(
            xid,
            credits,
            v2::ErrorBody::BadXdr,
        )),
    }
}

/// The error reply for a reply that could not be planned: v2 names the
/// resource (RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE, v2 draft §5.3.3);
/// v1 has only ERR_CHUNK.
pub(crate) fn encode_plan_error(version: Version, xid: u32, credits: u32, e: &PlanError) -> Bytes {
    match version {
        Version::V1 => encode_bad(version, xid, credits),
        Version::V2 => xdr::to_bytes(&v2::Header::error_reply(xid, credits, e.v2_error())),
    }
}

/// An RDMA2_CONNPROP advertising `props` (v2 draft §5.3.4).
pub(crate) fn encode_connprop(xid: u32, credits: u32, response: bool, props: &Properties) -> Bytes {
    let flags = if response {
        Flags::RESPONSE
    } else {
        Flags::default()
    };
    xdr::to_bytes(&v2::Header {
        xid,
        credits,
        flags,
        body: v2::Body::ConnProp(props.to_propset()),
    })
}
