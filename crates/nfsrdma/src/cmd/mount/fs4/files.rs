//! Open files of [`NfsFs4`]: OPEN by handle or with create (RFC 8881
//! §18.16), READ and WRITE with the open stateid, COMMIT on close, CLOSE
//! at the last release (§18.2), and the silly rename of a file unlinked
//! while open ([`super::super::silly`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fuser::{Errno, FileAttr, FileHandle, FopenFlags, INodeNo, OpenAccMode};
use nfs_client::nfs::v4::{
    NfsFh4, StableHow4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE,
};
use nfs_client::v4::{Create, OpenFile};
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;

use super::super::hide::{Hider, Names};
use super::super::unstable::{self, Target, Verf};
use super::convert::fattr3;
use super::{nfs, Entry, NfsFs4, Res, Session};

/// An open file handle: the open stateid, the unconfirmed writes, the
/// inode, and the credential of the process that opened it, which its
/// READs, WRITEs, COMMITs and CLOSE carry.
///
/// An open served locally under a delegation (RFC 8881 §10.4) holds the
/// delegation stateid and made no OPEN on the server; a recall turns it
/// into a real open (CLAIM_DELEG_CUR_FH) before the delegation goes back
/// ([`super::deleg`]).
#[derive(Debug)]
pub(crate) struct Open4 {
    file: Mutex<(OpenFile, bool)>,
    pub(super) access: u32,
    writes: unstable::OpenFile,
    ino: INodeNo,
    pub(super) cred: OpaqueAuth,
}

impl Open4 {
    /// The file and the stateid its I/O uses now.
    pub(crate) fn file(&self) -> OpenFile {
        self.lock().0.clone()
    }

    /// Served locally under a delegation: no OPEN on the server.
    pub(super) fn is_local(&self) -> bool {
        self.lock().1
    }

    /// A local open made real on the server with `file`'s stateid.
    pub(super) fn make_real(&self, file: OpenFile) {
        *self.lock() = (file, false);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (OpenFile, bool)> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether I/O through `o` with `used` failed with `e` because its
/// stateid is no longer valid and the open was reclaimed since (a
/// session recovery, RFC 8881 §8.4.2): then it is tried again with the
/// new stateid. A recovery still reclaiming is waited for first: I/O
/// sent on its new session before the open's reclaim ended fails with
/// the old stateid (EIO after an expired lease, `fuse_recover`, about 1
/// run in 8 with the three tests at load 11).
async fn reclaimed_since<U: ClientTransport>(
    s: &Session<U>,
    o: &Open4,
    used: &OpenFile,
    e: &nfs_client::v4::Error,
) -> bool {
    use nfs_client::nfs::v4::Nfsstat4;
    let stale = matches!(
        e.nfs_status(),
        Some(
            Nfsstat4::NFS4ERR_BAD_STATEID
                | Nfsstat4::NFS4ERR_STALE_STATEID
                | Nfsstat4::NFS4ERR_EXPIRED
                | Nfsstat4::NFS4ERR_OLD_STATEID
        )
    );
    if !stale {
        return false;
    }
    s.settled().await;
    o.file().stateid != used.stateid
}

/// The share access of an open mode (RFC 8881 §18.16.3).
fn share_access(acc: OpenAccMode) -> u32 {
    match acc {
        OpenAccMode::O_RDONLY => OPEN4_SHARE_ACCESS_READ,
        OpenAccMode::O_WRONLY => OPEN4_SHARE_ACCESS_WRITE,
        _ => OPEN4_SHARE_ACCESS_BOTH,
    }
}

/// An open file on the server as a write [`Target`] (RFC 8881 §18.32,
/// §18.3).
struct V4<'a, U> {
    s: &'a Session<U>,
    file: OpenFile,
    wsize: u32,
}

impl<U: ClientTransport> Target for V4<'_, U> {
    fn write_size(&self) -> usize {
        self.wsize as usize
    }

    fn commit_window(&self) -> u64 {
        nfs_client::IoOptions::default().commit_window
    }

    async fn write(&self, offset: u64, data: Bytes, sync: bool) -> Res<(u32, Option<Verf>)> {
        let how = if sync {
            StableHow4::FILE_SYNC4
        } else {
            StableHow4::UNSTABLE4
        };
        let (n, got, verf) = nfs(self.s.write(&self.file, offset, data, how).await)?;
        Ok((n, (got != StableHow4::FILE_SYNC4).then_some(verf.0)))
    }

    async fn commit(&self) -> Res<Verf> {
        Ok(nfs(self.s.commit(&self.file.fh).await)?.0)
    }
}

