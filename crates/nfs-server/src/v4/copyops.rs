//! The NFSv4.2 operations COPY and CLONE (RFC 7862 §15.2, §15.13), from
//! the saved file handle to the current one, within one export.
//!
//! A COPY the client lets run asynchronously may run in the background
//! ([`super::asynccopy`]: CB_OFFLOAD, OFFLOAD_STATUS, OFFLOAD_CANCEL).
//! Every other COPY is done synchronously (RFC 7862 §15.2.3 lets the
//! server choose): no `wr_callback_id`, `cr_synchronous` set. One
//! synchronous COPY moves at most 64 MiB (a short `wr_count`; the client
//! goes on), limit `nfs4.copy_bytes`; the destination is on stable
//! storage before the reply (`wr_committed` FILE_SYNC4). A copy from
//! another server (`ca_source_server` not empty, §4) is NFS4ERR_NOTSUPP.

use nfs::v3::NfsFh3;
use nfs::v4::*;
use oncrpc::limits::Limit;
use xdr::{Bounded, FixedOpaque};

use super::attrs::st4;
use super::fileops::{cur, key, resolve_sid};
use super::{Cx, Nfs4Service};
use crate::localfs::MAX_COPY;
use crate::storage::Storage;

type R<T> = Result<T, Nfsstat4>;

static COPY_BYTES: Limit = Limit::new("nfs4.copy_bytes");

/// NFS4ERR_WRONG_TYPE for a source or destination that is not a regular
/// file (RFC 7862 §15.2.3, §15.13.3).
fn wrong_type(e: Nfsstat4) -> Nfsstat4 {
    match e {
        Nfsstat4::NFS4ERR_ISDIR | Nfsstat4::NFS4ERR_SYMLINK | Nfsstat4::NFS4ERR_INVAL => {
            Nfsstat4::NFS4ERR_WRONG_TYPE
        }
        e => e,
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// The source (saved) and destination (current) of a COPY or CLONE,
    /// each checked as READ and WRITE check theirs, and the source's
    /// size; the delegations other clients hold that conflict are
    /// recalled (RFC 8881 §10.4.1).
    async fn copy_ends(
        &self,
        src_sid: &Stateid4,
        dst_sid: &Stateid4,
        cx: &Cx,
    ) -> R<(NfsFh3, NfsFh3, u64)> {
        let src = cx.saved.clone().ok_or(Nfsstat4::NFS4ERR_NOFILEHANDLE)?;
        let dst = cur(cx)?;
        let clientid = cx.sess.map(|s| s.clientid).unwrap_or(0);
        let mut src_size = 0;
        for (fh, sid, write) in [(&src, src_sid, false), (&dst, dst_sid, true)] {
            let attr = self.regular(fh).await.map_err(wrong_type)?;
            if !write {
                src_size = attr.size;
            }
            let sid = resolve_sid(cx, sid)?;
            self.state()?.io_check(&sid, clientid, &key(fh), write)?;
            if sid.is_special() {
                let need = if write {
                    nfs::v3::ACCESS3_MODIFY
                } else {
                    nfs::v3::ACCESS3_READ
                };
                self.allow(&attr, cx, need, true)?;
            }
            self.deleg_conflict(fh, cx, write)?;
        }
        Ok((src, dst, src_size))
    }

    /// COPY (RFC 7862 §15.2.3): `ca_count` 0 copies to the source's end; a
    /// range past the source's end is NFS4ERR_INVAL, as is an overlap
    /// within one file; across exports NFS4ERR_XDEV.
    pub(super) async fn copy(&self, a: &Copy4Args, cx: &Cx) -> R<Copy4ResOk> {
        if !a.source_server.0.is_empty() {
            return Err(Nfsstat4::NFS4ERR_NOTSUPP);
        }
        let (src, dst, src_size) = self.copy_ends(&a.src_stateid, &a.dst_stateid, cx).await?;
        if let Some(r) = self.copy_async(a, (&src, &dst), src_size, cx).await? {
            return Ok(r);
        }
        if a.count > MAX_COPY {
            COPY_BYTES.trip(format_args!(
                "COPY of {} bytes answered short ({MAX_COPY})",
                a.count
            ));
        }
        let own = self.watch.changing(&key(&dst));
        let r = self
            .fs
            .copy_range(&src, a.src_offset, &dst, a.dst_offset, a.count)
            .await;
        drop(own);
        let count = r.map_err(st4)?;
        Ok(Copy4ResOk {
            response: WriteResponse4 {
                callback_id: Bounded(Vec::new()),
                count,
                committed: StableHow4::FILE_SYNC4,
                writeverf: FixedOpaque(self.fs.write_verifier()),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: true,
            },
        })
    }

    /// CLONE (RFC 7862 §15.13.3): the whole source onto the destination
    /// by `FICLONE` where the file system shares extents; a partial range,
    /// or a file system that cannot, is NFS4ERR_NOTSUPP.
    pub(super) async fn clone_op(&self, a: &Clone4Args, cx: &Cx) -> R<()> {
        let (src, dst, _) = self.copy_ends(&a.src_stateid, &a.dst_stateid, cx).await?;
        let own = self.watch.changing(&key(&dst));
        let r = self
            .fs
            .clone_range(&src, a.src_offset, &dst, a.dst_offset, a.count)
            .await;
        drop(own);
        r.map_err(st4)
    }
}
