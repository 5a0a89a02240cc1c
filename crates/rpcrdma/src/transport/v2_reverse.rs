//! Reverse-direction calls with chunks, for peers that advertised
//! RDMA2_RVREQSUP_GENL (v2 draft §4.2.2): the server, as requester,
//! registers its call (Position-Zero Read chunk) and a reply chunk and
//! names one of them in rdma_inv_handle; the client, as responder, pulls
//! the call by RDMA Read, writes a long reply into the reply chunk and
//! answers with Send With Invalidate of that handle (§3.3, §8.4.1).

use bytes::{Bytes, BytesMut};
use oncrpc::RpcError;
use rnic::{
    Access, ChainWr, MemoryRegion, PostError, ProtectionDomain, QueuePair, ReadOnlyRegion, SendWr,
    Stag,
};
use xdr::XdrBuf;

use super::hdr;
use super::pull::ReadWaiters;
use super::reply::{chunk_bytes, fence};
use crate::endpoint::message::Rpc;
use crate::endpoint::reads::{plan_reads, read_total};
use crate::plan::{header_len, plan_reply, Version};
use crate::wire::v2;
use crate::wire::{ChunkLists, RdmaSegment, ReadSegment, WriteChunk};

/// Most bytes a client pulls by RDMA Read for one reverse-direction call.
pub(super) const PULL_MAX: u64 = 1 << 20;

/// Fences a reverse call's `regions` and returns its RPC reply from
/// `msg`, the reply as [`classify`](crate::endpoint::message::classify)
/// found it (`len` its header length): inline, or read back from the
/// reply chunk. A Send With Invalidate must name one of the call's STags
/// (v2 draft §8.4.1); otherwise, or on an RDMA2_ERROR, the call fails.
pub(super) fn resolve_reply(
    msg: &Bytes,
    len: usize,
    reply: Result<Rpc, v2::ErrorBody>,
    regions: Regions,
    invalidated: Option<Stag>,
) -> Result<Bytes, RpcError> {
    let foreign = invalidated.is_some_and(|s| !regions.owns(s));
    let bytes = match reply {
        Ok(r) if r.nomsg => regions.finish(r.lists.reply.as_ref()),
        Ok(_) => {
            regions.finish(None);
            msg.get(len..).map(|_| msg.slice(len..))
        }
        Err(e) => {
            regions.finish(None);
            return Err(RpcError::Transport(
                e.code().name().unwrap_or("RDMA2_ERROR"),
            ));
        }
    };
    if foreign {
        return Err(RpcError::Transport(
            "Send With Invalidate of a foreign STag",
        ));
    }
    bytes.ok_or(RpcError::Transport("reverse reply could not be read"))
}

/// Memory the server registered for one chunked reverse call.
#[derive(Default)]
pub(super) struct Regions {
    read: Option<ReadOnlyRegion>,
    reply: Option<MemoryRegion>,
}

impl Regions {
    /// Whether `stag` is one of this call's.
    pub(super) fn owns(&self, stag: Stag) -> bool {
        self.read.iter().any(|r| r.stag() == stag) || self.reply.iter().any(|r| r.stag() == stag)
    }

    /// Fences every region (RFC 8166 §3.4.3) and returns the reply held
    /// in the reply chunk, as `echo` says it was written.
    pub(super) fn finish(self, echo: Option<&WriteChunk>) -> Option<Bytes> {
        if let Some(r) = self.read {
            drop(r.invalidate());
        }
        match echo {
            Some(e) => chunk_bytes(e, self.reply),
            None => {
                fence(self.reply);
                None
            }
        }
    }
}

/// A reverse-direction call ready to send.
pub(super) struct Prepared {
    /// The transport header.
    pub(super) header: Bytes,
    /// What follows it in the Send.
    pub(super) inline: Bytes,
    /// Its registered memory.
    pub(super) regions: Regions,
}