impl<T: ClientTransport + Send + Sync + 'static> NfsFs4<T> {
    pub(super) fn open_file(&self, fh: FileHandle) -> Res<Arc<Open4>> {
        self.files.get(fh)
    }

    fn new_open(
        &self,
        (file, local): (OpenFile, bool),
        access: u32,
        ino: INodeNo,
        cred: OpaqueAuth,
    ) -> FileHandle {
        let o = Open4 {
            file: Mutex::new((file, local)),
            access,
            writes: unstable::OpenFile::default(),
            ino,
            cred,
        };
        self.files.open(self.handle(), o, ino, &self.opens)
    }

    /// OPEN by handle (CLAIM_FH) as the caller, for the access asked (the
    /// server checks it, RFC 8881 §18.16.3); its attributes revalidate
    /// the file: the kernel keeps its cached data only when they are
    /// unchanged since last seen (close-to-open, §10.3.1). Under a
    /// delegation this caller's open took (a read one for reading, a
    /// write one for any access), the open is served locally and the
    /// cached data kept (§10.4: no other client changed the file).
    pub(super) async fn do_open(
        &self,
        cred: OpaqueAuth,
        ino: INodeNo,
        acc: OpenAccMode,
    ) -> Res<(FileHandle, FopenFlags)> {
        let fh = self.fh(ino)?;
        if acc != OpenAccMode::O_RDONLY {
            self.writable()?;
        }
        let access = share_access(acc);
        if let Some(file) = self.delegated_open(&cred, &fh, access) {
            let h = self.new_open((file, true), access, ino, cred);
            return Ok((h, FopenFlags::FOPEN_KEEP_CACHE));
        }
        let s = self.as_cred(cred.clone());
        let (file, a, d) = nfs(s.open_fh_deleg(&fh, access).await)?;
        self.took_delegation(&s, &fh, &cred, d, &a).await;
        let f = fattr3(&a).ok_or(Errno::EIO)?;
        let keep = !self.ac.changed(ino.0, &f);
        self.ac.observe(ino.0, &f);
        let flags = if keep {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        Ok((self.new_open((file, false), access, ino, cred), flags))
    }

    /// OPEN with create (RFC 8881 §18.16): the new file's attributes and
    /// an open handle.
    pub(super) async fn do_create(
        &self,
        cred: OpaqueAuth,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, Duration, FileHandle)> {
        self.writable()?;
        let dir = self.fh(parent)?;
        let how = if flags & libc::O_EXCL != 0 {
            Create::Guarded(mode)
        } else {
            Create::Unchecked(mode)
        };
        let access = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => OPEN4_SHARE_ACCESS_READ,
            libc::O_WRONLY => OPEN4_SHARE_ACCESS_WRITE,
            _ => OPEN4_SHARE_ACCESS_BOTH,
        };
        let s = self.as_cred(cred.clone());
        let (file, a, d) = nfs(s.open_at_deleg(&dir, name.as_bytes(), access, how).await)?;
        self.took_delegation(&s, &file.fh, &cred, d, &a).await;
        let (_, attr, ttl) = self.entry(file.fh.clone(), &a)?;
        let h = self.new_open((file, false), access, attr.ino, cred);
        Ok((attr, ttl, h))
    }

    /// `mknod` of a regular file: an OPEN that creates it (GUARDED4),
    /// CLOSEd at once.
    pub(super) async fn mknod_file(
        &self,
        cred: OpaqueAuth,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
    ) -> Res<Entry> {
        self.writable()?;
        let dir = self.fh(parent)?;
        let s = self.as_cred(cred);
        let how = Create::Guarded(mode);
        let (file, a) = nfs(s
            .open_at(&dir, name.as_bytes(), OPEN4_SHARE_ACCESS_WRITE, how)
            .await)?;
        let fh = file.fh.clone();
        nfs(s.close_file(file).await)?;
        self.entry(fh, &a)
    }

    /// READ of up to `size` bytes at `offset` as the opener, pipelined
    /// over the session's slots for large requests.
    pub(super) async fn do_read(&self, fh: FileHandle, offset: u64, size: u32) -> Res<Vec<u8>> {
        let o = self.open_file(fh)?;
        let s = self.as_cred(o.cred.clone());
        let (len, max) = (u64::from(size), self.maxread);
        let used = o.file();
        match s.read_at(&used, offset, len, max).await {
            Err(e)
                if reclaimed_since(&self.session, &o, &used, &e).await
                    || self.reopen_if_gone(&o, &e).await =>
            {
                nfs(s.read_at(&o.file(), offset, len, max).await)
            }
            r => nfs(r),
        }
    }

    /// An UNSTABLE WRITE as the opener, kept until COMMIT.
    pub(super) async fn do_write(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Res<()> {
        let o = self.open_file(fh)?;
        let s = self.as_cred(o.cred.clone());
        let t = V4 {
            s: &s,
            file: o.file(),
            wsize: self.maxwrite,
        };
        if let Err(e) = o.writes.write(&t, offset, data).await {
            // The delegation an open served locally wrote under may be
            // gone (the write bookkeeping keeps only the errno): such an
            // open is reopened on the server and the write tried again;
            // so is one whose open was reclaimed meanwhile.
            let probe = nfs_client::v4::Error::Nfs {
                op: nfs_client::nfs::v4::Opnum4::OP_WRITE,
                status: nfs_client::nfs::v4::Nfsstat4::NFS4ERR_BAD_STATEID,
            };
            let again = reclaimed_since(&self.session, &o, &t.file, &probe).await
                || self.reopen_if_gone(&o, &probe).await;
            if !again {
                return Err(e);
            }
            let t = V4 {
                s: &s,
                file: o.file(),
                wsize: self.maxwrite,
            };
            o.writes.write(&t, offset, data).await?;
        }
        if let Some(m) = &self.delegs {
            m.table.wrote(&t.file.fh, offset + data.len() as u64, false);
        }
        Ok(())
    }

    /// COMMIT of an open file's writes, as its opener.
    pub(super) async fn commit(&self, o: &Open4) -> Res<()> {
        let s = self.as_cred(o.cred.clone());
        let t = V4 {
            s: &s,
            file: o.file(),
            wsize: self.maxwrite,
        };
        o.writes.commit(&t).await
    }

    /// The last close of a handle: COMMIT, CLOSE, then the REMOVE a silly
    /// rename put off if this was the file's last handle.
    pub(super) async fn do_release(&self, fh: FileHandle) -> Res<()> {
        let o = self.files.take(fh)?;
        let r = self.commit(&o).await;
        if !o.is_local() {
            let closed = self.as_cred(o.cred.clone()).close_file(o.file()).await;
            if let Err(e) = &closed {
                tracing::debug!(error = %e, "CLOSE failed");
            }
        }
        self.hider().closed(o.ino).await;
        r
    }

    /// The silly rename over this mount's open files, its COMPOUNDs
    /// made as the credential given.
    pub(super) fn hider<'a>(
        &'a self,
    ) -> Hider<'a, NfsFh4, impl Fn(OpaqueAuth) -> V4Names<'a, T> + 'a> {
        Hider {
            opens: &self.opens,
            inodes: &self.inodes,
            names: move |cred| V4Names(self.as_cred(cred)),
        }
    }

    /// At unmount: CLOSEs what the kernel left open and REMOVEs the
    /// silly-renamed files whose holders never closed them.
    pub(super) async fn close_all(&self) {
        let left = self.files.drain();
        for o in left {
            let _ = self.commit(&o).await;
            if !o.is_local() {
                let _ = self.as_cred(o.cred.clone()).close_file(o.file()).await;
            }
        }
        self.return_delegations().await;
        self.hider().remove_left().await;
    }
}

