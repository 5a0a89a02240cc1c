//! The NFSv3 program (RFC 1813 §3.3) as an [`oncrpc::RpcService`] over
//! an [`ExportTable`] of any [`Storage`].
//!
//! Each call goes to the export that minted its handle (a handle no
//! export owns goes to the first, whose storage answers BADHANDLE or
//! STALE), after the export's access decision
//! ([`ExportTable::admit`](crate::access::ExportTable)): a client the export does not list, or
//! a flavor it does not accept, gets NFS3ERR_ACCES. (Linux's nfsd answers
//! NFS3ERR_STALE for a client with no export entry, from
//! `nfsd_set_fh_dentry` when `rqst_exp_find` fails with ENOENT; ACCES says
//! what happened and stops clients retrying a "stale" mount.) The caller
//! is squashed as the export's options say before every permission check
//! and for the owner of what it creates; a read-only grant answers every
//! change with NFS3ERR_ROFS. RENAME and LINK across exports are
//! NFS3ERR_XDEV (RFC 1813 §3.3.14, §3.3.15).

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::*;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, Encode, XdrBuf};

use crate::access::{ExportTable, Grant};
use crate::nfs3_dir::DirCall;
use crate::perm::{permits, Caller};
use crate::storage::Storage;

mod procs;

/// Serves NFS program 100003 version 3 from the exports of a table.
#[derive(Debug)]
pub struct Nfs3Service<S> {
    table: Arc<ExportTable<S>>,
    /// One executor per export, in table order.
    per_export: Vec<Nfs3Fs<S>>,
}

impl<S: Storage> Nfs3Service<S> {
    /// A service over the exports of `table`.
    pub fn new(table: Arc<ExportTable<S>>) -> Self {
        let per_export = table
            .exports()
            .iter()
            .map(|e| Nfs3Fs {
                fs: Arc::clone(e.fs()),
                delegs: None,
                mds: None,
            })
            .collect();
        Self { table, per_export }
    }

    /// Breaks `delegs` (the NFSv4 service's delegations on the same
    /// files) before conflicting procedures ([`crate::nfs3_deleg`]).
    pub fn with_delegations(mut self, delegs: crate::v4::Delegations) -> Self {
        for e in &mut self.per_export {
            e.delegs = Some(delegs.clone());
        }
        self
    }

    /// Carries file data to the data servers of the pNFS metadata server
    /// `mds` ([`crate::nfs3_pnfs`]).
    pub fn with_mds(mut self, mds: Arc<crate::v4::pnfs::Mds>) -> Self {
        for e in &mut self.per_export {
            e.mds = Some(Arc::clone(&mds));
        }
        self
    }
}

/// NFSv3 on one export's storage, for an admitted caller.
#[derive(Debug)]
pub(crate) struct Nfs3Fs<S> {
    pub(crate) fs: Arc<S>,
    /// NFSv4 delegations to break before conflicting procedures.
    pub(crate) delegs: Option<crate::v4::Delegations>,
    /// The pNFS metadata server whose data servers hold file data.
    pub(crate) mds: Option<Arc<crate::v4::pnfs::Mds>>,
}

/// The handles a call names: the one that picks the export, and a second
/// one that must be in the same export (RENAME's and LINK's target
/// directory).
fn handles(a: &Args3) -> (Option<&NfsFh3>, Option<&NfsFh3>) {
    match a {
        Args3::Null => (None, None),
        Args3::Getattr(a) => (Some(&a.object), None),
        Args3::Setattr(a) => (Some(&a.object), None),
        Args3::Lookup(a) => (Some(&a.what.dir), None),
        Args3::Access(a) => (Some(&a.object), None),
        Args3::Readlink(a) => (Some(&a.symlink), None),
        Args3::Read(a) => (Some(&a.file), None),
        Args3::Write(a) => (Some(&a.file), None),
        Args3::Create(a) => (Some(&a.dir.dir), None),
        Args3::Mkdir(a) => (Some(&a.dir.dir), None),
        Args3::Symlink(a) => (Some(&a.dir.dir), None),
        Args3::Mknod(a) => (Some(&a.dir.dir), None),
        Args3::Remove(a) | Args3::Rmdir(a) => (Some(&a.object.dir), None),
        Args3::Rename(a) => (Some(&a.from.dir), Some(&a.to.dir)),
        Args3::Link(a) => (Some(&a.file), Some(&a.link.dir)),
        Args3::Readdir(a) => (Some(&a.dir), None),
        Args3::Readdirplus(a) => (Some(&a.dir), None),
        Args3::Fsstat(a) => (Some(&a.object), None),
        Args3::Fsinfo(a) => (Some(&a.object), None),
        Args3::Pathconf(a) => (Some(&a.object), None),
        Args3::Commit(a) => (Some(&a.file), None),
    }
}

