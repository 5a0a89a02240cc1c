//! Open handles per inode and the silly renames waiting for their last
//! close, for either NFS version (`H` is the file handle type).
//!
//! A file removed on the server is gone for whoever still holds it open
//! (NFSv3 has no open state; this project's NFSv4 server does not keep
//! unlinked open files either, RFC 8881 §18.16.4
//! OPEN4_RESULT_PRESERVE_UNLINKED). Like Linux's client
//! (`nfs_sillyrename`), the mount renames a file that is open here and
//! being unlinked, or replaced by a RENAME, to `.nfs` + its file id + a
//! counter (hex) in the same directory, and removes that name when the
//! last open handle is released (or the mount ends).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use fuser::INodeNo;
use oncrpc::msg::OpaqueAuth;

/// Silly renames made by this process, for unique names.
static SILLY_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A file renamed away instead of removed: where, and as whom to remove
/// it at the last close.
#[derive(Debug, Clone)]
pub(crate) struct Silly<H> {
    pub(crate) dir: H,
    pub(crate) name: String,
    pub(crate) cred: OpaqueAuth,
}

#[derive(Debug)]
struct Count<H> {
    handles: usize,
    silly: Option<Silly<H>>,
}

/// Open handles per inode, and the silly renames waiting for their last
/// close.
#[derive(Debug)]
pub(crate) struct Opens<H> {
    inodes: HashMap<u64, Count<H>>,
}

impl<H> Default for Opens<H> {
    fn default() -> Self {
        Self {
            inodes: HashMap::new(),
        }
    }
}

impl<H> Opens<H> {
    pub(crate) fn opened(&mut self, ino: INodeNo) {
        self.inodes
            .entry(ino.0)
            .or_insert(Count {
                handles: 0,
                silly: None,
            })
            .handles += 1;
    }

    /// One handle of `ino` closed: the silly rename to undo if it was the
    /// last.
    pub(crate) fn closed(&mut self, ino: INodeNo) -> Option<Silly<H>> {
        let c = self.inodes.get_mut(&ino.0)?;
        c.handles = c.handles.saturating_sub(1);
        if c.handles > 0 {
            return None;
        }
        self.inodes.remove(&ino.0).and_then(|c| c.silly)
    }

    /// Whether no file is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.inodes.is_empty()
    }

    /// Whether `ino` is open and not yet renamed away.
    pub(crate) fn needs_hiding(&self, ino: INodeNo) -> bool {
        self.inodes
            .get(&ino.0)
            .is_some_and(|c| c.handles > 0 && c.silly.is_none())
    }

    /// Records that open `ino` was renamed away as `s`; gives `s` back
    /// when the file was closed meanwhile (nothing holds it any more).
    pub(crate) fn hidden(&mut self, ino: INodeNo, s: Silly<H>) -> Option<Silly<H>> {
        match self.inodes.get_mut(&ino.0) {
            Some(c) if c.handles > 0 => {
                c.silly = Some(s);
                None
            }
            _ => Some(s),
        }
    }

    /// Every silly rename still waiting (at unmount).
    pub(crate) fn drain_silly(&mut self) -> Vec<Silly<H>> {
        self.inodes.drain().filter_map(|(_, c)| c.silly).collect()
    }
}

/// The hidden name for file id `fileid` (Linux's `.nfs%016llx%08x`).
pub(crate) fn silly_name(fileid: u64, n: u32) -> String {
    format!(".nfs{fileid:016x}{n:08x}")
}

/// A fresh hidden name for file id `fileid`.
pub(crate) fn next_silly_name(fileid: u64) -> String {
    silly_name(fileid, SILLY_COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silly() -> Silly<u8> {
        Silly {
            dir: 7,
            name: silly_name(1, 2),
            cred: OpaqueAuth::NONE,
        }
    }

    #[test]
    fn silly_names_are_hidden_and_unique_per_counter() {
        assert_eq!(silly_name(0xabc, 7), ".nfs0000000000000abc00000007");
        assert_ne!(silly_name(1, 1), silly_name(1, 2));
        assert_ne!(next_silly_name(1), next_silly_name(1));
    }

    #[test]
    fn the_last_close_of_a_hidden_file_removes_it() {
        let mut o = Opens::default();
        let ino = INodeNo(5);
        o.opened(ino);
        o.opened(ino);
        assert!(o.needs_hiding(ino));
        assert!(o.hidden(ino, silly()).is_none());
        assert!(!o.needs_hiding(ino), "renamed once only");
        assert!(o.closed(ino).is_none(), "one handle still open");
        assert_eq!(o.closed(ino).map(|s| s.name), Some(silly_name(1, 2)));
        assert!(o.is_empty());
        assert!(!o.needs_hiding(ino));
        assert!(o.closed(ino).is_none());
        assert!(o.hidden(ino, silly()).is_some(), "closed meanwhile");
    }

    #[test]
    fn unmount_drains_the_waiting_renames() {
        let mut o = Opens::default();
        o.opened(INodeNo(3));
        o.opened(INodeNo(4));
        assert!(o.hidden(INodeNo(3), silly()).is_none());
        assert_eq!(o.drain_silly().len(), 1);
        assert!(o.is_empty());
    }
}
