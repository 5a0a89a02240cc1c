//! I/O through the metadata server (RFC 8881 §12.1: a client without a
//! layout, or one that chooses not to use it, does its READ and WRITE
//! at the metadata server; RFC 8435 §5.1: the layouts therefore do not
//! set FF_FLAGS_NO_IO_THRU_MDS): READ, WRITE and COMMIT of a regular
//! file are carried to its data file on its data server through the
//! control path, so NFSv3, NFSv4.0 and NFSv4.1 clients without the
//! flex-files driver see the same bytes as pNFS clients.
//!
//! The metadata server's own file holds no data: it is kept sparse at
//! the data's size, and each WRITE through it sets its size (growing
//! only) and mtime, so the attributes its clients cache by stay right.
//!
//! Write verifier: a reply carries the metadata server's verifier XOR
//! the data server's (RFC 1813 §3.3.7), so a restart of either changes
//! it and the client resends its unstable writes.

use bytes::Bytes;
use nfs::v3::{Ftype3, NfsFh3, Nfsstat3, Sattr3, SetTime, StableHow};

use super::control::{ControlError, DsWritten};
use super::{data_file_name, Mds, DATA_FILE_MODE};
use crate::storage::{Storage, StorageResult};

/// A WRITE's or COMMIT's outcome as the client is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// How stable the data now is.
    pub how: StableHow,
    /// The write verifier to reply with.
    pub verf: [u8; 8],
}

/// The status a client doing I/O through the metadata server sees for a
/// control path failure: a data server that cannot be reached is
/// JUKEBOX (NFS4ERR_DELAY: retry later); a handle the data server no
/// longer knows is an I/O error (the client's own handle is good).
fn status(e: ControlError) -> Nfsstat3 {
    match e {
        ControlError::Unreachable => Nfsstat3::NFS3ERR_JUKEBOX,
        ControlError::Nfs(
            Nfsstat3::NFS3ERR_STALE | Nfsstat3::NFS3ERR_BADHANDLE | Nfsstat3::NFS3ERR_NOENT,
        ) => Nfsstat3::NFS3ERR_IO,
        ControlError::Nfs(s) => s,
    }
}

fn xor(a: [u8; 8], b: [u8; 8]) -> [u8; 8] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

impl Mds {
    /// READ (RFC 1813 §3.3.6, RFC 8881 §18.22) of `fh` on `fs`: a
    /// regular file's bytes come from its data file. A file with no data
    /// file yet reads as zeros up to the metadata server's size.
    pub async fn read<S: Storage>(
        &self,
        fs: &S,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> StorageResult<(Bytes, bool)> {
        let attr = fs.getattr(fh).await?;
        if attr.ftype != Ftype3::NF3REG {
            return fs.read(fh, offset, count).await;
        }
        let Some(i) = self.placed(&attr) else {
            return Ok(zeros(attr.size, offset, count));
        };
        let name = data_file_name(attr.fsid, attr.fileid);
        match self.ds[i].read(&name, offset, count).await {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Ok(zeros(attr.size, offset, count)),
            Err(e) => {
                tracing::warn!(ds = i, file = %name, error = ?e, "READ through the metadata server failed");
                Err(status(self.control_failed(i, e)))
            }
        }
    }

    /// WRITE (RFC 1813 §3.3.7, RFC 8881 §18.32) to `fh` on `fs`: a
    /// regular file's bytes go to its data file (created with the
    /// synthetic owner if missing), then the metadata server's file
    /// takes the new end and mtime.
    pub async fn write<S: Storage>(
        &self,
        fs: &S,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> StorageResult<Written> {
        let attr = fs.getattr(fh).await?;
        if attr.ftype != Ftype3::NF3REG {
            let how = fs.write(fh, offset, &data, stable).await?;
            return Ok(Written {
                how,
                verf: fs.write_verifier(),
            });
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(Nfsstat3::NFS3ERR_FBIG)?;
        let i = self.place(&attr).ok_or(Nfsstat3::NFS3ERR_IO)?;
        let name = data_file_name(attr.fsid, attr.fileid);
        let ds = &self.ds[i];
        let done = async {
            let d = ds
                .ensure(&name, self.cfg.uid, self.cfg.gid, DATA_FILE_MODE)
                .await?;
            ds.write(&name, &d.fh, offset, data, stable).await
        };
        let w: DsWritten = done.await.map_err(|e| {
            tracing::warn!(ds = i, file = %name, error = ?e, "WRITE through the metadata server failed");
            status(self.control_failed(i, e))
        })?;
        self.wrote(fs, fh, end).await?;
        if w.how != StableHow::UNSTABLE {
            // The size change at the metadata server is durable too.
            fs.commit(fh).await?;
        }
        Ok(Written {
            how: w.how,
            verf: xor(fs.write_verifier(), w.verf),
        })
    }

    /// COMMIT (RFC 1813 §3.3.21, RFC 8881 §18.3) of `fh` on `fs`: the
    /// data file is committed at its data server, the metadata server's
    /// file (its size) locally.
    pub async fn commit<S: Storage>(&self, fs: &S, fh: &NfsFh3) -> StorageResult<[u8; 8]> {
        let attr = fs.getattr(fh).await?;
        fs.commit(fh).await?;
        if attr.ftype != Ftype3::NF3REG {
            return Ok(fs.write_verifier());
        }
        let Some(i) = self.placed(&attr) else {
            return Ok(fs.write_verifier());
        };
        let name = data_file_name(attr.fsid, attr.fileid);
        match self.ds[i].commit(&name).await {
            Ok(Some(v)) => Ok(xor(fs.write_verifier(), v)),
            Ok(None) => Ok(fs.write_verifier()),
            Err(e) => {
                tracing::warn!(ds = i, file = %name, error = ?e, "COMMIT through the metadata server failed");
                Err(status(self.control_failed(i, e)))
            }
        }
    }

    /// After a WRITE through the metadata server: its file grows to
    /// `end` (never shrinks: writes finish in any order) and its mtime
    /// becomes now, under one lock so two writes cannot undo each other.
    async fn wrote<S: Storage>(&self, fs: &S, fh: &NfsFh3, end: u64) -> StorageResult<()> {
        let _one = self.grow.lock().await;
        let now = fs.getattr(fh).await?;
        let s = Sattr3 {
            size: (end > now.size).then_some(end),
            mtime: SetTime::ServerTime,
            ..Sattr3::default()
        };
        fs.setattr(fh, &s, None).await
    }
}

/// What a file without a data file reads as: zeros up to its size
/// (`count` is the caller's, already capped at the largest READ).
fn zeros(size: u64, offset: u64, count: u32) -> (Bytes, bool) {
    let left = size.saturating_sub(offset);
    let n = left.min(u64::from(count));
    (Bytes::from(vec![0u8; n as usize]), n == left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifiers_combine_so_either_restart_changes_them() {
        let mds = [1, 2, 3, 4, 5, 6, 7, 8];
        let ds = [9; 8];
        assert_ne!(xor(mds, ds), xor(mds, [10; 8]));
        assert_ne!(xor(mds, ds), xor([0; 8], ds));
        assert_eq!(xor(xor(mds, ds), ds), mds);
    }

    #[test]
    fn a_file_without_data_reads_as_zeros_to_its_size() {
        assert_eq!(zeros(10, 4, 100), (Bytes::from(vec![0; 6]), true));
        assert_eq!(zeros(10, 0, 4), (Bytes::from(vec![0; 4]), false));
        assert_eq!(zeros(10, 20, 4), (Bytes::new(), true));
    }
}
