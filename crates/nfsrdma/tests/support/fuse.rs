//! FUSE mounts for the `nfsrdma mount` tests: whether FUSE is usable
//! here, `nfsrdma mount --foreground` as a child unmounted on drop, and
//! small helpers to run tools on the mount.
//!
//! Where FUSE is unavailable (no /dev/fuse, no fusermount3 for a non-root
//! user, or mounting refused) a mount prints a loud `SKIPPED:` line and
//! returns `None`.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{Server, TempDir};

/// The `nfsrdma` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

impl Server {
    pub(crate) fn fuse_url(&self) -> String {
        format!("nfs://127.0.0.1:{}{}", self.port, self.dir().display())
    }

    /// NFS over RPC-over-RDMA, MOUNT over TCP.
    pub(crate) fn fuse_rdma_url(&self) -> String {
        format!(
            "nfs+rdma://127.0.0.1:{}{}?mountport={}",
            self.rdma_port,
            self.dir().display(),
            self.port
        )
    }
}

/// Why FUSE cannot be used here, if it cannot.
pub(crate) fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    let fusermount = Command::new("fusermount3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !root && !fusermount {
        return Some("not root and no fusermount3".into());
    }
    None
}

pub(crate) fn skip(why: &str) {
    eprintln!("SKIPPED: FUSE mount test not run: {why} (install fuse3 and provide /dev/fuse)");
}

/// Whether a failed mount's message says FUSE mounting is not allowed
/// here (rather than that something is broken).
pub(crate) fn refused(msg: &str) -> bool {
    [
        "Operation not permitted",
        "Permission denied",
        "No such device",
        "fusermount",
    ]
    .iter()
    .any(|s| msg.contains(s))
}

pub(crate) fn is_mounted(dir: &Path) -> bool {
    let want = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
    })
}

/// A mount of the server's export, unmounted (and its process reaped)
/// when dropped, whatever happened.
pub(crate) struct Mounted {
    pub(crate) dir: TempDir,
    pub(crate) child: Option<Child>,
    pub(crate) log: PathBuf,
}

impl Mounted {
    pub(crate) fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.0.join(rel)
    }

    /// The process id of the mount.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.dir.0) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.dir.0)
                .output();
            if is_mounted(&self.dir.0) {
                let _ = Command::new("umount").arg("-l").arg(&self.dir.0).output();
            }
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !matches!(c.try_wait(), Ok(Some(_)) | Err(_)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Mounts `srv`'s export with `nfsrdma mount --foreground extra...`;
/// `None` (after a SKIPPED line) when FUSE refuses.
pub(crate) fn mount(srv: &Server, tag: &str, extra: &[&str]) -> Option<Mounted> {
    mount_url(&srv.fuse_url(), tag, extra)
}

pub(crate) fn mount_url(url: &str, tag: &str, extra: &[&str]) -> Option<Mounted> {
    if let Some(why) = fuse_unavailable() {
        skip(&why);
        return None;
    }
    let dir = TempDir::new(tag);
    let log = std::env::temp_dir().join(format!("nfsrdma-fuse-{tag}-{}.log", std::process::id()));
    let child = Command::new(BIN)
        .arg("mount")
        .arg("--foreground")
        .args(extra)
        .arg(url)
        .arg(&dir.0)
        .env(
            "RUST_LOG",
            std::env::var("NFSRDMA_TEST_MOUNT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("start nfsrdma mount");
    let mut m = Mounted {
        dir,
        child: Some(child),
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_mounted(&m.dir.0) {
        let exited = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            let log = m.log();
            if refused(&log) {
                skip(&format!("mounting was refused: {}", log.trim()));
                return None;
            }
            panic!("nfsrdma mount exited ({status}) without mounting:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "mount did not appear in 10 s:\n{}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(m)
}

pub(crate) fn sh(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {prog}: {e}"))
}

/// Runs a tool and requires success; returns its standard output.
pub(crate) fn ok(prog: &str, args: &[&str]) -> String {
    let out = sh(prog, args);
    assert!(
        out.status.success(),
        "{prog} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Requires the file at `path` to hold exactly `want`; reports the size
/// and first difference rather than the bytes.
pub(crate) fn assert_holds(path: &Path, want: &[u8]) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{}: {} bytes, want {}; first difference at {at:?}",
            path.display(),
            got.len(),
            want.len()
        );
    }
}

/// Deterministic bytes that are not a short repeating pattern.
pub(crate) fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Whether the tests run as root (needed to switch users and for
/// `allow_other`).
pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `sh -c script` as `uid` (gid the same) with supplementary
/// `groups` (none when empty), through util-linux `setpriv`.
pub(crate) fn as_user(uid: u32, groups: &[u32], script: &str) -> Output {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"));
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(u32::to_string).collect();
        c.arg(format!("--groups={}", g.join(",")));
    }
    c.args(["sh", "-c", script])
        .output()
        .expect("running setpriv")
}

/// Bytes as text, for messages.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
