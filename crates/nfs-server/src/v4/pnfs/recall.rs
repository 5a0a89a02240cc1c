//! CB_LAYOUTRECALL (RFC 8881 §20.3, §12.5.5) and fencing (RFC 8435
//! §2.2).
//!
//! A file's layouts are recalled when its size (truncation), mode, owner
//! or group change, or it is removed, through the metadata server by any
//! NFS version; every layout on a data server is recalled when the
//! control path finds that server unreachable. Each recalled layout's
//! stateid seqid is bumped and sent in a CB_LAYOUTRECALL of the whole
//! file (LAYOUTIOMODE4_ANY) on its holder's back channel, retried while
//! the back channel is not there. LAYOUTRETURN ends the recall; an answer
//! of NFS4ERR_NOMATCHING_LAYOUT ends it too (the client holds none,
//! §20.3.4). While a file's layouts are being recalled, LAYOUTGET of it
//! is NFS4ERR_RECALLCONFLICT.
//!
//! When the recall is for a change of the file's size, mode, owner or
//! group and a read-write layout is recalled, its data file is fenced
//! (below) before the callbacks go out: the Linux client returns a
//! recalled layout while its WRITEs through it are still in flight, and
//! those must not land after the change (see [`run`]).
//!
//! A recall not ended within the lease (§12.5.5.2), or the shorter
//! `recall_timeout` when one is configured, is fenced: the data
//! file is given to the next synthetic uid and gid (the configured ones
//! plus 0 to [`FENCE_IDS`] − 1, in turn), so the credentials the old
//! layout carries fail the data server's permission check (NFS3ERR_ACCES
//! on the client's next READ or WRITE), and the layout is revoked; the
//! client's next LAYOUTGET carries the new ids.
//!
//! One task per recall event carries its callbacks and watches its
//! layouts; there are never more such layouts than layout stateids
//! (`--max-layouts`), and the task ends once each is returned or fenced.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use nfs::v3::NfsFh3;
use nfs::v4::cb::{
    CbLayoutrecall4Args, Layoutrecall4, LayoutrecallFile4, NfsCbArgop4, NfsCbResop4,
};
use nfs::v4::{Layoutiomode4, Layouttype4, NfsFh4, Nfsstat4};
use oncrpc::limits::Limit;

use super::layouts::{Layout, Recalled};
use super::Mds;
use crate::v4::callback::Callbacks;
use crate::v4::coherence::key;
use crate::v4::state::StateTable;
use crate::v4::Clock;

/// Layouts dropped because their client went (a count, not a bound:
/// each trip is one client's layouts, logged at most once a second).
static EXPIRED_LAYOUTS: Limit = Limit::new("pnfs.expired_layouts");

/// How many synthetic ids fencing rotates through.
pub const FENCE_IDS: u32 = 1024;

/// How long a recall for a change of size or attributes waits by default
/// for the fencing of its data files before the callbacks go out
/// regardless (`MdsConfig::fence_wait`, limit `pnfs.fence_wait`).
pub const DEFAULT_FENCE_WAIT: Duration = Duration::from_secs(5);

/// How often a recall task looks at its layouts: returned ones end it,
/// those past the recall timeout are revoked and fenced.
const POLL: Duration = Duration::from_millis(100);

/// The first wait before CB_LAYOUTRECALLs are sent again that the client
/// answered NFS4ERR_DELAY ("try again later", RFC 8881 §15.1.1.3) or
/// that found no back channel; each later retry waits twice as long as
/// the one before, up to [`RETRY_MAX`]: 10 sends in the first 10 s, not
/// 100, and one every 1.6 s after.
const RETRY_FIRST: Duration = POLL;

/// The longest wait between two sends of the same recall's callbacks.
const RETRY_MAX: Duration = Duration::from_millis(1600);

/// The wait before the retry after one of `wait`.
fn backoff(wait: Duration) -> Duration {
    (wait * 2).min(RETRY_MAX)
}

/// Why a file's layouts are recalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its size was set.
    Truncate,
    /// Its mode, owner or group changed.
    Attrs,
    /// It was removed.
    Remove,
}

/// What the metadata server recalls layouts with: the NFSv4.1 service's
/// client state, back channels and clock.
#[derive(Clone)]
pub(crate) struct Recaller {
    pub(crate) state: Arc<Mutex<StateTable>>,
    pub(crate) cbs: Callbacks,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) mds: Weak<Mds>,
}

impl core::fmt::Debug for Recaller {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Recaller").finish_non_exhaustive()
    }
}

/// Why data files are fenced (RFC 8435 §2.2, §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fence {
    /// A read-write layout of it is recalled because its size or
    /// attributes changed: I/O the client still has in flight must not
    /// land afterwards.
    Recalled,
    /// A recall was not answered within the recall timeout: the layout
    /// is revoked.
    Unanswered,
    /// The client holding a read-write layout went.
    Gone,
}

/// What one CB_LAYOUTRECALL came to.
enum Sent {
    /// The client took it (it will LAYOUTRETURN).
    Taken,
    /// The client holds no such layout.
    NoMatch,
    /// No answer (no back channel, or it failed): try again.
    Again,
}

