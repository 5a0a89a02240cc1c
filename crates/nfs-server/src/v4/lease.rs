//! Kernel file leases for delegations (issue 19 item 2), as Linux's nfsd
//! takes one for each delegation it grants: RFC 8881 §10.4.1 requires the
//! server to recall a delegation before an access that conflicts with it,
//! and a process on the server host does not go through NFS. A read
//! delegation holds an `F_RDLCK` lease (broken when the file is opened
//! for writing or truncated), a write delegation an `F_WRLCK` one (broken
//! by any open). The kernel holds the opener back (up to
//! `/proc/sys/fs/lease-break-time`, 45 s by default) until the lease is
//! released, so the holder is told *before* the local access happens; the
//! lease is released when the delegation goes (DELEGRETURN, revocation,
//! the client's state purged): [`Lease`] is dropped with it.
//!
//! A lease break is signalled with SIGIO to the process. One thread of
//! the process (started with the first lease) waits for SIGIO through
//! tokio's signal handling and then asks each lease held (`F_GETLEASE`
//! answers the type a lease is being broken to) which ones are breaking;
//! each is reported once, to the callback given when it was taken.
//!
//! Leases know no owner in user space: the server's own open of a leased
//! file breaks its lease like anybody's. The holder's own I/O through the
//! server therefore uses the leased descriptor
//! ([`crate::storage::Storage::pin`]); other accesses through NFS recall
//! the delegation before they open ([`super::coherence`]).

mod sys;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) use sys::Kind;

type OnBreak = Arc<dyn Fn() + Send + Sync>;

struct Entry {
    fd: Arc<OwnedFd>,
    kind: Kind,
    /// The break was reported.
    fired: bool,
    on_break: OnBreak,
}

/// Leases held by this process, by id.
static HELD: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
/// The SIGIO listener, started once.
static LISTENER: OnceLock<Result<(), String>> = OnceLock::new();

/// A kernel lease on an open file, released when dropped.
pub(crate) struct Lease {
    id: u64,
    fd: Arc<OwnedFd>,
    kind: Kind,
}

impl core::fmt::Debug for Lease {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Lease {
    /// Takes a lease on `fd` (opened read-only for a read lease, read and
    /// write for a write lease); `on_break` runs once when a break of it
    /// starts. Fails when the kernel refuses (EAGAIN: the file is open in
    /// a way that conflicts; EACCES: not the file's owner and no
    /// CAP_LEASE; EINVAL: the file system has no leases or
    /// `fs.leases-enable` is 0) or SIGIO cannot be handled.
    pub(crate) fn take(
        fd: OwnedFd,
        write: bool,
        on_break: impl Fn() + Send + Sync + 'static,
    ) -> io::Result<Lease> {
        listener()?;
        let kind = if write { Kind::Write } else { Kind::Read };
        sys::set(fd.as_fd(), kind)?;
        let fd = Arc::new(fd);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let on_break: OnBreak = Arc::new(on_break);
        if let Ok(mut held) = HELD.lock() {
            held.insert(
                id,
                Entry {
                    fd: Arc::clone(&fd),
                    kind,
                    fired: false,
                    on_break,
                },
            );
        }
        // A break that started before the entry was in the table.
        scan();
        Ok(Lease { id, fd, kind })
    }

    /// The leased descriptor (the holder's own I/O uses it).
    pub(crate) fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut held) = HELD.lock() {
            held.remove(&self.id);
        }
        if let Err(e) = sys::set(self.fd.as_fd(), Kind::None) {
            tracing::debug!(error = %e, "releasing a lease");
        }
    }
}

/// Starts the SIGIO listener once; its error when it could not start.
fn listener() -> io::Result<()> {
    LISTENER
        .get_or_init(start)
        .clone()
        .map_err(io::Error::other)
}

fn start() -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("nfs4-leases".into())
        .spawn(move || listen(tx))
        .map_err(|e| e.to_string())?;
    rx.recv().map_err(|e| e.to_string())?
}

/// The listener thread: its own runtime, so it outlives any server's.
fn listen(ready: std::sync::mpsc::Sender<Result<(), String>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    rt.block_on(async move {
        let mut sigio = match signal(SignalKind::io()) {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e.to_string()));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        while sigio.recv().await.is_some() {
            scan();
        }
    });
}

