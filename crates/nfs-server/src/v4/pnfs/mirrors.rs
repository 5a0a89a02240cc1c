//! Mirrored files (RFC 8435 §8): with `mirrors` above one, each file's
//! data has a copy on that many data servers, all listed in its layouts'
//! `ffl_mirrors`.
//!
//! - §8.1: a client reads from any mirror of a READ layout.
//! - §8.2: a client writes every mirror of an RW layout (client-side
//!   mirroring: FF_FLAGS_WRITE_ONE_MIRROR is not set); I/O through the
//!   metadata server does the same ([`super::proxy`]).
//! - §8.2.3: a client reports a mirror it could not write with
//!   LAYOUTERROR or in its LAYOUTRETURN: that copy is marked stale
//!   ([`Mds::mirror_failed`], recorded in the state directory), the
//!   file's layouts naming it are recalled, and later layouts leave it
//!   out. So does the control path when it cannot reach the copy's data
//!   server. The last good copy of a file is never marked stale.
//! - §8.3: the metadata server resilvers a stale copy once its data
//!   server answers again: the file's RW layouts (and those naming the
//!   stale copy) are recalled and RW LAYOUTGET is NFS4ERR_LAYOUTTRYLATER
//!   until the copy is rebuilt; once they are back, WRITE and truncation
//!   through the metadata server are NFS4ERR_DELAY / NFS3ERR_JUKEBOX
//!   while the good copy is read and the stale one rewritten through the
//!   control path, sized and committed; then the copy is marked good and
//!   appears in layouts again.
//!
//! Bound: at most `max_rebuilds` copies are rebuilt at once; stale copies
//! beyond it wait for the next round, and each round that leaves some
//! waiting trips the `pnfs.rebuilds` limit (log line and counter). Files
//! held while their layouts come back are at most the files with layouts
//! (`max_layouts`), and hold no rebuild slot. One
//! task ([`rebuilder`]) looks for stale copies every `rebuild_poll` while
//! there are any, probing each of their data servers once per round (one
//! that does not answer after a pause doubling up to a minute).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs::v3::{Fattr3, StableHow};
use oncrpc::limits::{Backoff, Limit};

use super::control::ControlError;
use super::layouts::Layout;
use super::placement::good;
use super::{data_file_name, Mds, DATA_FILE_MODE};

/// Copies waiting for a rebuild while `max_rebuilds` are under way.
static REBUILDS: Limit = Limit::new("pnfs.rebuilds");

/// The longest pause between probes of a data server that does not
/// answer (from `rebuild_poll`, doubling).
const PROBE_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Data servers that did not answer the last probe: when to probe again.
type Down = HashMap<usize, (Instant, Backoff)>;

/// Why a rebuild did not finish.
#[derive(Debug)]
enum RebuildError {
    /// The control path failed.
    Control(ControlError),
    /// The file's layouts were not returned in time.
    LayoutsOut,
    /// The placement could not be recorded.
    Log(std::io::Error),
}

impl core::fmt::Display for RebuildError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Control(e) => write!(f, "control path: {e:?}"),
            Self::LayoutsOut => f.write_str("the file's layouts were not returned"),
            Self::Log(e) => write!(f, "state directory: {e}"),
        }
    }
}

impl From<ControlError> for RebuildError {
    fn from(e: ControlError) -> Self {
        Self::Control(e)
    }
}

