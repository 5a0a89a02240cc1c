//! The NFSv3 upper-layer binding for RPC-over-RDMA (RFC 8267 for
//! version 1; draft-ietf-nfsv4-nfs-ulb-v2-06, "ULB v2 draft", §3 for version 2).
//!
//! An RPC-over-RDMA transport asks the binding, per call:
//! - which argument item it may move by a Read chunk and which result item
//!   by a Write chunk ([`UpperLayerBinding::ddp_eligible_arg`],
//!   [`UpperLayerBinding::ddp_eligible_result`]): for NFSv3 only WRITE
//!   data, the SYMLINK path, READ data and the READLINK path
//!   (ULB v2 draft §3);
//! - how large the reply can be, so it provisions a Write chunk for the
//!   DDP-eligible result and a Reply chunk when the rest could exceed the
//!   inline threshold ([`UpperLayerBinding::reply_size_estimate`],
//!   ULB v2 draft §3.1);
//! - whether replay detection may key on the connection's source port: it
//!   may not (ULB v2 draft §3.3.2).
//!
//! MOUNT, NLM and NSM run over TCP only (ULB v2 draft §4.1):
//! [`NfsV3Binding`] covers program 100003 version 3 alone.

use xdr::Decoder;

use crate::v3::{
    Args3, Nfsproc3, FATTR3_LEN, NFS3_FHSIZE, NFS3_MAXDATA, NFS3_MAXPATHLEN, NFS_PROGRAM, NFS_V3,
};

/// A DDP-eligible XDR item of NFSv3 (ULB v2 draft §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpItem {
    /// WRITE3args `data` (an argument).
    WriteData,
    /// SYMLINK3args `symlink_data` (an argument).
    SymlinkPath,
    /// READ3resok `data` (a result).
    ReadData,
    /// READLINK3resok `data` (a result).
    ReadlinkPath,
}

/// The largest possible reply to one call, split the way an RPC-over-RDMA
/// requester provisions it (ULB v2 draft §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplySize {
    /// Largest result body in bytes excluding the DDP-eligible item's
    /// data and padding (its length word is included), and excluding the
    /// RPC reply header, which the RPC layer adds.
    pub inline_max: usize,
    /// Largest DDP-eligible result item (data bytes, no padding), or 0 when
    /// the procedure has none: the size of the Write chunk to provision.
    pub ddp_max: usize,
}

impl ReplySize {
    /// Largest complete result body: inline part plus the DDP item padded
    /// to four bytes (RFC 4506 §3).
    pub fn total(&self) -> usize {
        self.inline_max
            .saturating_add(xdr::padded_len(self.ddp_max))
    }
}

/// Why a reply size cannot be estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UlbError {
    /// The binding does not cover this program and version.
    #[error("no upper-layer binding for program {prog} version {vers}")]
    NotCovered {
        /// Program number.
        prog: u32,
        /// Version.
        vers: u32,
    },
    /// The procedure number is unknown.
    #[error("no procedure {0}")]
    UnknownProcedure(u32),
    /// The call arguments needed for the estimate are malformed.
    #[error("malformed arguments: {0}")]
    Args(xdr::Error),
}

/// What an RPC-over-RDMA transport needs to know about an RPC program
/// (RFC 8166 §6).
pub trait UpperLayerBinding {
    /// Whether this binding covers `prog` version `vers`.
    fn covers(&self, prog: u32, vers: u32) -> bool;

    /// The DDP-eligible argument item of procedure `proc`, if any.
    fn ddp_eligible_arg(&self, proc: u32) -> Option<DdpItem>;

    /// The DDP-eligible result item of procedure `proc`, if any.
    fn ddp_eligible_result(&self, proc: u32) -> Option<DdpItem>;

    /// The largest reply to a call of `prog`/`vers`/`proc` whose argument
    /// bytes (after the RPC call header) are `args`.
    fn reply_size_estimate(
        &self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: &[u8],
    ) -> Result<ReplySize, UlbError>;

    /// Whether a server's replay detection may use the connection's source
    /// port. ULB v2 draft §3.3.2: never over RDMA, because a client cannot
    /// choose its source port when it reconnects.
    fn replay_key_uses_source_port(&self) -> bool {
        false
    }
}

/// The NFSv3 binding (ULB v2 draft §3).
#[derive(Debug, Clone, Copy, Default)]
pub struct NfsV3Binding;

/// `post_op_attr` at its largest (RFC 1813 §2.6).
const POST_OP_ATTR: usize = 4 + FATTR3_LEN;
/// `wcc_data` at its largest: `pre_op_attr` (4 + 24) plus `post_op_attr`.
const WCC_DATA: usize = 4 + 24 + POST_OP_ATTR;
/// `nfs_fh3` at its largest.
const FH3: usize = 4 + NFS3_FHSIZE;
/// `post_op_fh3` at its largest.
const POST_OP_FH3: usize = 4 + FH3;
/// The `nfsstat3` discriminant.
const STATUS: usize = 4;

