//! Asynchronous COPY (RFC 7862 §15.2.3, §16.1) and the operations on it,
//! OFFLOAD_STATUS and OFFLOAD_CANCEL (§15.9, §15.8). The bookkeeping is
//! the sans-IO [`super::offload::Offloads`]; here are the decision, the
//! background copier and CB_OFFLOAD.
//!
//! A COPY runs in the background when the client asks for it
//! (`ca_synchronous` false), the range is longer than [`ASYNC_MIN`], the
//! client's back channel answers (CB_NULL, as before a delegation), and
//! the bounds of [`super::offload`] admit it. The reply then carries the
//! copy's stateid in `wr_callback_id`, `wr_count` 0, `wr_committed`
//! UNSTABLE4 and `cr_synchronous` false (as Linux's nfsd answers). The
//! copier moves [`CHUNK`] bytes at a time (`copy_file_range`, the
//! destination `fsync`ed after each), recording progress for
//! OFFLOAD_STATUS and stopping at the next chunk once cancelled. When it
//! ends, CB_OFFLOAD { CB_SEQUENCE, CB_OFFLOAD } goes over the back
//! channel with the destination's handle, the stateid and either
//! NFS4_OK with a `write_response4` (`wr_committed` FILE_SYNC4) or the
//! error and the bytes copied before it; it is tried again (as a
//! CB_RECALL is) for at most a lease while the back channel fails.
//! Any other COPY is done synchronously ([`super::copyops`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfs::v3::NfsFh3;
use nfs::v4::cb::{CbOffload4Args, NfsCbArgop4, NfsCbResop4, OffloadInfo4};
use nfs::v4::*;
use xdr::{Bounded, FixedOpaque};

use super::attrs::st4;
use super::callback::Callbacks;
use super::fileops::{cur, key, resolve_sid};
use super::namespace::Namespace;
use super::offload::Outcome;
use super::state::StateTable;
use super::watch::FileWatch;
use super::{Cx, Nfs4Service};
use crate::storage::Storage;

type R<T> = Result<T, Nfsstat4>;

/// Copies of at most this many bytes are done synchronously even when
/// the client asks for an asynchronous one: the reply would not come
/// much later than CB_OFFLOAD.
pub(crate) const ASYNC_MIN: u64 = 1 << 20;
/// Bytes the copier moves between progress records and cancel checks.
pub(crate) const CHUNK: u64 = 16 << 20;
/// How long CB_OFFLOAD waits before it is tried again.
const CB_RETRY: Duration = Duration::from_millis(100);

/// The length of a copy of `count` bytes (0: to the end) at `offset` of
/// a source of `size` bytes; NFS4ERR_INVAL past the end (RFC 7862
/// §15.2.3).
pub(crate) fn copy_len(offset: u64, count: u64, size: u64) -> R<u64> {
    match count {
        _ if offset > size => Err(Nfsstat4::NFS4ERR_INVAL),
        0 => Ok(size - offset),
        n if offset.checked_add(n).is_some_and(|e| e <= size) => Ok(n),
        _ => Err(Nfsstat4::NFS4ERR_INVAL),
    }
}

/// One copy running in the background.
struct Job {
    sid: Stateid4,
    clientid: u64,
    src: NfsFh3,
    dst: NfsFh3,
    src_offset: u64,
    dst_offset: u64,
    len: u64,
    verf: [u8; 8],
}

/// What the copier needs of the service.
struct Copier<S: Storage> {
    fs: Arc<Namespace<S>>,
    state: Arc<Mutex<StateTable>>,
    cbs: Callbacks,
    watch: Arc<FileWatch>,
}

impl<S: Storage> Copier<S> {
    /// Copies the job's range chunk by chunk; `None` once cancelled.
    async fn copy(&self, j: &Job) -> Option<Outcome> {
        let k = key(&j.dst);
        let mut copied = 0u64;
        while copied < j.len {
            let want = (j.len - copied).min(CHUNK);
            let own = self.watch.changing(&k);
            let r = self
                .fs
                .copy_range(
                    &j.src,
                    j.src_offset + copied,
                    &j.dst,
                    j.dst_offset + copied,
                    want,
                )
                .await;
            drop(own);
            match r {
                // The source got shorter meanwhile: a short copy.
                Ok(0) => break,
                Ok(n) => copied += n,
                Err(e) => {
                    return Some(Outcome {
                        copied,
                        status: st4(e),
                    })
                }
            }
            if !self.state.lock().ok()?.offloads.progress(&j.sid, copied) {
                return None;
            }
        }
        Some(Outcome {
            copied,
            status: Nfsstat4::NFS4_OK,
        })
    }

