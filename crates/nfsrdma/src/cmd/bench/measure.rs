//! The embedded server process, CPU clocks, and one timed transfer.

use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use nfs_client::nfs::v3::NfsFh3;
use nfs_client::Mount;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use oncrpc::ClientTransport;

use super::report::Op;
use super::SOURCE_CHUNK;
use crate::device::DeviceChoice;
use crate::url::{NfsUrl, Scheme};

/// `nfsrdma serve` on a temporary directory (127.0.0.1 by default) with ephemeral
/// ports, killed (and its directory removed) on drop.
pub(super) struct ServerChild {
    child: Child,
    export: PathBuf,
    nfs: SocketAddr,
    mount: SocketAddr,
    rdma: SocketAddr,
    device: DeviceChoice,
}

/// The address after `label` in serve's "serving DIR: nfs over tcp A,
/// mount over tcp B, nfs over rdma C" line.
fn addr_after(line: &str, label: &str) -> Option<SocketAddr> {
    let rest = line.split(label).nth(1)?;
    rest.split(',').next()?.trim().parse().ok()
}

impl ServerChild {
    /// Starts the server on `addr` with RDMA on `device` and waits for its
    /// "serving" line.
    pub(super) async fn start(addr: IpAddr, device: &DeviceChoice) -> anyhow::Result<Self> {
        let export = std::env::temp_dir().join(format!("nfsrdma-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&export);
        std::fs::create_dir_all(&export)
            .with_context(|| format!("creating {}", export.display()))?;
        let export = std::fs::canonicalize(&export)?;
        let exe = std::env::current_exe().context("locating the nfsrdma binary")?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg(&export)
            .arg("--state-dir")
            .arg(export.with_extension("state"))
            .arg("--addr")
            .arg(addr.to_string())
            .arg("--rdma-device")
            .arg(device.to_string())
            .args(["--port", "0", "--rdma-port", "0"])
            .args(["--mount-port", "0"])
            // The bench writes its own temporary directory as the user
            // that created it, root included.
            .arg("--no-root-squash")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting nfsrdma serve")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        });
        let line = match tokio::time::timeout(Duration::from_secs(30), line).await {
            Ok(Ok(Ok(l))) => l,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("nfsrdma serve did not report its ports");
            }
        };
        let ports = (
            addr_after(&line, "nfs over tcp "),
            addr_after(&line, "mount over tcp "),
            addr_after(&line, "nfs over rdma "),
        );
        let (Some(nfs), Some(mount), Some(rdma)) = ports else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("unexpected line from nfsrdma serve: {line:?}");
        };
        Ok(Self {
            child,
            export,
            nfs,
            mount,
            rdma,
            device: device.clone(),
        })
    }

    /// The exported directory.
    pub(super) fn export(&self) -> &Path {
        &self.export
    }

    /// The server's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL of the export over `scheme`.
    pub(super) fn url(&self, scheme: Scheme) -> NfsUrl {
        let port = match scheme {
            Scheme::Tcp => self.nfs.port(),
            Scheme::Rdma => self.rdma.port(),
        };
        NfsUrl {
            scheme,
            host: self.nfs.ip().to_string(),
            nfs_port: Some(port),
            mount_port: Some(self.mount.port()),
            path: self.export.to_string_lossy().into_owned(),
            trailing_slash: true,
            crc: false,
            rdma_v2: false,
            nfs4_minor: None,
            device: self.device.clone(),
            xprtsec: crate::url::XprtSec::None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            sec: None,
            nconnect: 1,
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.export);
        let _ = std::fs::remove_dir_all(self.export.with_extension("state"));
    }
}

/// CPU time of this process (the client) and of the server process.
pub(super) struct Clocks {
    server: Option<ClockId>,
}

