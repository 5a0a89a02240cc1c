//! Version-generic header handling for the endpoints: one decode for
//! versions 1 and 2 (RFC 8166 §4; v2 draft §3, §5) and the encoders the
//! client and server use.

use bytes::Bytes;

use crate::plan::{PlanError, Version};
use crate::wire::v2::{self, ChunkLists2, Flags, Properties};
use crate::wire::{v1, AnyHeader, ChunkLists, HeaderError, Limits, Prefix};

/// What a received header asks of the endpoint.
#[derive(Debug)]
pub(super) enum Inbound {
    /// RDMA_MSG / RDMA_NOMSG (either version).
    Rpc {
        nomsg: bool,
        lists: ChunkLists,
        /// v2 rdma_inv_handle; zero in version 1.
        inv_handle: u32,
    },
    /// Version 1 RDMA_ERROR.
    ErrorV1(v1::ErrorBody),
    /// Version 2 RDMA2_ERROR.
    ErrorV2(v2::ErrorBody),
    /// RDMA2_CONNPROP, interpreted (v2 draft §4.1): `Err` means a known
    /// property with an ill-typed value.
    ConnProp(Result<Properties, v2::PropError>),
    /// RDMA_MSGP / RDMA_DONE: no longer part of the protocol
    /// (RFC 8166 §4.5).
    Obsolete,
}

/// A decoded header.
#[derive(Debug)]
pub(super) struct Received {
    pub(super) version: Version,
    pub(super) xid: u32,
    pub(super) credits: u32,
    pub(super) inbound: Inbound,
    /// Header length: the RPC message of an RDMA_MSG starts here.
    pub(super) len: usize,
}

/// Decodes a header of version 1, or 2 when `max_version` is 2; any other
/// version is [`HeaderError::UnsupportedVersion`].
pub(super) fn decode(
    buf: &[u8],
    limits: &Limits,
    max_version: u32,
) -> Result<Received, HeaderError> {
    let pre = Prefix::peek(buf)?;
    // An ERR_VERS in version 1 format that echoes the refused version
    // (Linux svcrdma does this).
    let foreign = v1::peek_foreign_err_vers(buf)
        .filter(|&(_, _, low, high)| super::v2::is_err_vers_range(low, high));
    if let Some((xid, credits, low, high)) = foreign {
        return Ok(Received {
            version: Version::V1,
            xid,
            credits,
            inbound: Inbound::ErrorV1(v1::ErrorBody::Vers { low, high }),
            len: buf.len(),
        });
    }
    if pre.vers > max_version {
        return Err(HeaderError::UnsupportedVersion(pre.vers));
    }
    let (h, len) = AnyHeader::parse(buf, limits)?;
    Ok(match h {
        AnyHeader::V1(h) => Received {
            version: Version::V1,
            xid: h.xid,
            credits: h.credits,
            len,
            inbound: match h.body {
                v1::Body::Msg(lists) => Inbound::Rpc {
                    nomsg: false,
                    lists,
                    inv_handle: 0,
                },
                v1::Body::NoMsg(lists) => Inbound::Rpc {
                    nomsg: true,
                    lists,
                    inv_handle: 0,
                },
                v1::Body::Error(e) => Inbound::ErrorV1(e),
                v1::Body::MsgP { .. } | v1::Body::Done => Inbound::Obsolete,
            },
        },
        AnyHeader::V2(h) => Received {
            version: Version::V2,
            xid: h.xid,
            credits: h.credits,
            len,
            inbound: match h.body {
                v2::Body::Msg(c) => Inbound::Rpc {
                    nomsg: false,
                    lists: c.lists,
                    inv_handle: c.inv_handle,
                },
                v2::Body::NoMsg(c) => Inbound::Rpc {
                    nomsg: true,
                    lists: c.lists,
                    inv_handle: c.inv_handle,
                },
                v2::Body::Error(e) => Inbound::ErrorV2(e),
                v2::Body::ConnProp(p) => Inbound::ConnProp(Properties::from_propset(&p)),
            },
        },
    })
}

/// An RDMA_MSG / RDMA_NOMSG header. `response` sets RPCRDMA2_F_RESPONSE in
/// version 2 (v2 draft §3.2).
pub(super) fn encode_rpc(
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
pub(super) fn encode_decode_error(
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
pub(super) fn encode_bad(version: Version, xid: u32, credits: u32) -> Bytes {
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
pub(super) fn encode_plan_error(version: Version, xid: u32, credits: u32, e: &PlanError) -> Bytes {
    match version {
        Version::V1 => encode_bad(version, xid, credits),
        Version::V2 => xdr::to_bytes(&v2::Header::error_reply(xid, credits, e.v2_error())),
    }
}

/// An RDMA2_CONNPROP advertising `props` (v2 draft §5.3.4).
pub(super) fn encode_connprop(xid: u32, credits: u32, response: bool, props: &Properties) -> Bytes {
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