/// Largest result body of each procedure (RFC 1813 §3.3), when it does
/// not depend on the arguments. READ, READDIR and READDIRPLUS are
/// computed from their arguments in [`NfsV3Binding`].
const fn fixed_inline_max(proc: Nfsproc3) -> Option<usize> {
    Some(match proc {
        Nfsproc3::NULL => 0,
        Nfsproc3::GETATTR => STATUS + FATTR3_LEN,
        Nfsproc3::SETATTR | Nfsproc3::REMOVE | Nfsproc3::RMDIR => STATUS + WCC_DATA,
        Nfsproc3::LOOKUP => STATUS + FH3 + 2 * POST_OP_ATTR,
        Nfsproc3::ACCESS => STATUS + POST_OP_ATTR + 4,
        // status, attributes, the path's length word; the path is the DDP
        // item.
        Nfsproc3::READLINK => STATUS + POST_OP_ATTR + 4,
        // status, attributes, count, eof, the data's length word.
        Nfsproc3::READ => STATUS + POST_OP_ATTR + 4 + 4 + 4,
        Nfsproc3::WRITE => STATUS + WCC_DATA + 4 + 4 + 8,
        Nfsproc3::CREATE | Nfsproc3::MKDIR | Nfsproc3::SYMLINK | Nfsproc3::MKNOD => {
            STATUS + POST_OP_FH3 + POST_OP_ATTR + WCC_DATA
        }
        Nfsproc3::RENAME => STATUS + 2 * WCC_DATA,
        Nfsproc3::LINK => STATUS + POST_OP_ATTR + WCC_DATA,
        Nfsproc3::FSSTAT => STATUS + POST_OP_ATTR + 6 * 8 + 4,
        Nfsproc3::FSINFO => STATUS + POST_OP_ATTR + 7 * 4 + 8 + 8 + 4,
        Nfsproc3::PATHCONF => STATUS + POST_OP_ATTR + 2 * 4 + 4 * 4,
        Nfsproc3::COMMIT => STATUS + WCC_DATA + 8,
        // READDIR/READDIRPLUS depend on the arguments.
        Nfsproc3::READDIR | Nfsproc3::READDIRPLUS => 0,
        _ => return None,
    })
}

impl UpperLayerBinding for NfsV3Binding {
    fn covers(&self, prog: u32, vers: u32) -> bool {
        prog == NFS_PROGRAM && vers == NFS_V3
    }

    /// ULB v2 draft §3: WRITE data and the SYMLINK path.
    fn ddp_eligible_arg(&self, proc: u32) -> Option<DdpItem> {
        match Nfsproc3(proc) {
            Nfsproc3::WRITE => Some(DdpItem::WriteData),
            Nfsproc3::SYMLINK => Some(DdpItem::SymlinkPath),
            _ => None,
        }
    }

    /// ULB v2 draft §3: READ data and the READLINK path.
    fn ddp_eligible_result(&self, proc: u32) -> Option<DdpItem> {
        match Nfsproc3(proc) {
            Nfsproc3::READ => Some(DdpItem::ReadData),
            Nfsproc3::READLINK => Some(DdpItem::ReadlinkPath),
            _ => None,
        }
    }

