//! NFSv4 READ and WRITE (RFC 8881 §18.22, §18.32) on the storage's one
//! pass, as NFSv3's: the stateid is checked first (it needs no
//! attributes), then [`Storage::read_checked`] / [`Storage::write_checked`]
//! resolve the handle once, hand its attributes to the type and
//! permission check, and move the data with at most one thread hand-off.
//! Before, a READ resolved the handle twice (the type check, the read)
//! and a WRITE three times, each under its own hand-off. On a pNFS
//! metadata server the data goes through the data servers as before.
//!
//! Durability is the storage's: a FILE_SYNC or DATA_SYNC WRITE is on
//! stable storage (the file synced) before the reply, and COMMIT syncs
//! the file.

use std::sync::OnceLock;

use nfs::v3::{Fattr3, Ftype3, NfsFh3, Nfsstat3, StableHow, ACCESS3_MODIFY, ACCESS3_READ};
use nfs::v4::*;
use xdr::FixedOpaque;

use super::attrs::st4;
use super::fileops::{cur, key, resolve_sid};
use super::{Cx, Nfs4Service};
use crate::localfs::MAX_READ;
use crate::perm::permits;
use crate::storage::{ReadData, Storage};

type R<T> = Result<T, Nfsstat4>;

/// What READ and WRITE check on the file's attributes inside the
/// storage's pass: a regular file (NFS4ERR_ISDIR, NFS4ERR_SYMLINK,
/// NFS4ERR_INVAL otherwise), and with a special stateid (no open to
/// vouch for the caller) permission to read or write, the owner always
/// (nfsd's NFSD_MAY_OWNER_OVERRIDE). The NFSv4 status of a refusal is
/// kept for the reply.
struct IoMay<'a> {
    caller: &'a crate::perm::Caller,
    /// The access a special stateid needs, or none.
    need: Option<u32>,
    refused: OnceLock<Nfsstat4>,
}

