//! Reply-side helpers of the requester: fencing chunk regions and
//! rebuilding a reply from its inline part and chunk data
//! (RFC 8166 §3.4.3, §3.5).

use bytes::Bytes;
use oncrpc::client::decode_reply;
use rnic::MemoryRegion;

use super::pool::PullPool;
use crate::layout::plan_layout;
use crate::plan::{chunk_contents, reassemble};
use crate::wire::{RdmaSegment, WriteChunk};

/// Bytes of a fenced region named by an echoed segment.
pub(super) fn region_bytes(buf: &Bytes, base_to: u64, seg: &RdmaSegment) -> Option<Bytes> {
    let start = usize::try_from(seg.offset.checked_sub(base_to)?).ok()?;
    buf.get(start..).map(|_| buf.slice(start..))
}

/// Local invalidation of a region whose contents are not needed.
pub(super) fn fence(mr: Option<MemoryRegion>) {
    if let Some(mr) = mr {
        drop(mr.invalidate());
    }
}

pub(super) fn chunk_bytes(echo: &WriteChunk, mr: Option<MemoryRegion>) -> Option<Bytes> {
    let mr = mr?;
    let base = mr.base_to();
    let buf = mr.invalidate().buf.freeze();
    chunk_contents(echo, |s| region_bytes(&buf, base, s))
}

/// How a write chunk's data reached the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placed {
    /// The chunk was empty.
    Nothing,
    /// Copied out of the region.
    Copied,
    /// Left where the server's RDMA Write put it.
    InPlace,
}

/// Room before a write chunk's segment for the reply's RPC header (24
/// bytes with an AUTH_NONE verifier) beyond the DDP item's position.
pub(super) const WRITE_PREFIX_SLACK: usize = 128;

/// Rebuilds a reply whose DDP item arrived in the write chunk
/// (RFC 8166 §3.5) in the write chunk's own buffer: the server placed the
/// data after `room` bytes, so the inline prefix is copied in just before
/// it and the inline suffix just after its padding, and the result is one
/// contiguous slice with no copy of the data. When the echoed segment is
/// not the one advertised, or the prefix does not fit the room, the data
/// is copied instead. Returns the reply and how the data was placed. The
/// buffer goes back to `pool` when the reply (or the copy's source) is
/// dropped.
pub(super) fn place_reply(
    base: &Bytes,
    echo: &WriteChunk,
    mr: MemoryRegion,
    room: usize,
    off: usize,
    pool: &PullPool,
) -> (Option<Bytes>, Placed) {
    let (stag, base_to, region_len) = (mr.stag(), mr.base_to(), mr.len());
    let mut buf = mr.invalidate().buf;
    let data_len: usize = echo.segments.iter().map(|s| s.length as usize).sum();
    if data_len == 0 {
        pool.give(buf);
        return (Some(base.clone()), Placed::Nothing);
    }
    let Ok((_, Ok(results))) = decode_reply(base) else {
        pool.give(buf);
        return (Some(base.clone()), Placed::Copied);
    };
    let pos = base.len() - results.len() + off;
    let mut used = echo.segments.iter().filter(|s| s.length > 0);
    let one = match (used.next(), used.next()) {
        (Some(s), None) => {
            s.handle == stag.0
                && s.offset == base_to + room as u64
                && u64::from(s.length) + room as u64 <= region_len
        }
        _ => false,
    };
    if one && pos <= room {
        let Ok(layout) = plan_layout(base, &[(pos as u32, data_len)]) else {
            return (None, Placed::Copied);
        };
        let start = room - pos;
        if let Some(dst) = buf.get_mut(start..start + layout.len) {
            if layout.copy_inline(base, dst) {
                let pad_end = (pos + data_len).next_multiple_of(4).min(dst.len());
                if let Some(p) = dst.get_mut(pos + data_len..pad_end) {
                    p.fill(0);
                }
                let end = start + layout.len;
                return (Some(pool.share(buf, end).slice(start..)), Placed::InPlace);
            }
        }
    }
    let len = buf.len();
    let frozen = pool.share(buf, len);
    let data = chunk_contents(echo, |s| region_bytes(&frozen, base_to, s));
    let full = data.and_then(|d| {
        reassemble(base.clone(), &[(pos as u32, d)])
            .map(|f| f.to_bytes())
            .ok()
    });
    (full, Placed::Copied)
}
