//! The NFSv4.2 data operations SEEK, ALLOCATE, DEALLOCATE and READ_PLUS
//! (RFC 7862 §15.11, §15.1, §15.4, §15.10), on [`Storage::seek`],
//! [`Storage::allocate`] and [`Storage::read_plus`], and the open file a
//! delegation's watch needs ([`Storage::open_file`]).

use std::fs::File;

use nfs::v4::{
    Allocate4Args, DataContent4, Nfsstat4, ReadPlus4Args, ReadPlus4ResOk, ReadPlusContent4,
    Seek4Args, Seek4ResOk,
};
use xdr::Bounded;

use super::attrs::st4;
use super::{Cx, Nfs4Service};
use crate::localfs::MAX_READ;
use crate::storage::{Segment, Storage};

/// Most data and hole segments in one READ_PLUS reply: a file fragmented
/// finer than that is returned in shorter replies.
pub(crate) const MAX_SEGMENTS: usize = 256;
/// Reply bytes a segment takes besides its data (content, offset, length).
const SEGMENT_COST: u32 = 4 + 8 + 8 + 4;

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

impl From<Segment> for ReadPlusContent4 {
    fn from(s: Segment) -> Self {
        match s {
            Segment::Data { offset, data } => Self::Data {
                offset,
                data: Bounded(data),
            },
            Segment::Hole { offset, length } => Self::Hole { offset, length },
        }
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// READ_PLUS (RFC 7862 §15.10.3): READ's checks and size limits, the
    /// bytes returned as data runs and holes (holes are not read, nor
    /// sent as zeros); at or past the end of the file, no contents and
    /// `rpr_eof`. At most [`MAX_SEGMENTS`] segments: a more fragmented
    /// range is returned short, `rpr_eof` false, for the client to go on.
    pub(super) async fn read_plus(&self, a: &ReadPlus4Args, cx: &Cx) -> R<ReadPlus4ResOk> {
        let fh = self.io_prep(&a.stateid, cx, false).await?;
        // Another client's write delegation: recall it (RFC 8881 §10.4.1).
        self.deleg_conflict(&fh, cx, false)?;
        let room = cx
            .sess
            .map(|s| s.max_response.saturating_sub(512))
            .unwrap_or(MAX_READ)
            .saturating_sub(SEGMENT_COST * MAX_SEGMENTS as u32);
        let count = a.count.min(MAX_READ).min(room);
        let (segments, eof) = self
            .fs
            .read_plus(&fh, a.offset, count, MAX_SEGMENTS)
            .await
            .map_err(st4)?;
        Ok(ReadPlus4ResOk {
            eof,
            contents: Bounded(segments.into_iter().map(Into::into).collect()),
        })
    }
}
