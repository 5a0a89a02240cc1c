//! The NFSv4 namespace (RFC 8881 §7 "Single-Server Namespace"): every
//! export of the table under one root, joined by the junction
//! directories of the pseudo file system ([`super::pseudofs`]).
//!
//! [`Namespace`] is itself a [`Storage`]: each call goes to the export
//! that minted the handle, or is answered by the pseudo file system for
//! its own handles (read-only directories: any change is NFS3ERR_ROFS,
//! NFS4ERR_ROFS on the wire, RFC 8881 §7.3). What depends on the client
//! (which junctions it sees, where a name leads it, the access decision,
//! SECINFO's flavors) has its own methods taking the caller's address.
//!
//! - PUTROOTFH gives the pseudo root; with an export of `/` it is that
//!   export's root for the clients it lists (no junction above it).
//! - Crossing from a junction into an export changes `fsid` (the pseudo
//!   file system's is 0; RFC 8881 §7.7, §5.8.1.9), and the export root's
//!   `mounted_on_fileid` is the file id of the junction it is mounted
//!   on (§5.8.2.19); LOOKUPP from an export root goes back to that
//!   junction's parent.
//! - Without an export table ([`Namespace::single`]) the one storage is
//!   the root, as before the pseudo file system (tests, embedding).

use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{
    Createhow3, Fattr3, Filename3, Ftype3, Mknoddata3, NfsFh3, Nfsstat3, Nfstime3, Sattr3,
    Specdata3, StableHow,
};
use nfs::v4::attr::FileAttrs;
use oncrpc::msg::Credential;
use oncrpc::PeerInfo;

use super::pseudofs::{Step, Tree, ROOT};
use crate::access::{peer_ip, ExportTable, Grant, Refusal};
use crate::fh::Handle;
use crate::perm::Caller;
use crate::storage::{
    DirEntry, DirPage, DirRequest, DirSink, FsStat, May, ReadDone, Segment, Storage, StorageResult,
    WriteDone, XattrError, XattrSet,
};

/// The `fsid` of the pseudo file system.
pub(crate) const PSEUDO_FSID: u64 = 0;

/// Which file system a handle belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Export `.0` of the table.
    Export(usize),
    /// Pseudo file system node `.0`.
    Junction(usize),
}

/// The pseudo file system's tree and how it answers.
struct Pseudo {
    tree: Tree,
    key: crate::fh::HandleKey,
    /// The times its directories show: when the server started.
    time: Nfstime3,
}

/// Every export under one root.
pub(crate) struct Namespace<S> {
    exports: Vec<Arc<S>>,
    /// Each export's root handle (fixed for the export's lifetime).
    roots: Vec<NfsFh3>,
    table: Option<Arc<ExportTable<S>>>,
    pseudo: Option<Pseudo>,
}

impl<S> core::fmt::Debug for Namespace<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Namespace")
            .field("exports", &self.exports.len())
            .field("pseudo", &self.pseudo.is_some())
            .finish()
    }
}

impl<S: Storage> Namespace<S> {
    /// One storage as the whole namespace, with no access control.
    pub(crate) fn single(fs: Arc<S>) -> Self {
        Self {
            roots: vec![fs.root()],
            exports: vec![fs],
            table: None,
            pseudo: None,
        }
    }

