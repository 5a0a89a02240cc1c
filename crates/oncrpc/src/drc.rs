//! The duplicate-request cache (replay detection) of the server core.
//!
//! Keyed on XID, client identity (the address *without* the source port),
//! program, version, procedure and a hash of the arguments. The source port
//! is never part of the key: an RDMA client cannot choose it when it
//! reconnects (draft-ietf-nfsv4-nfs-ulb-v2 §3.3.2). The cache
//! is bounded in entries and in reply size.

use core::hash::{Hash, Hasher};
use core::net::IpAddr;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use xdr::XdrBuf;

/// Bytes of the arguments hashed into the key (plus their total length),
/// as Linux knfsd does with its 256-byte checksum.
pub const ARGS_HASH_PREFIX: usize = 256;

/// The client half of a cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientId {
    /// The client's network address, without the port.
    Addr(IpAddr),
    /// A transport connection id, when no address is known.
    Connection(u64),
}

/// A cache key (draft-ietf-nfsv4-nfs-ulb-v2 §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrcKey {
    /// Transaction id.
    pub xid: u32,
    /// Who sent it (no source port).
    pub client: ClientId,
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure.
    pub proc_: u32,
    /// Length of the arguments.
    pub args_len: usize,
    /// Hash of the first [`ARGS_HASH_PREFIX`] bytes of the arguments.
    pub args_hash: u64,
}

impl DrcKey {
    /// Builds a key, hashing the arguments.
    pub fn new(xid: u32, client: ClientId, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Self {
        let mut h = DefaultHasher::new();
        args.get(..ARGS_HASH_PREFIX).unwrap_or(args).hash(&mut h);
        Self {
            xid,
            client,
            prog,
            vers,
            proc_,
            args_len: args.len(),
            args_hash: h.finish(),
        }
    }
}

/// Limits of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrcConfig {
    /// Entries kept; the oldest is evicted first.
    pub capacity: usize,
    /// Replies longer than this are not cached.
    pub max_reply_len: usize,
}

impl Default for DrcConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            max_reply_len: 64 * 1024,
        }
    }
}

/// What the cache says about an incoming call.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Not seen: an in-progress entry was created; execute the call and
    /// then [`DuplicateRequestCache::complete`] or
    /// [`DuplicateRequestCache::abandon`] it.
    New,
    /// The original is still executing: drop this retransmission.
    InProgress,
    /// Already executed: send this cached reply again.
    Replay(XdrBuf),
}

#[derive(Debug)]
enum State {
    InProgress,
    Done(XdrBuf),
}

#[derive(Debug)]
struct Entry {
    state: State,
    generation: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<DrcKey, Entry>,
    order: VecDeque<(DrcKey, u64)>,
    next_generation: u64,
    hits: u64,
}

/// A bounded duplicate-request cache, safe to share between connections.
#[derive(Debug)]
pub struct DuplicateRequestCache {
    config: DrcConfig,
    inner: Mutex<Inner>,
}

impl DuplicateRequestCache {
    /// An empty cache.
    pub fn new(config: DrcConfig) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every
        // mutation is a single map/deque operation), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks `key` up, creating an in-progress entry when it is new.
    pub fn begin(&self, key: DrcKey) -> Lookup {
        let mut g = self.lock();
        if let Some(e) = g.map.get(&key) {
            let out = match &e.state {
                State::InProgress => Lookup::InProgress,
                State::Done(r) => Lookup::Replay(r.clone()),
            };
            g.hits += 1;
            return out;
        }
        Self::insert(&mut g, self.config.capacity, key, State::InProgress);
        Lookup::New
    }

    fn insert(g: &mut Inner, capacity: usize, key: DrcKey, state: State) {
        let capacity = capacity.max(1);
        while g.map.len() >= capacity || g.order.len() >= 2 * capacity {
            let Some((old, gen)) = g.order.pop_front() else {
                break;
            };
            if g.map.get(&old).is_some_and(|e| e.generation == gen) {
                g.map.remove(&old);
            }
        }
        let generation = g.next_generation;
        g.next_generation += 1;
        g.map.insert(key, Entry { state, generation });
        g.order.push_back((key, generation));
    }