    /// ULB v2 draft §3.1. READ: the data is at most the
    /// requested `count`. READDIR: `count` bounds the whole READDIR3resok
    /// (RFC 1813 §3.3.16); READDIRPLUS: `maxcount` bounds READDIRPLUS3resok
    /// (§3.3.17). READLINK: the path is at most `NFS3_MAXPATHLEN`.
    fn reply_size_estimate(
        &self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: &[u8],
    ) -> Result<ReplySize, UlbError> {
        if !self.covers(prog, vers) {
            return Err(UlbError::NotCovered { prog, vers });
        }
        let p = Nfsproc3(proc);
        let inline_max = fixed_inline_max(p).ok_or(UlbError::UnknownProcedure(proc))?;
        let parse = || {
            let mut dec = Decoder::new(args);
            Args3::decode_from(p, &mut dec).map_err(|e| match e {
                crate::v3::ArgsError::Garbage { source, .. } => UlbError::Args(source),
                crate::v3::ArgsError::UnknownProcedure(n) => UlbError::UnknownProcedure(n),
            })
        };
        let size = match p {
            Nfsproc3::READ => match parse()? {
                Args3::Read(a) => ReplySize {
                    inline_max,
                    ddp_max: (a.count as usize).min(NFS3_MAXDATA),
                },
                _ => return Err(UlbError::UnknownProcedure(proc)),
            },
            Nfsproc3::READLINK => ReplySize {
                inline_max,
                ddp_max: NFS3_MAXPATHLEN,
            },
            Nfsproc3::READDIR => match parse()? {
                Args3::Readdir(a) => ReplySize {
                    inline_max: STATUS + a.count as usize,
                    ddp_max: 0,
                },
                _ => return Err(UlbError::UnknownProcedure(proc)),
            },
            Nfsproc3::READDIRPLUS => match parse()? {
                Args3::Readdirplus(a) => ReplySize {
                    inline_max: STATUS + a.maxcount as usize,
                    ddp_max: 0,
                },
                _ => return Err(UlbError::UnknownProcedure(proc)),
            },
            _ => ReplySize {
                inline_max,
                ddp_max: 0,
            },
        };
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v3::*;
    use bytes::Bytes;
    use xdr::Encode;

    fn fh() -> NfsFh3 {
        NfsFh3::new(&[7; NFS3_FHSIZE]).unwrap()
    }

    fn attrs() -> Fattr3 {
        Fattr3 {
            ftype: Ftype3::NF3REG,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 0,
            used: 0,
            rdev: Specdata3::default(),
            fsid: 0,
            fileid: 0,
            atime: Nfstime3::default(),
            mtime: Nfstime3::default(),
            ctime: Nfstime3::default(),
        }
    }

    fn wcc() -> WccData {
        WccData {
            before: Some(WccAttr::default()),
            after: Some(attrs()),
        }
    }

    #[test]
    fn only_the_four_items_are_ddp_eligible() {
        let b = NfsV3Binding;
        let args: Vec<_> = (0..22).filter_map(|p| b.ddp_eligible_arg(p)).collect();
        let res: Vec<_> = (0..22).filter_map(|p| b.ddp_eligible_result(p)).collect();
        assert_eq!(args, [DdpItem::WriteData, DdpItem::SymlinkPath]);
        assert_eq!(res, [DdpItem::ReadlinkPath, DdpItem::ReadData]);
    }

    #[test]
    fn encoders_mark_exactly_the_ddp_items() {
        let write = Write3Args {
            file: fh(),
            offset: 0,
            count: 5,
            stable: StableHow::UNSTABLE,
            data: xdr::DdpOpaque(Bytes::from_static(b"hello")),
        };
        let buf = xdr::to_xdr_buf(&write);
        assert_eq!(buf.ddp_items().count(), 1);
        let lookup = Lookup3Args {
            what: Diropargs3 {
                dir: fh(),
                name: Filename3::from_static("x"),
            },
        };
        assert_eq!(xdr::to_xdr_buf(&lookup).ddp_items().count(), 0);
    }

    #[test]
    fn read_estimate_follows_count_and_covers_largest_reply() {
        let args = xdr::to_bytes(&Read3Args {
            file: fh(),
            offset: 0,
            count: 65536,
        });
        let est = NfsV3Binding
            .reply_size_estimate(NFS_PROGRAM, 3, 6, &args)
            .unwrap();
        assert_eq!(est.ddp_max, 65536);
        let res: Read3Res = Res3::Ok(Read3ResOk {
            file_attributes: Some(attrs()),
            count: 65536,
            eof: false,
            data: xdr::DdpOpaque(Bytes::from(vec![0; 65536])),
        });
        assert_eq!(res.encoded_len(), est.total());
    }

    #[test]
    fn fixed_estimates_match_largest_encodings() {
        let b = NfsV3Binding;
        let est = |p: u32| b.reply_size_estimate(NFS_PROGRAM, 3, p, &[]).unwrap();
        let create: Create3Res = Res3::Ok(Create3ResOk {
            obj: Some(fh()),
            obj_attributes: Some(attrs()),
            dir_wcc: wcc(),
        });
        assert_eq!(est(8).inline_max, create.encoded_len());
        let lookup: Lookup3Res = Res3::Ok(Lookup3ResOk {
            object: fh(),
            obj_attributes: Some(attrs()),
            dir_attributes: Some(attrs()),
        });
        assert_eq!(est(3).inline_max, lookup.encoded_len());
        let commit: Commit3Res = Res3::Ok(Commit3ResOk {
            file_wcc: wcc(),
            verf: xdr::FixedOpaque([1; 8]),
        });
        assert_eq!(est(21).inline_max, commit.encoded_len());
        let rename: Rename3Res = Res3::Ok(Rename3Wcc {
            fromdir_wcc: wcc(),
            todir_wcc: wcc(),
        });
        assert_eq!(est(14).inline_max, rename.encoded_len());
        assert_eq!(est(0).total(), 0);
    }

    #[test]
    fn readdirplus_estimate_uses_maxcount() {
        let args = xdr::to_bytes(&Readdirplus3Args {
            dir: fh(),
            cookie: 0,
            cookieverf: xdr::FixedOpaque([0; 8]),
            dircount: 512,
            maxcount: 8192,
        });
        let est = NfsV3Binding
            .reply_size_estimate(NFS_PROGRAM, 3, 17, &args)
            .unwrap();
        assert_eq!(
            est,
            ReplySize {
                inline_max: 8196,
                ddp_max: 0
            }
        );
    }

    #[test]
    fn rejects_other_programs_and_truncated_read_args() {
        let b = NfsV3Binding;
        assert!(matches!(
            b.reply_size_estimate(100_005, 3, 1, &[]),
            Err(UlbError::NotCovered { .. })
        ));
        assert!(matches!(
            b.reply_size_estimate(NFS_PROGRAM, 3, 6, &[0, 0, 0, 8, 1]),
            Err(UlbError::Args(_))
        ));
        assert!(matches!(
            b.reply_size_estimate(NFS_PROGRAM, 3, 22, &[]),
            Err(UlbError::UnknownProcedure(22))
        ));
        assert!(!b.replay_key_uses_source_port());
    }
}
