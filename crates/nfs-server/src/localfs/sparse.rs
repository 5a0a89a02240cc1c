//! READ_PLUS data and holes (RFC 7862 §15.10) from `SEEK_DATA` and
//! `SEEK_HOLE` on one open file: each data run is read with `pread`, each
//! hole reported by its extent, never read.

use std::os::fd::AsFd;

use bytes::Bytes;
use nfs::v3::NfsFh3;
use rustix::buffer::spare_capacity;
use rustix::fs::{OFlags, SeekFrom};
use rustix::io::Errno;

use super::attrs::{errno_status, sx, Meta};
use super::{LocalFs, MAX_READ};
use crate::storage::{Segment, StorageResult};

/// Where the next data (or, with `hole`, the next hole) starts at or after
/// `pos`; `None` when there is no more data.
fn next(fd: impl AsFd, pos: u64, hole: bool) -> StorageResult<Option<u64>> {
    let how = if hole {
        SeekFrom::Hole(pos)
    } else {
        SeekFrom::Data(pos)
    };
    match rustix::fs::seek(fd, how) {
        Ok(p) => Ok(Some(p)),
        Err(Errno::NXIO) => Ok(None),
        Err(e) => Err(errno_status(e)),
    }
}

/// `len` bytes at `at`, fewer if the file ends first.
fn pread_all(fd: impl AsFd, at: u64, len: usize) -> StorageResult<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let from = at + buf.len() as u64;
        match rustix::io::pread(&fd, spare_capacity(&mut buf), from) {
            Ok(0) => break,
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(errno_status(e)),
        }
    }
    Ok(buf)
}

impl LocalFs {
    pub(crate) fn do_read_plus(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        max_segments: usize,
    ) -> StorageResult<(Vec<Segment>, bool)> {
        let (_, f) = self.open_regular(fh, OFlags::RDONLY)?;
        let size = sx(Meta::of(&f))?.size();
        let end = offset
            .saturating_add(u64::from(count.min(MAX_READ)))
            .min(size);
        let mut out = Vec::new();
        let mut pos = offset;
        while pos < end && out.len() < max_segments {
            let data = next(&f, pos, false)?.unwrap_or(end).min(end);
            if data > pos {
                out.push(Segment::Hole {
                    offset: pos,
                    length: data - pos,
                });
                pos = data;
                continue;
            }
            let stop = next(&f, pos, true)?.unwrap_or(end).min(end);
            let want = usize::try_from(stop.saturating_sub(pos)).unwrap_or(0);
            let buf = pread_all(&f, pos, want)?;
            let got = buf.len() as u64;
            if got == 0 {
                break; // the file shrank under us
            }
            out.push(Segment::Data {
                offset: pos,
                data: Bytes::from(buf),
            });
            pos += got;
            if (got as usize) < want {
                break;
            }
        }
        Ok((out, pos >= size))
    }
}
