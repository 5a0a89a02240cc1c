//! Directory listing for [`NfsFs`]: READDIRPLUS pages (RFC 1813
//! §3.3.17) into FUSE `readdir` and `readdirplus` replies. FUSE offsets
//! are NFS cookies; each open directory keeps the cookie verifier and the
//! rest of its last page, so a listing costs one large READDIRPLUS per
//! page, not one per kernel buffer.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fuser::{Errno, FileHandle, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use nfs_client::nfs::v3::{Cookieverf3, Entryplus3, Fattr3, NfsFh3};
use nfs_client::nfs::xdr::FixedOpaque;
use nfs_client::Mount;
use oncrpc::ClientTransport;

use super::super::table::{file_type, resumes_after};
use super::{is_dot, nfs, NfsFs};

type Res<T> = Result<T, Errno>;

impl<T: ClientTransport + Send + Sync + 'static> NfsFs<T> {
    /// Handle and attributes of a READDIRPLUS entry (RFC 1813 §3.3.17),
    /// looked up when the server sent neither.
    async fn entry_info(
        &self,
        m: &Mount<&T>,
        dir: &NfsFh3,
        e: &Entryplus3,
    ) -> Res<(NfsFh3, Fattr3)> {
        let c = m.client();
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

    /// The entries after cookie `offset` for directory handle `dh`: the
    /// rest of the last page when the kernel resumes where that page was
    /// cut (its buffer holds far fewer entries than a page), else one
    /// large READDIRPLUS (RFC 1813 §3.3.17) with the kept verifier.
    async fn read_dir_page(
        &self,
        m: &Mount<&T>,
        dir: &NfsFh3,
        dh: FileHandle,
        offset: u64,
    ) -> Res<VecDeque<Entryplus3>> {
        let verf = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            let d = dirs.entry(dh.0).or_default();
            if d.at == offset && (!d.rest.is_empty() || d.eof) {
                return Ok(std::mem::take(&mut d.rest));
            }
            if offset == 0 {
                FixedOpaque([0; 8])
            } else {
                d.verf
            }
        };
        let maxcount = self
            .mount
            .fsinfo()
            .dtpref
            .saturating_mul(8)
            .clamp(64 << 10, 1 << 20);
        let r = nfs(m
            .client()
            .readdirplus(dir, offset, verf, maxcount / 2, maxcount)
            .await)?;
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        let d = dirs.entry(dh.0).or_default();
        d.verf = r.cookieverf;
        d.eof = r.eof;
        Ok(r.entries.into())
    }

    /// Keeps the entries of a page the kernel's buffer did not take, to
    /// resume after cookie `at`.
    fn keep_rest(&self, dh: FileHandle, at: u64, rest: VecDeque<Entryplus3>) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dirs.get_mut(&dh.0) {
            d.at = at;
            d.rest = rest;
        }
    }

    /// Fills a `readdir` reply from one READDIRPLUS page; the entry types
    /// come from the attributes.
    pub(super) async fn fill_dir(
        &self,
        m: &Mount<&T>,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Res<()> {
        let dir = self.fh(ino)?;
        let mut page = self.read_dir_page(m, &dir, fh, offset).await?;
        let mut at = offset;
        while let Some(e) = page.pop_front() {
            resumes_after(at, e.cookie)?;
            let (ftype, fileid) = match &e.name_attributes {
                Some(a) => (a.ftype, a.fileid),
                None => {
                    let (_, a) = self.entry_info(m, &dir, &e).await?;
                    (a.ftype, a.fileid)
                }
            };
            let Some(eino) = self.inodes.ino(fileid) else {
                at = e.cookie;
                continue;
            };
            let name = OsStr::from_bytes(&e.name.0);
            if reply.add(eino, e.cookie, file_type(ftype), name) {
                page.push_front(e);
                break;
            }
            at = e.cookie;
        }
        self.keep_rest(fh, at, page);
        Ok(())
    }

    /// Fills a `readdirplus` reply from one READDIRPLUS page; each entry
    /// but `.` and `..` hands the kernel one lookup of its inode.
    pub(super) async fn fill_dir_plus(
        &self,
        m: &Mount<&T>,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> Res<()> {
        let dir = self.fh(ino)?;
        let mut page = self.read_dir_page(m, &dir, fh, offset).await?;
        let mut at = offset;
        while let Some(e) = page.pop_front() {
            resumes_after(at, e.cookie)?;
            let (efh, a) = self.entry_info(m, &dir, &e).await?;
            let Some(eino) = self.inodes.ino(a.fileid) else {
                at = e.cookie;
                continue;
            };
            let (attr, ttl) = self.attr(eino, &a);
            let name = OsStr::from_bytes(&e.name.0);
            if reply.add(eino, e.cookie, name, &ttl, &attr, Generation(0)) {
                page.push_front(e);
                break;
            }
            at = e.cookie;
            if !is_dot(&e.name.0) {
                self.inodes.remember(eino, &efh);
            }
        }
        self.keep_rest(fh, at, page);
        Ok(())
    }
}

/// An open directory: the cookie verifier, and the rest of the last
/// READDIRPLUS page that the kernel's buffer did not take, resuming after
/// cookie `at`.
#[derive(Debug)]
pub(crate) struct OpenDir {
    verf: Cookieverf3,
    at: u64,
    rest: VecDeque<Entryplus3>,
    eof: bool,
}

impl Default for OpenDir {
    fn default() -> Self {
        Self {
            verf: FixedOpaque([0; 8]),
            at: 0,
            rest: VecDeque::new(),
            eof: false,
        }
    }
}