/// Whether the call changes the file system (refused on a read-only
/// grant with NFS3ERR_ROFS, RFC 1813 §2.6).
fn modifies(a: &Args3) -> bool {
    matches!(
        a,
        Args3::Setattr(_)
            | Args3::Write(_)
            | Args3::Create(_)
            | Args3::Mkdir(_)
            | Args3::Symlink(_)
            | Args3::Mknod(_)
            | Args3::Remove(_)
            | Args3::Rmdir(_)
            | Args3::Rename(_)
            | Args3::Link(_)
    )
}

/// A failed result with `status` and empty failure data: no attributes
/// (`post_op_attr`/`pre_op_attr` FALSE), as many as the procedure's
/// `resfail` arm holds (RFC 1813 §3.3).
pub(crate) fn failure(a: &Args3, status: Nfsstat3) -> XdrBuf {
    let words = match a {
        Args3::Null | Args3::Getattr(_) => 0,
        Args3::Setattr(_)
        | Args3::Write(_)
        | Args3::Create(_)
        | Args3::Mkdir(_)
        | Args3::Symlink(_)
        | Args3::Mknod(_)
        | Args3::Remove(_)
        | Args3::Rmdir(_)
        | Args3::Commit(_) => 2,
        Args3::Rename(_) => 4,
        Args3::Link(_) => 3,
        _ => 1,
    };
    let mut out = XdrBuf::new();
    status.encode(&mut out);
    for _ in 0..words {
        0u32.encode(&mut out);
    }
    out
}

impl<S: Storage> Nfs3Service<S> {
    /// The export a call is for, its grant, or the failure to answer.
    fn route(&self, a: &Args3, ctx: &CallContext) -> Result<(&Nfs3Fs<S>, Grant), XdrBuf> {
        let (first, second) = handles(a);
        let exports = self.table.exports();
        let i = first
            .and_then(|fh| exports.iter().position(|e| e.fs().owns(fh)))
            .unwrap_or(0);
        let export = &exports[i];
        if let Some(fh) = second {
            if exports
                .iter()
                .position(|e| e.fs().owns(fh))
                .is_some_and(|j| j != i)
            {
                return Err(failure(a, Nfsstat3::NFS3ERR_XDEV));
            }
        }
        let grant = self
            .table
            .admit(export, &ctx.peer, &ctx.credential)
            .map_err(|_| failure(a, Nfsstat3::NFS3ERR_ACCES))?;
        if grant.read_only && modifies(a) {
            return Err(failure(a, Nfsstat3::NFS3ERR_ROFS));
        }
        Ok((&self.per_export[i], grant))
    }
}

