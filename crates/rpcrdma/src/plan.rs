//! Chunk planning and reassembly (RFC 8166 §3.4, §3.5), sans-IO.
//!
//! Sender side: [`plan_call`] and [`plan_reply`] decide how an RPC
//! message ([`xdr::XdrBuf`]) travels: inline in one Send (Short message),
//! with DDP-eligible items moved by read chunks (calls) or write chunks
//! (replies), or whole in a Position-Zero Read chunk / Reply chunk (Long
//! message, sent as RDMA_NOMSG as Linux does). Chunk data never includes
//! XDR padding (RFC 8166 §3.4.5).
//!
//! Receiver side: [`reassemble`] rebuilds the full XDR stream from the
//! inline (or Position-Zero / Reply chunk) bytes plus the data of each
//! chunk, reinserting the padding; chunk data stays zero-copy as bulk items
//! of the returned [`XdrBuf`].
//!
//! The planner assumes one RDMA segment per chunk: the transport registers
//! each chunk's buffer as one memory region.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use xdr::{BulkItem, Encoder, FileItem, FileSource, Segment, XdrBuf};

use crate::ulb::ReplyHint;
use crate::wire::cm::CmPrivateData;
use crate::wire::v1::Proc;
use crate::wire::{ChunkLists, RdmaSegment, ReadSegment, WriteChunk, PREFIX_LEN, SEGMENT_LEN};

/// Inline thresholds for one connection, per direction (RFC 8166 §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineThresholds {
    /// Largest message this endpoint may Send.
    pub send: usize,
    /// Largest message the peer may Send to this endpoint.
    pub recv: usize,
}

impl InlineThresholds {
    /// Thresholds from this endpoint's private data and the peer's (if
    /// any; RFC 8797 §4, 1024-byte defaults otherwise): a message never
    /// exceeds the sender's send size nor the receiver's receive size.
    pub fn negotiate(local: &CmPrivateData, peer: Option<&[u8]>) -> Self {
        let peer = CmPrivateData::from_peer(peer);
        Self {
            send: local.max_send_size.min(peer.max_recv_size) as usize,
            recv: local.max_recv_size.min(peer.max_send_size) as usize,
        }
    }
}

/// Which header encoding the plan's size arithmetic assumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// RPC-over-RDMA version 1 (RFC 8166).
    V1,
    /// Version 2: four more bytes of rdma_flags and four of
    /// rdma_inv_handle (v2 draft §3.2, §3.3).
    V2,
}

impl Version {
    fn extra(self) -> usize {
        match self {
            Version::V1 => 0,
            Version::V2 => 8,
        }
    }
}

/// Encoded length of an RDMA_MSG / RDMA_NOMSG header with `reads` read
/// segments, write chunks of the given segment counts and an optional
/// reply chunk of `reply` segments.
pub fn header_len(version: Version, reads: usize, writes: &[usize], reply: Option<usize>) -> usize {
    let lists = 3 * 4
        + reads * (4 + 4 + SEGMENT_LEN)
        + writes
            .iter()
            .map(|n| 4 + 4 + n * SEGMENT_LEN)
            .sum::<usize>()
        + reply.map_or(0, |n| 4 + n * SEGMENT_LEN);
    PREFIX_LEN + version.extra() + lists
}

/// Why no plan exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Even a header carrying only a Position-Zero Read chunk does not fit
    /// the threshold.
    #[error("inline threshold {threshold} too small for a {needed}-byte header")]
    ThresholdTooSmall {
        /// The send threshold.
        threshold: usize,
        /// The smallest header needed.
        needed: usize,
    },
    /// The message is longer than a 32-bit XDR position can name.
    #[error("message of {0} bytes too long")]
    TooLong(usize),
    /// A write chunk is smaller than the DDP-eligible result it must
    /// carry: RDMA2_ERR_WRITE_RESOURCE (v2 draft §5.3.3); version 1 can
    /// only say ERR_CHUNK.
    #[error("write chunk {chunk_index} needs {length_needed} bytes")]
    WriteResource {
        /// 1-based index of the write chunk.
        chunk_index: u32,
        /// Bytes it needed.
        length_needed: u32,
    },
    /// The reply does not fit inline and the reply chunk is absent or too
    /// small: RDMA2_ERR_REPLY_RESOURCE (v2 draft §5.3.3).
    #[error("reply needs a {length_needed}-byte reply chunk")]
    ReplyResource {
        /// Bytes of reply chunk needed.
        length_needed: u32,
    },
    /// The segments given to [`CallPlan::chunk_lists`] do not match the
    /// plan's chunks one for one.
    #[error("segment count does not match the plan")]
    SegmentMismatch,
}

impl PlanError {
    /// The version 2 error body a responder sends for this failure.
    pub fn v2_error(&self) -> crate::wire::v2::ErrorBody {
        use crate::wire::v2::ErrorBody;
        match *self {
            Self::WriteResource {
                chunk_index,
                length_needed,
            } => ErrorBody::WriteResource {
                chunk_index,
                length_needed,
            },
            Self::ReplyResource { length_needed } => ErrorBody::ReplyResource { length_needed },
            _ => ErrorBody::System,
        }
    }
}

/// Data a requester exposes for the responder to pull by RDMA Read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunkPlan {
    /// XDR position (RFC 8166 §3.4.5); zero for the Position-Zero chunk.
    pub position: u32,
    /// The bytes, without XDR padding; shared with the caller's buffer.
    pub data: Bytes,
}