/// NFSv4 LOOKUP, RENAME and REMOVE (RFC 8881 §18.13, §18.26, §18.25) as
/// one caller, for the silly rename.
pub(super) struct V4Names<'a, T>(Session<&'a T>);

fn utf8(name: &[u8]) -> Res<&str> {
    std::str::from_utf8(name).map_err(|_| Errno::EINVAL)
}

impl<T: ClientTransport> Names<NfsFh4> for V4Names<'_, T> {
    async fn fileid(&self, dir: &NfsFh4, name: &[u8]) -> Option<u64> {
        let (_, a) = self.0.lookup_attrs(dir, name).await.ok()?;
        a.fileid
    }

    async fn rename(&self, dir: &NfsFh4, from: &[u8], to: &str) -> Res<()> {
        nfs(self.0.rename(dir, utf8(from)?, dir, to).await)
    }

    async fn remove(&self, dir: &NfsFh4, name: &[u8]) -> Res<()> {
        nfs(self.0.remove(dir, utf8(name)?).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_modes_ask_the_matching_share_access() {
        assert_eq!(share_access(OpenAccMode::O_RDONLY), OPEN4_SHARE_ACCESS_READ);
        assert_eq!(
            share_access(OpenAccMode::O_WRONLY),
            OPEN4_SHARE_ACCESS_WRITE
        );
        assert_eq!(share_access(OpenAccMode::O_RDWR), OPEN4_SHARE_ACCESS_BOTH);
    }
}
