//! Room for a record made up front, within a server-wide budget.
//!
//! A record's length is in its fragment header (RFC 5531 §11), so a
//! connection could make room for the whole record as soon as the header
//! arrives and read the rest straight into it. Without that, the receive
//! buffer grows as the bytes arrive (64 KiB at a time from a shared
//! buffer, then doubling) and the record is moved at each step: a 1 MiB
//! NFS WRITE was copied about twice in user space and its fresh pages
//! faulted in on the way (docs/benchmarks.md).
//!
//! The length is the peer's claim, though: a peer that sends a header
//! claiming the largest record and falls silent would pin that much per
//! connection. So the room made ahead of the bytes is charged to a budget
//! shared by the server's connections ([`ServerReceiveBudget`], maximum
//! [`TcpConfig::max_server_receive_reserve`](super::TcpConfig)) from the
//! header's arrival until the record is complete or the connection ends.
//! A connection that finds the budget spent is not refused or delayed:
//! its record is received as before, growing with what arrives, and the
//! `tcp.receive_reserve_bytes` limit trips. A connection never holds more
//! than one record's room (at most `max_record`).
//!
//! The buffers large records were received into are kept as spares and
//! reused for later ones once the calls holding their records are done
//! ([`RecordDecoder::reserve_input_reusing`]): a new allocation per 1 MiB
//! WRITE cost page faults and zeroing in the receive copy, and the
//! allocator's `madvise` giving the pages back. Spares are charged to the
//! same budget for as long as they are kept (at most
//! [`MAX_SPARES`](crate::record::MAX_SPARES) per connection, each at most
//! `max_record` plus a read); past the budget they are let go and the
//! limit trips.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::limits::Limit;
use crate::record::RecordDecoder;

static RECEIVE_RESERVE: Limit = Limit::new("tcp.receive_reserve_bytes");

/// Records no longer than this are received as they arrive, with no room
/// made ahead: a read of that size takes them whole.
pub(crate) const SMALL_RECORD: usize = 64 * 1024;

/// The bytes of room all connections of a server have made ahead of their
/// records' arrival; see the module documentation. Share one between
/// listeners with [`TcpServer::with_receive_budget`](super::TcpServer::with_receive_budget).
#[derive(Debug)]
pub struct ServerReceiveBudget {
    max: usize,
    reserved: AtomicUsize,
}