/// How a call is conveyed (RFC 8166 §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPlan {
    /// RDMA_MSG (RPC message inline) or RDMA_NOMSG (Position-Zero Read
    /// chunk).
    pub proc_: Proc,
    /// The bytes that follow the transport header in the Send; empty for
    /// RDMA_NOMSG.
    pub inline: Bytes,
    /// Read chunks in position order: DDP-eligible arguments and, for a
    /// Long call, the Position-Zero chunk first.
    pub read_chunks: Vec<ReadChunkPlan>,
    /// Sizes of the write chunks to provision for DDP-eligible results.
    pub write_chunk_lens: Vec<u32>,
    /// Size of the reply chunk to provision, if the reply may not fit
    /// inline.
    pub reply_chunk_len: Option<u32>,
    /// Length of the transport header this plan needs.
    pub header_len: usize,
}

impl CallPlan {
    /// The chunk lists for the call's header, given the one segment the
    /// transport registered for each read chunk, write chunk and reply
    /// chunk, in plan order.
    pub fn chunk_lists(
        &self,
        reads: &[RdmaSegment],
        writes: &[RdmaSegment],
        reply: Option<RdmaSegment>,
    ) -> Result<ChunkLists, PlanError> {
        if reads.len() != self.read_chunks.len()
            || writes.len() != self.write_chunk_lens.len()
            || reply.is_some() != self.reply_chunk_len.is_some()
        {
            return Err(PlanError::SegmentMismatch);
        }
        Ok(ChunkLists {
            reads: self
                .read_chunks
                .iter()
                .zip(reads)
                .map(|(c, s)| ReadSegment {
                    position: c.position,
                    target: *s,
                })
                .collect(),
            writes: writes
                .iter()
                .map(|s| WriteChunk { segments: vec![*s] })
                .collect(),
            reply: reply.map(|s| WriteChunk { segments: vec![s] }),
        })
    }
}

fn u32_len(n: usize) -> Result<u32, PlanError> {
    u32::try_from(n).map_err(|_| PlanError::TooLong(n))
}

/// Plans a call (RFC 8166 §3.5). `send`/`recv` are the inline thresholds
/// ([`InlineThresholds`]); `hint` sizes the reply resources.
///
/// - Short call: transport header plus the whole message fit `send`:
///   RDMA_MSG, everything inline (RFC 8166 §3.5.1).
/// - Otherwise each non-empty DDP-eligible argument goes in a read chunk at
///   its position, and the reduced message goes inline if it fits
///   (RFC 8166 §3.5.2).
/// - Otherwise a Long call: RDMA_NOMSG with the (reduced) message in a
///   Position-Zero Read chunk (RFC 8166 §3.5.3).
///
/// Reply resources: when the largest reply plus its header exceeds `recv`,
/// a write chunk for the DDP-eligible result (if any) and a reply chunk
/// for the rest when that still may not fit (RFC 8166 §3.5.3, §3.4.6).
pub fn plan_call(
    msg: &XdrBuf,
    thresholds: InlineThresholds,
    hint: ReplyHint,
    version: Version,
) -> Result<CallPlan, PlanError> {
    u32_len(msg.len())?;
    let ddp_total = hint.ddp_max.map_or(0, xdr::padded_len);
    let mut write_chunk_lens = Vec::new();
    let mut reply_chunk_len = None;
    let bare_reply_hdr = header_len(version, 0, &[], None);
    if bare_reply_hdr + hint.max_inline + ddp_total > thresholds.recv {
        if let Some(n) = hint.ddp_max.filter(|&n| n > 0) {
            write_chunk_lens.push(u32_len(n)?);
        }
        let wl: Vec<usize> = write_chunk_lens.iter().map(|_| 1).collect();
        let reply_hdr = header_len(version, 0, &wl, Some(1));
        let rest = if write_chunk_lens.is_empty() {
            hint.max_inline + ddp_total
        } else {
            hint.max_inline
        };
        if reply_hdr + rest > thresholds.recv {
            reply_chunk_len = Some(u32_len(rest)?);
        }
    }
    let wl: Vec<usize> = write_chunk_lens.iter().map(|_| 1).collect();
    let reply_segs = reply_chunk_len.map(|_| 1);
    let mk = |proc_, inline: Bytes, read_chunks: Vec<ReadChunkPlan>| {
        let header_len = header_len(version, read_chunks.len(), &wl, reply_segs);
        CallPlan {
            proc_,
            inline,
            read_chunks,
            write_chunk_lens: write_chunk_lens.clone(),
            reply_chunk_len,
            header_len,
        }
    };

    // Short message: everything inline.
    if header_len(version, 0, &wl, reply_segs) + msg.len() <= thresholds.send {
        return Ok(mk(Proc::RDMA_MSG, msg.to_bytes(), Vec::new()));
    }
    // DDP-eligible arguments by read chunk.
    let is_moved = |i: &xdr::BulkItem| i.ddp_eligible && !i.data.is_empty();
    let mut ddp = Vec::new();
    for item in msg.bulk_items().filter(|i| is_moved(i)) {
        ddp.push(ReadChunkPlan {
            position: u32_len(item.position)?,
            data: item.data.clone(),
        });
    }
    let reduced = if ddp.is_empty() {
        msg.to_bytes()
    } else {
        msg.reduced_bytes_with(is_moved)
    };
    if !ddp.is_empty()
        && header_len(version, ddp.len(), &wl, reply_segs) + reduced.len() <= thresholds.send
    {
        return Ok(mk(Proc::RDMA_MSG, reduced, ddp));
    }
    // Long call: Position-Zero Read chunk.
    let needed = header_len(version, ddp.len() + 1, &wl, reply_segs);
    if needed > thresholds.send {
        return Err(PlanError::ThresholdTooSmall {
            threshold: thresholds.send,
            needed,
        });
    }
    let mut chunks = Vec::with_capacity(ddp.len() + 1);
    chunks.push(ReadChunkPlan {
        position: 0,
        data: reduced,
    });
    chunks.extend(ddp);
    Ok(mk(Proc::RDMA_NOMSG, Bytes::new(), chunks))
}

