//! What the metadata server does to data files and layouts when a file
//! changes through it, whichever NFS version the change came by: a
//! truncation reaches the data file, a removal removes it, and both, like
//! a change of mode, owner or group, recall the file's layouts
//! ([`super::recall`]).

use nfs::v3::{Fattr3, Ftype3, NfsFh3, Nfsstat3, Sattr3};

use super::control::ControlError;
use super::placement::good;
use super::recall::Why;
use super::{data_file_name, Mds};
use crate::v4::coherence::key;

impl Mds {
    /// A SETATTR of `s` was applied to the file `fh` (`before`: its
    /// attributes before): a size change recalls its layouts and reaches
    /// the data file ([`Mds::truncated`]); a mode, owner or group change
    /// recalls them (RFC 8435 §2.2: the layouts' access was decided
    /// under the old ones).
    pub async fn attrs_set(
        &self,
        fh: &NfsFh3,
        before: &Fattr3,
        s: &Sattr3,
    ) -> Result<(), Nfsstat3> {
        if before.ftype != Ftype3::NF3REG {
            return Ok(());
        }
        if let Some(size) = s.size {
            self.recall_file(fh, Why::Truncate);
            return self.truncated(before, size).await;
        }
        if s.mode.is_some() || s.uid.is_some() || s.gid.is_some() {
            self.recall_file(fh, Why::Attrs);
        }
        Ok(())
    }

    /// A control path failure on data server `i`: an unreachable one
    /// has its layouts recalled.
    pub(crate) fn control_failed(&self, i: usize, e: ControlError) -> ControlError {
        if e == ControlError::Unreachable {
            self.ds_lost(i);
        }
        e
    }

    /// A SETATTR of `size` on the file `attr` reaches its data files too
    /// (RFC 8435 §2.3: the metadata server keeps the data file's size in
    /// step on truncation): every good mirror's (a stale one takes the
    /// size when rebuilt; one found unreachable becomes stale, §8.2.3).
    /// A file without a good copy reachable, or being rebuilt (§8.3),
    /// fails it with JUKEBOX (NFS4ERR_DELAY: the client retries), after
    /// the metadata server's own size was set. A file without a data
    /// file has nothing to change.
    pub async fn truncated(&self, attr: &Fattr3, size: u64) -> Result<(), Nfsstat3> {
        if attr.ftype != Ftype3::NF3REG {
            return Ok(());
        }
        let Some(m) = self.placed(attr) else {
            return Ok(());
        };
        if self.rebuilding(attr) {
            return Err(Nfsstat3::NFS3ERR_JUKEBOX);
        }
        let name = data_file_name(attr.fsid, attr.fileid);
        let mut done = 0;
        let mut lost = Vec::new();
        for i in good(&m) {
            match self.ds[i].set_size(&name, size).await {
                Ok(()) | Err(ControlError::Nfs(Nfsstat3::NFS3ERR_NOENT)) => done += 1,
                Err(e) => {
                    tracing::warn!(ds = i, file = %name, error = ?e, "pNFS data file not truncated");
                    if self.control_failed(i, e) != ControlError::Unreachable {
                        return Err(Nfsstat3::NFS3ERR_JUKEBOX);
                    }
                    lost.push(i);
                }
            }
        }
        if done == 0 {
            return Err(Nfsstat3::NFS3ERR_JUKEBOX);
        }
        for i in lost {
            self.mirror_failed(attr.fsid, attr.fileid, i);
        }
        Ok(())
    }

    /// The file `attr` (of `fh`) was removed: when that was its last
    /// link, its layouts are recalled and dropped, and its data file
    /// removed.
    pub async fn removed(&self, fh: &NfsFh3, attr: &Fattr3) {
        if attr.ftype != Ftype3::NF3REG || attr.nlink > 1 {
            return;
        }
        self.recall_file(fh, Why::Remove);
        if let Ok(mut t) = self.layouts.lock() {
            t.forget_file(&key(fh));
        }
        let Some(m) = self.placed(attr) else {
            return;
        };
        let name = data_file_name(attr.fsid, attr.fileid);
        for x in m {
            if let Err(e) = self.ds[x.ds].remove(&name).await {
                tracing::warn!(ds = x.ds, file = %name, error = ?e, "pNFS data file not removed");
            }
        }
        self.unplace(attr);
    }
}
