//! Where the RDMA Reads of a message's read chunks land (RFC 8166
//! §3.4.5, §3.5): the rebuilt message is the inline stream with each read
//! chunk's data at its position, and the segments of one chunk (one
//! position) are concatenated. Both directions use it: a responder pulling
//! a forward call, a requester pulling a version 2 reverse call with
//! chunks (v2 draft §4.2.2).

use crate::layout::{plan_layout, Layout, Piece};
use crate::wire::ReadSegment;

/// One RDMA Read: `len` bytes of the peer's `handle` at `offset`, to `dst`
/// in the rebuilt message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOp {
    /// Offset in the rebuilt message.
    pub dst: u64,
    /// Bytes to read.
    pub len: u32,
    /// The peer's STag.
    pub handle: u32,
    /// The peer's tagged offset.
    pub offset: u64,
}

/// The rebuilt message: its layout (inline parts to copy) and the Reads
/// that fill the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlan {
    /// Length and pieces of the rebuilt message.
    pub layout: Layout,
    /// One Read per read segment, in segment order.
    pub reads: Vec<ReadOp>,
}

/// The bytes `reads` ask to pull: the sum of the segment lengths, which
/// come from the peer, to check against a bound before anything is
/// allocated.
pub fn read_total(reads: &[ReadSegment]) -> u64 {
    reads.iter().map(|r| u64::from(r.target.length)).sum()
}

/// Plans the Reads that rebuild a message from its `inline` part and its
/// read `segments`; `None` when the chunks do not fit the inline stream
/// (positions out of order, a length word that disagrees, a Position-Zero
/// chunk beside inline data), which a responder answers with ERR_CHUNK.
pub fn plan_reads(inline: &[u8], segments: &[ReadSegment]) -> Option<ReadPlan> {
    // Chunk items as (position, length) and the first segment of each.
    let mut items: Vec<(u32, usize)> = Vec::new();
    let mut first: Vec<usize> = Vec::new();
    for (i, r) in segments.iter().enumerate() {
        match items.last_mut() {
            Some((p, len)) if *p == r.position => *len += r.target.length as usize,
            _ => {
                items.push((r.position, r.target.length as usize));
                first.push(i);
            }
        }
    }
    let layout = plan_layout(inline, &items).ok()?;
    let mut reads = Vec::with_capacity(segments.len());
    for piece in &layout.pieces {
        let Piece::Chunk { index, dst, .. } = piece else {
            continue;
        };
        let (&start, &(pos, _)) = (first.get(*index)?, items.get(*index)?);
        let mut off = *dst as u64;
        for r in segments[start..].iter().take_while(|r| r.position == pos) {
            reads.push(ReadOp {
                dst: off,
                len: r.target.length,
                handle: r.target.handle,
                offset: r.target.offset,
            });
            off += u64::from(r.target.length);
        }
    }
    Some(ReadPlan { layout, reads })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RdmaSegment;

    fn rs(position: u32, handle: u32, length: u32) -> ReadSegment {
        ReadSegment {
            position,
            target: RdmaSegment {
                handle,
                length,
                offset: u64::from(handle) << 32,
            },
        }
    }

    #[test]
    fn position_zero_is_the_whole_message_from_its_segments() {
        let segs = [rs(0, 1, 1000), rs(0, 2, 24)];
        let p = plan_reads(&[], &segs).unwrap();
        assert_eq!(p.layout.len, 1024);
        let got: Vec<(u64, u32, u32)> = p.reads.iter().map(|r| (r.dst, r.len, r.handle)).collect();
        assert_eq!(got, [(0, 1000, 1), (1000, 24, 2)]);
        assert_eq!(p.reads[1].offset, 2 << 32);
        assert_eq!(read_total(&segs), 1024);
        // Position zero beside inline data is refused.
        assert_eq!(plan_reads(&[0; 8], &segs), None);
    }

    #[test]
    fn a_chunk_lands_after_its_length_word_and_inline_follows() {
        // 8 inline bytes, the last word the chunk's length (6), then 4
        // bytes after the chunk's (padded) data.
        let inline = [0, 0, 0, 9, 0, 0, 0, 6, 0xaa, 0xbb, 0xcc, 0xdd];
        let p = plan_reads(&inline, &[rs(8, 3, 6)]).unwrap();
        assert_eq!(
            p.reads,
            [ReadOp {
                dst: 8,
                len: 6,
                handle: 3,
                offset: 3 << 32
            }]
        );
        assert_eq!(p.layout.len, 8 + 8 + 4);
        // The length word disagrees with the chunk: refused.
        assert_eq!(plan_reads(&inline, &[rs(8, 3, 7)]), None);
        // Position beyond the inline stream: refused.
        assert_eq!(plan_reads(&inline, &[rs(40, 3, 6)]), None);
    }
}
