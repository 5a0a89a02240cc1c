//! Where every byte of a reassembled message goes, computed before any
//! chunk data moves, so a receiver can place chunk data by RDMA straight
//! into one contiguous buffer and copy only the small inline parts
//! (RFC 8166 §3.5: the full XDR stream is the inline stream with each
//! chunk's data, and its XDR padding, reinserted at its position).
//!
//! [`plan_layout`] checks the same rules as [`crate::plan::reassemble`]
//! (positions in order, room for each item's length word, the length word
//! agreeing with the chunk) and returns a [`Layout`]: the total length and
//! the pieces, inline ranges to copy and chunk spans to fill.

use core::ops::Range;

use crate::plan::ReassemblyError;

/// One piece of a [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Copy `base[src]` to `dst`.
    Inline {
        /// Range of the reduced (inline) stream.
        src: Range<usize>,
        /// Offset in the full stream.
        dst: usize,
    },
    /// Chunk `index` (in the order given to [`plan_layout`]) fills
    /// `len` bytes at `dst`; its XDR padding follows as zeros.
    Chunk {
        /// Index of the chunk.
        index: usize,
        /// Offset in the full stream.
        dst: usize,
        /// Data length (no padding).
        len: usize,
    },
}

/// The full stream's length and where each piece goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Length of the full stream.
    pub len: usize,
    /// Pieces in stream order.
    pub pieces: Vec<Piece>,
}

impl Layout {
    /// Copies the inline pieces of `base` into `buf` (whose length must be
    /// [`Layout::len`]); chunk spans and padding are left as they are.
    /// Returns false if `buf` or `base` is too short.
    pub fn copy_inline(&self, base: &[u8], buf: &mut [u8]) -> bool {
        for p in &self.pieces {
            if let Piece::Inline { src, dst } = p {
                let n = src.len();
                match (base.get(src.clone()), buf.get_mut(*dst..*dst + n)) {
                    (Some(s), Some(d)) => d.copy_from_slice(s),
                    _ => return false,
                }
            }
        }
        true
    }

    /// Zeroes the XDR padding after each chunk's data in `buf` (whose
    /// length must be [`Layout::len`]; RFC 4506 §3: padding bytes are
    /// zero). With [`Layout::copy_inline`] and the chunk data this writes
    /// every byte of the message, so a reused buffer shows nothing of an
    /// earlier one. Returns false if `buf` is too short.
    pub fn zero_padding(&self, buf: &mut [u8]) -> bool {
        for p in &self.pieces {
            if let Piece::Chunk { dst, len, .. } = p {
                let start = dst + len;
                let end = (start + pad(*len)).min(self.len);
                match buf.get_mut(start..end.max(start)) {
                    Some(d) => d.fill(0),
                    None => return false,
                }
            }
        }
        true
    }
}