impl ServerReceiveBudget {
    /// A budget of `max` bytes (0: records are never received into room
    /// made ahead).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            reserved: AtomicUsize::new(0),
        })
    }

    /// Bytes reserved now, all connections together.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }

    /// Takes `n` bytes if they fit under the maximum.
    fn try_take(&self, n: usize) -> bool {
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                r.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        if n != 0 {
            self.reserved.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// One connection's part of the budget: the room it made for the record it
/// is receiving. Given back when the record is complete
/// ([`Self::record_done`]) or the connection ends (drop).
#[derive(Debug)]
pub(crate) struct RecordRoom {
    server: Arc<ServerReceiveBudget>,
    conn_id: u64,
    held: usize,
    /// The budget refused room for the current record (tripped once).
    refused: bool,
    /// Bytes charged for the deframer's spare buffers
    /// ([`RecordDecoder::spare_len`]).
    spare: usize,
}

impl RecordRoom {
    pub(crate) fn new(server: Arc<ServerReceiveBudget>, conn_id: u64) -> Self {
        Self {
            server,
            conn_id,
            held: 0,
            refused: false,
            spare: 0,
        }
    }

    /// Before a read: if the fragment whose header has arrived needs more
    /// room than the buffer has and is not small, makes room for all of it
    /// at once when the budget allows.
    pub(crate) fn prepare(&mut self, deframer: &mut RecordDecoder) {
        let Some(missing) = deframer.fragment_missing() else {
            return;
        };
        let buf = deframer.read_buf();
        if missing <= SMALL_RECORD || buf.capacity() - buf.len() >= missing || self.refused {
            return;
        }
        if self.server.try_take(missing) {
            self.held += missing;
            deframer.reserve_input_reusing(missing);
            self.charge_spare(deframer);
            return;
        }
        self.refused = true;
        RECEIVE_RESERVE.trip(format_args!(
            "connection {} receives a {missing}-byte record as it arrives: \
             {} of {} bytes of receive room already reserved",
            self.conn_id,
            self.server.reserved(),
            self.server.max
        ));
    }

    /// Charges the deframer's spare buffers, kept for the next large
    /// records, to the budget, or lets them go when the budget has no room
    /// for them.
    fn charge_spare(&mut self, deframer: &mut RecordDecoder) {
        let len = deframer.spare_len();
        if len == self.spare {
            return;
        }
        self.server.give_back(std::mem::take(&mut self.spare));
        if len == 0 {
            return;
        }
        if self.server.try_take(len) {
            self.spare = len;
            return;
        }
        deframer.drop_spares();
        RECEIVE_RESERVE.trip(format_args!(
            "connection {} keeps no spare receive buffers ({len} bytes): \
             {} of {} bytes of receive room already reserved",
            self.conn_id,
            self.server.reserved(),
            self.server.max
        ));
    }

    /// A record was returned: the room made for it is the record's now.
    pub(crate) fn record_done(&mut self) {
        self.server.give_back(std::mem::take(&mut self.held));
        self.refused = false;
    }
}

impl Drop for RecordRoom {
    fn drop(&mut self) {
        self.server.give_back(self.held + self.spare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{fragment_header, MAX_SPARES};
    use bytes::Bytes;

    fn claim(len: usize) -> RecordDecoder {
        let mut d = RecordDecoder::new(8 << 20);
        d.feed(&fragment_header(len, true));
        d.feed(&[0; 100]);
        d
    }

    #[test]
    fn room_is_made_within_the_budget_and_given_back() {
        let server = ServerReceiveBudget::new(3 << 20);
        let mut a = RecordRoom::new(Arc::clone(&server), 1);
        let mut da = claim(2 << 20);
        a.prepare(&mut da);
        assert_eq!(server.reserved(), (2 << 20) + 4 - 104);
        assert!(da.read_buf().capacity() >= (2 << 20) + 4);
        // A second claim does not fit: received as it arrives.
        let mut b = RecordRoom::new(Arc::clone(&server), 2);
        let mut db = claim(2 << 20);
        b.prepare(&mut db);
        assert_eq!(server.reserved(), (2 << 20) + 4 - 104);
        assert!(db.read_buf().capacity() < 1 << 20);
        a.record_done();
        assert_eq!(server.reserved(), 0);
        // The refused connection gets room for its next record.
        b.record_done();
        let mut db = claim(2 << 20);
        b.prepare(&mut db);
        assert_eq!(server.reserved(), (2 << 20) + 4 - 104);
        drop(b);
        assert_eq!(server.reserved(), 0);
    }

    /// Feeds the rest of the record claimed by `claim`, takes it, and
    /// feeds the next header claiming `len`.
    fn next_claim(d: &mut RecordDecoder, len: usize, first: usize) -> Bytes {
        d.feed(&vec![0; first - 100]);
        let record = d.next_record().unwrap().unwrap();
        d.feed(&fragment_header(len, true));
        d.feed(&[0; 100]);
        record
    }

    #[test]
    fn spare_buffers_are_charged_bounded_reused_and_let_go_past_the_budget() {
        const BUF: usize = (1 << 20) + 4;
        let server = ServerReceiveBudget::new(16 << 20);
        let mut a = RecordRoom::new(Arc::clone(&server), 1);
        let mut d = claim(1 << 20);
        a.prepare(&mut d);
        assert_eq!(d.spare_len(), 0);
        let mut bufs = vec![d.read_buf().as_ptr()];
        // Every record still held by its call: each next one gets a new
        // buffer, those before are kept as spares, at most MAX_SPARES of
        // them, each charged beside the room for the record arriving.
        let mut held = Vec::new();
        for i in 1..=MAX_SPARES + 2 {
            held.push(next_claim(&mut d, 1 << 20, 1 << 20));
            a.record_done();
            a.prepare(&mut d);
            let p = d.read_buf().as_ptr();
            assert!(!bufs.contains(&p));
            bufs.push(p);
            assert_eq!(d.spare_len(), i.min(MAX_SPARES) * BUF);
            assert_eq!(server.reserved(), d.spare_len() + BUF - 104);
        }
        // The records dropped: the next one goes into one of the spares,
        // no new allocation.
        drop(held);
        let _next = next_claim(&mut d, 1 << 20, 1 << 20);
        a.record_done();
        a.prepare(&mut d);
        let kept = &bufs[bufs.len() - 1 - MAX_SPARES..bufs.len() - 1];
        assert!(kept.contains(&d.read_buf().as_ptr()));
        assert_eq!(d.spare_len(), MAX_SPARES * BUF);
        drop(a);
        assert_eq!(server.reserved(), 0);
        // A budget with room for the record but not its spare: the spare
        // is let go and the limit trips.
        let before = crate::limits::trips("tcp.receive_reserve_bytes");
        let server = ServerReceiveBudget::new((1 << 20) + (1 << 19));
        let mut b = RecordRoom::new(Arc::clone(&server), 2);
        let mut d = claim(1 << 20);
        b.prepare(&mut d);
        let _held = next_claim(&mut d, 1 << 20, 1 << 20);
        b.record_done();
        b.prepare(&mut d);
        assert_eq!(d.spare_len(), 0);
        assert_eq!(server.reserved(), (1 << 20) + 4 - 104);
        assert!(crate::limits::trips("tcp.receive_reserve_bytes") > before);
        drop(b);
        assert_eq!(server.reserved(), 0);
    }

    #[test]
    fn small_records_take_no_room_ahead() {
        let server = ServerReceiveBudget::new(1 << 20);
        let mut a = RecordRoom::new(Arc::clone(&server), 1);
        let mut d = claim(SMALL_RECORD);
        a.prepare(&mut d);
        assert_eq!(server.reserved(), 0);
    }
}
