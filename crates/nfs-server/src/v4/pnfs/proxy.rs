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
//! Mirrored files (RFC 8435 §8): a READ is served by the first good
//! mirror that answers (§8.1), a WRITE or COMMIT goes to every good one
//! (§8.2); a mirror whose data server cannot be reached while another
//! took the write is marked stale (§8.2.3) and the write stands. While a
//! stale mirror is rebuilt (§8.3) WRITEs wait (JUKEBOX / NFS4ERR_DELAY).
//!
//! Write verifier: a reply carries the metadata server's verifier XOR
//! the data servers' (RFC 1813 §3.3.7), so a restart of any changes it
//! and the client resends its unstable writes.

use bytes::Bytes;
use nfs::v3::{Ftype3, NfsFh3, Nfsstat3, Sattr3, SetTime, StableHow};

use super::control::{ControlError, DsWritten};
use super::placement::good;
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
        let Some(m) = self.placed(&attr) else {
            return Ok(zeros(attr.size, offset, count));
        };
        let name = data_file_name(attr.fsid, attr.fileid);
        let mut failed = ControlError::Unreachable;
        for i in good(&m) {
            match self.ds[i].read(&name, offset, count).await {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => return Ok(zeros(attr.size, offset, count)),
                Err(e) => {
                    tracing::warn!(ds = i, file = %name, error = ?e, "READ through the metadata server failed");
                    failed = self.control_failed(i, e);
                }
            }
        }
        Err(status(failed))
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
        let m = self.place(&attr).ok_or(Nfsstat3::NFS3ERR_IO)?;
        let name = data_file_name(attr.fsid, attr.fileid);
        let w = {
            let _writing = self.gate.read().await;
            if self.rebuilding(&attr) {
                return Err(Nfsstat3::NFS3ERR_JUKEBOX);
            }
            self.write_mirrors(&attr, &name, good(&m).collect(), offset, data, stable)
                .await?
        };
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

    /// The WRITE to the data file `name` on each of the data servers
    /// `to` (the file's good mirrors, RFC 8435 §8.2): the weakest
    /// stability and the verifiers combined. Those that cannot be reached
    /// are marked stale when another took the write (§8.2.3).
    async fn write_mirrors(
        &self,
        attr: &nfs::v3::Fattr3,
        name: &str,
        to: Vec<usize>,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> StorageResult<DsWritten> {
        let mut all: Option<DsWritten> = None;
        let mut lost = Vec::new();
        for i in to {
            let ds = &self.ds[i];
            let done = async {
                let d = ds
                    .ensure(name, self.cfg.uid, self.cfg.gid, DATA_FILE_MODE)
                    .await?;
                ds.write(name, &d.fh, offset, data.clone(), stable).await
            };
            match done.await {
                Ok(w) => {
                    all = Some(match all {
                        None => w,
                        Some(a) => DsWritten {
                            how: weakest(a.how, w.how),
                            verf: xor(a.verf, w.verf),
                        },
                    });
                }
                Err(e) => {
                    tracing::warn!(ds = i, file = %name, error = ?e, "WRITE through the metadata server failed");
                    match self.control_failed(i, e) {
                        ControlError::Unreachable => lost.push(i),
                        other => return Err(status(other)),
                    }
                }
            }
        }
        let w = all.ok_or(Nfsstat3::NFS3ERR_JUKEBOX)?;
        for i in lost {
            self.mirror_failed(attr.fsid, attr.fileid, i);
        }
        Ok(w)
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
        let Some(m) = self.placed(&attr) else {
            return Ok(fs.write_verifier());
        };
        let name = data_file_name(attr.fsid, attr.fileid);
        let mut verf = fs.write_verifier();
        for i in good(&m) {
            match self.ds[i].commit(&name).await {
                Ok(Some(v)) => verf = xor(verf, v),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(ds = i, file = %name, error = ?e, "COMMIT through the metadata server failed");
                    return Err(status(self.control_failed(i, e)));
                }
            }
        }
        Ok(verf)
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

/// The less stable of two WRITE outcomes (UNSTABLE < DATA_SYNC <
/// FILE_SYNC).
fn weakest(a: StableHow, b: StableHow) -> StableHow {
    if a.0 <= b.0 {
        a
    } else {
        b
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
