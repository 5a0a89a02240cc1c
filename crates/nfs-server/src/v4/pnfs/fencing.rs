//! Fencing of data files (RFC 8435 §2.2), one queue per data server.
//!
//! A data file is fenced by giving it the next synthetic uid and gid
//! ([`super::recall`]), two NFSv3 calls on the control path: a data
//! server that accepts the connection and never answers holds a fencing
//! call for the control timeout (`MdsConfig::control_timeout`), so a
//! recall cannot wait for it nor spawn a task per call. The fencing of a data
//! server's files is done by at most one task per data server, which
//! takes the files queued for it in batches and ends when the queue is
//! empty; a hung data server holds that one task and at most
//! [`MAX_QUEUED`] queued names (past it, a file is not fenced: limit
//! `pnfs.fence_queue`). Whoever queued a file may wait for its batch, at
//! most a bound of its own (a recall: `MdsConfig::fence_wait`, limit
//! `pnfs.fence_wait`), and goes on regardless.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use oncrpc::limits::Limit;
use tokio::sync::watch;

use super::layouts::Recalled;
use super::recall::{next_id, Fence};
use super::Mds;

/// A data file queued for fencing was not fenced within the wait of
/// whoever queued it: the recall goes out meanwhile.
static FENCE_WAIT: Limit = Limit::new("pnfs.fence_wait");

/// A data server's fencing queue was full: a data file was not fenced.
static FENCE_QUEUE: Limit = Limit::new("pnfs.fence_queue");

/// Data file names queued for fencing per data server at most (as many
/// as the control path keeps handles of).
pub(crate) const MAX_QUEUED: usize = super::control::MAX_HANDLES;

/// One data server's fencing queue.
#[derive(Debug)]
pub(crate) struct Fencer {
    q: Mutex<Queue>,
    /// Batches done: every file queued in batch `n` is fenced (or failed)
    /// once this is more than `n`.
    done: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Queue {
    /// Names waiting for the next batch, with why each is fenced.
    names: BTreeMap<String, Fence>,
    /// The number of the batch `names` will be.
    batch: u64,
    /// Whether the task fencing this data server's files runs.
    running: bool,
}

impl Default for Fencer {
    fn default() -> Self {
        Self {
            q: Mutex::new(Queue::default()),
            done: watch::Sender::new(0),
        }
    }
}

impl Fencer {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Names queued (not yet taken by the task).
    pub(crate) fn queued(&self) -> usize {
        self.lock().names.len()
    }

    /// Whether the fencing task of this data server runs.
    pub(crate) fn running(&self) -> bool {
        self.lock().running
    }
}

/// What [`Mds::fence`] queued: the batch to wait for on each data server.
pub(crate) struct Tickets(Vec<(usize, u64)>);

impl Mds {
    /// Queues the data files of `due` for fencing on their data servers,
    /// starting each one's fencing task if it is not running.
    pub(super) fn fence(self: &Arc<Self>, due: &[Recalled], why: Fence) -> Tickets {
        let mut by_ds: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for d in due.iter().flat_map(|r| &r.data) {
            by_ds.entry(d.ds).or_default().push(&d.name);
        }
        let mut tickets = Vec::new();
        for (ds, names) in by_ds {
            let Some(f) = self.fencers.get(ds) else {
                continue;
            };
            let (batch, start) = {
                let mut q = f.lock();
                for n in names {
                    if q.names.len() >= MAX_QUEUED && !q.names.contains_key(n) {
                        FENCE_QUEUE.trip(format_args!(
                            "data server {ds}: {MAX_QUEUED} data files already wait for \
                             fencing; {n} is not fenced ({why:?})"
                        ));
                        continue;
                    }
                    q.names.entry(n.to_owned()).or_insert(why);
                }
                let start = !q.running && !q.names.is_empty();
                q.running |= start;
                (q.batch, start)
            };
            if start {
                let me = Arc::clone(self);
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => {
                        rt.spawn(async move { me.fence_queue(ds).await });
                    }
                    Err(_) => f.lock().running = false,
                }
            }
            tickets.push((ds, batch));
        }
        Tickets(tickets)
    }

