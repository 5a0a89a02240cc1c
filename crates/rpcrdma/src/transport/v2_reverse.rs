//! Reverse-direction calls with chunks, for peers that advertised
//! RDMA2_RVREQSUP_GENL (v2 draft §4.2.2): the server, as requester,
//! registers its call (Position-Zero Read chunk) and a reply chunk and
//! names one of them in rdma_inv_handle; the client, as responder, pulls
//! the call by RDMA Read, writes a long reply into the reply chunk and
//! answers with Send With Invalidate of that handle (§3.3, §8.4.1).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use oncrpc::RpcError;
use rnic::{
    Access, ChainWr, MemoryRegion, PostError, ProtectionDomain, QueuePair, ReadOnlyRegion, ReadWr,
    SendWr, Stag, WcStatus, WriteWr,
};
use tokio::sync::oneshot;
use xdr::XdrBuf;

use super::hdr;
use super::reply::{chunk_bytes, fence};
use crate::layout::{plan_layout, Piece};
use crate::plan::{header_len, plan_reply, Version};
use crate::wire::v2;
use crate::wire::{ChunkLists, Limits, RdmaSegment, ReadSegment, WriteChunk};

/// Most bytes a client pulls by RDMA Read for one reverse-direction call.
pub(super) const PULL_MAX: u64 = 1 << 20;

/// RDMA Reads in flight, by work request id: the completion task hands
/// each status to the task that posted the Read.
#[derive(Default)]
pub(super) struct ReadWaiters(Mutex<HashMap<u64, oneshot::Sender<WcStatus>>>);

impl ReadWaiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<WcStatus>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Read `id` completed with `status`.
    pub(super) fn complete(&self, id: u64, status: WcStatus) {
        if let Some(tx) = self.lock().remove(&id) {
            let _ = tx.send(status);
        }
    }

    /// The connection is gone: every waiter sees its sender dropped.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}

/// rdma_flags of a version 2 header, read without decoding the rest, so
/// forward traffic is not decoded twice; `None` for other versions.
fn v2_flags(msg: &[u8]) -> Option<v2::Flags> {
    let pre = crate::wire::Prefix::peek(msg).ok()?;
    let w = msg.get(v2::HDR_PREFIX_LEN - 4..v2::HDR_PREFIX_LEN)?;
    (pre.vers == v2::VERSION).then(|| v2::Flags(u32::from_be_bytes([w[0], w[1], w[2], w[3]])))
}

/// A version 2 Msg / NoMsg header and where the RPC message starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct V2Rpc {
    /// rdma_xid.
    pub(super) xid: u32,
    /// rdma_credits.
    pub(super) credits: u32,
    /// RDMA2_NOMSG.
    pub(super) nomsg: bool,
    /// The chunk lists.
    pub(super) lists: ChunkLists,
    /// rdma_inv_handle.
    pub(super) inv_handle: u32,
    /// Header length.
    pub(super) len: usize,
}

/// A version 2 RDMA2_MSG / RDMA2_NOMSG carrying chunks whose
/// RPCRDMA2_F_RESPONSE is `response`: with the flag clear, a client
/// receives a reverse-direction call; with it set, a server receives a
/// reverse-direction reply (v2 draft §3.2). Inline-only messages are left
/// to [`super::v2::inline_rpc`].
pub(super) fn chunked(msg: &[u8], limits: &Limits, response: bool) -> Option<V2Rpc> {
    if v2_flags(msg)?.is_response() != response {
        return None;
    }
    let (h, len) = v2::Header::parse(msg, limits).ok()?;
    if h.flags.is_response() != response {
        return None;
    }
    let (nomsg, c) = match h.body {
        v2::Body::Msg(c) => (false, c),
        v2::Body::NoMsg(c) => (true, c),
        _ => return None,
    };
    (nomsg || !c.lists.is_empty()).then_some(V2Rpc {
        xid: h.xid,
        credits: h.credits,
        nomsg,
        lists: c.lists,
        inv_handle: c.inv_handle,
        len,
    })
}