fn pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Lays out the full XDR stream of a message (RFC 8166 §3.4.5, §3.4.6,
/// §3.5) from its reduced stream `base` and its chunk-borne items
/// `(position, data length)` in position order. A Position-Zero item
/// (RFC 8166 §3.4.5: the whole RPC message in a read chunk) must be alone
/// with an empty `base`, and is the whole stream, unpadded.
pub fn plan_layout(base: &[u8], items: &[(u32, usize)]) -> Result<Layout, ReassemblyError> {
    if let Some(&(0, len)) = items.first() {
        if items.len() != 1 || !base.is_empty() {
            return Err(ReassemblyError::PositionZero);
        }
        return Ok(Layout {
            len,
            pieces: vec![Piece::Chunk {
                index: 0,
                dst: 0,
                len,
            }],
        });
    }
    let mut pieces = Vec::with_capacity(2 * items.len() + 1);
    let mut full = 0usize;
    let mut base_off = 0usize;
    for (index, &(pos, len)) in items.iter().enumerate() {
        let p = pos as usize;
        if p < full + 4 {
            return Err(if p < full {
                ReassemblyError::Overlap(pos)
            } else {
                ReassemblyError::BadPosition(pos)
            });
        }
        let take = p - full;
        let Some(head) = base.get(base_off..base_off + take) else {
            return Err(ReassemblyError::BadPosition(pos));
        };
        let word = head.get(take - 4..).unwrap_or_default();
        let declared = match word {
            [a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => return Err(ReassemblyError::BadPosition(pos)),
        };
        if declared as usize != len {
            return Err(ReassemblyError::LengthMismatch {
                position: pos,
                declared,
                actual: len,
            });
        }
        pieces.push(Piece::Inline {
            src: base_off..base_off + take,
            dst: full,
        });
        pieces.push(Piece::Chunk { index, dst: p, len });
        base_off += take;
        full = p + len + pad(len);
    }
    let rest = base.len() - base_off;
    if rest > 0 {
        pieces.push(Piece::Inline {
            src: base_off..base.len(),
            dst: full,
        });
    }
    Ok(Layout {
        len: full + rest,
        pieces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::reassemble;
    use bytes::Bytes;

    /// Fills a buffer from a layout the way a receiver does with RDMA.
    fn fill(base: &[u8], items: &[(u32, Bytes)]) -> Result<Vec<u8>, ReassemblyError> {
        let lens: Vec<(u32, usize)> = items.iter().map(|(p, d)| (*p, d.len())).collect();
        let l = plan_layout(base, &lens)?;
        let mut buf = vec![0xa5u8; l.len];
        assert!(l.copy_inline(base, &mut buf));
        for p in &l.pieces {
            if let Piece::Chunk { index, dst, len } = p {
                buf[*dst..*dst + *len].copy_from_slice(&items[*index].1);
                let end = (*dst + *len + pad(*len)).min(l.len);
                buf[*dst + *len..end].fill(0);
            }
        }
        Ok(buf)
    }

    #[test]
    fn layout_matches_reassembly_with_padding() {
        // header word, len=5, [chunk], trailer word
        let base = [0, 0, 0, 1, 0, 0, 0, 5, 0xee, 0xee, 0xee, 0xee];
        let items = [(8u32, Bytes::from_static(b"hello"))];
        let got = fill(&base, &items).unwrap();
        let want = reassemble(Bytes::copy_from_slice(&base), &items)
            .unwrap()
            .to_bytes();
        assert_eq!(got, &want[..]);
        assert_eq!(
            got,
            [
                0, 0, 0, 1, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0, 0, 0, 0xee, 0xee, 0xee,
                0xee
            ]
        );
    }

    #[test]
    fn layout_places_two_chunks() {
        let base = [0, 0, 0, 4, 7, 7, 7, 7, 0, 0, 0, 3, 9, 9, 9, 9];
        let items = [
            (4u32, Bytes::from_static(b"abcd")),
            (16u32, Bytes::from_static(b"xyz")),
        ];
        let got = fill(&base, &items).unwrap();
        let want = reassemble(Bytes::copy_from_slice(&base), &items)
            .unwrap()
            .to_bytes();
        assert_eq!(got, &want[..]);
    }

    /// A buffer full of an earlier message's bytes: inline parts, chunk
    /// data and zeroed padding leave none of them.
    #[test]
    fn inline_chunks_and_padding_cover_every_byte() {
        let base = [0, 0, 0, 5, 7, 7, 7, 7, 0, 0, 0, 3, 9, 9, 9, 9];
        let items = [(4u32, 5usize), (20u32, 3usize)];
        let l = plan_layout(&base, &items).unwrap();
        let mut buf = vec![0xa5u8; l.len];
        assert!(l.copy_inline(&base, &mut buf));
        assert!(l.zero_padding(&mut buf));
        for p in &l.pieces {
            if let Piece::Chunk { dst, len, .. } = p {
                buf[*dst..*dst + *len].fill(0x11);
            }
        }
        assert!(!buf.contains(&0xa5), "{buf:?}");
        assert_eq!(&buf[9..12], &[0, 0, 0]);
        assert_eq!(&buf[23..24], &[0]);
        assert!(!l.zero_padding(&mut buf[..l.len - 5]));
    }

    #[test]
    fn position_zero_is_the_whole_message() {
        let l = plan_layout(&[], &[(0, 100)]).unwrap();
        assert_eq!(l.len, 100);
        assert_eq!(
            plan_layout(&[1, 2, 3, 4], &[(0, 100)]),
            Err(ReassemblyError::PositionZero)
        );
    }

    #[test]
    fn rejects_length_word_disagreeing_with_chunk() {
        let base = [0, 0, 0, 6];
        assert_eq!(
            plan_layout(&base, &[(4, 5)]),
            Err(ReassemblyError::LengthMismatch {
                position: 4,
                declared: 6,
                actual: 5
            })
        );
    }

    #[test]
    fn rejects_position_beyond_inline_stream() {
        assert_eq!(
            plan_layout(&[0, 0, 0, 1], &[(40, 1)]),
            Err(ReassemblyError::BadPosition(40))
        );
        assert_eq!(
            plan_layout(&[0, 0, 0, 1], &[(2, 1)]),
            Err(ReassemblyError::BadPosition(2))
        );
    }

    #[test]
    fn rejects_overlapping_positions() {
        let base = [0, 0, 0, 8, 0, 0, 0, 1];
        assert_eq!(
            plan_layout(&base, &[(4, 8), (8, 1)]),
            Err(ReassemblyError::Overlap(8))
        );
    }
}