/// One RDMA Write the responder posts before its reply Send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePlan {
    /// Where: the requester's handle and offset, and the bytes written.
    pub target: RdmaSegment,
    /// What, zero-copy from the reply buffer or still in a file.
    pub data: WriteData,
}

/// What one RDMA Write of a reply carries.
#[derive(Debug, Clone)]
pub enum WriteData {
    /// Bytes in memory, shared with the reply buffer.
    Bytes(Bytes),
    /// `len` bytes of an open file at `offset` that the service left
    /// unread ([`xdr::FileItem`]): the transport's device sends them from
    /// the file, or reads them in. Missing bytes of a file that shrank
    /// are sent as zeros.
    File {
        /// The file.
        file: Arc<dyn FileSource>,
        /// Where the bytes start in the file.
        offset: u64,
        /// How many bytes.
        len: usize,
    },
}

impl WriteData {
    /// Bytes carried.
    pub fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::File { len, .. } => *len,
        }
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they are in memory.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::File { .. } => None,
        }
    }

    /// The `n` bytes at `off`, which must lie within.
    fn slice(&self, off: usize, n: usize) -> Self {
        match self {
            Self::Bytes(b) => Self::Bytes(b.slice(off..off + n)),
            Self::File { file, offset, .. } => Self::File {
                file: Arc::clone(file),
                offset: offset + off as u64,
                len: n,
            },
        }
    }
}

/// The same bytes: equal in-memory bytes, or the same range of the same
/// open file.
impl PartialEq for WriteData {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Bytes(a), Self::Bytes(b)) => a == b,
            (
                Self::File { file, offset, len },
                Self::File {
                    file: f2,
                    offset: o2,
                    len: l2,
                },
            ) => Arc::ptr_eq(file, f2) && (offset, len) == (o2, l2),
            _ => false,
        }
    }
}

impl Eq for WriteData {}

/// A DDP-eligible result of a reply (RFC 8166 §3.4): in memory or still
/// in a file.
enum Item<'a> {
    Bulk(&'a BulkItem),
    File(&'a FileItem),
}

impl Item<'_> {
    fn position(&self) -> usize {
        match self {
            Self::Bulk(b) => b.position,
            Self::File(f) => f.position,
        }
    }

    fn data(&self) -> WriteData {
        match self {
            Self::Bulk(b) => WriteData::Bytes(b.data.clone()),
            Self::File(f) => WriteData::File {
                file: Arc::clone(&f.file),
                offset: f.offset,
                len: f.len,
            },
        }
    }
}

/// The DDP-eligible results of `reply` in stream order.
fn ddp_results(reply: &XdrBuf) -> impl Iterator<Item = Item<'_>> + '_ {
    reply.segments().filter_map(|s| match s {
        Segment::Bulk(b) if b.ddp_eligible => Some(Item::Bulk(b)),
        Segment::File(f) if f.ddp_eligible => Some(Item::File(f)),
        _ => None,
    })
}

/// The stream positions of the file ranges of `reply` that
/// [`plan_reply`] moves by write chunk (a DDP-eligible result paired with
/// a non-empty chunk that holds it, RFC 8166 §3.4.6). Every other file
/// range stays in the Send or the reply chunk, whose bytes the transport
/// must read in ([`XdrBuf::load_files_where`]) before planning.
pub fn files_by_chunk(reply: &XdrBuf, call: &ChunkLists) -> Vec<usize> {
    call.writes
        .iter()
        .zip(ddp_results(reply))
        .filter_map(|(chunk, item)| match item {
            Item::File(f) if chunk.total_len() != 0 && f.len as u64 <= chunk.total_len() => {
                Some(f.position)
            }
            _ => None,
        })
        .collect()
}

/// Bytes that follow the transport header in one Send, as
/// reference-counted pieces (a gather list): a reply's data is sent from
/// where the service put it, not copied to join its header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pieces(pub Vec<Bytes>);

impl Pieces {
    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Bytes::is_empty)
    }

    /// The pieces joined (one copy unless there is at most one piece).
    pub fn to_bytes(&self) -> Bytes {
        match self.0.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = bytes::BytesMut::with_capacity(self.len());
                for p in many {
                    out.extend_from_slice(p);
                }
                out.freeze()
            }
        }
    }
}