fn seconds(clock: ClockId) -> anyhow::Result<f64> {
    let t = clock_gettime(clock).context("reading a CPU clock")?;
    Ok(t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

impl Clocks {
    /// Clocks for this process and, when known, the server's `pid`.
    pub(super) fn new(server: Option<u32>) -> anyhow::Result<Self> {
        let server = match server {
            Some(pid) => {
                let pid = i32::try_from(pid).context("server pid")?;
                Some(ClockId::pid_cpu_clock_id(Pid::from_raw(pid)).context("server CPU clock")?)
            }
            None => None,
        };
        Ok(Self { server })
    }

    /// (client, server) CPU seconds so far.
    pub(super) fn now(&self) -> anyhow::Result<(f64, Option<f64>)> {
        let client = seconds(ClockId::CLOCK_PROCESS_CPUTIME_ID)?;
        let server = self.server.map(seconds).transpose()?;
        Ok((client, server))
    }
}

/// The 1-minute load average from `/proc/loadavg`, when there is one.
pub(super) fn load1() -> Option<f64> {
    parse_load1(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The first field of a `/proc/loadavg` line.
fn parse_load1(line: &str) -> Option<f64> {
    line.split_ascii_whitespace().next()?.parse().ok()
}

/// One timed transfer.
pub(super) struct Sample {
    pub(super) bytes: u64,
    pub(super) seconds: f64,
    pub(super) client_cpu: f64,
    pub(super) server_cpu: Option<f64>,
}

/// Reads the whole file, or writes `size` bytes to it (UNSTABLE WRITEs
/// and COMMIT), with the mount's current read size and in-flight count,
/// timing it and the CPU of both sides.
pub(super) async fn point<T: ClientTransport>(
    m: &Mount<T>,
    fh: &NfsFh3,
    op: Op,
    size: u64,
    clocks: &Clocks,
) -> anyhow::Result<Sample> {
    let source = match op {
        Op::Write => Some(source_chunk()),
        Op::Read | Op::RandomRead | Op::Meta => None,
    };
    let (c0, s0) = clocks.now()?;
    let t0 = Instant::now();
    let bytes = match &source {
        None => m.read_to(fh, 0, |_| Ok(())).await?,
        Some(src) => write_from(m, fh, size, src).await?,
    };
    let secs = t0.elapsed().as_secs_f64();
    let (c1, s1) = clocks.now()?;
    if op == Op::Read && bytes != size {
        bail!("read {bytes} bytes of a {size}-byte file");
    }
    Ok(Sample {
        bytes,
        seconds: secs,
        client_cpu: c1 - c0,
        server_cpu: s0.zip(s1).map(|(a, b)| b - a),
    })
}

/// The bytes written: a fixed pattern, shared by every WRITE.
pub(super) fn source_chunk() -> Bytes {
    Bytes::from(
        (0..SOURCE_CHUNK)
            .map(|i| (i.wrapping_mul(31) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

async fn write_from<T: ClientTransport>(
    m: &Mount<T>,
    fh: &NfsFh3,
    size: u64,
    src: &Bytes,
) -> anyhow::Result<u64> {
    let mut w = m.writer(fh, 0);
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(src.len());
        w.write(src.slice(..n)).await?;
        left -= n as u64;
    }
    Ok(w.finish().await?.bytes)
}

/// Writes `size` bytes to a remote file (untimed set-up for external
/// servers).
pub(super) async fn write_remote<T: ClientTransport>(
    m: &Mount<T>,
    fh: &NfsFh3,
    size: u64,
) -> anyhow::Result<()> {
    write_from(m, fh, size, &source_chunk()).await.map(|_| ())
}

/// Writes `size` bytes of the pattern to a local file.
pub(super) fn write_local_file(path: &Path, size: u64) -> anyhow::Result<()> {
    let src = source_chunk();
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(src.len());
        f.write_all(&src[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_line_gives_every_address() {
        let line = "serving /tmp/x: nfs over tcp 127.0.0.1:40001, mount over tcp 127.0.0.1:40002, nfs over rdma 127.0.0.1:40003\n";
        assert_eq!(
            addr_after(line, "nfs over tcp "),
            Some("127.0.0.1:40001".parse().unwrap())
        );
        assert_eq!(
            addr_after(line, "mount over tcp "),
            Some("127.0.0.1:40002".parse().unwrap())
        );
        assert_eq!(
            addr_after(line, "nfs over rdma "),
            Some("127.0.0.1:40003".parse().unwrap())
        );
        assert_eq!(
            addr_after("serving /x: nfs over tcp junk", "nfs over tcp "),
            None
        );
    }

    #[test]
    fn load_average_is_the_first_loadavg_field() {
        assert_eq!(parse_load1("9.12 7.50 3.01 4/812 12345\n"), Some(9.12));
        assert_eq!(parse_load1(""), None);
        assert_eq!(parse_load1("x 1 2"), None);
        if std::path::Path::new("/proc/loadavg").exists() {
            assert!(load1().is_some_and(|l| l >= 0.0));
        }
    }

    #[test]
    fn this_process_cpu_clock_advances() {
        let clocks = Clocks::new(Some(std::process::id())).unwrap();
        let (c0, s0) = clocks.now().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let (c1, s1) = clocks.now().unwrap();
        assert!(c1 > c0);
        assert!(s1.unwrap() > s0.unwrap());
    }
}
