//! `nfsrdma serve` as a child process, for the hostile-client tests: on
//! free loopback ports (NFS, MOUNT, RDMA), its own export and state
//! directory, standard error in a log file; killed and cleaned up on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// The `nfsrdma` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

/// A port free on 127.0.0.1 when asked.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("an ephemeral port")
}

/// A running `nfsrdma serve` child.
pub(crate) struct ServeChild {
    pub(crate) child: Child,
    pub(crate) nfs: u16,
    pub(crate) mnt: u16,
    pub(crate) rdma: u16,
    pub(crate) export: TempDir,
    log: PathBuf,
}

impl ServeChild {
    /// Fills a fresh export with `populate`, then serves it with `extra`
    /// arguments and waits until all three ports listen. A port picked
    /// free can be taken before the child binds it (other tests open
    /// thousands of client connections from ephemeral ports): a child that
    /// exits before listening is started again on new ports, twice at
    /// most.
    pub(crate) fn start(tag: &str, extra: &[&str], populate: impl FnOnce(&Path)) -> Self {
        let export = TempDir::new(tag);
        populate(&export.0);
        let log = export.0.with_extension("log");
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        for attempt in 0..3 {
            let (nfs, mnt, rdma) = (free_port(), free_port(), free_port());
            let mut child = Command::new(BIN)
                .arg("serve")
                .arg(&export.0)
                .arg("--state-dir")
                .arg(export.0.with_extension("state"))
                .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
                .args(["--mount-port", &mnt.to_string()])
                .args(["--rdma-port", &rdma.to_string()])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("spawn serve");
            if wait_listening(&mut child, [nfs, mnt, rdma], &read_log) {
                return Self {
                    child,
                    nfs,
                    mnt,
                    rdma,
                    export,
                    log,
                };
            }
            assert!(
                attempt < 2,
                "serve exited before listening:\n{}",
                read_log()
            );
        }
        unreachable!("the last attempt returns or panics")
    }

    /// A shell that, when told ([`Restarter::restart`]), starts this
    /// server again on the same ports, export and state directory with
    /// `extra` arguments. Made before the test opens files on a mount of
    /// the server: a process forked while a FUSE file is open closes it
    /// at exec, and that FLUSH would wait for the server being started.
    pub(crate) fn restarter(&self, extra: &[&str]) -> Restarter {
        let export = self.export.0.clone();
        let child = Command::new("sh")
            .args(["-c", "read _ && exec \"$0\" \"$@\"", BIN, "serve"])
            .arg(&export)
            .arg("--state-dir")
            .arg(export.with_extension("state"))
            .args(["--addr", "127.0.0.1", "--port", &self.nfs.to_string()])
            .args(["--mount-port", &self.mnt.to_string()])
            .args(["--rdma-port", &self.rdma.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .expect("spawn the restarter");
        Restarter(Some(child))
    }

    /// Stops the server (SIGTERM) and has `r` start it again; waits until
    /// it listens.
    pub(crate) fn restart(&mut self, r: &mut Restarter) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
        let mut child = r.0.take().expect("one restart per restarter");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"go\n").unwrap();
        }
        let log = self.log.clone();
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let up = wait_listening(&mut child, [self.nfs, self.mnt, self.rdma], &read_log);
        self.child = child;
        assert!(up, "serve exited before listening again:\n{}", read_log());
    }

    /// The URL of `file` in the export: `nfs` (TCP) or `nfs+rdma`.
    pub(crate) fn url(&self, scheme: &str, file: &str) -> String {
        let port = if scheme == "nfs" { self.nfs } else { self.rdma };
        format!(
            "{scheme}://127.0.0.1:{port}{}/{file}?mountport={}",
            self.export.0.display(),
            self.mnt
        )
    }

    /// Whether the server is still running.
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Panics, with the log, if the server has exited.
    pub(crate) fn assert_alive(&mut self) {
        let status = self.child.try_wait().unwrap();
        assert!(
            status.is_none(),
            "server exited: {status:?}\n{}",
            self.log()
        );
    }

    /// A memory figure of the server from /proc (`VmRSS`, `VmData`), in KiB.
    pub(crate) fn vm_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect(field)
    }

    /// Resident memory of the server, in KiB.
    pub(crate) fn rss_kib(&self) -> u64 {
        self.vm_kib("VmRSS")
    }

    /// What the server wrote to standard error so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to `t` for `needle` in the server's log.
    pub(crate) fn logged_within(&self, needle: &str, t: Duration) -> bool {
        let end = Instant::now() + t;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `nfsrdma ls` of the export's root over `scheme` succeeds and lists
    /// `data`. A server held by an attack (a listener
    /// ended, places all taken, a task blocked) leaves the client refused
    /// or waiting for the attack's own timeouts (minutes: the idle
    /// timeout is 6): an `ls` not done within [`SERVED_WITHIN`] fails.
    /// No tighter wall-clock bound is asserted here: process start alone
    /// passed a second at load 14; a test whose attack holds places for
    /// less checks that they are still held once the client was served.
    pub(crate) fn assert_lists_data(&self, scheme: &str) {
        let url = self.url(scheme, "");
        let url = url.replacen("/?", "?", 1);
        let start = Instant::now();
        let mut child = Command::new(BIN)
            .args(["ls", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > SERVED_WITHIN {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ls {url} not served in {SERVED_WITHIN:?}\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "ls {url}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("data"));
    }
}

/// How long [`ServeChild::assert_lists_data`] waits for a normal client
/// to be served: far beyond a loaded machine's `ls` (seconds at load 27)
/// and far below the 6-minute idle timeout that would free an attacker's
/// places.
pub(crate) const SERVED_WITHIN: Duration = Duration::from_secs(60);

/// Waits until `ports` listen: true when they do, false when `child`
/// exited first (a port taken meanwhile); panics after 20 s per port.
fn wait_listening(child: &mut Child, ports: [u16; 3], log: &dyn Fn() -> String) -> bool {
    for port in ports {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "server never listened on {port}:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    true
}

/// A server start held back until [`ServeChild::restart`].
pub(crate) struct Restarter(Option<Child>);

impl Drop for Restarter {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.export.0.with_extension("state"));
        let _ = std::fs::remove_file(&self.log);
    }
}
