//! Counters of the server's RPC-over-RDMA connections (issue 16 item 4):
//! what came inline and what moved by chunk (RFC 8166 §3.4: read chunks
//! pulled by RDMA Read, write and reply chunks pushed by RDMA Write), the
//! work requests posted, the credits granted and in use (§3.3), and the
//! errors. Relaxed atomics bumped by the connection shells; each event
//! counts in its connection's counters and in the process totals.
//! [`snapshot`] reads them for `serve --metrics` and `nfsrdma stat`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Connections whose counters are kept apart; past this, new
/// connections count in the totals only.
const MAX_TRACKED: usize = 4096;

/// Closed connections whose final figures wait for the next
/// [`snapshot`]; past this the oldest are forgotten.
const MAX_CLOSED: usize = 64;

macro_rules! counters {
    ($( $(#[$m:meta])* $field:ident, )*) => {
        /// One set of counters (a connection's, or the totals).
        #[derive(Debug, Default)]
        pub struct Counters {
            $( $(#[$m])* $field: AtomicU64, )*
        }

        /// The values of [`Counters`] at one moment.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Figures {
            $( $(#[$m])* pub $field: u64, )*
        }

        impl Counters {
            const fn new() -> Self {
                Self { $( $field: AtomicU64::new(0), )* }
            }

            fn read(&self) -> Figures {
                Figures { $( $field: self.$field.load(Ordering::Relaxed), )* }
            }
        }

        impl Figures {
            /// Every figure with its name (the Prometheus series suffix).
            pub fn named(&self) -> [(&'static str, u64); [$(stringify!($field)),*].len()] {
                [$( (stringify!($field), self.$field), )*]
            }
        }
    };
}

counters! {
    /// Messages received (every Receive completion).
    messages_received,
    /// Bytes received inline (the Receives' lengths).
    inline_bytes_received,
    /// Bytes of calls pulled from read chunks.
    read_chunk_bytes,
    /// RDMA Reads completed.
    rdma_reads,
    /// Sends posted (replies and error answers, reverse calls).
    sends,
    /// Of those, Sends With Invalidate.
    sends_with_invalidate,
    /// Bytes sent inline (transport header and inline body of the Sends).
    inline_bytes_sent,
    /// Bytes of replies pushed into write chunks.
    write_chunk_bytes,
    /// Bytes of replies pushed into reply chunks.
    reply_chunk_bytes,
    /// RDMA Writes posted.
    rdma_writes,
    /// Answers that were RDMA_ERROR (ERR_VERS, ERR_CHUNK, v2 errors).
    errors_sent,
    /// Connections closed on a failed work completion, a peer over its
    /// credits, or RDMA Reads left unanswered.
    connection_errors,
    /// The credit grant of the last reply (RFC 8166 §3.3.1); a gauge.
    credits_granted,
    /// Calls received and not yet answered: credits in use; a gauge.
    credits_in_use,
}

/// The counters of every process-wide total.
static TOTALS: Counters = Counters::new();

/// Live connections: id → (peer, counters).
static CONNS: Mutex<BTreeMap<u64, (String, Arc<Counters>)>> = Mutex::new(BTreeMap::new());

/// Final figures of connections closed since the last [`snapshot`].
static CLOSED: Mutex<VecDeque<ConnFigures>> = Mutex::new(VecDeque::new());

fn conns() -> MutexGuard<'static, BTreeMap<u64, (String, Arc<Counters>)>> {
    CONNS.lock().unwrap_or_else(|p| p.into_inner())
}

fn closed() -> MutexGuard<'static, VecDeque<ConnFigures>> {
    CLOSED.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connection's side of the counters: each event counts in the
/// connection's set and in the totals; the gauges are summed in the
/// totals. Unregistered when dropped.
#[derive(Debug)]
pub(crate) struct ConnCounters {
    id: u64,
    own: Arc<Counters>,
}

impl ConnCounters {
    /// Counters for connection `id` from `peer`.
    pub(crate) fn register(id: u64, peer: String) -> Self {
        let own = Arc::new(Counters::new());
        let mut c = conns();
        if c.len() < MAX_TRACKED {
            c.insert(id, (peer, Arc::clone(&own)));
        }
        Self { id, own }
    }

    fn add(&self, f: impl Fn(&Counters) -> &AtomicU64, n: u64) {
        f(&self.own).fetch_add(n, Ordering::Relaxed);
        f(&TOTALS).fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&self, f: impl Fn(&Counters) -> &AtomicU64, n: u64) {
        f(&self.own).fetch_sub(n, Ordering::Relaxed);
        f(&TOTALS).fetch_sub(n, Ordering::Relaxed);
    }

    /// A message of `len` bytes arrived.
    pub(crate) fn received(&self, len: u64) {
        self.add(|c| &c.messages_received, 1);
        self.add(|c| &c.inline_bytes_received, len);
    }

    /// A call of `bytes` in read chunks was pulled.
    pub(crate) fn pulled(&self, bytes: u64) {
        self.add(|c| &c.read_chunk_bytes, bytes);
    }

    /// An RDMA Read completed.
    pub(crate) fn read_done(&self) {
        self.add(|c| &c.rdma_reads, 1);
    }

    /// A Send of `header` and `inline` bytes was posted (with
    /// invalidation when `invalidate`).
    pub(crate) fn sent(&self, header: &[u8], inline: u64, invalidate: bool) {
        self.add(|c| &c.sends, 1);
        self.add(|c| &c.inline_bytes_sent, header.len() as u64 + inline);
        if invalidate {
            self.add(|c| &c.sends_with_invalidate, 1);
        }
        if let Some(grant) = header_word(header, 2) {
            let old = self
                .own
                .credits_granted
                .swap(u64::from(grant), Ordering::Relaxed);
            TOTALS
                .credits_granted
                .fetch_add(u64::from(grant), Ordering::Relaxed);
            TOTALS.credits_granted.fetch_sub(old, Ordering::Relaxed);
        }
        if header_word(header, 3) == Some(RDMA_ERROR) {
            self.add(|c| &c.errors_sent, 1);
        }
    }

    /// An RDMA Write of `bytes` was posted, into a reply chunk when
    /// `reply_chunk`, else a write chunk.
    pub(crate) fn wrote(&self, bytes: u64, reply_chunk: bool) {
        self.add(|c| &c.rdma_writes, 1);
        if reply_chunk {
            self.add(|c| &c.reply_chunk_bytes, bytes);
        } else {
            self.add(|c| &c.write_chunk_bytes, bytes);
        }
    }

    /// A call started (it holds a credit until answered).
    pub(crate) fn call_started(&self) {
        self.add(|c| &c.credits_in_use, 1);
    }

    /// A call was answered (or dropped).
    pub(crate) fn call_ended(&self) {
        self.sub(|c| &c.credits_in_use, 1);
    }

    /// The connection is being closed for an error.
    pub(crate) fn failed(&self) {
        self.add(|c| &c.connection_errors, 1);
    }
}

impl Drop for ConnCounters {
    /// The connection's gauges leave the totals with it; its final
    /// figures are kept for the next [`snapshot`].
    fn drop(&mut self) {
        let f = self.own.read();
        TOTALS
            .credits_granted
            .fetch_sub(f.credits_granted, Ordering::Relaxed);
        TOTALS
            .credits_in_use
            .fetch_sub(f.credits_in_use, Ordering::Relaxed);
        let Some((peer, _)) = conns().remove(&self.id) else {
            return;
        };
        let mut c = closed();
        if c.len() >= MAX_CLOSED {
            c.pop_front();
        }
        c.push_back(ConnFigures {
            id: self.id,
            peer,
            figures: f,
        });
    }
}

/// `rdma_proc` of RDMA_ERROR (RFC 8166 §4.2.4; also the version 2 draft's
/// RDMA2_ERROR).
const RDMA_ERROR: u32 = 4;

/// Word `i` of a transport header (RFC 8166 §4.2: xid, version, credits,
/// procedure), if it is that long.
fn header_word(header: &[u8], i: usize) -> Option<u32> {
    let b = header.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// One connection's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnFigures {
    /// The connection id (as RPC services see it).
    pub id: u64,
    /// The peer's address.
    pub peer: String,
    /// Its counters.
    pub figures: Figures,
}

/// The process totals, and each connection's figures: the live ones (at
/// most [`MAX_TRACKED`], oldest ids first), then those closed since the
/// last snapshot with their final figures (so a short connection is seen
/// at least once).
pub fn snapshot() -> (Figures, Vec<ConnFigures>) {
    let mut per: Vec<ConnFigures> = conns()
        .iter()
        .map(|(id, (peer, c))| ConnFigures {
            id: *id,
            peer: peer.clone(),
            figures: c.read(),
        })
        .collect();
    per.extend(closed().drain(..));
    (TOTALS.read(), per)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(id: u64) -> Option<Figures> {
        snapshot()
            .1
            .into_iter()
            .find(|c| c.id == id)
            .map(|c| c.figures)
    }

    #[test]
    fn events_count_per_connection_and_leave_with_it() {
        let id = u64::MAX - 7;
        let c = ConnCounters::register(id, "10.0.0.1:5".into());
        c.received(100);
        c.call_started();
        c.pulled(4096);
        c.read_done();
        // xid, version 1, grant 32, RDMA_MSG.
        let header = [0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 32, 0, 0, 0, 0];
        c.wrote(8192, false);
        c.wrote(300, true);
        c.sent(&header, 50, true);
        c.call_ended();
        let error = [0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 31, 0, 0, 0, 4];
        c.sent(&error, 0, false);
        let f = find(id).unwrap();
        assert_eq!((f.messages_received, f.inline_bytes_received), (1, 100));
        assert_eq!((f.read_chunk_bytes, f.rdma_reads), (4096, 1));
        assert_eq!(
            (f.write_chunk_bytes, f.reply_chunk_bytes, f.rdma_writes),
            (8192, 300, 2)
        );
        assert_eq!((f.sends, f.sends_with_invalidate), (2, 1));
        assert_eq!(f.inline_bytes_sent, 16 + 50 + 16);
        assert_eq!((f.credits_granted, f.credits_in_use), (31, 0));
        assert_eq!(f.errors_sent, 1);
        let totals = snapshot().0;
        assert!(totals.write_chunk_bytes >= 8192 && totals.rdma_writes >= 2);
        drop(c);
        assert_eq!(
            find(id).map(|f| f.write_chunk_bytes),
            Some(8192),
            "final figures once"
        );
        assert_eq!(find(id), None);
    }

    #[test]
    fn figures_are_named_for_export() {
        let f = Figures {
            rdma_reads: 3,
            ..Figures::default()
        };
        assert!(f.named().contains(&("rdma_reads", 3)));
        assert_eq!(f.named().len(), 14);
    }
}
