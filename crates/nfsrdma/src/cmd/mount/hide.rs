//! The silly rename of either NFS version, written once over the
//! version's name operations ([`Names`]): a file open here that is being
//! unlinked, or replaced by a RENAME, is renamed to a hidden `.nfs` name
//! in its directory and REMOVEd at its last close or when the mount ends,
//! as Linux's client does (`nfs_sillyrename`). [`super::silly`] keeps the
//! bookkeeping (open handles per inode, the renames waiting).

use std::sync::{Mutex, MutexGuard};

use fuser::{Errno, INodeNo};
use oncrpc::msg::OpaqueAuth;

use super::silly::{next_silly_name, Opens, Silly};
use super::table::Inodes;

type Res<T> = Result<T, Errno>;

/// What the silly rename needs of an NFS version, acting as one caller.
pub(crate) trait Names<H> {
    /// The file id of `name` in `dir` (LOOKUP), if it exists.
    async fn fileid(&self, dir: &H, name: &[u8]) -> Option<u64>;
    /// RENAME of `from` to `to`, both in `dir`.
    async fn rename(&self, dir: &H, from: &[u8], to: &str) -> Res<()>;
    /// REMOVE of `name` in `dir`.
    async fn remove(&self, dir: &H, name: &[u8]) -> Res<()>;
}

/// A mount's open files and inodes, and `names(cred)`: its version's
/// name operations as `cred`.
pub(crate) struct Hider<'a, H, F> {
    pub(crate) opens: &'a Mutex<Opens<H>>,
    pub(crate) inodes: &'a Inodes<H>,
    pub(crate) names: F,
}

impl<H: Clone + PartialEq, N: Names<H>, F: Fn(OpaqueAuth) -> N> Hider<'_, H, F> {
    fn opens(&self) -> MutexGuard<'_, Opens<H>> {
        self.opens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The inode and file id of `name` in `dir` if it is open here and
    /// not yet renamed away (a LOOKUP only while some file is open).
    async fn open_target(&self, n: &N, dir: &H, name: &[u8]) -> Option<(INodeNo, u64)> {
        if self.opens().is_empty() {
            return None;
        }
        let fileid = n.fileid(dir, name).await?;
        let ino = self.inodes.ino(fileid)?;
        let hide = self.opens().needs_hiding(ino);
        hide.then_some((ino, fileid))
    }

    /// Renames `name` in `dir` to a hidden name, as `cred`, if it is a
    /// file open here, so that it outlives the unlink or the RENAME over
    /// it until its last close. Returns whether it did.
    pub(crate) async fn hide_if_open(&self, cred: &OpaqueAuth, dir: &H, name: &[u8]) -> Res<bool> {
        let n = (self.names)(cred.clone());
        let Some((ino, fileid)) = self.open_target(&n, dir, name).await else {
            return Ok(false);
        };
        let hidden = next_silly_name(fileid);
        n.rename(dir, name, &hidden).await?;
        tracing::debug!(hidden, "silly rename of a file open here");
        let silly = Silly {
            dir: dir.clone(),
            name: hidden,
            cred: cred.clone(),
        };
        let orphan = self.opens().hidden(ino, silly);
        if let Some(s) = orphan {
            self.remove(&s).await;
        }
        Ok(true)
    }

    /// UNLINK as `cred`: REMOVE, or a silly rename of a file open here.
    pub(crate) async fn remove_or_hide(&self, cred: &OpaqueAuth, dir: &H, name: &[u8]) -> Res<()> {
        if self.hide_if_open(cred, dir, name).await? {
            return Ok(());
        }
        (self.names)(cred.clone()).remove(dir, name).await
    }

    /// REMOVE of a silly-renamed file, as whoever renamed it.
    async fn remove(&self, s: &Silly<H>) {
        let n = (self.names)(s.cred.clone());
        if let Err(e) = n.remove(&s.dir, s.name.as_bytes()).await {
            tracing::warn!(name = %s.name, error = ?e, "removing a silly-renamed file failed");
        }
    }

    /// One handle of `ino` released: the REMOVE a silly rename put off,
    /// if that was the file's last handle.
    pub(crate) async fn closed(&self, ino: INodeNo) {
        let silly = self.opens().closed(ino);
        if let Some(s) = silly {
            self.remove(&s).await;
        }
    }

    /// At unmount: REMOVEs the silly-renamed files whose holders never
    /// closed them.
    pub(crate) async fn remove_left(&self) {
        let left = self.opens().drain_silly();
        for s in &left {
            self.remove(s).await;
        }
    }
}