    /// Waits until the files of `t` are fenced, at most `wait`: `false`
    /// (and a trip of `pnfs.fence_wait`) when some are not by then.
    pub(super) async fn fenced(&self, t: Tickets, wait: Duration, what: &str) -> bool {
        let all = async {
            for (ds, batch) in &t.0 {
                if let Some(f) = self.fencers.get(*ds) {
                    let mut rx = f.done.subscribe();
                    let _ = rx.wait_for(|d| *d > *batch).await;
                }
            }
        };
        if tokio::time::timeout(wait, all).await.is_ok() {
            return true;
        }
        FENCE_WAIT.trip(format_args!(
            "data files of {what} not fenced within {wait:?}: their data server does not \
             answer the control path; going on meanwhile (the fencing stays queued)"
        ));
        false
    }

    /// The task fencing data server `ds`'s queued files, batch by batch,
    /// until its queue is empty.
    async fn fence_queue(&self, ds: usize) {
        let Some(f) = self.fencers.get(ds) else {
            return;
        };
        loop {
            let (names, batch) = {
                let mut q = f.lock();
                if q.names.is_empty() {
                    q.running = false;
                    return;
                }
                let b = q.batch;
                q.batch += 1;
                (std::mem::take(&mut q.names), b)
            };
            for (name, why) in names {
                self.fence_one(ds, &name, why).await;
            }
            f.done.send_replace(batch + 1);
        }
    }

    /// Gives the data file `name` on data server `ds` the next synthetic
    /// uid and gid.
    async fn fence_one(&self, ds: usize, name: &str, why: Fence) {
        let c = &self.ds[ds];
        let cur = match c
            .ensure(name, self.cfg.uid, self.cfg.gid, super::DATA_FILE_MODE)
            .await
        {
            Ok(cur) => cur,
            Err(e) => {
                tracing::warn!(ds, file = %name, error = ?e, reason = ?why, "pNFS data file not fenced");
                return;
            }
        };
        let (uid, gid) = (
            next_id(self.cfg.uid, cur.uid),
            next_id(self.cfg.gid, cur.gid),
        );
        match c.set_owner(name, uid, gid).await {
            Ok(_) if why == Fence::Recalled => tracing::info!(
                ds,
                file = %name,
                uid,
                gid,
                "pNFS read-write layout recalled for a change of size or attributes: data file fenced (I/O still in flight under the old layout is refused)"
            ),
            Ok(_) => tracing::warn!(
                ds,
                file = %name,
                uid,
                gid,
                reason = ?why,
                "pNFS layout revoked, data file fenced"
            ),
            Err(e) => {
                tracing::warn!(ds, file = %name, error = ?e, reason = ?why, "pNFS data file not fenced")
            }
        }
    }

    /// Fencing tasks running and data file names queued for fencing,
    /// over all data servers (the bounds: one task and [`MAX_QUEUED`]
    /// names per data server).
    pub fn fencing(&self) -> (usize, usize) {
        self.fencers.iter().fold((0, 0), |(t, n), f| {
            (t + usize::from(f.running()), n + f.queued())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v4::pnfs::layouts::DataFile;
    use crate::v4::pnfs::{DataServer, MdsConfig};
    use nfs::v4::Stateid4;

    fn recalled(names: impl Iterator<Item = String>) -> Vec<Recalled> {
        names
            .map(|name| Recalled {
                client: 1,
                file: bytes::Bytes::from(name.clone().into_bytes()),
                stateid: Stateid4 {
                    seqid: 1,
                    other: xdr::FixedOpaque([0; 12]),
                },
                data: vec![DataFile { ds: 0, name }],
                rw: true,
            })
            .collect()
    }

    #[test]
    fn a_data_servers_fencing_queue_is_bounded_and_deduplicated() {
        let ds = DataServer {
            tcp: "127.0.0.1:9".parse().unwrap(),
            rdma: None,
            mount_port: None,
            export: "/x".into(),
            advertise: None,
        };
        let mds = Arc::new(Mds::new(MdsConfig::new(vec![ds])));
        // Its task is busy (a data server that does not answer): the
        // names wait in the queue.
        mds.fencers[0].lock().running = true;
        let before = FENCE_QUEUE.count();
        let t = mds.fence(
            &recalled((0..MAX_QUEUED + 10).map(|i| format!("f{i}"))),
            Fence::Recalled,
        );
        assert_eq!(t.0, vec![(0, 0)]);
        assert_eq!(mds.fencing(), (1, MAX_QUEUED));
        assert_eq!(FENCE_QUEUE.count() - before, 10);
        // A name already queued is not refused, nor queued twice.
        mds.fence(&recalled(std::iter::once("f0".into())), Fence::Gone);
        assert_eq!(FENCE_QUEUE.count() - before, 10);
        assert_eq!(mds.fencing(), (1, MAX_QUEUED));
    }
}