    /// CB_OFFLOAD (RFC 7862 §16.1) with the outcome, tried again while the
    /// back channel fails, at most `lease`; the copy is then no longer in
    /// flight.
    async fn report(&self, j: &Job, o: Outcome, lease: Duration) {
        let info = if o.status.is_ok() {
            OffloadInfo4::Ok(WriteResponse4 {
                callback_id: Bounded(Vec::new()),
                count: o.copied,
                committed: StableHow4::FILE_SYNC4,
                writeverf: FixedOpaque(j.verf),
            })
        } else {
            OffloadInfo4::Err {
                status: o.status,
                bytes_copied: o.copied,
            }
        };
        let op = NfsCbArgop4::Offload(CbOffload4Args {
            fh: NfsFh4(key(&j.dst)),
            stateid: j.sid,
            info,
        });
        let deadline = tokio::time::Instant::now() + lease;
        loop {
            match self
                .cbs
                .compound(&self.state, j.clientid, vec![op.clone()])
                .await
            {
                Ok(r) => {
                    let answered = r
                        .resarray
                        .0
                        .iter()
                        .any(|x| matches!(x, NfsCbResop4::Offload(_)));
                    tracing::debug!(clientid = j.clientid, status = ?r.status, "CB_OFFLOAD answered");
                    if answered {
                        break;
                    }
                }
                Err(e) => tracing::info!(clientid = j.clientid, failure = ?e, "CB_OFFLOAD failed"),
            }
            let gone = self.state.lock().map_or(true, |st| {
                st.offloads
                    .status(&j.sid, j.clientid, &key(&j.dst))
                    .is_err()
            });
            if gone || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(CB_RETRY).await;
        }
        if let Ok(mut st) = self.state.lock() {
            st.offloads.remove(&j.sid);
        }
    }

    async fn run(self, j: Job) {
        let Some(o) = self.copy(&j).await else {
            return;
        };
        let lease = match self.state.lock() {
            Ok(mut st) => st.offloads.finish(&j.sid, o).then(|| st.lease()),
            Err(_) => None,
        };
        let Some(lease) = lease else { return };
        self.report(&j, o, lease).await;
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// RFC 7862 §15.2.3: starts COPY `a` of `src` (of `src_size` bytes)
    /// to `dst` in the background when the client asked for it and it is
    /// worth it (see the module); `None` to copy synchronously.
    pub(super) async fn copy_async(
        &self,
        a: &Copy4Args,
        (src, dst): (&NfsFh3, &NfsFh3),
        src_size: u64,
        cx: &Cx,
    ) -> R<Option<Copy4ResOk>> {
        let len = copy_len(a.src_offset, a.count, src_size)?;
        let Some(clientid) = cx.sess.map(|s| s.clientid) else {
            return Ok(None);
        };
        if a.synchronous || len <= ASYNC_MIN {
            return Ok(None);
        }
        // What the synchronous path's copy_file_range would refuse.
        let same = key(src) == key(dst);
        if same && a.src_offset < a.dst_offset + len && a.dst_offset < a.src_offset + len {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        if a.dst_offset
            .checked_add(len)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Nfsstat4::NFS4ERR_FBIG);
        }
        if !self.cbs.usable(&self.state, clientid).await {
            return Ok(None);
        }
        let Some(sid) = self.state()?.offloads.start(clientid, key(dst)) else {
            return Ok(None);
        };
        let verf = self.fs.write_verifier();
        let job = Job {
            sid,
            clientid,
            src: src.clone(),
            dst: dst.clone(),
            src_offset: a.src_offset,
            dst_offset: a.dst_offset,
            len,
            verf,
        };
        let copier = Copier {
            fs: Arc::clone(&self.fs),
            state: Arc::clone(&self.state),
            cbs: self.cbs.clone(),
            watch: Arc::clone(&self.watch),
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.state()?.offloads.remove(&sid);
            return Ok(None);
        };
        rt.spawn(copier.run(job));
        Ok(Some(Copy4ResOk {
            response: WriteResponse4 {
                callback_id: Bounded(vec![sid]),
                count: 0,
                committed: StableHow4::UNSTABLE4,
                writeverf: FixedOpaque(verf),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: false,
            },
        }))
    }

    /// The copy a stateid names for the current file and client.
    fn offload_target(&self, sid: &Stateid4, cx: &Cx) -> R<(Stateid4, u64, bytes::Bytes)> {
        let fh = cur(cx)?;
        let sid = resolve_sid(cx, sid)?;
        let clientid = cx
            .sess
            .map(|s| s.clientid)
            .ok_or(Nfsstat4::NFS4ERR_BAD_STATEID)?;
        Ok((sid, clientid, key(&fh)))
    }

    /// OFFLOAD_STATUS (RFC 7862 §15.9.3) of the copy to the current file.
    pub(super) fn offload_status(&self, sid: &Stateid4, cx: &Cx) -> R<OffloadStatus4ResOk> {
        let (sid, clientid, fh) = self.offload_target(sid, cx)?;
        self.state()?.offloads.status(&sid, clientid, &fh)
    }

    /// OFFLOAD_CANCEL (RFC 7862 §15.8.3) of the copy to the current file.
    pub(super) fn offload_cancel(&self, sid: &Stateid4, cx: &Cx) -> Nfsstat4 {
        let (sid, clientid, fh) = match self.offload_target(sid, cx) {
            Ok(t) => t,
            Err(e) => return e,
        };
        match self.state() {
            Ok(mut st) => st.offloads.cancel(&sid, clientid, &fh),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_lengths_stop_at_the_source_end() {
        assert_eq!(copy_len(0, 0, 10), Ok(10));
        assert_eq!(copy_len(4, 6, 10), Ok(6));
        assert_eq!(copy_len(10, 0, 10), Ok(0));
        assert_eq!(copy_len(4, 7, 10), Err(Nfsstat4::NFS4ERR_INVAL));
        assert_eq!(copy_len(11, 0, 10), Err(Nfsstat4::NFS4ERR_INVAL));
        assert_eq!(copy_len(1, u64::MAX, 10), Err(Nfsstat4::NFS4ERR_INVAL));
    }
}