/// How a reply is conveyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyPlan {
    /// RDMA_MSG, or RDMA_NOMSG when the whole reply went into the reply
    /// chunk (as Linux svcrdma does, kpeer README).
    pub proc_: Proc,
    /// Bytes after the transport header in the Send.
    pub inline: Pieces,
    /// RDMA Writes to post first, in order.
    pub writes: Vec<WritePlan>,
    /// Chunk lists for the reply header: the call's write chunks with each
    /// segment's length set to the bytes written, and the reply chunk
    /// likewise when it was used (RFC 8166 §3.4.6, §3.4.7).
    pub chunks: ChunkLists,
}

/// Spreads `data` over `chunk`'s segments in order; returns the writes
/// and the chunk as echoed with the lengths written.
fn scatter(data: &WriteData, chunk: &WriteChunk) -> (Vec<WritePlan>, WriteChunk) {
    let mut writes = Vec::new();
    let mut echo = Vec::with_capacity(chunk.segments.len());
    let mut off = 0usize;
    for seg in &chunk.segments {
        let n = (seg.length as usize).min(data.len() - off);
        if n > 0 {
            writes.push(WritePlan {
                target: RdmaSegment {
                    length: n as u32,
                    ..*seg
                },
                data: data.slice(off, n),
            });
        }
        off += n;
        echo.push(RdmaSegment {
            length: n as u32,
            ..*seg
        });
    }
    (writes, WriteChunk { segments: echo })
}

/// Plans a reply (RFC 8166 §3.5) given the chunks the call offered.
///
/// DDP-eligible results are matched in order with the call's write chunks
/// and written there without padding (RFC 8166 §3.4.6); results beyond the
/// offered chunks stay inline. The reduced reply goes inline when it fits
/// `send`, else whole into the reply chunk as RDMA_NOMSG (RFC 8166 §3.5.3).
/// A write chunk too small is [`PlanError::WriteResource`]; a reply that
/// fits neither is [`PlanError::ReplyResource`].
///
/// A result still in a file ([`xdr::FileItem`]) is moved as
/// [`WriteData::File`]; the reply must hold no other file range (the
/// transport reads those in first, [`files_by_chunk`]): the inline bytes
/// are taken from memory.
pub fn plan_reply(
    reply: &XdrBuf,
    call: &ChunkLists,
    send: usize,
    version: Version,
) -> Result<ReplyPlan, PlanError> {
    u32_len(reply.len())?;
    let mut writes = Vec::new();
    let mut echoed = Vec::with_capacity(call.writes.len());
    let mut moved = Vec::new();
    let items = ddp_results(reply);
    // Write chunks pair with the reply's DDP-eligible items in order; an
    // item beyond the last chunk stays inline, and so does one whose chunk
    // is empty (ULB v2 draft §5.4.1: "an empty write chunk" asks for the
    // result inline).
    for (idx, (chunk, item)) in call.writes.iter().zip(items).enumerate() {
        if chunk.total_len() == 0 {
            let (_, echo) = scatter(&WriteData::Bytes(Bytes::new()), chunk);
            echoed.push(echo);
            continue;
        }
        let data = item.data();
        if data.len() as u64 > chunk.total_len() {
            return Err(PlanError::WriteResource {
                chunk_index: u32_len(idx + 1)?,
                length_needed: u32_len(data.len())?,
            });
        }
        let (w, echo) = scatter(&data, chunk);
        writes.extend(w);
        echoed.push(echo);
        moved.push(item.position());
    }
    debug_assert!(
        reply.segments().all(|s| match s {
            Segment::File(f) => moved.contains(&f.position),
            _ => true,
        }),
        "a file range that stays inline was not read in"
    );
    for chunk in call.writes.iter().skip(echoed.len()) {
        let (_, echo) = scatter(&WriteData::Bytes(Bytes::new()), chunk);
        echoed.push(echo);
    }
    // RFC 8166 §3.5.1: what is not moved goes inline, by reference (a 4 KiB
    // READ reply's data is not copied next to its header).
    let inline =
        Pieces(reply.reduced_pieces_with(|i| i.ddp_eligible && moved.contains(&i.position)));
    let seg_counts: Vec<usize> = echoed.iter().map(|c| c.segments.len()).collect();
    if header_len(version, 0, &seg_counts, None) + inline.len() <= send {
        return Ok(ReplyPlan {
            proc_: Proc::RDMA_MSG,
            inline,
            writes,
            chunks: ChunkLists {
                reads: Vec::new(),
                writes: echoed,
                reply: None,
            },
        });
    }
    let needed = u32_len(inline.len())?;
    match &call.reply {
        Some(rc) if rc.total_len() >= u64::from(needed) => {
            let (w, echo) = scatter(&WriteData::Bytes(inline.to_bytes()), rc);
            writes.extend(w);
            Ok(ReplyPlan {
                proc_: Proc::RDMA_NOMSG,
                inline: Pieces::default(),
                writes,
                chunks: ChunkLists {
                    reads: Vec::new(),
                    writes: echoed,
                    reply: Some(echo),
                },
            })
        }
        _ => Err(PlanError::ReplyResource {
            length_needed: needed,
        }),
    }
}

