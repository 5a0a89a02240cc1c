//! What the transport must know about an RPC program: the upper-layer
//! binding (RFC 8166 §6).
//!
//! `nfs::ulb::UpperLayerBinding` describes NFSv3 in more detail, but
//! `rpcrdma` sits below `nfs` (DESIGN.md), so this crate defines the
//! narrow interface it consumes; crates above both adapt one to the other.

/// How a requester provisions resources for the reply to one call
/// (RFC 8166 §3.5.3, §3.4.6, RFC 8267 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyHint {
    /// Largest reply RPC message in bytes (RPC reply header included),
    /// excluding the data and padding of the DDP-eligible result; its
    /// length word is included.
    pub max_inline: usize,
    /// Largest DDP-eligible result (data bytes, no padding), when the
    /// procedure has one: the Write chunk to provision.
    pub ddp_max: Option<usize>,
}

#[cfg(feature = "transport")]
impl From<oncrpc::ReplyHint> for ReplyHint {
    /// oncrpc's hint counts the DDP item (padded) in `max_reply_len`; this
    /// one keeps it apart.
    fn from(h: oncrpc::ReplyHint) -> Self {
        Self {
            max_inline: h
                .max_reply_len
                .saturating_sub(h.ddp.map_or(0, |d| xdr::padded_len(d.max_len))),
            ddp_max: h.ddp.map(|d| d.max_len),
        }
    }
}

/// An RPC program's binding to RPC-over-RDMA, as the transport uses it.
pub trait UpperLayerBinding {
    /// Reply resources for a call to `prog`/`vers`/`proc_` whose argument
    /// bytes (after the RPC call header) are `args`.
    fn reply_hint(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> ReplyHint;

    /// Where the DDP-eligible result's data sits in the full reply stream
    /// (the position just after its length word), given the reduced
    /// reply in which that data is absent; `None` when this reply carries
    /// no such item (an error status, say). The requester splices the
    /// Write chunk data there (RFC 8166 §3.4.6).
    fn reply_ddp_position(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        reduced_reply: &[u8],
    ) -> Option<usize>;
}

/// A binding for programs without DDP-eligible items whose replies never
/// exceed a fixed size (NULL-only services, echo tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoDdp {
    /// Largest reply RPC message.
    pub max_reply: usize,
}

impl UpperLayerBinding for NoDdp {
    fn reply_hint(&self, _: u32, _: u32, _: u32, _: &[u8]) -> ReplyHint {
        ReplyHint {
            max_inline: self.max_reply,
            ddp_max: None,
        }
    }

    fn reply_ddp_position(&self, _: u32, _: u32, _: u32, _: &[u8]) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_ddp_binding_never_asks_for_write_chunks() {
        let b = NoDdp { max_reply: 9000 };
        let h = b.reply_hint(1, 1, 1, &[]);
        assert_eq!(h.max_inline, 9000);
        assert_eq!(h.ddp_max, None);
        assert_eq!(b.reply_ddp_position(1, 1, 1, &[0; 8]), None);
    }

    #[cfg(feature = "transport")]
    #[test]
    fn converts_oncrpc_hint_keeping_ddp_item_apart() {
        let h = oncrpc::ReplyHint {
            max_reply_len: 64 + 1004,
            ddp: Some(oncrpc::client::DdpReplyHint {
                position: 4,
                max_len: 1001,
            }),
        };
        assert_eq!(
            ReplyHint::from(h),
            ReplyHint {
                max_inline: 64,
                ddp_max: Some(1001)
            }
        );
    }
}
