//! From a handle to an open directory fd and a name in it, without a walk
//! of the export and without a path built from the export root.
//!
//! A handle's entry in the [index](super::index) names its parent
//! directory's inode and its name there; the parent is found the same way,
//! up to the export root or to a directory whose fd is still open in the
//! bounded cache ([`DIR_CACHE`] entries). Then each step down is an
//! `openat(parent_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW)` whose
//! result is checked (`fstat`: same inode, device and generation as
//! recorded), and the handle's own entry is checked with
//! `statx(parent_fd, name, AT_SYMLINK_NOFOLLOW)`. No symbolic link is ever
//! followed and no name is `..`, so a client that swaps a directory for a
//! symbolic link while a call is in flight makes it fail, never leave the
//! export (RFC 1813 §4.2: the server must not follow links for a client).
//!
//! A directory fd stays valid when the directory is renamed by the server
//! (the index is updated) and follows it if a local process moves it;
//! each use checks the handle's own entry against its parent, so a file
//! moved behind the server's back is STALE until looked up again.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{NfsFh3, Nfsstat3};
use rustix::fs::{Mode, OFlags};

use super::attrs::{sx, Meta, Target};
use super::index::Entry;
use super::{pins, LocalFs};
use crate::fh::Handle;
use crate::storage::StorageResult;

/// Directory fds kept open.
pub(crate) const DIR_CACHE: usize = 512;
/// Deepest directory chain followed from an entry to a known directory;
/// deeper (or a loop in a damaged index) is STALE.
const MAX_DEPTH: usize = 4096;

/// A resolved handle.
pub(crate) struct Node {
    pub(crate) ino: u64,
    pub(crate) meta: Meta,
    /// The directory holding it (the root itself for the root).
    pub(crate) parent: Arc<OwnedFd>,
    /// Its name there (`.` for the root).
    pub(crate) name: Bytes,
    /// Its own fd when it is a directory (`O_PATH`).
    pub(crate) dir: Option<Arc<OwnedFd>>,
    /// The descriptor opens of it reuse ([`super::pins`]).
    pub(crate) pinned: Option<Arc<OwnedFd>>,
}

impl Node {
    /// An `O_PATH` fd of the file and the [`Target`] for SETATTR.
    pub(crate) fn with_target<T>(
        &self,
        f: impl FnOnce(&Target<'_>) -> StorageResult<T>,
    ) -> StorageResult<T> {
        let fd = match &self.dir {
            Some(d) => Arc::clone(d),
            None => Arc::new(self.open(OFlags::PATH)?),
        };
        f(&Target {
            parent: &self.parent,
            name: &self.name,
            fd: &fd,
            meta: self.meta,
            pinned: self.pinned.as_deref(),
        })
    }

    /// Opens the file itself (never through a link), checked to be the
    /// resolved inode: a dup of its pinned descriptor where that serves.
    /// Never waits for a kernel lease to be released (`O_NONBLOCK`):
    /// a leased file answers NFS3ERR_JUKEBOX while the break runs.
    pub(crate) fn open(&self, flags: OFlags) -> StorageResult<OwnedFd> {
        Ok(self.open_checked(flags)?.0)
    }

    /// [`Self::open`], with the opened file's attributes (from the
    /// `statx` that checks it is the resolved inode).
    pub(crate) fn open_checked(&self, flags: OFlags) -> StorageResult<(OwnedFd, Meta)> {
        if let Some(fd) = self.pinned.as_deref().and_then(|p| pins::reuse(p, flags)) {
            let m = sx(Meta::of(&fd))?;
            return Ok((fd, m));
        }
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = sx(rustix::fs::openat(
            &*self.parent,
            &self.name[..],
            flags,
            Mode::empty(),
        ))?;
        let m = sx(Meta::of(&fd))?;
        if m.ino() != self.meta.ino() || m.dev() != self.meta.dev() {
            return Err(Nfsstat3::NFS3ERR_STALE);
        }
        Ok((fd, m))
    }

    /// The directory fd of a directory node (NOTDIR otherwise).
    pub(crate) fn dir(&self) -> StorageResult<&Arc<OwnedFd>> {
        self.dir.as_ref().ok_or(Nfsstat3::NFS3ERR_NOTDIR)
    }
}

impl LocalFs {
    /// The file `fh` names: BADHANDLE if it is not one of this server's
    /// handles, STALE if its file is gone or not where it was recorded.
    pub(crate) fn resolve(&self, fh: &NfsFh3) -> StorageResult<Node> {
        let h = Handle::parse(fh, &self.key, self.export_id)?;
        let mut n = match self.resolve_ino(h.ino, h.gen) {
            Err(Nfsstat3::NFS3ERR_STALE) => return self.resolve_orphan(h.ino, h.gen),
            r => r?,
        };
        if n.dir.is_none() {
            n.pinned = self.pins.get(n.ino);
        }
        Ok(n)
    }

    /// A regular file with no name left (a RENAME or REMOVE took its
    /// last one) that the server holds open for a client that still has
    /// it open (`v4/orphans.rs`, RFC 8881 §18.26.4, §18.25.4): resolved
    /// through its pinned descriptor ([`super::pins`]), which must be the
    /// handle's inode, device and generation with no links left. READ,
    /// WRITE, COMMIT and GETATTR work through the descriptor; operations
    /// that need a name (SETATTR of times or ownership, LINK) fail, as
    /// the node's name is empty. Anything else stays STALE.
    fn resolve_orphan(&self, ino: u64, gen: u64) -> StorageResult<Node> {
        const STALE: Nfsstat3 = Nfsstat3::NFS3ERR_STALE;
        let pinned = self.pins.get(ino).ok_or(STALE)?;
        let meta = Meta::of(&*pinned).map_err(|_| STALE)?;
        let same = meta.ino() == ino && meta.dev() == self.dev && meta.gen() == gen;
        if !same || meta.nlink() != 0 || !meta.is_file() {
            return Err(STALE);
        }
        Ok(Node {
            ino,
            meta,
            parent: Arc::clone(&self.root),
            name: Bytes::new(),
            dir: None,
            pinned: Some(pinned),
        })
    }