/// Why received pieces do not form an XDR stream; a responder answers
/// ERR_CHUNK / RDMA2_ERR_BAD_XDR (RFC 8166 §4.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReassemblyError {
    /// Chunk positions overlap, repeat or go backwards.
    #[error("chunk at position {0} overlaps the previous one")]
    Overlap(u32),
    /// A chunk's position lies beyond the inline stream, or leaves no room
    /// for the item's length word.
    #[error("chunk position {0} outside the message")]
    BadPosition(u32),
    /// The length word before a chunk's position disagrees with the chunk
    /// data length.
    #[error("item at {position} declares {declared} bytes, chunk holds {actual}")]
    LengthMismatch {
        /// The chunk's position.
        position: u32,
        /// The XDR length word.
        declared: u32,
        /// Bytes in the chunk.
        actual: usize,
    },
    /// A Position-Zero Read chunk alongside inline RPC bytes, or more than
    /// one Position-Zero chunk.
    #[error("ambiguous position-zero chunk")]
    PositionZero,
}

/// Rebuilds the full XDR stream (RFC 8166 §3.4.5, §3.4.6): `base` is the
/// reduced stream (the inline bytes, or the Position-Zero / Reply chunk
/// contents), `inserts` the `(position, data)` of each chunk-borne item in
/// full-stream coordinates. Each item's length word must already be in
/// `base`, just before its position; its padding is reinserted. Item data
/// stays zero-copy as DDP-eligible bulk items of the result.
pub fn reassemble(base: Bytes, inserts: &[(u32, Bytes)]) -> Result<XdrBuf, ReassemblyError> {
    let mut sorted: Vec<&(u32, Bytes)> = inserts.iter().collect();
    sorted.sort_by_key(|(p, _)| *p);
    let mut out = XdrBuf::new();
    let mut base_off = 0usize;
    for (pos, data) in sorted {
        let p = *pos as usize;
        let full = out.len();
        if p < full + 4 {
            return Err(if p < full {
                ReassemblyError::Overlap(*pos)
            } else {
                ReassemblyError::BadPosition(*pos)
            });
        }
        let take = p - full;
        let Some(head) = base.get(base_off..base_off + take) else {
            return Err(ReassemblyError::BadPosition(*pos));
        };
        let (raw, word) = head.split_at(take - 4);
        let declared = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        if declared as usize != data.len() {
            return Err(ReassemblyError::LengthMismatch {
                position: *pos,
                declared,
                actual: data.len(),
            });
        }
        out.put_raw(raw);
        out.put_bulk(data.clone(), true);
        base_off += take;
    }
    if let Some(rest) = base.get(base_off..) {
        out.put_raw(rest);
    }
    Ok(out)
}

/// Reassembles a received call (RFC 8166 §3.5): `inline` is what followed
/// the header in the Send, `pulled` the data the responder read for each
/// read chunk, as `(position, bytes)`. A Position-Zero chunk supplies the
/// base stream (the Send must then carry no RPC bytes).
pub fn reassemble_call(inline: Bytes, pulled: &[(u32, Bytes)]) -> Result<XdrBuf, ReassemblyError> {
    let mut zero = pulled.iter().filter(|(p, _)| *p == 0);
    let base = match (zero.next(), zero.next()) {
        (None, _) => inline,
        (Some((_, b)), None) if inline.is_empty() => b.clone(),
        _ => return Err(ReassemblyError::PositionZero),
    };
    let rest: Vec<(u32, Bytes)> = pulled.iter().filter(|(p, _)| *p != 0).cloned().collect();
    reassemble(base, &rest)
}

