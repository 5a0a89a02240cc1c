//! NFSv3 on a pNFS metadata server ([`crate::v4::pnfs`]): READ, WRITE
//! and COMMIT of regular files reach their data files on the data
//! servers ([`Mds::read`], [`Mds::write`], [`Mds::commit`]), a SETATTR of
//! the size truncates the data file too (and, like one of the mode,
//! owner or group, recalls the file's layouts), and REMOVE of a file's
//! last link removes it; so an NFSv3 client sees the bytes pNFS clients wrote
//! through their layouts, and the reverse. Without the role each call is
//! the storage's own.

use bytes::Bytes;
use nfs::v3::{Fattr3, Filename3, NfsFh3, Sattr3, StableHow};

use crate::nfs3::Nfs3Fs;
use crate::storage::{Storage, StorageResult};
use crate::v4::pnfs::{Mds, Written};

impl<S: Storage> Nfs3Fs<S> {
    fn mds(&self) -> Option<&Mds> {
        self.mds.as_deref()
    }

    /// READ of `fh`.
    pub(crate) async fn read_data(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> StorageResult<(Bytes, bool)> {
        match self.mds() {
            Some(m) => m.read(&*self.fs, fh, offset, count).await,
            None => self.fs.read(fh, offset, count).await,
        }
    }

    /// WRITE to `fh`: how stable and the verifier to reply with.
    pub(crate) async fn write_data(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> StorageResult<Written> {
        match self.mds() {
            Some(m) => m.write(&*self.fs, fh, offset, data, stable).await,
            None => Ok(Written {
                how: self.fs.write(fh, offset, &data, stable).await?,
                verf: self.fs.write_verifier(),
            }),
        }
    }

    /// COMMIT of `fh`: the verifier to reply with.
    pub(crate) async fn commit_data(&self, fh: &NfsFh3) -> StorageResult<[u8; 8]> {
        match self.mds() {
            Some(m) => m.commit(&*self.fs, fh).await,
            None => {
                self.fs.commit(fh).await?;
                Ok(self.fs.write_verifier())
            }
        }
    }

    /// After a SETATTR of `s` on the file `fh` (`before`: its
    /// attributes before): layouts recalled, the data file truncated
    /// ([`Mds::attrs_set`]).
    pub(crate) async fn attrs_set(
        &self,
        fh: &NfsFh3,
        before: &Fattr3,
        s: &Sattr3,
    ) -> StorageResult<()> {
        match self.mds() {
            Some(m) => m.attrs_set(fh, before, s).await,
            None => Ok(()),
        }
    }

    /// REMOVE of `dir/name`, and on a metadata server the removal of the
    /// file's data file when that was its last link.
    pub(crate) async fn remove_file(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        let Some(m) = self.mds() else {
            return self.fs.remove(dir, name).await;
        };
        let gone = match self.fs.lookup(dir, name).await {
            Ok(fh) => self.fs.getattr(&fh).await.ok().map(|a| (fh, a)),
            Err(_) => None,
        };
        self.fs.remove(dir, name).await?;
        if let Some((fh, a)) = gone {
            m.removed(&fh, &a).await;
        }
        Ok(())
    }
}
