//! Outstanding calls of one connection, keyed by direction and XID, so a
//! reply can be named after its call. Bounded: past `MAX_CALLS` the oldest
//! is forgotten.

use std::collections::{HashMap, VecDeque};

use crate::report::Dir;
use crate::rpc::CallInfo;

/// Most calls remembered per connection.
pub(crate) const MAX_CALLS: usize = 4096;

/// A remembered call and what its transport header asked for.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) frame: u64,
    pub(crate) info: CallInfo,
    /// STags of chunks that may carry the whole call or reply (reply
    /// chunk, Position-Zero Read chunk), captured until the reply.
    pub(crate) handles: Vec<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Calls {
    map: HashMap<(Dir, u32), Pending>,
    order: VecDeque<(Dir, u32)>,
    /// Calls forgotten to keep the bound.
    pub(crate) evicted: u64,
}

impl Calls {
    /// Remembers a call sent in direction `dir`.
    pub(crate) fn insert(&mut self, dir: Dir, xid: u32, p: Pending) {
        if self.map.insert((dir, xid), p).is_none() {
            self.order.push_back((dir, xid));
        }
        while self.map.len() > MAX_CALLS {
            let Some(k) = self.order.pop_front() else {
                break;
            };
            if self.map.remove(&k).is_some() {
                self.evicted += 1;
            }
        }
        if self.order.len() > 2 * MAX_CALLS {
            let map = &self.map;
            self.order.retain(|k| map.contains_key(k));
        }
    }

    /// Takes the call a reply travelling in `dir` answers.
    pub(crate) fn answer(&mut self, dir: Dir, xid: u32) -> Option<Pending> {
        self.map.remove(&(dir.rev(), xid))
    }

    /// The call a later message names, left in place.
    pub(crate) fn get_mut(&mut self, dir: Dir, xid: u32) -> Option<&mut Pending> {
        self.map.get_mut(&(dir, xid))
    }

    /// Calls still waiting.
    pub(crate) fn unanswered(&self) -> u64 {
        self.map.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Pending {
        Pending {
            frame: 1,
            handles: vec![],
            info: CallInfo {
                prog: 1,
                vers: 1,
                proc_: 1,
                label: String::new(),
            },
        }
    }

    #[test]
    fn a_flood_of_calls_stays_bounded() {
        let mut c = Calls::default();
        for xid in 0..(3 * MAX_CALLS as u32) {
            c.insert(Dir::ToServer, xid, p());
        }
        assert_eq!(c.unanswered(), MAX_CALLS as u64);
        assert!(c.order.len() <= 2 * MAX_CALLS);
        assert_eq!(c.evicted, 2 * MAX_CALLS as u64);
        assert!(c.answer(Dir::ToClient, 0).is_none());
        assert!(c.answer(Dir::ToClient, 3 * MAX_CALLS as u32 - 1).is_some());
    }
}