    /// Every export of `table` at its path.
    pub(crate) fn of_table(table: Arc<ExportTable<S>>) -> Self {
        let exports: Vec<Arc<S>> = table.exports().iter().map(|e| Arc::clone(e.fs())).collect();
        // Each export at its canonical path and at every absolute alias
        // MOUNT knows it by (RFC 8881 §7.3: one namespace for all).
        let paths: Vec<(usize, &std::path::Path)> = table
            .exports()
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                e.names()
                    .iter()
                    .filter(|n| n.starts_with(b"/"))
                    .map(move |n| (i, std::path::Path::new(std::ffi::OsStr::from_bytes(n))))
            })
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let pseudo = Pseudo {
            tree: Tree::with_names(&paths),
            key: table.handle_key().clone(),
            time: Nfstime3 {
                seconds: u32::try_from(now.as_secs()).unwrap_or(u32::MAX),
                nseconds: now.subsec_nanos(),
            },
        };
        Self {
            roots: exports.iter().map(|fs| fs.root()).collect(),
            exports,
            table: Some(table),
            pseudo: Some(pseudo),
        }
    }

    /// Which file system `fh` belongs to; a handle no export owns goes to
    /// the first, which refuses it (BADHANDLE or STALE) when used.
    pub(crate) fn place(&self, fh: &NfsFh3) -> StorageResult<Place> {
        if let Some(p) = &self.pseudo {
            if Handle::is_pseudo(fh) {
                let id = Handle::parse_pseudo(fh, &p.key)?;
                return p
                    .tree
                    .by_fileid(id)
                    .map(Place::Junction)
                    .ok_or(Nfsstat3::NFS3ERR_STALE);
            }
        }
        if self.exports.len() == 1 {
            return Ok(Place::Export(0));
        }
        Ok(Place::Export(
            self.exports.iter().position(|e| e.owns(fh)).unwrap_or(0),
        ))
    }

    fn junction_fh(&self, n: usize) -> NfsFh3 {
        match &self.pseudo {
            Some(p) => Handle::pseudo_fh(p.tree.node(n).fileid, &p.key),
            None => NfsFh3::default(),
        }
    }

    fn step_fh(&self, s: Step) -> NfsFh3 {
        match s {
            Step::Export(e) => self.roots[e].clone(),
            Step::Junction(n) => self.junction_fh(n),
        }
    }

    /// Whether the client at `ip` may use export `e`.
    fn lists(&self, ip: IpAddr) -> impl Fn(usize) -> bool + '_ {
        move |e| self.table.as_ref().is_none_or(|t| t.lists(e, ip))
    }

    /// The root file handle for the client at `peer` (PUTROOTFH, RFC 8881
    /// §18.21): the pseudo root, or the export of `/` when it lists the
    /// client.
    pub(crate) fn root_for(&self, peer: &PeerInfo) -> NfsFh3 {
        let Some(p) = &self.pseudo else {
            return self.roots[0].clone();
        };
        let lists = self.lists(peer_ip(peer));
        match p.tree.enter(ROOT, &lists) {
            Some(s) => self.step_fh(s),
            None => self.junction_fh(ROOT),
        }
    }

    /// LOOKUP of `name` in `dir` for the client at `peer`: in a junction,
    /// only names that lead to an export the client may use
    /// (NFS3ERR_NOENT otherwise).
    pub(crate) async fn lookup_for(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        peer: &PeerInfo,
    ) -> StorageResult<NfsFh3> {
        match (self.place(dir)?, &self.pseudo) {
            (Place::Junction(n), Some(p)) => {
                let lists = self.lists(peer_ip(peer));
                let (_, s) = p
                    .tree
                    .step(n, &name.0, &lists)
                    .ok_or(Nfsstat3::NFS3ERR_NOENT)?;
                Ok(self.step_fh(s))
            }
            _ => self.lookup(dir, name).await,
        }
    }

    /// READDIR of `dir` for the client at `peer`: a junction lists only
    /// the children that lead to an export the client may use.
    pub(crate) async fn readdir_for(
        &self,
        dir: &NfsFh3,
        peer: &PeerInfo,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPage> {
        match self.place(dir)? {
            Place::Junction(n) => self.list_junction(n, Some(peer_ip(peer)), req, sink).await,
            Place::Export(e) => self.exports[e].readdir(dir, req, sink).await,
        }
    }

    /// The access decision for a call on `fh`'s file system.
    pub(crate) fn admit(
        &self,
        place: Place,
        peer: &PeerInfo,
        cred: &Credential,
    ) -> Result<Grant, Refusal> {
        let (Some(t), Some(p)) = (&self.table, &self.pseudo) else {
            return Ok(Grant {
                caller: Caller::of(cred),
                read_only: false,
            });
        };
        match place {
            Place::Export(e) => t.admit(&t.exports()[e], peer, cred),
            Place::Junction(n) => t.admit_junction(&p.tree.node(n).below, peer, cred),
        }
    }

    /// The flavors SECINFO offers for `fh` to the client at `peer`
    /// (RFC 8881 §18.29.4, §2.6.3.1.1): those of its export, or for a
    /// junction those of the exports below it that list the client
    /// (§7.8).
    pub(crate) fn flavors(&self, fh: &NfsFh3, peer: &PeerInfo) -> StorageResult<Vec<u32>> {
        let (Some(t), Some(p)) = (&self.table, &self.pseudo) else {
            return Ok(vec![1]);
        };
        let ip = peer_ip(peer);
        Ok(match self.place(fh)? {
            Place::Export(e) => t.flavors(&[e], ip),
            Place::Junction(n) => t.flavors(&p.tree.node(n).below, ip),
        })
    }

    /// The NFSv4 attributes that depend on the namespace: a junction's
    /// change attribute (stable, from its children), and an export
    /// root's `mounted_on_fileid` (RFC 8881 §5.8.2.19).
    pub(crate) fn fix_attrs(&self, fh: &NfsFh3, attrs: &mut FileAttrs) {
        let Some(p) = &self.pseudo else {
            return;
        };
        match self.place(fh) {
            Ok(Place::Junction(n)) => {
                attrs.change = Some(p.tree.node(n).change);
                attrs.xattr_support = Some(false);
            }
            Ok(Place::Export(e)) if self.roots[e] == *fh => {
                if let Some(m) = p.tree.mount_of(e).filter(|&m| m != ROOT) {
                    attrs.mounted_on_fileid = Some(p.tree.node(m).fileid);
                }
            }
            _ => {}
        }
    }

    fn junction_attrs(p: &Pseudo, n: usize) -> Fattr3 {
        let node = p.tree.node(n);
        Fattr3 {
            ftype: Ftype3::NF3DIR,
            mode: 0o555,
            nlink: 2 + u32::try_from(node.children.len()).unwrap_or(u32::MAX - 2),
            uid: 0,
            gid: 0,
            size: 4096,
            used: 4096,
            rdev: Specdata3::default(),
            fsid: PSEUDO_FSID,
            fileid: node.fileid,
            atime: p.time,
            mtime: p.time,
            ctime: p.time,
        }
    }

    /// Lists junction `n` (only what the client at `ip` may see, when
    /// given).
    async fn list_junction(
        &self,
        n: usize,
        ip: Option<IpAddr>,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPage> {
        let Some(p) = &self.pseudo else {
            return Err(Nfsstat3::NFS3ERR_BADHANDLE);
        };
        let lists = move |e: usize| match ip {
            Some(ip) => self.lists(ip)(e),
            None => true,
        };
        sink.dir(&Self::junction_attrs(p, n))?;
        let verf = p.tree.node(n).change.to_be_bytes();
        let mut eof = true;
        for (cookie, c) in p.tree.list(n, req.cookie, &lists) {
            let Some(step) = p.tree.enter(c, &lists) else {
                continue;
            };
            let fh = self.step_fh(step);
            let plus = if req.plus {
                Some(match step {
                    Step::Export(e) => self.exports[e].getattr(&fh).await,
                    Step::Junction(j) => Ok(Self::junction_attrs(p, j)),
                })
            } else {
                None
            };
            let entry = DirEntry {
                fileid: p.tree.node(c).fileid,
                name: &p.tree.node(c).name,
                cookie,
                plus: plus.map(|r| r.map(|a| (fh.as_bytes(), a))),
            };
            if !sink.entry(entry) {
                eof = false;
                break;
            }
        }
        Ok(DirPage { verf, eof })
    }

    /// The export a change goes to, or ROFS in the pseudo file system.
    fn writable(&self, fh: &NfsFh3) -> StorageResult<&Arc<S>> {
        match self.place(fh)? {
            Place::Export(e) => Ok(&self.exports[e]),
            Place::Junction(_) => Err(Nfsstat3::NFS3ERR_ROFS),
        }
    }

    /// The export of a regular-file operation (a junction is a directory).
    fn file(&self, fh: &NfsFh3) -> StorageResult<&Arc<S>> {
        match self.place(fh)? {
            Place::Export(e) => Ok(&self.exports[e]),
            Place::Junction(_) => Err(Nfsstat3::NFS3ERR_ISDIR),
        }
    }

    /// The one export both handles of a two-directory change belong to
    /// (NFS3ERR_XDEV across exports).
    fn same(&self, a: &NfsFh3, b: &NfsFh3) -> StorageResult<&Arc<S>> {
        match (self.place(a)?, self.place(b)?) {
            (Place::Export(x), Place::Export(y)) if x == y => Ok(&self.exports[x]),
            (Place::Export(_), Place::Export(_)) => Err(Nfsstat3::NFS3ERR_XDEV),
            _ => Err(Nfsstat3::NFS3ERR_ROFS),
        }
    }

    /// `..` of an export root: the junction it is mounted on's parent.
    fn above_root(&self, e: usize) -> StorageResult<NfsFh3> {
        let p = self.pseudo.as_ref().ok_or(Nfsstat3::NFS3ERR_NOENT)?;
        let m = p.tree.mount_of(e).ok_or(Nfsstat3::NFS3ERR_NOENT)?;
        let up = p.tree.node(m).parent.ok_or(Nfsstat3::NFS3ERR_NOENT)?;
        Ok(self.junction_fh(up))
    }
}

impl<S: Storage> Storage for Namespace<S> {
    fn root(&self) -> NfsFh3 {
        match &self.pseudo {
            Some(p) => match p.tree.node(ROOT).export {
                Some(e) => self.roots[e].clone(),
                None => self.junction_fh(ROOT),
            },
            None => self.roots[0].clone(),
        }
    }

    fn read_only(&self) -> bool {
        self.exports.iter().all(|e| e.read_only())
    }

    fn owns(&self, fh: &NfsFh3) -> bool {
        match self.place(fh) {
            Ok(Place::Export(e)) => self.exports[e].owns(fh),
            Ok(Place::Junction(_)) => true,
            Err(_) => false,
        }
    }

    /// The first export's: every export's changes when the server
    /// restarts, which is all a verifier tells (RFC 8881 §18.32.3).
    fn write_verifier(&self) -> [u8; 8] {
        self.exports[0].write_verifier()
    }

    async fn getattr(&self, fh: &NfsFh3) -> StorageResult<Fattr3> {
        match self.place(fh)? {
            Place::Export(e) => self.exports[e].getattr(fh).await,
            Place::Junction(n) => match &self.pseudo {
                Some(p) => Ok(Self::junction_attrs(p, n)),
                None => Err(Nfsstat3::NFS3ERR_BADHANDLE),
            },
        }
    }

    async fn setattr(
        &self,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> StorageResult<()> {
        self.writable(fh)?.setattr(fh, attrs, guard).await
    }

    async fn lookup(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<NfsFh3> {
        let dotdot = name.0[..] == b".."[..];
        match (self.place(dir)?, &self.pseudo) {
            (Place::Junction(n), Some(p)) if dotdot => {
                let up = p.tree.node(n).parent.ok_or(Nfsstat3::NFS3ERR_NOENT)?;
                Ok(self.junction_fh(up))
            }
            (Place::Junction(n), Some(p)) => {
                let all = |_: usize| true;
                let (_, s) = p
                    .tree
                    .step(n, &name.0, &all)
                    .ok_or(Nfsstat3::NFS3ERR_NOENT)?;
                Ok(self.step_fh(s))
            }
            (Place::Export(e), Some(_)) if dotdot && self.roots[e] == *dir => self.above_root(e),
            (Place::Export(e), _) => self.exports[e].lookup(dir, name).await,
            (Place::Junction(_), None) => Err(Nfsstat3::NFS3ERR_BADHANDLE),
        }
    }

    async fn readlink(&self, fh: &NfsFh3) -> StorageResult<Bytes> {
        match self.place(fh)? {
            Place::Export(e) => self.exports[e].readlink(fh).await,
            Place::Junction(_) => Err(Nfsstat3::NFS3ERR_INVAL),
        }
    }

    async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> StorageResult<(Bytes, bool)> {
        self.file(fh)?.read(fh, offset, count).await
    }

    async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> StorageResult<StableHow> {
        self.writable(fh)?.write(fh, offset, data, stable).await
    }

    /// The export's own one pass.
    async fn read_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: May<'_>,
        files: bool,
    ) -> ReadDone {
        match self.file(fh) {
            Ok(fs) => fs.read_checked(fh, offset, count, may, files).await,
            Err(e) => ReadDone {
                data: Err(e),
                attrs: None,
            },
        }
    }

    /// The export's own one pass.
    async fn write_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        may: May<'_>,
    ) -> WriteDone {
        match self.writable(fh) {
            Ok(fs) => fs.write_checked(fh, offset, data, stable, may).await,
            Err(e) => WriteDone {
                before: None,
                written: Err(e),
                after: None,
            },
        }
    }

    async fn create(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        how: &Createhow3,
    ) -> StorageResult<NfsFh3> {
        self.writable(dir)?.create(dir, name, how).await
    }

    async fn mkdir(&self, dir: &NfsFh3, name: &Filename3, attrs: &Sattr3) -> StorageResult<NfsFh3> {
        self.writable(dir)?.mkdir(dir, name, attrs).await
    }

    async fn symlink(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        target: &[u8],
        attrs: &Sattr3,
    ) -> StorageResult<NfsFh3> {
        self.writable(dir)?.symlink(dir, name, target, attrs).await
    }

    async fn mknod(
        &self,
        dir: &NfsFh3,
        name: &Filename3,
        what: &Mknoddata3,
    ) -> StorageResult<NfsFh3> {
        self.writable(dir)?.mknod(dir, name, what).await
    }

    async fn remove(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        self.writable(dir)?.remove(dir, name).await
    }

    async fn rmdir(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        self.writable(dir)?.rmdir(dir, name).await
    }

    async fn rename(
        &self,
        from_dir: &NfsFh3,
        from: &Filename3,
        to_dir: &NfsFh3,
        to: &Filename3,
    ) -> StorageResult<()> {
        self.same(from_dir, to_dir)?
            .rename(from_dir, from, to_dir, to)
            .await
    }

    async fn link(&self, fh: &NfsFh3, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        self.same(fh, dir)?.link(fh, dir, name).await
    }

    async fn readdir(
        &self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPage> {
        match self.place(dir)? {
            Place::Junction(n) => self.list_junction(n, None, req, sink).await,
            Place::Export(e) => self.exports[e].readdir(dir, req, sink).await,
        }
    }

    async fn fsstat(&self, fh: &NfsFh3) -> StorageResult<FsStat> {
        match self.place(fh)? {
            Place::Export(e) => self.exports[e].fsstat(fh).await,
            Place::Junction(_) => Ok(FsStat::default()),
        }
    }

    async fn commit(&self, fh: &NfsFh3) -> StorageResult<()> {
        self.file(fh)?.commit(fh).await
    }

    async fn seek(&self, fh: &NfsFh3, offset: u64, hole: bool) -> StorageResult<Option<u64>> {
        self.file(fh)?.seek(fh, offset, hole).await
    }

    fn open_file(&self, fh: &NfsFh3, write: bool) -> StorageResult<std::fs::File> {
        self.file(fh)?.open_file(fh, write)
    }

    fn pin(&self, fh: &NfsFh3, fd: &std::sync::Arc<std::os::fd::OwnedFd>) {
        if let Ok(fs) = self.file(fh) {
            fs.pin(fh, fd);
        }
    }

    async fn allocate(&self, fh: &NfsFh3, offset: u64, len: u64, punch: bool) -> StorageResult<()> {
        self.writable(fh)?.allocate(fh, offset, len, punch).await
    }

    async fn getxattr(&self, fh: &NfsFh3, name: &[u8], max: usize) -> Result<Bytes, XattrError> {
        match self.place(fh)? {
            Place::Export(e) => self.exports[e].getxattr(fh, name, max).await,
            Place::Junction(_) => Err(XattrError::NoAttr),
        }
    }

    async fn setxattr(
        &self,
        fh: &NfsFh3,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), XattrError> {
        self.writable(fh)?.setxattr(fh, name, value, how).await
    }

    async fn listxattrs(&self, fh: &NfsFh3) -> Result<Vec<Bytes>, XattrError> {
        match self.place(fh)? {
            Place::Export(e) => self.exports[e].listxattrs(fh).await,
            Place::Junction(_) => Ok(Vec::new()),
        }
    }

    async fn removexattr(&self, fh: &NfsFh3, name: &[u8]) -> Result<(), XattrError> {
        self.writable(fh)?.removexattr(fh, name).await
    }

    async fn read_plus(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        max_segments: usize,
    ) -> StorageResult<(Vec<Segment>, bool)> {
        self.file(fh)?
            .read_plus(fh, offset, count, max_segments)
            .await
    }

    async fn copy_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<u64> {
        self.same(src, dst)?
            .copy_range(src, src_offset, dst, dst_offset, count)
            .await
    }

    async fn clone_range(
        &self,
        src: &NfsFh3,
        src_offset: u64,
        dst: &NfsFh3,
        dst_offset: u64,
        count: u64,
    ) -> StorageResult<()> {
        self.same(src, dst)?
            .clone_range(src, src_offset, dst, dst_offset, count)
            .await
    }
}