    /// Like [`Self::resolve`], requiring a directory.
    pub(crate) fn resolve_dir(&self, fh: &NfsFh3) -> StorageResult<Node> {
        let n = self.resolve(fh)?;
        n.dir()?;
        Ok(n)
    }

    pub(crate) fn root_node(&self) -> StorageResult<Node> {
        let meta = sx(Meta::of(&*self.root))?;
        Ok(Node {
            ino: self.root_ino,
            meta,
            parent: Arc::clone(&self.root),
            name: Bytes::from_static(b"."),
            dir: Some(Arc::clone(&self.root)),
            pinned: None,
        })
    }

    fn resolve_ino(&self, ino: u64, gen: u64) -> StorageResult<Node> {
        const STALE: Nfsstat3 = Nfsstat3::NFS3ERR_STALE;
        if ino == self.root_ino {
            return if gen == self.root_gen {
                self.root_node()
            } else {
                Err(STALE)
            };
        }
        let own = self.index.get(ino).filter(|e| e.gen == gen).ok_or(STALE)?;
        match self.resolve_at(ino, gen, own) {
            Err(STALE) => self.resolve_other_name(ino, gen),
            r => r,
        }
    }

    /// A file with several links whose recorded name no longer holds it,
    /// through one of its other names recorded in the index, which then
    /// becomes its recorded name (RFC 8881 §4.2.3: a persistent handle is
    /// good for the lifetime of its file; Linux's nfsd finds the inode
    /// itself). STALE when none holds it: its last link is gone.
    fn resolve_other_name(&self, ino: u64, gen: u64) -> StorageResult<Node> {
        for e in self.index.other_names(ino, gen) {
            if let Ok(n) = self.resolve_at(ino, gen, e.clone()) {
                self.index.promote(ino, e);
                return Ok(n);
            }
        }
        Err(Nfsstat3::NFS3ERR_STALE)
    }

    /// The file `ino` of generation `gen` as `own` in the index says,
    /// checked on the file system.
    fn resolve_at(&self, ino: u64, gen: u64, own: Entry) -> StorageResult<Node> {
        const STALE: Nfsstat3 = Nfsstat3::NFS3ERR_STALE;
        // Up from the parent to a directory whose fd is at hand.
        let mut chain: Vec<(u64, Entry)> = Vec::new();
        let mut up = own.parent;
        let mut dir = loop {
            if let Some(fd) = self.cached_dir(up) {
                break fd;
            }
            let e = self.index.get(up).ok_or(STALE)?;
            let next = e.parent;
            chain.push((up, e));
            if chain.len() > MAX_DEPTH {
                return Err(STALE);
            }
            up = next;
        };
        // Down, checking each step.
        for (d_ino, e) in chain.into_iter().rev() {
            dir = self.open_dir_at(&dir, d_ino, &e)?;
        }
        let meta = Meta::at(&*dir, &own.name).map_err(|_| STALE)?;
        if meta.ino() != ino || meta.dev() != self.dev || meta.gen() != gen {
            return Err(STALE);
        }
        let own_dir = if meta.is_dir() {
            Some(self.open_dir_at(&dir, ino, &own)?)
        } else {
            None
        };
        Ok(Node {
            ino,
            meta,
            parent: dir,
            name: own.name,
            dir: own_dir,
            pinned: None,
        })
    }

    /// The cached fd of directory `ino` (the root is always at hand).
    fn cached_dir(&self, ino: u64) -> Option<Arc<OwnedFd>> {
        if ino == self.root_ino {
            return Some(Arc::clone(&self.root));
        }
        let mut c = self.dirs.lock().ok()?;
        c.get(&ino).map(|(_, fd)| Arc::clone(fd))
    }

    /// Opens directory `e.name` in `parent`, checks it is inode `ino` of
    /// generation `e.gen` on the export's device, and caches it.
    pub(crate) fn open_dir_at(
        &self,
        parent: &OwnedFd,
        ino: u64,
        e: &Entry,
    ) -> StorageResult<Arc<OwnedFd>> {
        if let Some(fd) = self.dirs.lock().ok().and_then(|mut c| {
            c.get(&ino)
                .filter(|(g, _)| *g == e.gen)
                .map(|(_, fd)| Arc::clone(fd))
        }) {
            return Ok(fd);
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(parent, &e.name[..], flags, Mode::empty())
            .map_err(|_| Nfsstat3::NFS3ERR_STALE)?;
        let m = sx(Meta::of(&fd))?;
        if m.ino() != ino || m.dev() != self.dev || m.gen() != e.gen {
            return Err(Nfsstat3::NFS3ERR_STALE);
        }
        let fd = Arc::new(fd);
        if let Ok(mut c) = self.dirs.lock() {
            c.put(ino, (e.gen, Arc::clone(&fd)));
        }
        Ok(fd)
    }

    /// Drops a removed directory's fd and its listings' cursors.
    pub(crate) fn forget_dir(&self, ino: u64) {
        if let Ok(mut c) = self.dirs.lock() {
            c.pop(&ino);
        }
        self.cursors.forget_dir(ino);
    }
}