/// The uid or gid after `cur` in the fencing rotation from `base`.
pub(super) fn next_id(base: u32, cur: u32) -> u32 {
    let off = cur.wrapping_sub(base);
    let next = if off < FENCE_IDS {
        (off + 1) % FENCE_IDS
    } else {
        1
    };
    base.wrapping_add(next)
}

impl Mds {
    /// Lets the metadata server recall layouts through `r`.
    pub(crate) fn bind(&self, r: Recaller) {
        if let Ok(mut g) = self.recaller.write() {
            *g = Some(r);
        }
        // Mirrors recorded stale before a restart are rebuilt now.
        if self.stale_mirrors() > 0 {
            self.start_rebuilder();
        }
    }

    pub(crate) fn recaller(&self) -> Option<Recaller> {
        self.recaller.read().ok()?.clone()
    }

    /// Recalls every layout of the file `fh` (RFC 8881 §12.5.5.1). When
    /// its size or attributes changed and a read-write layout is among
    /// them, the data file is fenced first (see [`run`]).
    pub fn recall_file(&self, fh: &NfsFh3, why: Why) {
        let file = key(fh);
        let pick = move |f: &Bytes, _: &Layout| *f == file;
        let gone = why == Why::Remove;
        self.start_recall(pick, why != Why::Attrs, gone, !gone);
    }

    /// The control path could not reach data server `ds`: every layout
    /// on it is recalled (the client does its I/O through the metadata
    /// server or asks again later).
    pub(crate) fn ds_lost(&self, ds: usize) {
        let pick = move |_: &Bytes, l: &Layout| l.data.iter().any(|d| d.ds == ds);
        self.start_recall(pick, true, false, false);
    }

    /// Recalls the layouts `pick` chooses (RFC 8881 §12.5.5.1), with
    /// `clora_changed` = `changed`.
    pub(crate) fn start_recall_where(&self, pick: impl Fn(&Bytes, &Layout) -> bool, changed: bool) {
        self.start_recall(pick, changed, false, false);
    }

    fn start_recall(
        &self,
        pick: impl Fn(&Bytes, &Layout) -> bool,
        changed: bool,
        gone: bool,
        fence: bool,
    ) {
        let Some(r) = self.recaller() else { return };
        let Some(me) = r.mds.upgrade() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let rs = match self.layouts.lock() {
            Ok(mut t) => {
                let rs = t.recall(pick, r.clock.now());
                if gone {
                    // The file is gone: nothing is left to fence.
                    for x in &rs {
                        t.forget(x.client, &x.file);
                    }
                }
                rs
            }
            Err(_) => return,
        };
        if rs.is_empty() {
            return;
        }
        tracing::info!(layouts = rs.len(), changed, "CB_LAYOUTRECALL");
        rt.spawn(async move { run(me, r, rs, changed, fence).await });
    }

    /// The client `client` went (its lease expired, it was replaced or
    /// destroyed): its layouts are dropped at once (RFC 8881 §12.7.3) and
    /// counted (`pnfs.expired_layouts`), and the data files it could
    /// write are fenced as for an unanswered recall (RFC 8435 §2.2), so
    /// it can no longer write to them with the credentials it was given.
    /// Other holders of those files find their ids refused too and get
    /// the new ones with their next LAYOUTGET. Work: that client's
    /// layouts only; its writable data files join their data servers'
    /// fencing queues ([`super::fencing`]).
    pub(crate) fn client_gone(&self, client: u64) {
        if let Ok(mut h) = self.holds.lock() {
            h.forget_client(client);
        }
        let gone = match self.layouts.lock() {
            Ok(mut t) => t.return_all(client),
            Err(_) => return,
        };
        if gone.is_empty() {
            return;
        }
        EXPIRED_LAYOUTS.trip(format_args!(
            "client {client:#x} went with {} layouts; dropped",
            gone.len()
        ));
        let writable: Vec<Recalled> = gone
            .into_iter()
            .filter(|(_, l)| l.rw)
            .map(|(file, l)| Recalled {
                client,
                file,
                stateid: l.stateid,
                data: l.data,
                rw: true,
            })
            .collect();
        let Some(me) = self.recaller().and_then(|r| r.mds.upgrade()) else {
            return;
        };
        if writable.is_empty() {
            return;
        }
        // Queued; nobody waits for it.
        me.fence(&writable, Fence::Gone);
    }
}

