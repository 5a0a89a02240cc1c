//! Directory listing for [`NfsFs`]: READDIRPLUS pages (RFC 1813
//! §3.3.17) into FUSE `readdir` and `readdirplus` replies. FUSE offsets
//! are NFS cookies; each open directory keeps the cookie verifier.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fuser::{Errno, FileHandle, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use nfs_client::nfs::v3::{Entryplus3, Fattr3, NfsFh3};
use nfs_client::nfs::xdr::FixedOpaque;
use oncrpc::ClientTransport;

use super::super::table::{file_attr, file_type, resumes_after};
use super::{is_dot, nfs, NfsFs};

type Res<T> = Result<T, Errno>;

impl<T: ClientTransport + Send + Sync + 'static> NfsFs<T> {
    /// Handle and attributes of a READDIRPLUS entry (RFC 1813 §3.3.17),
    /// looked up when the server sent neither.
    async fn entry_info(&self, dir: &NfsFh3, e: &Entryplus3) -> Res<(NfsFh3, Fattr3)> {
        let c = self.mount.client();
        match (&e.name_handle, &e.name_attributes) {
            (Some(fh), Some(a)) => Ok((fh.clone(), a.clone())),
            (Some(fh), None) => Ok((fh.clone(), nfs(c.getattr(fh).await)?)),
            (None, _) => {
                let l = nfs(c.lookup(dir, &e.name.0).await)?;
                let a = match l.obj_attributes {
                    Some(a) => a,
                    None => nfs(c.getattr(&l.object).await)?,
                };
                Ok((l.object, a))
            }
        }
    }

    /// One READDIRPLUS (RFC 1813 §3.3.17) resuming after cookie `offset`
    /// with the verifier kept for directory handle `dh`.
    async fn read_dir_page(
        &self,
        dir: &NfsFh3,
        dh: FileHandle,
        offset: u64,
    ) -> Res<Vec<Entryplus3>> {
        let verf = if offset == 0 {
            FixedOpaque([0; 8])
        } else {
            let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            dirs.get(&dh.0).copied().unwrap_or(FixedOpaque([0; 8]))
        };
        let maxcount = self
            .mount
            .fsinfo()
            .dtpref
            .saturating_mul(8)
            .clamp(4096, 1 << 20);
        let r = nfs(self
            .mount
            .client()
            .readdirplus(dir, offset, verf, maxcount / 4, maxcount)
            .await)?;
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.insert(dh.0, r.cookieverf);
        Ok(r.entries)
    }

    /// Fills a `readdir` reply from one READDIRPLUS page; the entry types
    /// come from the attributes.
    pub(super) async fn fill_dir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Res<()> {
        let dir = self.fh(ino)?;
        for e in self.read_dir_page(&dir, fh, offset).await? {
            resumes_after(offset, e.cookie)?;
            let (ftype, fileid) = match &e.name_attributes {
                Some(a) => (a.ftype, a.fileid),
                None => {
                    let (_, a) = self.entry_info(&dir, &e).await?;
                    (a.ftype, a.fileid)
                }
            };
            let Some(eino) = self.inodes.ino(fileid) else {
                continue;
            };
            let name = OsStr::from_bytes(&e.name.0);
            if reply.add(eino, e.cookie, file_type(ftype), name) {
                break;
            }
        }
        Ok(())
    }

    /// Fills a `readdirplus` reply from one READDIRPLUS page; each entry
    /// but `.` and `..` hands the kernel one lookup of its inode.
    pub(super) async fn fill_dir_plus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Res<()> {
        let dir = self.fh(ino)?;
        for e in self.read_dir_page(&dir, fh, offset).await? {
            resumes_after(offset, e.cookie)?;
            let (efh, a) = self.entry_info(&dir, &e).await?;
            let Some(eino) = self.inodes.ino(a.fileid) else {
                continue;
            };
            let attr = file_attr(eino, &a, self.blksize);
            let name = OsStr::from_bytes(&e.name.0);
            if reply.add(eino, e.cookie, name, &self.opts.ttl, &attr, Generation(0)) {
                break;
            }
            if !is_dot(&e.name.0) {
                self.inodes.remember(eino, &efh);
            }
        }
        Ok(())
    }
}
