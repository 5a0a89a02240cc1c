//! Open files of [`NfsFs`]: the ACCESS check and attribute revalidation
//! on open (close-to-open consistency, nfs(5) "Close-to-open cache
//! consistency"), COMMIT on close, and the silly rename of a file
//! unlinked while open.
//!
//! NFSv3 has no open state, so a file removed on the server is gone for
//! whoever still holds it open (NFS3ERR_STALE). Like Linux's client
//! (`nfs_sillyrename`), the mount renames a file that is open here and
//! being unlinked, or replaced by a RENAME, to `.nfs` + its file id + a
//! counter (hex) in the same directory, and REMOVEs that name when the
//! last open handle is released (or the mount ends).

use fuser::{Errno, FileHandle, FopenFlags, INodeNo, OpenAccMode};
use nfs_client::nfs::v3::{
    Fattr3, NfsFh3, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_MODIFY, ACCESS3_READ,
};
use nfs_client::Mount;
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;

use super::super::hide::{Hider, Names};
use super::super::unstable::{OpenFile, V3};
use super::{nfs, NfsFs, Res};

/// `__FMODE_EXEC` in the open flags FUSE passes on: the open of
/// `execve(2)`, which needs execute permission only (Linux's
/// `nfs_open_permission_mask`).
pub(crate) const FMODE_EXEC: i32 = 0x20;

/// An open file handle: the file with its unconfirmed writes, its inode,
/// and the credential of the process that opened it, which its READs,
/// WRITEs and COMMITs carry.
#[derive(Debug)]
pub(crate) struct Open {
    pub(crate) fh: NfsFh3,
    pub(crate) file: OpenFile,
    pub(crate) ino: INodeNo,
    pub(crate) cred: OpaqueAuth,
}

/// The ACCESS bits an open needs (RFC 1813 §3.3.4), as Linux's client
/// asks them: read, write (modify or extend), or execute for `execve`.
fn open_needs(acc: OpenAccMode, flags: i32) -> (u32, u32) {
    const W: u32 = ACCESS3_MODIFY | ACCESS3_EXTEND;
    if flags & FMODE_EXEC != 0 {
        return (ACCESS3_EXECUTE, 0);
    }
    match acc {
        OpenAccMode::O_RDONLY => (ACCESS3_READ, 0),
        OpenAccMode::O_WRONLY => (0, W),
        _ => (ACCESS3_READ, W),
    }
}

/// Whether ACCESS granted `granted` covers `all` (every bit) and `any`
/// (one bit at least, when any are asked).
fn granted(granted: u32, all: u32, any: u32) -> bool {
    granted & all == all && (any == 0 || granted & any != 0)
}

impl<T: ClientTransport + Send + Sync + 'static> NfsFs<T> {
    pub(super) fn new_open_file(&self, fh: NfsFh3, ino: INodeNo, cred: OpaqueAuth) -> FileHandle {
        let o = Open {
            fh,
            file: OpenFile::default(),
            ino,
            cred,
        };
        self.files.open(self.handle(), o, ino, &self.opens)
    }

    /// OPEN: ACCESS (RFC 1813 §3.3.4) as the caller for the open mode
    /// (EACCES when the server denies it), whose attributes revalidate
    /// the file: the kernel keeps its cached data only when they are
    /// unchanged since last seen (close-to-open consistency).
    pub(super) async fn do_open(
        &self,
        cred: OpaqueAuth,
        ino: INodeNo,
        flags: i32,
        acc: OpenAccMode,
    ) -> Res<(FileHandle, FopenFlags)> {
        let fh = self.fh(ino)?;
        if acc != OpenAccMode::O_RDONLY {
            self.writable()?;
        }
        let (all, any) = open_needs(acc, flags);
        let m = self.mount.with_credential(cred.clone());
        let r = nfs(m.client().access(&fh, all | any).await)?;
        if !granted(r.access, all, any) {
            return Err(Errno::EACCES);
        }
        let a: Fattr3 = match r.obj_attributes {
            Some(a) => a,
            None => nfs(m.client().getattr(&fh).await)?,
        };
        let keep = !self.ac.changed(ino.0, &a);
        self.ac.observe(ino.0, &a);
        let flags = if keep {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        Ok((self.new_open_file(fh, ino, cred), flags))
    }

    /// COMMIT (RFC 1813 §3.3.21) of an open file's writes, as its opener.
    pub(super) async fn commit(&self, o: &Open) -> Res<()> {
        let m = self.mount.with_credential(o.cred.clone());
        o.file.commit(&V3 { m: &m, fh: &o.fh }).await
    }

    /// The last close of a handle: COMMIT, then the REMOVE a silly rename
    /// put off, if this was the file's last handle.
    pub(super) async fn do_release(&self, fh: FileHandle) -> Res<()> {
        let o = self.files.take(fh)?;
        let r = self.commit(&o).await;
        self.hider().closed(o.ino).await;
        r
    }

    /// The silly rename over this mount's open files, its NFSv3 calls
    /// made as the credential given.
    pub(super) fn hider<'a>(
        &'a self,
    ) -> Hider<'a, NfsFh3, impl Fn(OpaqueAuth) -> V3Names<'a, T> + 'a> {
        Hider {
            opens: &self.opens,
            inodes: &self.inodes,
            names: move |cred| V3Names(self.mount.with_credential(cred)),
        }
    }
}

/// NFSv3 LOOKUP, RENAME and REMOVE (RFC 1813 §3.3.3, §3.3.14, §3.3.12)
/// as one caller, for the silly rename.
pub(super) struct V3Names<'a, T>(Mount<&'a T>);

impl<T: ClientTransport> Names<NfsFh3> for V3Names<'_, T> {
    async fn fileid(&self, dir: &NfsFh3, name: &[u8]) -> Option<u64> {
        let c = self.0.client();
        let l = c.lookup(dir, name).await.ok()?;
        match l.obj_attributes {
            Some(a) => Some(a.fileid),
            None => Some(c.getattr(&l.object).await.ok()?.fileid),
        }
    }

    async fn rename(&self, dir: &NfsFh3, from: &[u8], to: &str) -> Res<()> {
        nfs(self.0.client().rename(dir, from, dir, to).await).map(drop)
    }

    async fn remove(&self, dir: &NfsFh3, name: &[u8]) -> Res<()> {
        nfs(self.0.client().remove(dir, name).await).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_modes_ask_the_access_linux_asks() {
        let w = ACCESS3_MODIFY | ACCESS3_EXTEND;
        assert_eq!(open_needs(OpenAccMode::O_RDONLY, 0), (ACCESS3_READ, 0));
        assert_eq!(open_needs(OpenAccMode::O_WRONLY, 1), (0, w));
        assert_eq!(open_needs(OpenAccMode::O_RDWR, 2), (ACCESS3_READ, w));
        assert_eq!(
            open_needs(OpenAccMode::O_RDONLY, FMODE_EXEC),
            (ACCESS3_EXECUTE, 0)
        );
        assert!(granted(ACCESS3_READ | ACCESS3_EXTEND, ACCESS3_READ, w));
        assert!(!granted(ACCESS3_READ, ACCESS3_READ, w));
        assert!(!granted(ACCESS3_EXTEND, ACCESS3_READ, w));
        assert!(granted(ACCESS3_READ, ACCESS3_READ, 0));
    }
}