/// A reply to one of the server's reverse-direction calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReplyIn {
    /// rdma_xid: the reverse call's XID.
    pub(super) xid: u32,
    /// rdma_credits: the client's backchannel grant.
    pub(super) credits: u32,
    kind: ReplyKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ReplyKind {
    /// RDMA_MSG / RDMA2_MSG with no chunks; the RPC reply starts here.
    Inline(usize),
    /// RDMA2_MSG / RDMA2_NOMSG with chunks (GENL).
    Chunked(V2Rpc),
    /// RDMA2_ERROR from the client as responder (v2 draft §5.3.3).
    Error(v2::ErrorBody),
}

/// Recognizes a reply to a reverse-direction call: an inline message of
/// msg_type REPLY (either version), a version 2 message with chunks and
/// RPCRDMA2_F_RESPONSE set, or an RDMA2_ERROR (v2 draft §3.2).
pub(super) fn reverse_reply(msg: &[u8], limits: &Limits) -> Option<ReplyIn> {
    // A forward call (version 2 with the flag clear) is not looked at
    // further.
    if v2_flags(msg).is_some_and(|f| !f.is_response()) {
        return None;
    }
    if let Some(r) = super::v2::inline_rpc(msg, limits).filter(|r| r.msg_type == 1) {
        return Some(ReplyIn {
            xid: r.xid,
            credits: r.credits,
            kind: ReplyKind::Inline(r.len),
        });
    }
    if let Some(c) = chunked(msg, limits, true) {
        return Some(ReplyIn {
            xid: c.xid,
            credits: c.credits,
            kind: ReplyKind::Chunked(c),
        });
    }
    v2_flags(msg)?;
    match v2::Header::parse(msg, limits).ok()? {
        (
            v2::Header {
                xid,
                credits,
                flags,
                body: v2::Body::Error(e),
            },
            _,
        ) if flags.is_response() => Some(ReplyIn {
            xid,
            credits,
            kind: ReplyKind::Error(e),
        }),
        _ => None,
    }
}

