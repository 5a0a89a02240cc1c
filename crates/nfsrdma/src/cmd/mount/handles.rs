//! [`OpenHandles`]: the open file handles of a mount, by FUSE handle
//! number, for either NFS version (an `O` is the version's open file);
//! each one opened is counted in the silly-rename bookkeeping
//! ([`super::silly::Opens`]), which its last release must be told of.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::{Errno, FileHandle, INodeNo};

use super::silly::Opens;

type Res<T> = Result<T, Errno>;

/// The mount's open file handles; clones share them (the NFSv4 mount's
/// recovery and recall tasks see the same table).
#[derive(Debug)]
pub(crate) struct OpenHandles<O>(Arc<Mutex<HashMap<u64, Arc<O>>>>);

impl<O> Clone for OpenHandles<O> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<O> Default for OpenHandles<O> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(HashMap::new())))
    }
}

impl<O> OpenHandles<O> {
    /// The table, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<O>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `o` (a file of inode `ino`) as handle `id`, counted open in
    /// `opens`.
    pub(crate) fn open<H>(
        &self,
        id: u64,
        o: O,
        ino: INodeNo,
        opens: &Mutex<Opens<H>>,
    ) -> FileHandle {
        opens.lock().unwrap_or_else(|p| p.into_inner()).opened(ino);
        self.lock().insert(id, Arc::new(o));
        FileHandle(id)
    }

    /// The open file of handle `fh` (EBADF: not open).
    pub(crate) fn get(&self, fh: FileHandle) -> Res<Arc<O>> {
        self.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// Handle `fh` closed: its open file (EBADF: not open).
    pub(crate) fn take(&self, fh: FileHandle) -> Res<Arc<O>> {
        self.lock().remove(&fh.0).ok_or(Errno::EBADF)
    }

    /// Every handle closed (the mount ends): their open files.
    pub(crate) fn drain(&self) -> Vec<Arc<O>> {
        self.lock().drain().map(|(_, o)| o).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_kept_counted_and_taken_once() {
        let h: OpenHandles<&str> = OpenHandles::default();
        let opens: Mutex<Opens<u8>> = Mutex::new(Opens::default());
        let fh = h.open(7, "a", INodeNo(3), &opens);
        assert!(!opens.lock().unwrap().is_empty());
        assert_eq!(*h.clone().get(fh).unwrap(), "a");
        assert_eq!(*h.take(fh).unwrap(), "a");
        assert_eq!(h.get(fh).unwrap_err(), Errno::EBADF);
        assert_eq!(h.take(fh).unwrap_err(), Errno::EBADF);
        h.open(8, "b", INodeNo(4), &opens);
        assert_eq!(h.drain().len(), 1);
        assert!(h.lock().is_empty());
    }
}
