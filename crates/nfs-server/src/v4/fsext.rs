//! The NFSv4.2 data operations SEEK, ALLOCATE and DEALLOCATE (RFC 7862
//! §15.11, §15.1, §15.4), which need an open file descriptor that the
//! [`Storage`](crate::Storage) interface does not give.
//!
//! A handle is turned into a path by walking the export for its inode
//! (never following symbolic links, never leaving the export's device),
//! with the result cached and re-checked by `lstat` on every use. Moving
//! this into `LocalFs` (which already keeps such a map) would avoid the
//! walk.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nfs::v4::{Allocate4Args, DataContent4, Nfsstat4, Seek4Args, Seek4ResOk};
use rustix::fs::{FallocateFlags, OFlags, SeekFrom};

use super::attrs::st4;
use super::{Cx, Nfs4Service};
use crate::fh::Handle;
use crate::localfs::io_status;

type R<T> = Result<T, Nfsstat4>;

/// Inode number to export-relative path, for [`Nfs4Service`]'s file
/// descriptors.
#[derive(Debug, Default)]
pub(super) struct PathCache(Mutex<HashMap<u64, PathBuf>>);

fn io4(e: &std::io::Error) -> Nfsstat4 {
    st4(io_status(e))
}

fn find(root: &Path, dev: u64, ino: u64) -> Option<PathBuf> {
    let mut queue = VecDeque::from([PathBuf::new()]);
    while let Some(rel) = queue.pop_front() {
        let Ok(rd) = fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for ent in rd.flatten() {
            let child = rel.join(ent.file_name());
            if ent.ino() == ino {
                return Some(child);
            }
            if ent.file_type().is_ok_and(|t| t.is_dir())
                && ent.metadata().is_ok_and(|m| m.dev() == dev)
            {
                queue.push_back(child);
            }
        }
    }
    None
}

impl Nfs4Service {
    /// Opens the current file (a regular file, checked by the caller).
    pub(super) fn open_fd(&self, fh: &nfs::v3::NfsFh3, write: bool) -> R<File> {
        let h = Handle::parse(fh, self.fs.export_id()).map_err(st4)?;
        let root = self.fs.path();
        let dev = fs::symlink_metadata(root).map_err(|e| io4(&e))?.dev();
        let ok = |rel: &Path| {
            fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.ino() == h.ino && m.dev() == dev)
        };
        let cached = self
            .paths
            .0
            .lock()
            .ok()
            .and_then(|m| m.get(&h.ino).cloned());
        let rel = match cached.filter(|r| ok(r)) {
            Some(r) => r,
            None => {
                let r = find(root, dev, h.ino).ok_or(Nfsstat4::NFS4ERR_STALE)?;
                if let Ok(mut m) = self.paths.0.lock() {
                    m.insert(h.ino, r.clone());
                }
                r
            }
        };
        OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(root.join(rel))
            .map_err(|e| io4(&e))
    }

    /// SEEK (RFC 7862 §15.11.3) with `SEEK_DATA`/`SEEK_HOLE`: an offset at
    /// or past the end is NFS4ERR_NXIO; no further data is `sr_eof` at the
    /// file size; `sr_eof` is set when the answer is the end of the file.
    pub(super) async fn seek(&self, a: &Seek4Args, cx: &Cx) -> R<Seek4ResOk> {
        let fh = self.io_prep(&a.stateid, cx, false).await?;
        let size = self.attr(&fh).await?.size;
        if a.offset >= size {
            return Err(Nfsstat4::NFS4ERR_NXIO);
        }
        let f = self.open_fd(&fh, false)?;
        let how = match a.what {
            DataContent4::NFS4_CONTENT_DATA => SeekFrom::Data(a.offset),
            DataContent4::NFS4_CONTENT_HOLE => SeekFrom::Hole(a.offset),
            _ => return Err(Nfsstat4::NFS4ERR_UNION_NOTSUPP),
        };
        match rustix::fs::seek(&f, how) {
            Ok(pos) => Ok(Seek4ResOk {
                eof: pos >= size,
                offset: pos,
            }),
            Err(rustix::io::Errno::NXIO) => Ok(Seek4ResOk {
                eof: true,
                offset: size,
            }),
            Err(e) => Err(io4(&e.into())),
        }
    }

    /// ALLOCATE and DEALLOCATE (RFC 7862 §15.1.3, §15.4.3): `fallocate`,
    /// plain or punching a hole that keeps the size.
    pub(super) async fn allocate(&self, a: &Allocate4Args, cx: &Cx, dealloc: bool) -> R<()> {
        if a.length == 0 || a.offset.checked_add(a.length).is_none() {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let fh = self.io_prep(&a.stateid, cx, true).await?;
        let f = self.open_fd(&fh, true)?;
        let flags = if dealloc {
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
        } else {
            FallocateFlags::empty()
        };
        rustix::fs::fallocate(&f, flags, a.offset, a.length).map_err(|e| match e {
            rustix::io::Errno::OPNOTSUPP => Nfsstat4::NFS4ERR_NOTSUPP,
            e => io4(&e.into()),
        })
    }
}