impl ReplyIn {
    /// Fences the call's `regions` and returns the RPC reply: inline, or
    /// read back from the reply chunk. A Send With Invalidate must name
    /// one of the call's STags (v2 draft §8.4.1); otherwise, or on an
    /// RDMA2_ERROR, the call fails.
    pub(super) fn resolve(
        self,
        msg: &Bytes,
        regions: Regions,
        invalidated: Option<Stag>,
    ) -> Result<Bytes, RpcError> {
        let foreign = invalidated.is_some_and(|s| !regions.owns(s));
        let inline = |len: usize| msg.get(len..).map(|_| msg.slice(len..));
        let bytes = match self.kind {
            ReplyKind::Inline(len) => {
                regions.finish(None);
                inline(len)
            }
            ReplyKind::Chunked(c) if c.nomsg => regions.finish(c.lists.reply.as_ref()),
            ReplyKind::Chunked(c) => {
                regions.finish(None);
                inline(c.len)
            }
            ReplyKind::Error(e) => {
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
    let total: u64 = lists.reads.iter().map(|r| u64::from(r.target.length)).sum();
    if total > max {
        return None;
    }
    let mut items: Vec<(u32, usize)> = Vec::new();
    let mut first: Vec<usize> = Vec::new();
    for (i, r) in lists.reads.iter().enumerate() {
        match items.last_mut() {
            Some((p, len)) if *p == r.position => *len += r.target.length as usize,
            _ => {
                items.push((r.position, r.target.length as usize));
                first.push(i);
            }
        }
    }
    let layout = plan_layout(&inline, &items).ok()?;
    let mut buf = BytesMut::zeroed(layout.len);
    if !layout.copy_inline(&inline, &mut buf) {
        return None;
    }
    let mr = pd.register(buf, Access::LOCAL_WRITE).ok()?;
    let mut waits = Vec::new();
    let mut ok = true;
    'pieces: for piece in &layout.pieces {
        let Piece::Chunk { index, dst, .. } = piece else {
            continue;
        };
        let (Some(&start), Some(&(pos, _))) = (first.get(*index), items.get(*index)) else {
            ok = false;
            break;
        };
        let mut off = *dst as u64;
        for r in lists
            .reads
            .iter()
            .skip(start)
            .take_while(|r| r.position == pos)
        {
            let id = wr_id();
            let (tx, rx) = oneshot::channel();
            waiters.lock().insert(id, tx);
            let wr = ReadWr {
                wr_id: id,
                local_stag: mr.stag(),
                local_to: mr.base_to() + off,
                len: r.target.length,
                remote_stag: Stag(r.target.handle),
                remote_to: r.target.offset,
            };
            off += u64::from(r.target.length);
            if qp.post_read(wr).is_err() {
                waiters.lock().remove(&id);
                ok = false;
                break 'pieces;
            }
            waits.push(rx);
        }
    }
    for rx in waits {
        ok &= matches!(rx.await, Ok(WcStatus::Success));
    }
    let buf = mr.invalidate().buf.freeze();
    ok.then_some(buf)
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
    call: &V2Rpc,
    credits: u32,
    reply: &XdrBuf,
    send: usize,
) -> Result<(), PostError> {
    let plan = match plan_reply(reply, &call.lists, send, Version::V2) {
        Ok(p) => p,
        Err(e) => {
            let h = hdr::encode_plan_error(Version::V2, call.xid, credits, &e);
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
        .map(|w| {
            ChainWr::Write(WriteWr {
                wr_id: wr_id(),
                data: vec![w.data],
                remote_stag: Stag(w.target.handle),
                remote_to: w.target.offset,
            })
        })
        .collect();
    let nomsg = plan.proc_ == crate::wire::v1::Proc::RDMA_NOMSG;
    let header = hdr::encode_rpc(Version::V2, call.xid, credits, true, nomsg, plan.chunks, 0);
    chain.push(ChainWr::Send(SendWr {
        wr_id: wr_id(),
        data: vec![header, plan.inline],
        solicited: false,
        invalidate: (call.inv_handle != 0).then_some(Stag(call.inv_handle)),
    }));
    qp.post_chain(chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::v2::{ChunkLists2, Flags, Header};

    fn header(flags: Flags, body: v2::Body) -> Vec<u8> {
        xdr::to_bytes(&Header {
            xid: 3,
            credits: 1,
            flags,
            body,
        })
        .to_vec()
    }

    fn pz() -> ChunkLists {
        ChunkLists {
            reads: vec![ReadSegment {
                position: 0,
                target: RdmaSegment {
                    handle: 9,
                    length: 100,
                    offset: 0,
                },
            }],
            ..ChunkLists::default()
        }
    }

    #[test]
    fn chunked_call_is_recognized_by_flag_and_chunks() {
        let c = ChunkLists2 {
            inv_handle: 9,
            lists: pz(),
        };
        let m = header(Flags::default(), v2::Body::NoMsg(c.clone()));
        let got = chunked(&m, &Limits::default(), false).unwrap();
        assert_eq!((got.xid, got.nomsg, got.inv_handle), (3, true, 9));
        assert_eq!(got.lists, pz());
        assert_eq!(got.len, m.len());
        // The same with RPCRDMA2_F_RESPONSE is a reply, not a call.
        assert!(chunked(&m, &Limits::default(), true).is_none());
        let r = header(Flags::RESPONSE, v2::Body::NoMsg(c));
        assert!(chunked(&r, &Limits::default(), true).is_some());
    }

    #[test]
    fn inline_only_message_is_not_chunked() {
        let m = header(Flags::default(), v2::Body::Msg(ChunkLists2::default()));
        assert!(chunked(&m, &Limits::default(), false).is_none());
        let v1 = xdr::to_bytes(&crate::wire::v1::Header {
            xid: 3,
            credits: 1,
            body: crate::wire::v1::Body::NoMsg(pz()),
        });
        assert!(chunked(&v1, &Limits::default(), false).is_none());
    }
}
