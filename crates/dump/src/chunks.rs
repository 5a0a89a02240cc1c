//! The bytes of chunks that carry a whole RPC message (RFC 8166 §3.5.3):
//! a reply chunk the responder fills with RDMA Writes before its
//! RDMA_NOMSG reply, and a Position-Zero Read chunk the responder pulls
//! with RDMA Reads after the requester's RDMA_NOMSG call. Only STags that
//! a call header named are captured, each up to its advertised length,
//! within a per-connection budget.

use std::collections::HashMap;

use rpcrdma::wire::RdmaSegment;

/// Most bytes held for chunk contents per connection.
const MAX_BYTES: usize = 16 << 20;
/// Most STags watched per connection.
const MAX_STAGS: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Chunks {
    /// STag to (capacity, bytes so far).
    watched: HashMap<u32, (usize, Vec<u8>)>,
    /// Read Request sink STag to the source STag it reads.
    sinks: HashMap<u32, u32>,
    held: usize,
}

impl Chunks {
    /// Starts capturing the segments of a chunk.
    pub(crate) fn watch(&mut self, segs: &[RdmaSegment]) {
        for s in segs {
            let cap = s.length as usize;
            if self.watched.len() >= MAX_STAGS || self.held + cap > MAX_BYTES {
                return;
            }
            self.held += cap;
            if let Some((old, _)) = self.watched.insert(s.handle, (cap, Vec::new())) {
                self.held -= old;
            }
        }
    }

    /// A Read Request: data for `sink` belongs to `source`.
    pub(crate) fn read_request(&mut self, sink: u32, source: u32) {
        if self.watched.contains_key(&source) && self.sinks.len() < MAX_STAGS {
            self.sinks.insert(sink, source);
        }
    }

    /// Tagged payload (RDMA Write or Read Response) to `stag`.
    pub(crate) fn data(&mut self, stag: u32, payload: &[u8]) {
        let stag = self.sinks.get(&stag).copied().unwrap_or(stag);
        if let Some((cap, buf)) = self.watched.get_mut(&stag) {
            let room = cap.saturating_sub(buf.len());
            buf.extend_from_slice(&payload[..payload.len().min(room)]);
        }
    }

    /// Takes the contents of a chunk, `len` bytes of each segment (the
    /// lengths a reply reports, or the call's for a read chunk); `None`
    /// unless every byte arrived.
    pub(crate) fn take(&mut self, segs: &[RdmaSegment]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut complete = true;
        for s in segs {
            match self.watched.remove(&s.handle) {
                Some((cap, buf)) => {
                    self.held -= cap;
                    match buf.get(..s.length as usize) {
                        Some(b) => out.extend_from_slice(b),
                        None => complete = false,
                    }
                }
                None => complete = complete && s.length == 0,
            }
        }
        self.sinks
            .retain(|_, src| !segs.iter().any(|s| s.handle == *src));
        complete.then_some(out)
    }

    /// True once every byte of the segments arrived.
    pub(crate) fn complete(&self, segs: &[RdmaSegment]) -> bool {
        segs.iter().all(|s| {
            self.watched
                .get(&s.handle)
                .is_some_and(|(_, b)| b.len() >= s.length as usize)
        })
    }

    /// Stops watching a chunk that carried nothing.
    pub(crate) fn forget(&mut self, handles: &[u32]) {
        for h in handles {
            if let Some((cap, _)) = self.watched.remove(h) {
                self.held -= cap;
            }
        }
        self.sinks.retain(|_, src| !handles.contains(src));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(handle: u32, length: u32) -> RdmaSegment {
        RdmaSegment {
            handle,
            length,
            offset: 0,
        }
    }

    #[test]
    fn captures_watched_stags_only_and_within_their_length() {
        let mut c = Chunks::default();
        c.watch(&[seg(1, 4), seg(2, 2)]);
        c.data(1, b"abcdef");
        c.data(3, b"zz");
        c.data(2, b"gh");
        assert_eq!(c.take(&[seg(1, 4), seg(2, 2)]).unwrap(), b"abcdgh");
        assert_eq!(c.held, 0);
    }

    #[test]
    fn read_responses_reach_their_source_stag() {
        let mut c = Chunks::default();
        c.watch(&[seg(7, 3)]);
        c.read_request(99, 7);
        c.data(99, b"xyz");
        assert_eq!(c.take(&[seg(7, 3)]).unwrap(), b"xyz");
        assert!(c.sinks.is_empty());
    }

    #[test]
    fn incomplete_chunks_give_nothing_and_hostile_sizes_are_bounded() {
        let mut c = Chunks::default();
        c.watch(&[seg(1, 10)]);
        c.data(1, b"abc");
        assert!(c.take(&[seg(1, 10)]).is_none());
        for h in 0..10_000 {
            c.watch(&[seg(h, u32::MAX)]);
        }
        assert!(c.held <= MAX_BYTES && c.watched.len() <= MAX_STAGS);
    }
}
