//! NFSv3 on a pNFS metadata server ([`crate::v4::pnfs`]): READ, WRITE
//! and COMMIT of regular files reach their data files on the data
//! servers ([`Mds::read`], [`Mds::write`], [`Mds::commit`]), a SETATTR of
//! the size truncates the data file too (and, like one of the mode,
//! owner or group, recalls the file's layouts), and REMOVE of a file's
//! last link, or a RENAME over it, removes it; so an NFSv3 client sees the bytes pNFS clients wrote
//! through their layouts, and the reverse. Without the role each call is
//! the storage's own.

use bytes::Bytes;
use nfs::v3::{Fattr3, Filename3, NfsFh3, Sattr3, StableHow};

use crate::nfs3::Nfs3Fs;
use crate::storage::{May, ReadData, ReadDone, Storage, StorageResult, WriteDone};
use crate::v4::pnfs::Mds;

impl<S: Storage> Nfs3Fs<S> {
    fn mds(&self) -> Option<&Mds> {
        self.mds.as_deref()
    }

    /// READ of `fh` once `may` allowed it on its attributes, with the
    /// attributes for the reply: in one pass of the storage
    /// ([`Storage::read_checked`]), or from the data server.
    pub(crate) async fn read_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: May<'_>,
        files: bool,
    ) -> ReadDone {
        let Some(m) = self.mds() else {
            return self.fs.read_checked(fh, offset, count, may, files).await;
        };
        // Boxed: the data server's call is a large future, and a local
        // READ's (the common one, polled on every call) would carry its
        // size otherwise (see `Nfs3Fs::execute`).
        Box::pin(self.read_mds(m, fh, offset, count, may)).await
    }

    async fn read_mds(
        &self,
        m: &Mds,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        may: May<'_>,
    ) -> ReadDone {
        let data = match self.fs.getattr(fh).await.and_then(|a| may(&a)) {
            Ok(()) => m.read(&*self.fs, fh, offset, count).await,
            Err(e) => Err(e),
        };
        ReadDone {
            data: data.map(|(b, eof)| (ReadData::Bytes(b), eof)),
            attrs: self.fs.getattr(fh).await.ok(),
        }
    }

    /// WRITE to `fh` once `may` allowed it: what was done (in one pass
    /// of the storage, [`Storage::write_checked`], or through the data
    /// server) and the verifier to reply with.
    pub(crate) async fn write_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
        may: May<'_>,
    ) -> (WriteDone, [u8; 8]) {
        let Some(m) = self.mds() else {
            let done = self.fs.write_checked(fh, offset, &data, stable, may).await;
            return (done, self.fs.write_verifier());
        };
        Box::pin(self.write_mds(m, fh, offset, data, stable, may)).await
    }

    async fn write_mds(
        &self,
        m: &Mds,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
        may: May<'_>,
    ) -> (WriteDone, [u8; 8]) {
        let before = self.fs.getattr(fh).await;
        let written = match &before {
            Ok(a) => match may(a) {
                Ok(()) => m.write(&*self.fs, fh, offset, data, stable).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(*e),
        };
        let verf = written
            .as_ref()
            .map_or_else(|_| self.fs.write_verifier(), |w| w.verf);
        let done = WriteDone {
            before: before.ok(),
            written: written.map(|w| w.how),
            after: self.fs.getattr(fh).await.ok(),
        };
        (done, verf)
    }

    /// COMMIT of `fh`: the verifier to reply with.
    pub(crate) async fn commit_data(&self, fh: &NfsFh3) -> StorageResult<[u8; 8]> {
        match self.mds() {
            Some(m) => Box::pin(m.commit(&*self.fs, fh)).await,
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
            Some(m) => Box::pin(m.attrs_set(fh, before, s)).await,
            None => Ok(()),
        }
    }

    /// REMOVE of `dir/name`, and on a metadata server the removal of the
    /// file's data file when that was its last link.
    pub(crate) async fn remove_file(&self, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
        let Some(m) = self.mds() else {
            return self.fs.remove(dir, name).await;
        };
        Box::pin(self.remove_mds(m, dir, name)).await
    }

    async fn remove_mds(&self, m: &Mds, dir: &NfsFh3, name: &Filename3) -> StorageResult<()> {
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

    /// RENAME of `from/fname` to `to/tname`, and on a metadata server the
    /// removal of the data file of a file it replaced, when that was its
    /// last link (as REMOVE does).
    pub(crate) async fn rename_file(
        &self,
        from: &NfsFh3,
        fname: &Filename3,
        to: &NfsFh3,
        tname: &Filename3,
    ) -> StorageResult<()> {
        let Some(m) = self.mds() else {
            return self.fs.rename(from, fname, to, tname).await;
        };
        Box::pin(self.rename_mds(m, from, fname, to, tname)).await
    }

    async fn rename_mds(
        &self,
        m: &Mds,
        from: &NfsFh3,
        fname: &Filename3,
        to: &NfsFh3,
        tname: &Filename3,
    ) -> StorageResult<()> {
        let replaced = match self.fs.lookup(to, tname).await {
            Ok(fh) => self.fs.getattr(&fh).await.ok().map(|a| (fh, a)),
            Err(_) => None,
        };
        self.fs.rename(from, fname, to, tname).await?;
        if let Some((fh, a)) = replaced {
            // Renaming a link over another link of the same file changes
            // nothing: only a lost link counts.
            if self
                .fs
                .getattr(&fh)
                .await
                .map_or(true, |now| now.nlink < a.nlink)
            {
                m.removed(&fh, &a).await;
            }
        }
        Ok(())
    }
}
