//! The NFSv4.2 data operations SEEK, ALLOCATE and DEALLOCATE (RFC 7862
//! §15.11, §15.1, §15.4), on [`Storage::seek`] and [`Storage::allocate`],
//! and the open file a delegation's watch needs ([`Storage::open_file`]).

use std::fs::File;

use nfs::v4::{Allocate4Args, DataContent4, Nfsstat4, Seek4Args, Seek4ResOk};

use super::attrs::st4;
use super::{Cx, Nfs4Service};
use crate::storage::Storage;

type R<T> = Result<T, Nfsstat4>;

impl<S: Storage> Nfs4Service<S> {
    /// Opens the current file (a regular file, checked by the caller).
    pub(super) fn open_fd(&self, fh: &nfs::v3::NfsFh3, write: bool) -> R<File> {
        self.fs.open_file(fh, write).map_err(st4)
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
        let hole = match a.what {
            DataContent4::NFS4_CONTENT_DATA => false,
            DataContent4::NFS4_CONTENT_HOLE => true,
            _ => return Err(Nfsstat4::NFS4ERR_UNION_NOTSUPP),
        };
        match self.fs.seek(&fh, a.offset, hole).await.map_err(st4)? {
            Some(pos) => Ok(Seek4ResOk {
                eof: pos >= size,
                offset: pos,
            }),
            None => Ok(Seek4ResOk {
                eof: true,
                offset: size,
            }),
        }
    }

    /// ALLOCATE and DEALLOCATE (RFC 7862 §15.1.3, §15.4.3): `fallocate`,
    /// plain or punching a hole that keeps the size.
    pub(super) async fn allocate(&self, a: &Allocate4Args, cx: &Cx, dealloc: bool) -> R<()> {
        if a.length == 0 || a.offset.checked_add(a.length).is_none() {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let fh = self.io_prep(&a.stateid, cx, true).await?;
        self.fs
            .allocate(&fh, a.offset, a.length, dealloc)
            .await
            .map_err(st4)
    }
}