    /// Stores the reply of a call that [`Self::begin`] reported as new.
    /// Replies over the size limit are not kept.
    pub fn complete(&self, key: DrcKey, reply: &XdrBuf) {
        let mut g = self.lock();
        if reply.len() > self.config.max_reply_len {
            g.map.remove(&key);
            return;
        }
        match g.map.get_mut(&key) {
            Some(e) => e.state = State::Done(reply.clone()),
            None => Self::insert(
                &mut g,
                self.config.capacity,
                key,
                State::Done(reply.clone()),
            ),
        }
    }

    /// Forgets an in-progress entry whose call produced no reply (dropped
    /// or cancelled), so a retransmission is executed.
    pub fn abandon(&self, key: DrcKey) {
        let mut g = self.lock();
        if matches!(
            g.map.get(&key),
            Some(Entry {
                state: State::InProgress,
                ..
            })
        ) {
            g.map.remove(&key);
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of lookups that found an existing entry.
    pub fn hits(&self) -> u64 {
        self.lock().hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::Encoder;

    fn key(xid: u32, args: &[u8]) -> DrcKey {
        DrcKey::new(xid, ClientId::Addr([10, 0, 0, 1].into()), 1, 1, 1, args)
    }

    fn reply(v: u32) -> XdrBuf {
        let mut b = XdrBuf::new();
        b.put_u32(v);
        b
    }

    #[test]
    fn replays_completed_entry_and_drops_in_progress() {
        let c = DuplicateRequestCache::new(DrcConfig::default());
        assert!(matches!(c.begin(key(1, b"a")), Lookup::New));
        assert!(matches!(c.begin(key(1, b"a")), Lookup::InProgress));
        c.complete(key(1, b"a"), &reply(9));
        match c.begin(key(1, b"a")) {
            Lookup::Replay(r) => assert_eq!(r.to_bytes().as_ref(), &[0, 0, 0, 9]),
            other => panic!("expected replay, got {other:?}"),
        }
        assert!(matches!(c.begin(key(1, b"b")), Lookup::New));
        assert_eq!(c.hits(), 2);
    }

    #[test]
    fn evicts_oldest_beyond_capacity() {
        let c = DuplicateRequestCache::new(DrcConfig {
            capacity: 2,
            max_reply_len: 100,
        });
        for x in 0..3 {
            assert!(matches!(c.begin(key(x, b"")), Lookup::New));
            c.complete(key(x, b""), &reply(x));
        }
        assert_eq!(c.len(), 2);
        assert!(matches!(c.begin(key(0, b"")), Lookup::New));
    }

    #[test]
    fn abandoned_and_oversized_entries_are_forgotten() {
        let c = DuplicateRequestCache::new(DrcConfig {
            capacity: 4,
            max_reply_len: 2,
        });
        assert!(matches!(c.begin(key(5, b"")), Lookup::New));
        c.abandon(key(5, b""));
        assert!(matches!(c.begin(key(5, b"")), Lookup::New));
        c.complete(key(5, b""), &reply(1));
        assert!(matches!(c.begin(key(5, b"")), Lookup::New));
    }

    #[test]
    fn key_ignores_nothing_but_the_port() {
        let a = DrcKey::new(1, ClientId::Addr([10, 0, 0, 1].into()), 1, 1, 1, b"x");
        let b = DrcKey::new(1, ClientId::Addr([10, 0, 0, 2].into()), 1, 1, 1, b"x");
        assert_ne!(a, b);
        assert_ne!(a, DrcKey::new(1, a.client, 1, 1, 1, b"y"));
        assert_eq!(a, DrcKey::new(1, a.client, 1, 1, 1, b"x"));
    }
}