/// CB_LAYOUTRECALL of one layout (RFC 8881 §20.3.1): the whole file,
/// any iomode, under the recalled stateid.
async fn send(r: &Recaller, x: &Recalled, changed: bool) -> Sent {
    let op = NfsCbArgop4::Layoutrecall(CbLayoutrecall4Args {
        layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
        iomode: Layoutiomode4::LAYOUTIOMODE4_ANY,
        changed,
        recall: Layoutrecall4::File(LayoutrecallFile4 {
            fh: NfsFh4(x.file.clone()),
            offset: 0,
            length: u64::MAX,
            stateid: x.stateid,
        }),
    });
    let res = match r.cbs.compound(&r.state, x.client, vec![op]).await {
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(client = x.client, failure = ?e, "CB_LAYOUTRECALL not delivered");
            return Sent::Again;
        }
    };
    let st = res.resarray.0.iter().find_map(|o| match o {
        NfsCbResop4::Layoutrecall(s) => Some(*s),
        _ => None,
    });
    tracing::debug!(client = x.client, seqid = x.stateid.seqid, status = ?st, "CB_LAYOUTRECALL answered");
    match st {
        Some(Nfsstat4::NFS4_OK) => Sent::Taken,
        Some(Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT) => Sent::NoMatch,
        other => {
            tracing::debug!(client = x.client, status = ?other.unwrap_or(res.status), "CB_LAYOUTRECALL refused");
            Sent::Again
        }
    }
}

/// One recall event: the callbacks, then the watch until each layout is
/// returned or, the recall timeout (the lease unless configured) after
/// the recall, revoked and fenced.
///
/// With `fence_first` (the file's size or attributes changed) the data
/// files of the read-write layouts among `rs` are fenced before the
/// callbacks go out. A returned layout does not mean no I/O under it is
/// left: the Linux flex-files client answers CB_LAYOUTRECALL and sends
/// LAYOUTRETURN at once while its WRITEs to the data server are still in
/// flight (seen in the VM, docs/pnfs.md), and a loosely coupled data
/// server knows nothing of layouts (RFC 8435 §2.2), so such a WRITE would
/// land after the truncation or permission change under credentials the
/// metadata server no longer stands by. With the ids rotated it is
/// refused (NFS3ERR_ACCES) and the client sends it again under a new
/// layout, which LAYOUTGET hands out only once the recall ended
/// (NFS4ERR_RECALLCONFLICT meanwhile, RFC 8881 §12.5.5.2), i.e. with the
/// new ids.
async fn run(mds: Arc<Mds>, r: Recaller, rs: Vec<Recalled>, changed: bool, fence_first: bool) {
    if fence_first {
        let writable: Vec<Recalled> = rs.iter().filter(|x| x.rw).cloned().collect();
        if !writable.is_empty() {
            // A data server that hangs must not hold the recall back
            // for a control timeout.
            let t = mds.fence(&writable, Fence::Recalled);
            let what = format!("{} recalled read-write layouts", writable.len());
            mds.fenced(t, mds.cfg.fence_wait, &what).await;
        }
    }
    let lease = mds.cfg.recall_timeout.unwrap_or_else(|| {
        r.state
            .lock()
            .map(|s| s.lease())
            .unwrap_or(Duration::from_secs(90))
    });
    let mut unsent: Vec<&Recalled> = rs.iter().collect();
    let mut first = true;
    // The callbacks not taken yet are sent again at `retry_at`, after
    // `retry_wait`, which doubles each time (the watch below keeps POLL).
    let mut retry_wait = RETRY_FIRST;
    let mut retry_at = tokio::time::Instant::now();
    loop {
        if !unsent.is_empty() && tokio::time::Instant::now() >= retry_at {
            let mut again = Vec::new();
            for x in unsent {
                let live = mds.layouts.lock().is_ok_and(|t| t.pending(x));
                if !first && !live {
                    continue;
                }
                match send(&r, x, changed).await {
                    Sent::Taken => {}
                    Sent::NoMatch => {
                        if let Ok(mut t) = mds.layouts.lock() {
                            if t.pending(x) {
                                t.forget(x.client, &x.file);
                            }
                        }
                    }
                    Sent::Again => again.push(x),
                }
            }
            unsent = again;
            first = false;
            // Timed from the answers, so a slow client is not sent more.
            retry_at = tokio::time::Instant::now() + retry_wait;
            retry_wait = backoff(retry_wait);
        }
        let due = match mds.layouts.lock() {
            Ok(mut t) => t.due(&rs, r.clock.now(), lease),
            Err(_) => return,
        };
        if !due.is_empty() {
            // Fenced before the loop looks again, unless the data server
            // hangs (then the fencing stays queued and the task goes on).
            let t = mds.fence(&due, Fence::Unanswered);
            let what = format!("{} revoked layouts", due.len());
            mds.fenced(t, mds.cfg.fence_wait, &what).await;
        }
        let left = mds
            .layouts
            .lock()
            .is_ok_and(|t| rs.iter().any(|x| t.pending(x)));
        if !left {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_rotates_through_the_synthetic_ids() {
        assert_eq!(next_id(40001, 40001), 40002);
        assert_eq!(next_id(40001, 40001 + FENCE_IDS - 1), 40001);
        // An owner outside the range (changed by hand) restarts it.
        assert_eq!(next_id(40001, 0), 40002);
        assert_eq!(next_id(u32::MAX - 1, u32::MAX), 0);
    }

    #[test]
    fn recall_retries_back_off_from_100_ms_to_1600_ms() {
        let mut wait = RETRY_FIRST;
        let mut waits = vec![];
        for _ in 0..7 {
            waits.push(wait.as_millis());
            wait = backoff(wait);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 1600, 1600]);
    }
}