fn wcc_attr(a: &Fattr3) -> WccAttr {
    WccAttr {
        size: a.size,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

impl<S: Storage> Nfs3Fs<S> {
    async fn post(&self, fh: &NfsFh3) -> PostOpAttr {
        self.fs.getattr(fh).await.ok()
    }

    async fn pre(&self, fh: &NfsFh3) -> PreOpAttr {
        self.fs.getattr(fh).await.ok().as_ref().map(wcc_attr)
    }

    async fn wcc(&self, before: PreOpAttr, fh: &NfsFh3) -> WccData {
        WccData {
            before,
            after: self.post(fh).await,
        }
    }

    /// Ok when `c` may do what needs `need` on `fh`: NFS3ERR_ACCES
    /// otherwise, or the handle's own error when it does not resolve.
    async fn allow(
        &self,
        fh: &NfsFh3,
        c: &Caller,
        need: u32,
        owner_override: bool,
    ) -> Result<(), Nfsstat3> {
        let a = self.fs.getattr(fh).await?;
        if permits(&a, c, need, owner_override) {
            Ok(())
        } else {
            Err(Nfsstat3::NFS3ERR_ACCES)
        }
    }

    /// Hands a new object to its creator, as Linux's nfsd creates with the
    /// caller's fsuid/fsgid. Best effort: a server not running as root
    /// cannot give files away and keeps them.
    async fn give(&self, fh: &NfsFh3, c: &Caller) {
        if let Ok(a) = self.fs.getattr(fh).await {
            if a.uid != c.uid || a.gid != c.gid {
                let s = Sattr3 {
                    uid: Some(c.uid),
                    gid: Some(c.gid),
                    ..Sattr3::default()
                };
                if let Err(e) = self.fs.setattr(fh, &s, None).await {
                    tracing::debug!(status = %e, "cannot give a new object to its creator");
                }
            }
        }
    }

    async fn created(
        &self,
        before: PreOpAttr,
        dir: &NfsFh3,
        r: Result<NfsFh3, Nfsstat3>,
        c: &Caller,
    ) -> Create3Res {
        if let Ok(fh) = &r {
            self.give(fh, c).await;
        }
        let dir_wcc = self.wcc(before, dir).await;
        match r {
            Ok(fh) => Res3::Ok(Create3ResOk {
                obj_attributes: self.post(&fh).await,
                obj: Some(fh),
                dir_wcc,
            }),
            Err(s) => Res3::Fail(s, dir_wcc),
        }
    }

    async fn removed(
        &self,
        before: PreOpAttr,
        dir: &NfsFh3,
        r: Result<(), Nfsstat3>,
    ) -> Remove3Res {
        let w = self.wcc(before, dir).await;
        match r {
            Ok(()) => Res3::Ok(w),
            Err(s) => Res3::Fail(s, w),
        }
    }

    /// Executes one decoded call for an admitted caller and encodes its
    /// result: one method per procedure ([`procs`]).
    /// With `files` (plain TCP, [`CallContext::sends_files`]) a READ's
    /// data may stay in the file for the transport to send.
    /// The pNFS metadata server's branches (calls to data servers, whose
    /// futures are ~7 KiB) are boxed where they start (`nfs3_pnfs`), so
    /// this future, moved into a box and a task on every call, stays
    /// ~1.3 KiB instead of ~9.5 KiB.
    async fn execute(
        &self,
        args: Args3,
        grant: &Grant,
        files: bool,
    ) -> Result<XdrBuf, ServiceError> {
        if let Some(jukebox) = self.break_delegations(&args).await {
            return Ok(jukebox);
        }
        let g = grant;
        let mut out = XdrBuf::new();
        match args {
            Args3::Null => {}
            Args3::Getattr(a) => self.getattr3(a).await.encode(&mut out),
            Args3::Setattr(a) => self.setattr3(a, g).await.encode(&mut out),
            Args3::Lookup(a) => self.lookup3(a, g).await.encode(&mut out),
            Args3::Access(a) => self.access3(a, g).await.encode(&mut out),
            Args3::Readlink(a) => self.readlink3(a).await.encode(&mut out),
            Args3::Read(a) => self.read3(a, g, files, &mut out).await,
            Args3::Write(a) => self.write3(a, g).await?.encode(&mut out),
            Args3::Create(a) => self.create3(a, g).await.encode(&mut out),
            Args3::Mkdir(a) => self.mkdir3(a, g).await.encode(&mut out),
            Args3::Symlink(a) => self.symlink3(a, g).await.encode(&mut out),
            Args3::Mknod(a) => self.mknod3(a, g).await.encode(&mut out),
            Args3::Remove(a) => self.remove3(a, g).await.encode(&mut out),
            Args3::Rmdir(a) => self.rmdir3(a, g).await.encode(&mut out),
            Args3::Rename(a) => self.rename3(a, g).await.encode(&mut out),
            Args3::Link(a) => self.link3(a, g).await.encode(&mut out),
            Args3::Readdir(a) => {
                self.read_dir(DirCall::readdir(&a), &g.caller, &mut out)
                    .await
            }
            Args3::Readdirplus(a) => {
                self.read_dir(DirCall::readdirplus(&a), &g.caller, &mut out)
                    .await
            }
            Args3::Fsstat(a) => self.fsstat3(a).await.encode(&mut out),
            Args3::Fsinfo(a) => self.fsinfo3(a).await.encode(&mut out),
            Args3::Pathconf(a) => self.pathconf3(a).await.encode(&mut out),
            Args3::Commit(a) => self.commit3(a).await.encode(&mut out),
        }
        Ok(out)
    }
}

/// RFC 1813 §3.3: the NFS program, version 3 only.
impl<S: Storage> RpcService for Nfs3Service<S> {
    fn program(&self) -> u32 {
        NFS_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        NFS_V3..=NFS_V3
    }

    /// Decodes the arguments (zero-copy for WRITE data) and executes them.
    /// Malformed or truncated arguments are GARBAGE_ARGS; bytes after the
    /// arguments are ignored, as Linux's nfsd does.
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut dec = Decoder::from_bytes(&args);
        let a = Args3::decode_from(Nfsproc3(ctx.proc_), &mut dec).map_err(|e| match e {
            ArgsError::UnknownProcedure(_) => ServiceError::ProcUnavail,
            ArgsError::Garbage { source, .. } => ServiceError::GarbageArgs(source),
        })?;
        tracing::trace!(xid = ctx.xid, proc_ = %a.procedure(), "nfs3 call");
        if matches!(a, Args3::Null) {
            return Ok(XdrBuf::new());
        }
        // Transports hand a connection's calls over in arrival order up to
        // their first wait: yield so later calls run concurrently (storage
        // calls do not yield), except for a READ, which yields itself
        // before it would wait for the disk (`Storage::read_checked`):
        // one whose data is cached is served inline, without a task of
        // its own; and a GETATTR, one `statx` of a name in a directory
        // held open (`Storage::getattr`), which is cheaper than the task.
        if !matches!(a, Args3::Read(_) | Args3::Getattr(_)) {
            tokio::task::yield_now().await;
        }
        match self.route(&a, &ctx) {
            Ok((export, grant)) => export.execute(a, &grant, ctx.sends_files()).await,
            Err(refused) => Ok(refused),
        }
    }

    /// The reply's size from the arguments (a READ's count, a listing's
    /// maxcount), so a TCP connection reserves that much reply memory per
    /// call in flight rather than a whole 1 MiB READ.
    fn reply_size_bound(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<usize> {
        (vers == NFS_V3)
            .then(|| nfs::v3::reply_size_bound(Nfsproc3(proc_), args))
            .flatten()
    }

    /// Non-idempotent procedures go in the duplicate-request cache, as in
    /// Linux's nfsd (RC_REPLBUFF).
    fn is_cached(&self, vers: u32, proc_: u32) -> bool {
        vers == NFS_V3
            && matches!(
                Nfsproc3(proc_),
                Nfsproc3::SETATTR
                    | Nfsproc3::WRITE
                    | Nfsproc3::CREATE
                    | Nfsproc3::MKDIR
                    | Nfsproc3::SYMLINK
                    | Nfsproc3::MKNOD
                    | Nfsproc3::REMOVE
                    | Nfsproc3::RMDIR
                    | Nfsproc3::RENAME
                    | Nfsproc3::LINK
            )
    }
}