/// Reports each lease whose break has started, once.
fn scan() {
    let breaking: Vec<OnBreak> = match HELD.lock() {
        Ok(mut held) => held
            .values_mut()
            .filter(|e| !e.fired && sys::get(e.fd.as_fd()).map_or(true, |k| k != e.kind))
            .map(|e| {
                e.fired = true;
                Arc::clone(&e.on_break)
            })
            .collect(),
        Err(_) => return,
    };
    for f in breaking {
        // The listener serves every lease of the process: a callback's
        // panic must not end it.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f())).is_err() {
            tracing::error!("a lease break callback panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    fn open(p: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        rustix::fs::open(p, flags | OFlags::CLOEXEC, Mode::from_raw_mode(0o644))
    }

    fn file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("nfs-lease-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"old").unwrap();
        p
    }

    fn lease(p: &Path, write: bool) -> (Lease, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let l = Lease::take(open(p, flags).unwrap(), write, move || {
            let _ = tx.lock().unwrap().send(());
        })
        .unwrap();
        (l, rx)
    }

    #[test]
    fn a_write_open_breaks_a_read_lease_and_waits_for_its_release() {
        let p = file("read");
        let before = std::fs::read(&p).unwrap();
        let (l, rx) = lease(&p, false);
        // Another reader does not break it.
        drop(open(&p, OFlags::RDONLY).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        // A writer that will not wait is refused, and the break starts.
        assert_eq!(
            open(&p, OFlags::WRONLY | OFlags::NONBLOCK).unwrap_err(),
            rustix::io::Errno::AGAIN
        );
        rx.recv_timeout(Duration::from_secs(5)).expect("break seen");
        // A writer that waits gets in once the lease is released, not
        // before (however late its thread runs on a loaded machine).
        let p2 = p.clone();
        let (started, go) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            started.send(()).unwrap();
            let f = open(&p2, OFlags::WRONLY).unwrap();
            rustix::io::write(&f, b"new").unwrap();
        });
        go.recv().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!writer.is_finished(), "the writer waits for the release");
        assert_eq!(std::fs::read(&p).unwrap(), before, "nothing written yet");
        drop(l);
        writer.join().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn a_read_open_breaks_a_write_lease_once() {
        let p = file("write");
        let (l, rx) = lease(&p, true);
        // The holder's own descriptor (and dups of it) do not break it.
        let dup = rustix::io::fcntl_dupfd_cloexec(l.fd().as_fd(), 0).unwrap();
        rustix::io::pwrite(&dup, b"mine", 0).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        assert_eq!(
            open(&p, OFlags::RDONLY | OFlags::NONBLOCK).unwrap_err(),
            rustix::io::Errno::AGAIN
        );
        rx.recv_timeout(Duration::from_secs(5)).expect("break seen");
        // A second opener does not report it again.
        let _ = open(&p, OFlags::RDONLY | OFlags::NONBLOCK);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop((l, dup));
        assert!(open(&p, OFlags::RDONLY | OFlags::NONBLOCK).is_ok());
    }

    #[test]
    fn conflicting_opens_refuse_a_lease() {
        let p = file("refused");
        let _writer = open(&p, OFlags::WRONLY).unwrap();
        let r = Lease::take(open(&p, OFlags::RDONLY).unwrap(), false, || {});
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        let r = Lease::take(open(&p, OFlags::RDWR).unwrap(), true, || {});
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    }

    /// The server's own descriptors of a file (kept for NFSv3 READ and
    /// WRITE, `localfs/files.rs`) would make the kernel refuse a
    /// delegation's lease: the descriptor a lease is taken on is opened
    /// with them closed.
    #[test]
    fn the_servers_kept_files_give_way_to_a_lease() {
        use crate::storage::Storage;
        use nfs::v3::{Fattr3, Filename3, StableHow};
        let p = file("kept");
        let dir = p.parent().unwrap();
        let lfs = crate::localfs::LocalFs::new(dir, false).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let fh = rt
            .block_on(lfs.lookup(&lfs.root(), &Filename3(bytes::Bytes::from_static(b"f"))))
            .unwrap();
        let allow = |_: &Fattr3| Ok(());
        let w = rt.block_on(lfs.write_checked(&fh, 0, b"new", StableHow::UNSTABLE, &allow));
        assert_eq!(w.written, Ok(StableHow::UNSTABLE));
        let r = rt.block_on(lfs.read_checked(&fh, 0, 3, &allow, false));
        assert!(r.data.is_ok());
        // Kept open: a lease on another descriptor is refused.
        let r = Lease::take(open(&p, OFlags::RDONLY).unwrap(), false, || {});
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        // Through `open_file`, as a delegation takes it: granted, and a
        // write lease too.
        let f = lfs.open_file(&fh, true).unwrap();
        let l = Lease::take(OwnedFd::from(f), true, || {}).expect("lease granted");
        drop(l);
    }
}
