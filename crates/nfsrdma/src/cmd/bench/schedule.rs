//! The order of the runs. Transports are interleaved point by point: for
//! each operation, size and in-flight count, every repetition runs once
//! on each transport before the next repetition, so load that changes
//! during the bench lands on both sides alike. The transport order flips
//! on every other repetition (A B, B A, A B, ...) so that a steady drift
//! in load does not always favour the transport that runs first.

use super::report::Op;

/// One run: which point, which repetition, which transport (an index into
/// the bench's transports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) op: Op,
    pub(crate) io_size: u32,
    pub(crate) in_flight: usize,
    pub(crate) rep: u32,
    pub(crate) side: usize,
}

/// Every run in order: operation, then size, then in-flight count, then
/// repetition, then transport (reversed on odd repetitions).
pub(crate) fn plan(
    ops: &[Op],
    io_sizes: &[u32],
    in_flight: &[usize],
    sides: usize,
    repeat: u32,
) -> Vec<Slot> {
    let mut out = Vec::new();
    for &op in ops {
        for &io_size in io_sizes {
            for &nf in in_flight {
                for rep in 0..repeat {
                    let order: Vec<usize> = if rep % 2 == 0 {
                        (0..sides).collect()
                    } else {
                        (0..sides).rev().collect()
                    };
                    out.extend(order.into_iter().map(|side| Slot {
                        op,
                        io_size,
                        in_flight: nf,
                        rep,
                        side,
                    }));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &Slot) -> (Op, u32, usize, u32, usize) {
        (s.op, s.io_size, s.in_flight, s.rep, s.side)
    }

    #[test]
    fn transports_alternate_within_each_point() {
        let p = plan(&[Op::Read], &[4096], &[1], 2, 3);
        let got: Vec<_> = p.iter().map(key).collect();
        assert_eq!(
            got,
            vec![
                (Op::Read, 4096, 1, 0, 0),
                (Op::Read, 4096, 1, 0, 1),
                (Op::Read, 4096, 1, 1, 1),
                (Op::Read, 4096, 1, 1, 0),
                (Op::Read, 4096, 1, 2, 0),
                (Op::Read, 4096, 1, 2, 1),
            ]
        );
    }

    #[test]
    fn a_point_finishes_on_every_transport_before_the_next_starts() {
        let p = plan(&[Op::Read, Op::Write], &[4096, 1 << 20], &[1, 4], 2, 3);
        assert_eq!(p.len(), 2 * 2 * 2 * 3 * 2);
        // Runs of the same point are contiguous, and each has every
        // transport `repeat` times.
        for chunk in p.chunks(6) {
            let first = chunk[0];
            assert!(chunk.iter().all(|s| s.op == first.op
                && s.io_size == first.io_size
                && s.in_flight == first.in_flight));
            for side in 0..2 {
                assert_eq!(chunk.iter().filter(|s| s.side == side).count(), 3);
            }
            // Never three runs in a row on one transport.
            for w in chunk.windows(3) {
                assert!(!(w[0].side == w[1].side && w[1].side == w[2].side));
            }
        }
        assert_eq!(p[0].op, Op::Read);
        assert_eq!(p.last().map(|s| s.op), Some(Op::Write));
    }

    #[test]
    fn one_transport_or_one_repetition_is_plain_order() {
        let p = plan(&[Op::RandomRead], &[4096, 65536], &[16], 1, 2);
        let sizes: Vec<u32> = p.iter().map(|s| s.io_size).collect();
        assert_eq!(sizes, vec![4096, 4096, 65536, 65536]);
        assert!(p.iter().all(|s| s.side == 0));
        assert!(plan(&[Op::Read], &[4096], &[1], 2, 0).is_empty());
    }
}
