//! The NFSv4 upper-layer binding for RPC-over-RDMA (ULB v2 draft §5,
//! draft-ietf-nfsv4-nfs-ulb-v2-06).
//!
//! - DDP-eligible items (§5.1): WRITE4args `data`, the NF4LNK `linkdata`
//!   of CREATE, READ4resok `data` and READLINK4resok `link`. Nothing in
//!   READ_PLUS is eligible (§5.1.1), nor anything in the callback program
//!   (§5.5.2) or the session operations (§5.6).
//! - Write chunks pair with "READ operations" (those with a DDP-eligible
//!   result: READ and READLINK) in COMPOUND order; an empty Write chunk
//!   means inline; READ operations beyond the Write list go inline
//!   (§5.4.1): [`pair_write_chunks`].
//! - Reply size (§5.2.2): for minor version 1 and later the session's fore
//!   channel `ca_maxresponsesize` bounds any reply: [`reply_size_estimate`].

use super::{Compound4Args, Createtype4, NfsArgop4, NFS4_MAXPATHLEN};

/// A DDP-eligible XDR item of the NFSv4 COMPOUND procedure (ULB v2 draft
/// §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpItem4 {
    /// WRITE4args `data` (an argument).
    WriteData,
    /// CREATE4args NF4LNK `linkdata` (an argument).
    LinkData,
    /// READ4resok `data` (a result).
    ReadData,
    /// READLINK4resok `link` (a result).
    ReadlinkData,
}

/// The DDP-eligible argument item of operation `op`, if any
/// (ULB v2 draft §5.1).
pub fn ddp_eligible_arg(op: &NfsArgop4) -> Option<DdpItem4> {
    match op {
        NfsArgop4::Write(_) => Some(DdpItem4::WriteData),
        NfsArgop4::Create(c) if matches!(c.objtype, Createtype4::Link(_)) => {
            Some(DdpItem4::LinkData)
        }
        _ => None,
    }
}

/// The DDP-eligible result item of operation `op`, if any: such an
/// operation is a "READ operation" of ULB v2 draft §5.4.1.
pub fn ddp_eligible_result(op: &NfsArgop4) -> Option<DdpItem4> {
    match op {
        NfsArgop4::Read(_) => Some(DdpItem4::ReadData),
        NfsArgop4::Readlink(_) => Some(DdpItem4::ReadlinkData),
        _ => None,
    }
}

/// Where one READ operation's DDP-eligible result goes (ULB v2 draft
/// §5.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultPlacement {
    /// Into Write chunk number `.0` of the Write list.
    WriteChunk(usize),
    /// Inline: the matching Write chunk is empty, or there is none.
    Inline,
}

/// Pairs the READ operations of a COMPOUND (by index in `argarray`) with
/// the Write list, whose chunks have the given total lengths (ULB v2 draft
/// §5.4.1): the n-th READ operation takes the n-th Write chunk; an empty
/// chunk means inline; READ operations beyond the list go inline. Write
/// chunks beyond the READ operations are unused (the caller returns them
/// empty).
pub fn pair_write_chunks(args: &[NfsArgop4], chunk_lens: &[u64]) -> Vec<(usize, ResultPlacement)> {
    args.iter()
        .enumerate()
        .filter(|(_, op)| ddp_eligible_result(op).is_some())
        .enumerate()
        .map(|(n, (idx, _))| {
            let place = match chunk_lens.get(n) {
                Some(&len) if len > 0 => ResultPlacement::WriteChunk(n),
                _ => ResultPlacement::Inline,
            };
            (idx, place)
        })
        .collect()
}

/// The largest reply to a COMPOUND, split the way an RPC-over-RDMA
/// requester provisions it (ULB v2 draft §5.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplySize4 {
    /// Bound on the whole COMPOUND4res: the session's
    /// `ca_maxresponsesize` (the only reliable bound, since `attrlist4` is
    /// unbounded; §5.2).
    pub total_max: usize,
    /// Per READ operation in COMPOUND order: its index in `argarray` and
    /// the largest DDP-eligible result it can return (READ: its `count`;
    /// READLINK: `NFS4_MAXPATHLEN`), each capped at `total_max`.
    pub ddp_max: Vec<(usize, usize)>,
}

/// Estimates the reply to `args` on a session whose fore channel has
/// `ca_maxresponsesize` (ULB v2 draft §5.2.2).
pub fn reply_size_estimate(args: &Compound4Args, ca_maxresponsesize: u32) -> ReplySize4 {
    let total_max = ca_maxresponsesize as usize;
    let ddp_max = args
        .argarray
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            NfsArgop4::Read(r) => Some((i, (r.count as usize).min(total_max))),
            NfsArgop4::Readlink(_) => Some((i, NFS4_MAXPATHLEN.min(total_max))),
            _ => None,
        })
        .collect();
    ReplySize4 { total_max, ddp_max }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v4::{Read4Args, StableHow4, Stateid4, Write4Args};
    use bytes::Bytes;

    fn read(count: u32) -> NfsArgop4 {
        NfsArgop4::Read(Read4Args {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            count,
        })
    }

    #[test]
    fn pairs_write_chunks_with_read_operations_in_order() {
        let ops = vec![
            NfsArgop4::Putrootfh(()),
            read(10),
            NfsArgop4::Readlink(()),
            read(20),
            read(30),
        ];
        // Chunk A for the first READ, an empty chunk for READLINK, chunk C
        // for the third READ operation, none for the fourth.
        let p = pair_write_chunks(&ops, &[4096, 0, 8192]);
        assert_eq!(
            p,
            vec![
                (1, ResultPlacement::WriteChunk(0)),
                (2, ResultPlacement::Inline),
                (3, ResultPlacement::WriteChunk(2)),
                (4, ResultPlacement::Inline),
            ]
        );
        assert!(pair_write_chunks(&ops, &[])
            .iter()
            .all(|(_, p)| *p == ResultPlacement::Inline));
    }

    #[test]
    fn only_write_data_and_symlink_target_are_eligible_arguments() {
        let w = NfsArgop4::Write(Write4Args {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            stable: StableHow4::UNSTABLE4,
            data: xdr::DdpOpaque(Bytes::from_static(b"x")),
        });
        assert_eq!(ddp_eligible_arg(&w), Some(DdpItem4::WriteData));
        assert_eq!(ddp_eligible_arg(&read(1)), None);
        assert_eq!(ddp_eligible_result(&w), None);
        assert_eq!(ddp_eligible_result(&read(1)), Some(DdpItem4::ReadData));
    }

    #[test]
    fn reply_estimate_is_capped_by_ca_maxresponsesize() {
        let args = Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: vec![read(1 << 20), NfsArgop4::Readlink(()), read(100)],
        };
        let r = reply_size_estimate(&args, 65536);
        assert_eq!(r.total_max, 65536);
        assert_eq!(r.ddp_max, vec![(0, 65536), (1, 4096), (2, 100)]);
    }
}
