//! Open files whose last name is gone. A client may keep using a file it
//! has open after another client's RENAME replaced its name or REMOVE
//! took it (RFC 8881 §18.26.4, §18.25.4: the object goes only once no
//! name and no open refers to it; Linux's nfsd keeps the open file and
//! resolves its handle by inode). Handles here resolve through a name
//! (`localfs/resolve.rs`), so before RENAME or REMOVE takes the last
//! name of a regular file some client has open, the server opens it and
//! pins that descriptor: the handle then resolves through it
//! (`LocalFs::resolve_orphan`) until the last CLOSE, when the descriptor
//! goes and the file with it.
//!
//! Bound (limit `nfs4.orphans`): at most [`MAX_ORPHANS`] such files are
//! kept; beyond it the handle goes STALE as before. Files whose clients
//! went away without CLOSE are released at the next CLOSE or RENAME/REMOVE
//! of an open file.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs::v3::NfsFh3;
use oncrpc::limits::Limit;

use super::fileops::key;
use super::Nfs4Service;
use crate::storage::Storage;

static ORPHANS: Limit = Limit::new("nfs4.orphans");

/// Most unnamed open files kept.
pub(crate) const MAX_ORPHANS: usize = 4096;

/// Descriptors of unnamed open files, by handle.
#[derive(Debug, Default)]
pub(crate) struct Orphans {
    map: Mutex<HashMap<Bytes, Arc<OwnedFd>>>,
}

impl Orphans {
    /// Keeps `fd` for handle `k`; `false` past the bound.
    fn keep(&self, k: Bytes, fd: Arc<OwnedFd>) -> bool {
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        if m.len() >= MAX_ORPHANS && !m.contains_key(&k) {
            ORPHANS.trip(format_args!(
                "an open file losing its last name is not kept: {MAX_ORPHANS} kept already"
            ));
            return false;
        }
        m.insert(k, fd);
        true
    }

    /// Drops the files no client has open any more.
    fn sweep(&self, open: impl Fn(&Bytes) -> bool) {
        if let Ok(mut m) = self.map.lock() {
            m.retain(|k, _| open(k));
        }
    }

    /// Files kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }
}

impl<S: Storage> Nfs4Service<S> {
    /// Whether some client has `k` open.
    fn is_open(&self, k: &Bytes) -> bool {
        self.state().is_ok_and(|st| !st.ids.opens_of(k).is_empty())
    }

    /// Before RENAME or REMOVE may take the last name of `f`: when a
    /// client has it open, keeps a descriptor of it (read-write where the
    /// server may, else read-only) pinned, so its handle still resolves.
    pub(super) fn keep_if_open(&self, f: &NfsFh3) {
        let k = key(f);
        self.release_closed();
        if !self.is_open(&k) {
            return;
        }
        let file = self
            .fs
            .open_file(f, true)
            .or_else(|_| self.fs.open_file(f, false));
        if let Ok(file) = file {
            let fd = Arc::new(OwnedFd::from(file));
            if self.orphans.keep(k, Arc::clone(&fd)) {
                self.fs.pin(f, &fd);
            }
        }
    }

    /// Lets go of the kept files no client has open any more.
    pub(super) fn release_closed(&self) {
        self.orphans.sweep(|k| self.is_open(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_files_are_bounded_and_swept() {
        let o = Orphans::default();
        let fd = || Arc::new(OwnedFd::from(std::fs::File::open("/").unwrap()));
        for i in 0..MAX_ORPHANS {
            assert!(o.keep(Bytes::from(i.to_be_bytes().to_vec()), fd()));
        }
        let trips = ORPHANS.count();
        assert!(!o.keep(Bytes::from_static(b"one more"), fd()));
        assert!(ORPHANS.count() > trips, "the refusal is counted");
        assert!(
            o.keep(Bytes::from(0usize.to_be_bytes().to_vec()), fd()),
            "a kept one again"
        );
        o.sweep(|k| k[7] % 2 == 0);
        assert_eq!(o.len(), MAX_ORPHANS / 2);
        o.sweep(|_| false);
        assert_eq!(o.len(), 0);
    }
}
