//! WRITEs in progress, per file, so that a returned write delegation stops
//! holding other clients back only once the holder's WRITEs that reached
//! the server before its DELEGRETURN are applied (issue 19).
//!
//! A client flushes its dirty data before it returns a delegation (RFC
//! 8881 §10.4.1: "the client ... MUST flush modified data"), but it may
//! send the DELEGRETURN before the WRITEs are answered, and the server
//! runs the calls of a connection concurrently. A COMPOUND's WRITEs are
//! counted as soon as it starts (before its first wait, so a COMPOUND the
//! transport hands over first is counted before a later one runs:
//! [`Writes::scan`]), and DELEGRETURN waits, at most
//! [`super::SessionLimits::delegreturn_write_wait`] ([`DRAIN_WAIT`] by
//! default), for the count of its file to fall to zero before the
//! delegation goes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::{CompoundHeader, NfsArgop4};
use oncrpc::limits::Limit;
use tokio::sync::Notify;
use xdr::{Decode, Decoder};

/// A DELEGRETURN waited its whole bound for earlier WRITEs of its file and
/// returned the delegation with some still running.
pub(crate) static DRAIN_TIMEOUT: Limit = Limit::new("nfs4.delegreturn_write_wait");

/// Longest a DELEGRETURN waits for WRITEs of its file in progress, by
/// default.
pub(crate) const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// WRITE operations in progress per file handle (bytes). An entry exists
/// only while a COMPOUND that holds one of its WRITEs runs: at most the
/// COMPOUNDs in progress times their operations.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    files: Mutex<HashMap<Bytes, usize>>,
    done: Notify,
}

/// One counted WRITE; dropping it ends the count.
#[derive(Debug)]
pub(crate) struct WriteGuard {
    writes: Arc<Writes>,
    key: Bytes,
}

/// The counted WRITEs of one COMPOUND, in operation order (`None` for a
/// WRITE whose file the scan could not tell).
pub(crate) type Pending = VecDeque<Option<WriteGuard>>;

impl Writes {
    fn lock(&self) -> MutexGuard<'_, HashMap<Bytes, usize>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(self: &Arc<Self>, key: Bytes) -> WriteGuard {
        *self.lock().entry(key.clone()).or_insert(0) += 1;
        WriteGuard {
            writes: Arc::clone(self),
            key,
        }
    }

    /// WRITEs of `key` in progress.
    pub(crate) fn count(&self, key: &Bytes) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }

    /// Counts the WRITEs of a COMPOUND (`args`, the whole COMPOUND4args)
    /// whose file follows from a PUTFH before them. Stops at the first
    /// operation it cannot decode or that moves the current file handle
    /// in a way it does not follow; the COMPOUND loop reports errors.
    pub(crate) fn scan(self: &Arc<Self>, args: &Bytes) -> Pending {
        let mut out = Pending::new();
        let mut dec = Decoder::from_bytes(args);
        let Ok(hdr) = CompoundHeader::decode(&mut dec) else {
            return out;
        };
        let mut cur: Option<Bytes> = None;
        for _ in 0..hdr.numops {
            let Ok(op) = NfsArgop4::decode(&mut dec) else {
                break;
            };
            match op {
                NfsArgop4::Putfh(a) => cur = Some(Bytes::copy_from_slice(a.object.as_bytes())),
                NfsArgop4::Write(_) => out.push_back(cur.clone().map(|k| self.begin(k))),
                NfsArgop4::Unsupported(_) => break,
                NfsArgop4::Sequence(_)
                | NfsArgop4::Getattr(_)
                | NfsArgop4::Savefh(())
                | NfsArgop4::Getfh(())
                | NfsArgop4::Commit(_)
                | NfsArgop4::Read(_)
                | NfsArgop4::Access(_)
                | NfsArgop4::Setattr(_)
                | NfsArgop4::Delegreturn(_) => {}
                _ => cur = None,
            }
        }
        out
    }

    /// Waits until no WRITE of `key` is in progress, at most `limit`;
    /// `false` when the time ran out.
    pub(crate) async fn drained(&self, key: &Bytes, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.done.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.count(key) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let mut files = self.writes.lock();
        if let Some(n) = files.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                files.remove(&self.key);
            }
        }
        drop(files);
        self.writes.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use nfs::v4::{Compound4Args, NfsFh4, Putfh4Args, StableHow4, Stateid4, Write4Args};

    use super::*;

    fn compound(ops: Vec<NfsArgop4>) -> Bytes {
        xdr::to_bytes(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        })
    }

    fn putfh(b: &'static [u8]) -> NfsArgop4 {
        NfsArgop4::Putfh(Putfh4Args {
            object: NfsFh4(Bytes::from_static(b)),
        })
    }

    fn write() -> NfsArgop4 {
        NfsArgop4::Write(Write4Args {
            stateid: Stateid4::ANONYMOUS,
            offset: 0,
            stable: StableHow4(0),
            data: xdr::DdpOpaque(Bytes::from_static(b"data")),
        })
    }

    #[test]
    fn writes_are_counted_per_file_until_their_guards_drop() {
        let w = Arc::new(Writes::default());
        let (a, b) = (Bytes::from_static(b"fh-a"), Bytes::from_static(b"fh-b"));
        let mut p = w.scan(&compound(vec![
            putfh(b"fh-a"),
            write(),
            putfh(b"fh-b"),
            write(),
        ]));
        assert_eq!((w.count(&a), w.count(&b)), (1, 1));
        let q = w.scan(&compound(vec![putfh(b"fh-a"), write()]));
        assert_eq!(w.count(&a), 2);
        p.pop_front();
        assert_eq!((w.count(&a), w.count(&b)), (1, 1));
        drop(p);
        drop(q);
        assert_eq!((w.count(&a), w.count(&b)), (0, 0));
        assert!(w.lock().is_empty());
    }

    #[test]
    fn a_write_after_an_unfollowed_handle_change_is_not_counted() {
        let w = Arc::new(Writes::default());
        let lookup = NfsArgop4::Lookup(nfs::v4::Lookup4Args {
            objname: nfs::v4::Component4::from_static("x"),
        });
        let p = w.scan(&compound(vec![putfh(b"fh-a"), lookup, write()]));
        assert_eq!(p.len(), 1);
        assert!(p[0].is_none());
        assert_eq!(w.count(&Bytes::from_static(b"fh-a")), 0);
        assert!(w.scan(&Bytes::from_static(b"\0\0")).is_empty());
    }

    #[tokio::test]
    async fn drained_waits_for_the_last_write_of_the_file() {
        let w = Arc::new(Writes::default());
        let a = Bytes::from_static(b"fh-a");
        let p = w.scan(&compound(vec![putfh(b"fh-a"), write()]));
        assert!(!w.drained(&a, Duration::from_millis(30)).await);
        let w2 = Arc::clone(&w);
        let waiter = tokio::spawn(async move {
            w2.drained(&Bytes::from_static(b"fh-a"), Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(p);
        assert!(waiter.await.unwrap());
        assert!(w.drained(&a, Duration::ZERO).await);
    }
}
