//! Descriptors the server's own I/O on a file uses instead of opening it
//! anew: a file under a kernel lease for an NFSv4 delegation
//! (`v4/lease.rs`) must not be opened by the server for the delegation's
//! holder, since leases know no owner in user space and the open would
//! break the server's own lease. While a pin lives, every open of the
//! file that the pinned descriptor can serve (its access mode allows it)
//! is a `dup` of it, which shares its open file description and breaks
//! nothing. Pins are weak: they end when the lease's descriptor is
//! closed.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use rustix::fs::OFlags;

/// Pinned descriptors by inode.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    map: Mutex<Map>,
}

#[derive(Debug, Default)]
struct Map {
    by_ino: HashMap<u64, Weak<OwnedFd>>,
    /// Size at which dead pins are swept next.
    sweep_at: usize,
}

impl Pins {
    /// Pins `fd` for inode `ino` while it lives.
    pub(crate) fn pin(&self, ino: u64, fd: &Arc<OwnedFd>) {
        let Ok(mut m) = self.map.lock() else { return };
        if m.by_ino.len() >= m.sweep_at {
            m.by_ino.retain(|_, w| w.strong_count() > 0);
            m.sweep_at = (m.by_ino.len() * 2).max(64);
        }
        m.by_ino.insert(ino, Arc::downgrade(fd));
    }

    /// The live pin of `ino`.
    pub(crate) fn get(&self, ino: u64) -> Option<Arc<OwnedFd>> {
        let mut m = self.map.lock().ok()?;
        if m.by_ino.is_empty() {
            return None;
        }
        let w = m.by_ino.get(&ino)?;
        let fd = w.upgrade();
        if fd.is_none() {
            m.by_ino.remove(&ino);
        }
        fd
    }
}

/// A `dup` of `pinned` when its access mode serves an open with `flags`
/// (`O_PATH` opens break no lease and are never served).
pub(crate) fn reuse(pinned: &OwnedFd, flags: OFlags) -> Option<OwnedFd> {
    if flags.contains(OFlags::PATH) {
        return None;
    }
    let have = rustix::fs::fcntl_getfl(pinned).ok()? & OFlags::RWMODE;
    let want = flags & OFlags::RWMODE;
    if want != OFlags::RDONLY && have != OFlags::RDWR && have != want {
        return None;
    }
    if want == OFlags::RDONLY && have == OFlags::WRONLY {
        return None;
    }
    rustix::io::fcntl_dupfd_cloexec(pinned.as_fd(), 0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_serve_compatible_opens_and_end_with_their_descriptor() {
        let dir = std::env::temp_dir().join(format!("nfs-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"x").unwrap();
        let open = |f| rustix::fs::open(&p, f, rustix::fs::Mode::empty()).unwrap();
        let pins = Pins::default();
        let ro = Arc::new(open(OFlags::RDONLY));
        pins.pin(7, &ro);
        let got = pins.get(7).unwrap();
        assert!(reuse(&got, OFlags::RDONLY | OFlags::NONBLOCK).is_some());
        assert!(reuse(&got, OFlags::WRONLY).is_none());
        assert!(reuse(&got, OFlags::PATH).is_none());
        let rw = Arc::new(open(OFlags::RDWR));
        assert!(reuse(&rw, OFlags::WRONLY).is_some());
        assert!(reuse(&rw, OFlags::RDWR).is_some());
        drop((got, ro));
        assert!(pins.get(7).is_none());
        assert!(pins.get(8).is_none());
    }
}