/// Conveys a reverse-direction call to a GENL client (v2 draft §4.2.2):
/// inline when it fits the client's receive buffers (`peer_rbs`), else in
/// a Position-Zero Read chunk (RDMA2_NOMSG); a reply chunk of
/// `reply_max` bytes when the reply may not fit the server's own receive
/// buffers (`own_rbs`). rdma_inv_handle names the reply chunk, else the
/// read chunk (v2 draft §3.3, §8.4.1).
pub(super) fn prepare_call(
    pd: &ProtectionDomain,
    xid: u32,
    credits: u32,
    body: Bytes,
    reply_max: usize,
    peer_rbs: usize,
    own_rbs: usize,
) -> Result<Prepared, RpcError> {
    let reg_err = |_| RpcError::Transport("memory registration failed");
    let too_long = || RpcError::Transport("reverse-direction call too long");
    let mut regions = Regions::default();
    let mut lists = ChunkLists::default();
    if header_len(Version::V2, 0, &[], None) + reply_max > own_rbs {
        let n = u32::try_from(reply_max).map_err(|_| too_long())?;
        let mr = pd
            .register(BytesMut::zeroed(reply_max), Access::REMOTE_WRITE)
            .map_err(reg_err)?;
        lists.reply = Some(WriteChunk {
            segments: vec![RdmaSegment {
                handle: mr.stag().0,
                length: n,
                offset: mr.base_to(),
            }],
        });
        regions.reply = Some(mr);
    }
    let reply_segs = lists.reply.as_ref().map(|_| 1);
    let inline_fits = header_len(Version::V2, 0, &[], reply_segs) + body.len() <= peer_rbs;
    let inline = if inline_fits {
        body
    } else {
        let n = u32::try_from(body.len()).map_err(|_| too_long())?;
        let mr = pd.register_read_only(body, 0).map_err(reg_err)?;
        lists.reads.push(ReadSegment {
            position: 0,
            target: RdmaSegment {
                handle: mr.stag().0,
                length: n,
                offset: mr.base_to(),
            },
        });
        regions.read = Some(mr);
        Bytes::new()
    };
    let inv_handle = regions
        .reply
        .as_ref()
        .map(|m| m.stag().0)
        .or(regions.read.as_ref().map(|m| m.stag().0))
        .unwrap_or(0);
    let header = hdr::encode_rpc(
        Version::V2,
        xid,
        credits,
        false,
        !inline_fits,
        lists,
        inv_handle,
    );
    Ok(Prepared {
        header,
        inline,
        regions,
    })
}

/// Rebuilds a call from its inline part and read chunks, pulling each
/// segment by RDMA Read to its place in one buffer (RFC 8166 §3.5). At
/// most `max` bytes are pulled; `None` when the chunks do not fit the
/// inline stream, exceed `max`, or a Read fails.
pub(super) async fn pull<Q: QueuePair>(
    qp: &Q,
    pd: &ProtectionDomain,
    waiters: &ReadWaiters,
    wr_id: impl Fn() -> u64,
    inline: Bytes,
    lists: &ChunkLists,
    max: u64,
) -> Option<Bytes> {
    if lists.reads.is_empty() {
        return Some(inline);
    }
    if read_total(&lists.reads) > max {
        return None;
    }
    let plan = plan_reads(&inline, &lists.reads)?;
    // Reverse calls with chunks are rare: a fresh buffer each, no pool.
    let pool = super::pool::PullPool::new(0);
    let pulling = super::pull::start(qp, pd, &pool, waiters, wr_id, &inline, &plan).ok()?;
    pulling.finish().await
}

/// Sends the client's reply to a reverse-direction call (v2 draft
/// §4.2.2 GENL): inline when it fits `send`, else written into the
/// call's reply chunk (RDMA2_NOMSG); RDMA2_ERR_REPLY_RESOURCE when it
/// fits neither. RPCRDMA2_F_RESPONSE is set (§3.2) and the Send
/// invalidates the call's rdma_inv_handle, never when that is zero
/// (§3.3, §8.4.1).
pub(super) fn send_reply<Q: QueuePair>(
    qp: &Q,
    wr_id: impl Fn() -> u64,
    xid: u32,
    call: &Rpc,
    credits: u32,
    reply: &XdrBuf,
    send: usize,
) -> Result<(), PostError> {
    let plan = match plan_reply(reply, &call.lists, send, Version::V2) {
        Ok(p) => p,
        Err(e) => {
            let h = hdr::encode_plan_error(Version::V2, xid, credits, &e);
            return qp.post_send(SendWr {
                wr_id: wr_id(),
                data: vec![h],
                solicited: false,
                invalidate: None,
            });
        }
    };
    // The Writes and the Send of the reply go as one chain (one socket
    // write on the software device).
    let mut chain: Vec<ChainWr> = plan
        .writes
        .into_iter()
        .map(|w| super::server::write_wr(wr_id(), w))
        .collect();
    let nomsg = plan.proc_ == crate::wire::v1::Proc::RDMA_NOMSG;
    let header = hdr::encode_rpc(Version::V2, xid, credits, true, nomsg, plan.chunks, 0);
    let mut data = Vec::with_capacity(1 + plan.inline.0.len());
    data.push(header);
    data.extend(plan.inline.0);
    chain.push(ChainWr::Send(SendWr {
        wr_id: wr_id(),
        data,
        solicited: false,
        invalidate: (call.inv_handle != 0).then_some(Stag(call.inv_handle)),
    }));
    qp.post_chain(chain)
}