impl IoMay<'_> {
    fn check(&self, a: &Fattr3) -> Result<(), Nfsstat3> {
        let r = match a.ftype {
            Ftype3::NF3REG => match self.need {
                Some(need) if !permits(a, self.caller, need, true) => Err(Nfsstat4::NFS4ERR_ACCESS),
                _ => Ok(()),
            },
            Ftype3::NF3DIR => Err(Nfsstat4::NFS4ERR_ISDIR),
            Ftype3::NF3LNK => Err(Nfsstat4::NFS4ERR_SYMLINK),
            _ => Err(Nfsstat4::NFS4ERR_INVAL),
        };
        r.map_err(|e| {
            let _ = self.refused.set(e);
            Nfsstat3::NFS3ERR_ACCES
        })
    }

    /// The reply's status for the storage's `e`: the refusal's own.
    fn status(&self, e: Nfsstat3) -> Nfsstat4 {
        self.refused.get().copied().unwrap_or_else(|| st4(e))
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// The stateid check of READ and WRITE: the current handle, and the
    /// access a special stateid leaves to [`IoMay`].
    fn io_state(&self, sid: &Stateid4, cx: &Cx, write: bool) -> R<(NfsFh3, Option<u32>)> {
        let fh = cur(cx)?;
        let sid = resolve_sid(cx, sid)?;
        let clientid = cx.clientid().unwrap_or(0);
        self.state()?.io_check(&sid, clientid, &key(&fh), write)?;
        let need = sid
            .is_special()
            .then_some(if write { ACCESS3_MODIFY } else { ACCESS3_READ });
        Ok((fh, need))
    }

    /// READ (RFC 8881 §18.22.4), at most `MAX_READ` bytes and what fits
    /// the session's `ca_maxresponsesize`. Over plain TCP, in a session
    /// whose reply is not cached (`sa_cachethis` false, as clients send
    /// READs), the data stays in the file: the result carries none and
    /// [`Cx::file_data`] has it for the reply's encoding.
    pub(super) async fn read(&self, a: &Read4Args, cx: &mut Cx) -> R<Read4ResOk> {
        if self.mds.is_some() {
            return Box::pin(self.read_pnfs(a, cx)).await;
        }
        let (fh, need) = self.io_state(&a.stateid, cx, false)?;
        // Another client's write delegation: recall it (RFC 8881 §10.4.1).
        self.deleg_conflict(&fh, cx, false)?;
        let count = read_count(a, cx);
        let may = IoMay {
            caller: &cx.caller,
            need,
            refused: OnceLock::new(),
        };
        let check = |attrs: &Fattr3| may.check(attrs);
        let files = cx.files && cx.sess.is_some_and(|s| !s.cachethis);
        let done = self
            .fs
            .read_checked(&fh, a.offset, count, &check, files)
            .await;
        let (data, eof) = done.data.map_err(|e| may.status(e))?;
        let data = match data {
            ReadData::Bytes(b) => b,
            d @ ReadData::File { .. } if files => {
                cx.file_data = Some(d);
                bytes::Bytes::new()
            }
            // Not asked for; read in if ever given.
            ReadData::File { file, offset, len } => {
                let mut buf = vec![0u8; len];
                let n = file
                    .read_at(&mut buf, offset)
                    .map_err(|_| Nfsstat4::NFS4ERR_IO)?;
                buf.truncate(n);
                buf.into()
            }
        };
        Ok(Read4ResOk {
            eof,
            data: xdr::DdpOpaque(data),
        })
    }

    /// READ on a pNFS metadata server: from the data server.
    async fn read_pnfs(&self, a: &Read4Args, cx: &Cx) -> R<Read4ResOk> {
        let fh = self.io_prep(&a.stateid, cx, false).await?;
        self.deleg_conflict(&fh, cx, false)?;
        let count = read_count(a, cx);
        let (data, eof) = match &self.mds {
            Some(m) => m.read(&*self.fs, &fh, a.offset, count).await,
            None => self.fs.read(&fh, a.offset, count).await,
        }
        .map_err(st4)?;
        Ok(Read4ResOk {
            eof,
            data: xdr::DdpOpaque(data),
        })
    }

    /// WRITE (RFC 8881 §18.32.4).
    pub(super) async fn write(&self, a: &Write4Args, cx: &Cx) -> R<Write4ResOk> {
        if self.mds.is_some() {
            return Box::pin(self.write_pnfs(a, cx)).await;
        }
        let (fh, need) = self.io_state(&a.stateid, cx, true)?;
        self.deleg_conflict(&fh, cx, true)?;
        let how = StableHow(a.stable.0.min(2));
        let count = u32::try_from(a.data.0.len()).map_err(|_| Nfsstat4::NFS4ERR_INVAL)?;
        let may = IoMay {
            caller: &cx.caller,
            need,
            refused: OnceLock::new(),
        };
        let check = |attrs: &Fattr3| may.check(attrs);
        // The holder's own write: not a local change (super::watch).
        let own = self.watch.changing(&key(&fh));
        let done = self
            .fs
            .write_checked(&fh, a.offset, &a.data.0, how, &check)
            .await;
        drop(own);
        let committed = done.written.map_err(|e| may.status(e))?;
        Ok(Write4ResOk {
            count,
            committed: StableHow4(committed.0),
            writeverf: FixedOpaque(self.fs.write_verifier()),
        })
    }

    /// WRITE on a pNFS metadata server: through the data server.
    async fn write_pnfs(&self, a: &Write4Args, cx: &Cx) -> R<Write4ResOk> {
        let fh = self.io_prep(&a.stateid, cx, true).await?;
        self.deleg_conflict(&fh, cx, true)?;
        let how = StableHow(a.stable.0.min(2));
        let count = u32::try_from(a.data.0.len()).map_err(|_| Nfsstat4::NFS4ERR_INVAL)?;
        let own = self.watch.changing(&key(&fh));
        let done = match &self.mds {
            Some(m) => {
                m.write(&*self.fs, &fh, a.offset, a.data.0.clone(), how)
                    .await
            }
            None => self
                .fs
                .write(&fh, a.offset, &a.data.0, how)
                .await
                .map(|how| super::pnfs::Written {
                    how,
                    verf: self.fs.write_verifier(),
                }),
        };
        drop(own);
        let done = done.map_err(st4)?;
        Ok(Write4ResOk {
            count,
            committed: StableHow4(done.how.0),
            writeverf: FixedOpaque(done.verf),
        })
    }
}

/// A READ's count: at most `MAX_READ` and what fits the session's
/// `ca_maxresponsesize` (RFC 8881 §18.36.3).
fn read_count(a: &Read4Args, cx: &Cx) -> u32 {
    let room = cx
        .sess
        .map(|s| s.max_response.saturating_sub(512))
        .unwrap_or(MAX_READ);
    a.count.min(MAX_READ).min(room)
}