impl Mds {
    /// Marks the copy of `(fsid, fileid)` on data server `ds` stale
    /// (RFC 8435 §8.2.3) unless it is the file's last good one, and
    /// recalls the file's layouts that name it (§8.3): whether it was
    /// marked.
    pub(crate) fn mirror_failed(&self, fsid: u64, fileid: u64, ds: usize) -> bool {
        let marked = match self.placement.lock() {
            Ok(mut p) => super::blocking(|| p.mark(fsid, fileid, ds, true)),
            Err(_) => return false,
        };
        match marked {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                tracing::error!(error = %e, "pNFS stale mirror not recorded");
                return false;
            }
        }
        let name = data_file_name(fsid, fileid);
        tracing::warn!(ds, file = %name, "pNFS mirror marked stale; it is rebuilt when its data server answers");
        self.start_recall_where(
            move |_, l: &Layout| l.data.iter().any(|d| d.name == name && d.ds == ds),
            true,
        );
        self.start_rebuilder();
        true
    }

    /// Whether the file `attr` is being rebuilt (its writes wait).
    pub(crate) fn rebuilding(&self, attr: &Fattr3) -> bool {
        self.rebuilding
            .lock()
            .is_ok_and(|r| r.contains(&(attr.fsid, attr.fileid)))
    }

    /// Copies being rebuilt now, and the most there ever were at once.
    pub fn rebuilds(&self) -> (usize, usize) {
        let now = self.rebuilding.lock().map(|r| r.len()).unwrap_or(0);
        (now, self.peak_rebuilds.load(Ordering::Relaxed))
    }

    /// Stale copies waiting for a rebuild.
    pub fn stale_mirrors(&self) -> usize {
        self.placement.lock().map(|p| p.stale_count()).unwrap_or(0)
    }

    /// Starts the [`rebuilder`] unless it runs (and a runtime is there).
    pub(crate) fn start_rebuilder(&self) {
        let Some(me) = self.recaller().and_then(|r| r.mds.upgrade()) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.rebuilder_on.swap(true, Ordering::AcqRel) {
            rt.spawn(rebuilder(Arc::downgrade(&me)));
        }
    }

    /// One round: the stale copies whose data servers answer are rebuilt,
    /// at most `max_rebuilds` at once (each such server probed once). A
    /// file with layouts that could write it, or naming the stale copy,
    /// is held instead (RW LAYOUTGET refused) and those layouts recalled;
    /// a later round takes it once they are back, so a client slow to
    /// return them holds no rebuild slot. False when there are none left.
    async fn rebuild_round(self: &Arc<Self>, down: &mut Down) -> bool {
        let servers = match self.placement.lock() {
            Ok(p) => p.stale_servers(),
            Err(_) => return false,
        };
        if servers.is_empty() {
            return false;
        }
        let max = self.cfg.max_rebuilds;
        for ds in servers {
            if !self.answers(ds, down).await {
                continue;
            }
            // Those being rebuilt or held are still stale: look past them
            // (and at a few more, which may turn out to be held).
            let busy = self.rebuilding.lock().map(|r| r.len()).unwrap_or(max)
                + self.held.lock().map(|h| h.len()).unwrap_or(0);
            let stale = match self.placement.lock() {
                Ok(p) => p.stale_on(ds, max + busy + 64),
                Err(_) => return true,
            };
            for (fsid, fileid) in stale {
                if self.rebuilding_id(fsid, fileid) {
                    continue;
                }
                let hit = conflicts(data_file_name(fsid, fileid), ds);
                if self.layouts.lock().map_or(true, |t| t.any(&hit)) {
                    if let Ok(mut h) = self.held.lock() {
                        h.insert((fsid, fileid));
                    }
                    self.start_recall_where(hit, true);
                    continue;
                }
                let Ok(mut r) = self.rebuilding.lock() else {
                    return true;
                };
                if r.len() >= max {
                    break;
                }
                r.insert((fsid, fileid));
                self.peak_rebuilds.fetch_max(r.len(), Ordering::Relaxed);
                drop(r);
                if let Ok(mut h) = self.held.lock() {
                    h.remove(&(fsid, fileid));
                }
                let me = Arc::clone(self);
                tokio::spawn(async move { me.rebuild(fsid, fileid, ds).await });
            }
        }
        // Stale copies neither rebuilt nor held while no slot is free.
        let running = self.rebuilding.lock().map(|r| r.len()).unwrap_or(0);
        let held = self.held.lock().map(|h| h.len()).unwrap_or(0);
        if running >= max && self.stale_mirrors() > running + held {
            REBUILDS.trip(format_args!(
                "{} stale pNFS mirrors; at most {max} are rebuilt at once, the others wait",
                self.stale_mirrors()
            ));
        }
        true
    }

    /// Whether data server `ds` answers a probe; one that did not is
    /// probed again after a pause doubling from `rebuild_poll` to a
    /// minute (each failed probe logs a warning in the control path).
    async fn answers(&self, ds: usize, down: &mut Down) -> bool {
        if down.get(&ds).is_some_and(|(at, _)| Instant::now() < *at) {
            return false;
        }
        if self.ds[ds].probe().await.is_ok() {
            down.remove(&ds);
            return true;
        }
        let poll = self.cfg.rebuild_poll;
        let (at, b) = down
            .entry(ds)
            .or_insert_with(|| (Instant::now(), Backoff::new(poll, PROBE_BACKOFF_MAX)));
        *at = Instant::now() + b.failed();
        false
    }

    fn rebuilding_id(&self, fsid: u64, fileid: u64) -> bool {
        self.rebuilding
            .lock()
            .is_ok_and(|r| r.contains(&(fsid, fileid)))
    }

    /// Whether RW layouts of the file `attr` are refused (RFC 8435 §8.3):
    /// its stale copy is being rebuilt, or waits for its layouts to come
    /// back to be.
    pub(crate) fn writes_held(&self, attr: &Fattr3) -> bool {
        self.rebuilding(attr)
            || self
                .held
                .lock()
                .is_ok_and(|h| h.contains(&(attr.fsid, attr.fileid)))
    }

    /// The file `attr` went: it is held for no rebuild any more.
    pub(crate) fn unhold(&self, attr: &Fattr3) {
        if let Ok(mut h) = self.held.lock() {
            h.remove(&(attr.fsid, attr.fileid));
        }
    }

    /// Rebuilds the copy of `(fsid, fileid)` on `target` and ends its
    /// rebuild, whatever came of it.
    async fn rebuild(self: Arc<Self>, fsid: u64, fileid: u64, target: usize) {
        let name = data_file_name(fsid, fileid);
        match self.resilver(fsid, fileid, target, &name).await {
            Ok(true) => tracing::info!(ds = target, file = %name, "pNFS mirror rebuilt"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(ds = target, file = %name, error = %e, "pNFS mirror not rebuilt; tried again later")
            }
        }
        if let Ok(mut r) = self.rebuilding.lock() {
            r.remove(&(fsid, fileid));
        }
    }

    /// RFC 8435 §8.3: the copy on `target` rewritten from a good one.
    /// Ok(false) when there is nothing to do (the file went, or the copy
    /// is no longer stale).
    async fn resilver(
        &self,
        fsid: u64,
        fileid: u64,
        target: usize,
        name: &str,
    ) -> Result<bool, RebuildError> {
        // WRITEs through the metadata server under way finish first; later
        // ones see the rebuild and wait.
        drop(self.gate.write().await);
        let Some(m) = self.placement.lock().ok().and_then(|p| p.get(fsid, fileid)) else {
            return Ok(false);
        };
        if m.iter().all(|x| x.ds != target || !x.stale) {
            return Ok(false);
        }
        let Some(source) = good(&m).next() else {
            return Ok(false);
        };
        self.quiesce(name, target).await?;
        let (src, dst) = (&self.ds[source], &self.ds[target]);
        let owner = src
            .ensure(name, self.cfg.uid, self.cfg.gid, DATA_FILE_MODE)
            .await?;
        let d = dst
            .ensure(name, owner.uid, owner.gid, DATA_FILE_MODE)
            .await?;
        if (d.uid, d.gid) != (owner.uid, owner.gid) {
            dst.set_owner(name, owner.uid, owner.gid).await?;
        }
        let size = src.size(name).await?;
        let chunk = src
            .io_sizes(1 << 20)
            .0
            .min(dst.io_sizes(1 << 20).1)
            .max(4096);
        let mut at = 0u64;
        while at < size {
            let want = chunk.min(u32::try_from(size - at).unwrap_or(u32::MAX));
            let data: Bytes = match src.read(name, at, want).await? {
                Some((b, _)) if !b.is_empty() => b,
                _ => break,
            };
            let n = data.len() as u64;
            dst.write(name, &d.fh, at, data, StableHow::UNSTABLE)
                .await?;
            at += n;
        }
        dst.set_size(name, size).await?;
        dst.commit(name).await?;
        let marked = match self.placement.lock() {
            Ok(mut p) if p.get(fsid, fileid).is_some() => {
                Some(super::blocking(|| p.mark(fsid, fileid, target, false)))
            }
            Ok(_) => None,
            Err(_) => Some(Err(std::io::Error::other("placement lock poisoned"))),
        };
        match marked {
            Some(r) => r.map_err(RebuildError::Log),
            None => {
                // Removed meanwhile: the copy just written goes too.
                let _ = dst.remove(name).await;
                Ok(false)
            }
        }
    }

    /// Recalls the layouts of the data file `name` that could write it,
    /// or that name its copy on `target`, and waits until they are back
    /// (returned, or fenced a lease after the recall).
    async fn quiesce(&self, name: &str, target: usize) -> Result<(), RebuildError> {
        let hit = conflicts(name.to_owned(), target);
        self.start_recall_where(hit.clone(), true);
        // The recall fences layouts not returned within a lease: wait a
        // little longer than that, then give up for this round.
        let lease = self
            .recaller()
            .and_then(|r| r.state.lock().ok().map(|s| s.lease()))
            .unwrap_or(Duration::from_secs(90));
        let wait = lease + lease / 2;
        let since = Instant::now();
        loop {
            let out = self.layouts.lock().map_or(true, |t| t.any(&hit));
            if !out {
                return Ok(());
            }
            if since.elapsed() > wait {
                return Err(RebuildError::LayoutsOut);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Layouts in the way of rebuilding the copy of the data file `name` on
/// `target`: those that could write the file, and those naming that copy.
fn conflicts(name: String, target: usize) -> impl Fn(&Bytes, &Layout) -> bool + Clone {
    move |_: &Bytes, l: &Layout| {
        l.data.iter().any(|d| d.name == name) && (l.rw || l.data.iter().any(|d| d.ds == target))
    }
}

/// Runs rebuild rounds every `rebuild_poll` while there are stale copies
/// and the metadata server lives.
async fn rebuilder(mds: Weak<Mds>) {
    let mut down = Down::new();
    loop {
        let Some(m) = mds.upgrade() else { return };
        if !m.rebuild_round(&mut down).await {
            m.rebuilder_on.store(false, Ordering::Release);
            // A copy marked stale after the round looked: go on unless
            // another rebuilder was started for it.
            if m.stale_mirrors() == 0 || m.rebuilder_on.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let poll = m.cfg.rebuild_poll;
        drop(m);
        tokio::time::sleep(poll).await;
    }
}