/// The bytes a write or reply chunk received, as echoed in the reply
/// header: each segment's first `length` bytes, fetched with `read`
/// (normally a slice of the requester's registered buffer). Zero-copy when
/// one segment holds everything.
pub fn chunk_contents(
    echo: &WriteChunk,
    mut read: impl FnMut(&RdmaSegment) -> Option<Bytes>,
) -> Option<Bytes> {
    let mut parts = Vec::new();
    for seg in echo.segments.iter().filter(|s| s.length > 0) {
        let b = read(seg)?;
        parts.push(
            b.get(..seg.length as usize)
                .map(|_| b.slice(..seg.length as usize))?,
        );
    }
    Some(match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut m = BytesMut::new();
            for p in &parts {
                m.extend_from_slice(p);
            }
            m.freeze()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::CmFlags;

    const T4K: InlineThresholds = InlineThresholds {
        send: 4096,
        recv: 4096,
    };

    fn seg(handle: u32, length: u32) -> RdmaSegment {
        RdmaSegment {
            handle,
            length,
            offset: u64::from(handle) << 32,
        }
    }

    /// An RPC-ish message: `head` words, a bulk item, two trailing words.
    fn msg(head: usize, bulk: usize, ddp: bool) -> XdrBuf {
        let mut b = XdrBuf::new();
        for i in 0..head {
            b.put_u32(i as u32);
        }
        b.put_bulk(Bytes::from(vec![0x5a; bulk]), ddp);
        b.put_u32(0xfeed);
        b.put_u32(0xbeef);
        b
    }

    #[test]
    fn negotiates_thresholds_from_private_data() {
        let local = CmPrivateData::new(CmFlags(0), 8192, 8192);
        let t = InlineThresholds::negotiate(&local, Some(&[0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]));
        assert_eq!(t, T4K);
        let t = InlineThresholds::negotiate(&local, None);
        assert_eq!((t.send, t.recv), (1024, 1024));
    }

    #[test]
    fn header_len_matches_encoder() {
        let lists = ChunkLists {
            reads: vec![ReadSegment::default(); 2],
            writes: vec![WriteChunk {
                segments: vec![seg(1, 2); 3],
            }],
            reply: Some(WriteChunk {
                segments: vec![seg(3, 4)],
            }),
        };
        let h = crate::wire::v1::Header {
            xid: 1,
            credits: 1,
            body: crate::wire::v1::Body::Msg(lists.clone()),
        };
        assert_eq!(header_len(Version::V1, 2, &[3], Some(1)), h.buffer_len());
        let h2 = crate::wire::v2::Header {
            xid: 1,
            credits: 1,
            flags: crate::wire::v2::Flags::default(),
            body: crate::wire::v2::Body::Msg(crate::wire::v2::ChunkLists2 {
                inv_handle: 0,
                lists,
            }),
        };
        assert_eq!(header_len(Version::V2, 2, &[3], Some(1)), h2.buffer_len());
    }

    #[test]
    fn short_call_goes_inline() {
        let m = msg(20, 100, true);
        let p = plan_call(&m, T4K, ReplyHint::default(), Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_MSG);
        assert_eq!(p.inline, m.to_bytes());
        assert!(p.read_chunks.is_empty() && p.write_chunk_lens.is_empty());
        assert_eq!(p.reply_chunk_len, None);
        assert_eq!(p.header_len, 28);
    }

    #[test]
    fn large_write_moves_data_by_read_chunk_without_pad() {
        let m = msg(28, 102_401, true);
        let p = plan_call(&m, T4K, ReplyHint::default(), Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_MSG);
        assert_eq!(p.read_chunks.len(), 1);
        assert_eq!(p.read_chunks[0].position, 28 * 4 + 4);
        assert_eq!(p.read_chunks[0].data.len(), 102_401);
        assert_eq!(p.inline.len(), 28 * 4 + 4 + 8);
        assert!(p.header_len + p.inline.len() <= 4096);
        let (_, data) = m.ddp_items().next().unwrap();
        assert_eq!(p.read_chunks[0].data.as_ptr(), data.as_ptr(), "zero-copy");
    }

    #[test]
    fn long_call_without_ddp_uses_position_zero() {
        let m = msg(10, 5000, false);
        let p = plan_call(&m, T4K, ReplyHint::default(), Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_NOMSG);
        assert!(p.inline.is_empty());
        assert_eq!(p.read_chunks.len(), 1);
        assert_eq!(p.read_chunks[0].position, 0);
        assert_eq!(p.read_chunks[0].data, m.to_bytes());
    }

    #[test]
    fn long_call_with_ddp_sends_reduced_stream_in_position_zero() {
        let m = msg(2000, 9000, true);
        let p = plan_call(&m, T4K, ReplyHint::default(), Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_NOMSG);
        let pos: Vec<u32> = p.read_chunks.iter().map(|c| c.position).collect();
        assert_eq!(pos, [0, 8004]);
        assert_eq!(p.read_chunks[0].data.len(), m.len() - xdr::padded_len(9000));
    }

    #[test]
    fn rejects_threshold_smaller_than_header() {
        let m = msg(100, 10, false);
        let t = InlineThresholds {
            send: 40,
            recv: 4096,
        };
        assert_eq!(
            plan_call(&m, t, ReplyHint::default(), Version::V1),
            Err(PlanError::ThresholdTooSmall {
                threshold: 40,
                needed: 52
            })
        );
    }

    #[test]
    fn provisions_write_chunk_for_large_read_reply() {
        let hint = ReplyHint {
            max_inline: 140,
            ddp_max: Some(102_400),
        };
        let p = plan_call(&msg(20, 0, false), T4K, hint, Version::V1).unwrap();
        assert_eq!(p.write_chunk_lens, [102_400]);
        assert_eq!(p.reply_chunk_len, None);
        assert_eq!(p.header_len, 52);
    }

    #[test]
    fn provisions_reply_chunk_for_large_reply_and_none_for_small() {
        let big = ReplyHint {
            max_inline: 32_768,
            ddp_max: None,
        };
        let p = plan_call(&msg(20, 0, false), T4K, big, Version::V1).unwrap();
        assert_eq!(p.write_chunk_lens, Vec::<u32>::new());
        assert_eq!(p.reply_chunk_len, Some(32_768));
        let small = ReplyHint {
            max_inline: 4000,
            ddp_max: Some(16),
        };
        let p = plan_call(&msg(20, 0, false), T4K, small, Version::V1).unwrap();
        assert!(p.write_chunk_lens.is_empty());
        assert_eq!(p.reply_chunk_len, None);
    }

    #[test]
    fn chunk_lists_need_one_segment_per_chunk() {
        let hint = ReplyHint {
            max_inline: 9000,
            ddp_max: Some(9000),
        };
        let p = plan_call(&msg(10, 9000, true), T4K, hint, Version::V1).unwrap();
        assert_eq!(
            p.chunk_lists(&[], &[seg(2, 9000)], Some(seg(3, 9000))),
            Err(PlanError::SegmentMismatch)
        );
        let cl = p
            .chunk_lists(&[seg(1, 9000)], &[seg(2, 9000)], Some(seg(3, 9000)))
            .unwrap();
        assert_eq!(cl.reads[0].position, 44);
        assert_eq!(cl.writes.len(), 1);
        assert!(cl.reply.is_some());
    }

    #[test]
    fn reply_data_goes_to_write_chunk_and_rest_inline() {
        let reply = msg(30, 10_001, true);
        let call = ChunkLists {
            writes: vec![WriteChunk {
                segments: vec![seg(7, 6000), seg(8, 6000)],
            }],
            ..ChunkLists::default()
        };
        let p = plan_reply(&reply, &call, 4096, Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_MSG);
        assert_eq!(p.inline.len(), 30 * 4 + 4 + 8);
        let lens: Vec<u32> = p.writes.iter().map(|w| w.target.length).collect();
        assert_eq!(lens, [6000, 4001]);
        let echoed: Vec<u32> = p.chunks.writes[0]
            .segments
            .iter()
            .map(|s| s.length)
            .collect();
        assert_eq!(echoed, [6000, 4001]);
    }

    /// ULB v2 draft §5.4.1: write chunks pair with the DDP-eligible
    /// results in order, an empty write chunk leaves its result inline, and
    /// results beyond the last chunk go inline.
    #[test]
    fn pairs_write_chunks_in_order_with_empty_and_missing_chunks_inline() {
        let mut reply = XdrBuf::new();
        reply.put_u32(1);
        reply.put_bulk(Bytes::from(vec![0xa1; 100]), true);
        reply.put_u32(2);
        reply.put_bulk(Bytes::from(vec![0xb2; 3000]), true);
        reply.put_u32(3);
        reply.put_bulk(Bytes::from(vec![0xc3; 50]), true);
        let call = ChunkLists {
            writes: vec![
                WriteChunk {
                    segments: vec![seg(7, 0)],
                },
                WriteChunk {
                    segments: vec![seg(8, 4096)],
                },
            ],
            ..ChunkLists::default()
        };
        let p = plan_reply(&reply, &call, 4096, Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_MSG);
        assert_eq!(p.writes.len(), 1, "only the second result is moved");
        assert_eq!(p.writes[0].target.handle, 8);
        assert_eq!(
            p.writes[0].data,
            WriteData::Bytes(Bytes::from(vec![0xb2; 3000]))
        );
        let echoed: Vec<u32> = p
            .chunks
            .writes
            .iter()
            .map(|c| c.total_len() as u32)
            .collect();
        assert_eq!(echoed, [0, 3000]);
        // Inline: the first and third results with their data, the second
        // with its length word only.
        assert_eq!(p.inline.len(), reply.len() - 3000);
        let inline = p.inline.to_bytes();
        assert!(inline.windows(100).any(|w| w.iter().all(|&b| b == 0xa1)));
        assert!(inline.windows(50).any(|w| w.iter().all(|&b| b == 0xc3)));
    }

    #[test]
    fn reports_write_resource_when_write_chunk_too_small() {
        let reply = msg(30, 10_001, true);
        let call = ChunkLists {
            writes: vec![WriteChunk {
                segments: vec![seg(7, 10_000)],
            }],
            ..ChunkLists::default()
        };
        let err = plan_reply(&reply, &call, 4096, Version::V2).unwrap_err();
        assert_eq!(
            err,
            PlanError::WriteResource {
                chunk_index: 1,
                length_needed: 10_001
            }
        );
        assert_eq!(
            err.v2_error(),
            crate::wire::v2::ErrorBody::WriteResource {
                chunk_index: 1,
                length_needed: 10_001
            }
        );
    }

    #[test]
    fn long_reply_fills_reply_chunk_segments_in_order_as_nomsg() {
        // Shaped like kpeer v3 frame 61: 600-byte READDIRPLUS reply into
        // segments of 124, 256 + 0x7000 and 4 bytes.
        let mut reply = XdrBuf::new();
        reply.put_raw(&[7u8; 600]);
        let call = ChunkLists {
            reply: Some(WriteChunk {
                segments: vec![seg(1, 124), seg(2, 0x7100), seg(3, 4)],
            }),
            ..ChunkLists::default()
        };
        let p = plan_reply(&reply, &call, 512, Version::V1).unwrap();
        assert_eq!(p.proc_, Proc::RDMA_NOMSG);
        assert!(p.inline.is_empty());
        let echoed: Vec<u32> = p
            .chunks
            .reply
            .as_ref()
            .unwrap()
            .segments
            .iter()
            .map(|s| s.length)
            .collect();
        assert_eq!(echoed, [124, 476, 0]);
        assert_eq!(p.writes.len(), 2);
    }

    #[test]
    fn reports_reply_resource_without_big_enough_reply_chunk() {
        let mut reply = XdrBuf::new();
        reply.put_raw(&[7u8; 6000]);
        assert_eq!(
            plan_reply(&reply, &ChunkLists::default(), 4096, Version::V1),
            Err(PlanError::ReplyResource {
                length_needed: 6000
            })
        );
        let small = ChunkLists {
            reply: Some(WriteChunk {
                segments: vec![seg(1, 5999)],
            }),
            ..ChunkLists::default()
        };
        assert_eq!(
            plan_reply(&reply, &small, 4096, Version::V1),
            Err(PlanError::ReplyResource {
                length_needed: 6000
            })
        );
    }

    #[test]
    fn reassembles_call_with_read_chunk_and_pad() {
        let m = msg(28, 102_401, true);
        let p = plan_call(&m, T4K, ReplyHint::default(), Version::V1).unwrap();
        let pulled: Vec<(u32, Bytes)> = p
            .read_chunks
            .iter()
            .map(|c| (c.position, Bytes::copy_from_slice(&c.data)))
            .collect();
        let full = reassemble_call(p.inline.clone(), &pulled).unwrap();
        assert_eq!(full.to_bytes(), m.to_bytes());
        let (pos, data) = full.ddp_items().next().unwrap();
        assert_eq!(pos, 116);
        assert_eq!(data.as_ptr(), pulled[0].1.as_ptr(), "zero-copy");
    }

    #[test]
    fn rejects_overlapping_and_misplaced_chunks() {
        let base = Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1]);
        let d = Bytes::from_static(b"abcd");
        assert_eq!(
            reassemble(base.clone(), &[(4, d.clone()), (6, d.clone())]).unwrap_err(),
            ReassemblyError::Overlap(6)
        );
        assert_eq!(
            reassemble(base.clone(), &[(2, d.clone())]).unwrap_err(),
            ReassemblyError::BadPosition(2)
        );
        assert_eq!(
            reassemble(base.clone(), &[(400, d.clone())]).unwrap_err(),
            ReassemblyError::BadPosition(400)
        );
        assert_eq!(
            reassemble(base.clone(), &[(4, Bytes::from_static(b"abc"))]).unwrap_err(),
            ReassemblyError::LengthMismatch {
                position: 4,
                declared: 4,
                actual: 3
            }
        );
        let ok = reassemble(base.clone(), &[(4, d.clone()), (12, d.clone())]).unwrap();
        assert_eq!(ok.len(), 20);
        assert_eq!(
            reassemble_call(base.clone(), &[(0, base.clone())]).unwrap_err(),
            ReassemblyError::PositionZero
        );
    }

    #[test]
    fn chunk_contents_concatenates_written_segments() {
        let echo = WriteChunk {
            segments: vec![seg(1, 3), seg(2, 2), seg(3, 0)],
        };
        let mem = |s: &RdmaSegment| Some(Bytes::from(vec![s.handle as u8; 8]));
        assert_eq!(
            chunk_contents(&echo, mem).unwrap().as_ref(),
            &[1, 1, 1, 2, 2]
        );
        let one = WriteChunk {
            segments: vec![seg(1, 3)],
        };
        let buf = Bytes::from_static(b"xyzw");
        let got = chunk_contents(&one, |_| Some(buf.clone())).unwrap();
        assert_eq!(got.as_ptr(), buf.as_ptr());
        assert_eq!(
            chunk_contents(&one, |_| Some(Bytes::from_static(b"x"))),
            None
        );
    }

    /// A file as a reply's data source; planning never reads it.
    #[derive(Debug)]
    struct NoFile(std::fs::File);

    impl FileSource for NoFile {
        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            std::os::fd::AsFd::as_fd(&self.0)
        }

        fn read_at(&self, _: &mut [u8], _: u64) -> std::io::Result<usize> {
            unreachable!("planning reads no file")
        }
    }

    #[test]
    fn a_file_range_goes_by_write_chunk_as_the_range_and_stays_in_the_file() {
        let file: Arc<dyn FileSource> = Arc::new(NoFile(std::fs::File::open("/dev/null").unwrap()));
        let mut reply = XdrBuf::new();
        reply.put_u32(1);
        reply.put_file(Arc::clone(&file), 1000, 6000, true);
        reply.put_u32(2);
        // A second result beyond the one chunk stays inline: the transport
        // must read it in.
        reply.put_file(Arc::clone(&file), 9000, 100, true);
        let call = ChunkLists {
            writes: vec![WriteChunk {
                segments: vec![seg(8, 4096), seg(9, 4096)],
            }],
            ..ChunkLists::default()
        };
        let by_chunk = files_by_chunk(&reply, &call);
        assert_eq!(by_chunk, [8], "the first range, after its length word");
        assert!(!by_chunk.contains(&(8 + 6000 + 4 + 4)));
        // Once the inline range is in memory (as `load_files_where` leaves
        // it) the plan writes the first range from the file, split over
        // the chunk's two segments.
        let mut loaded = XdrBuf::new();
        loaded.put_u32(1);
        loaded.put_file(Arc::clone(&file), 1000, 6000, true);
        loaded.put_u32(2);
        loaded.put_bulk(Bytes::from(vec![0xc3; 100]), true);
        let p = plan_reply(&loaded, &call, 4096, Version::V1).unwrap();
        assert_eq!(p.writes.len(), 2);
        let ranges: Vec<(u32, Option<(u64, usize)>)> = p
            .writes
            .iter()
            .map(|w| {
                let r = match &w.data {
                    WriteData::File {
                        file: f,
                        offset,
                        len,
                    } => {
                        assert!(Arc::ptr_eq(f, &file));
                        Some((*offset, *len))
                    }
                    WriteData::Bytes(_) => None,
                };
                (w.target.handle, r)
            })
            .collect();
        assert_eq!(ranges, [(8, Some((1000, 4096))), (9, Some((5096, 1904)))]);
        assert_eq!(p.chunks.writes[0].total_len(), 6000);
        // Inline: everything but the moved range, the second result's
        // bytes included.
        assert_eq!(p.inline.len(), loaded.len() - 6000);
        assert!(p
            .inline
            .to_bytes()
            .windows(100)
            .any(|w| w.iter().all(|&b| b == 0xc3)));
    }
}
