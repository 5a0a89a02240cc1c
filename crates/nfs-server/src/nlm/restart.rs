//! NLM/NSM reboot recovery (XNFS NLM "Crash recovery", XNFS SM): the
//! server's NSM state number and the hosts that held NLM locks, kept in
//! the state directory as Linux's rpc.statd keeps `/var/lib/nfs/statd`.
//!
//! - `nsm-state`: the state number, odd while up; each start takes the
//!   next odd number above the last one (and above the time in seconds),
//!   written durably, so a client sees it grow across every restart.
//! - `nlm-hosts/`: one file per client host (named by the BLAKE3 hash of
//!   its `caller_name`) holding the name and the address its first lock
//!   came from, written (`fsync`, rename, directory `fsync`) before that
//!   LOCK's reply; removed when the host says it restarted (FREE_ALL,
//!   SM_NOTIFY) or when it is notified of ours (its reclaims record it
//!   again, so a second restart notifies it too). At most `max` hosts
//!   (the NLM host bound; limit `nlm.host_records`).
//! - After a start that found recorded hosts: a grace period (the server's
//!   grace time) in which only `reclaim` LOCKs are granted and other LOCKs
//!   and TESTs answer NLM4_DENIED_GRACE_PERIOD; and SM_NOTIFY
//!   (`mon_name` this host's name, the new state) sent to each recorded
//!   host's status monitor, found through its rpcbind ([`Restart::notify`]).

use std::collections::HashSet;
use std::fs::{self, DirBuilder, File};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs::nsm::{SmProc, StatChge, SM_PROGRAM, SM_V1};
use oncrpc::client::{ClientConfig, ClientTransport, ReplyHint, RpcCall};
use oncrpc::limits::Limit;
use oncrpc::msg::OpaqueAuth;
use oncrpc::tcp::{TcpClient, TcpConfig};
use xdr::Bounded;

use crate::statedir::{read_counter, remove_durably, write_durably};

static HOSTS: Limit = Limit::new("nlm.host_records");

const DIR: &str = "nlm-hosts";
const STATE: &str = "nsm-state";
const MAGIC: &[u8; 8] = b"nlmhost1";
/// Longest host name kept (`LM_MAXSTRLEN` is 1024).
const MAX_NAME: usize = 1024;

/// Where NLM hosts are recorded, and the grace period after a start.
#[derive(Debug)]
pub struct NlmRecovery {
    dir: Option<PathBuf>,
    recorded: Mutex<HashSet<Bytes>>,
    grace_until: Option<Instant>,
    max: usize,
}

/// What a start found: its state number and the hosts to notify.
#[derive(Debug)]
pub struct Restart {
    /// This instance's NSM state number.
    pub state: i32,
    hosts: Vec<(Bytes, IpAddr)>,
    dir: PathBuf,
}

impl NlmRecovery {
    /// No records, no grace period.
    pub fn none() -> Self {
        Self {
            dir: None,
            recorded: Mutex::new(HashSet::new()),
            grace_until: None,
            max: 0,
        }
    }

    /// Opens the records in `state_dir`: the hosts of the last instance
    /// get a grace period of `grace` to reclaim and are to be notified.
    pub fn open(state_dir: &Path, grace: Duration, max: usize) -> io::Result<(Self, Restart)> {
        let state = next_state(state_dir)?;
        let dir = state_dir.join(DIR);
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        File::open(state_dir)?.sync_all()?;
        let mut hosts = Vec::new();
        for ent in fs::read_dir(&dir)? {
            let p = ent?.path();
            if p.extension().is_some_and(|e| e == "tmp") {
                let _ = fs::remove_file(&p);
                continue;
            }
            match read_host(&p) {
                Ok(h) if hosts.len() < max => hosts.push(h),
                Ok(_) => HOSTS.trip(format_args!("NLM host record not loaded: {max} hosts")),
                Err(e) => tracing::warn!(record = %p.display(), error = %e, "bad NLM host record"),
            }
        }
        let grace_until = (!hosts.is_empty()).then(|| Instant::now() + grace);
        if !hosts.is_empty() {
            tracing::info!(
                hosts = hosts.len(),
                state,
                "NLM grace period; notifying hosts"
            );
        }
        // The last instance's hosts are not "recorded" by this one: their
        // records go when they are notified, and come back with their
        // reclaims (so that they are notified again after another restart).
        let rec = Self {
            dir: Some(dir.clone()),
            recorded: Mutex::new(HashSet::new()),
            grace_until,
            max,
        };
        Ok((rec, Restart { state, hosts, dir }))
    }

    /// When the grace period ends (none: there is none).
    pub fn grace_until(&self) -> Option<Instant> {
        self.grace_until
    }

    /// Whether the grace period runs.
    pub fn in_grace(&self) -> bool {
        self.grace_until.is_some_and(|t| Instant::now() < t)
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<Bytes>> {
        self.recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `host` (its lock came from `addr`) before its LOCK reply.
    pub(crate) fn record(&self, host: &Bytes, addr: IpAddr) {
        let Some(dir) = &self.dir else { return };
        if host.len() > MAX_NAME || self.set().contains(host) {
            return;
        }
        if self.set().len() >= self.max {
            HOSTS.trip(format_args!(
                "NLM host not recorded (not notified after a restart): {} hosts",
                self.max
            ));
            return;
        }
        match put_host(dir, host, addr) {
            Ok(()) => {
                self.set().insert(host.clone());
            }
            Err(e) => tracing::warn!(error = %e, "NLM host record not written"),
        }
    }

    /// `host` restarted (FREE_ALL, SM_NOTIFY): it holds no locks now.
    pub(crate) fn forget(&self, host: &[u8]) {
        let Some(dir) = &self.dir else { return };
        if self.set().remove(host) {
            if let Err(e) = remove_host(dir, host) {
                tracing::warn!(error = %e, "NLM host record not removed");
            }
        }
    }
}

impl Restart {
    /// Sends SM_NOTIFY (XNFS SM: `mon_name` = `name`, our new state) to
    /// the status monitor of every host recorded by the last instance,
    /// found through the rpcbind at the host's address and
    /// `rpcbind_port` (111); a notified host's record goes. Each host is
    /// tried a few times, 2 s apart; one that never answers keeps its
    /// record for the next start.
    pub async fn notify(self, name: Bytes, rpcbind_port: u16) {
        for (host, ip) in self.hosts {
            // Removed before the host can reclaim (its reclaim records it
            // again), put back if it cannot be told.
            let _ = remove_host(&self.dir, &host);
            let mut told = false;
            for _ in 0..3 {
                match notify_one(ip, rpcbind_port, &name, self.state).await {
                    Ok(()) => {
                        tracing::info!(host = %String::from_utf8_lossy(&host), %ip, "SM_NOTIFY sent");
                        told = true;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(host = %String::from_utf8_lossy(&host), %ip, error = %e, "SM_NOTIFY failed");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
            if !told {
                let _ = put_host(&self.dir, &host, ip);
            }
        }
    }
}

/// This host's name for `mon_name`.
pub fn host_name() -> Bytes {
    let n = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    match n.trim() {
        "" => Bytes::from_static(b"localhost"),
        n => Bytes::from(n.to_string()),
    }
}

/// One call over a new TCP connection to `addr`, 5 s to connect and 5 s
/// for the reply (AUTH_NONE).
pub(super) async fn call(
    addr: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: Bytes,
) -> io::Result<Bytes> {
    let t = Duration::from_secs(5);
    let rpc = tokio::time::timeout(
        t,
        TcpClient::connect(addr, 1, ClientConfig::default(), TcpConfig::default()),
    )
    .await
    .map_err(|_| io::Error::other("connect timed out"))?
    .map_err(|e| io::Error::other(format!("connect: {e}")))?;
    let c = RpcCall {
        prog,
        vers,
        proc_,
        cred: OpaqueAuth::NONE,
        args: xdr::XdrBuf::from_bytes(args),
        reply_hint: ReplyHint::default(),
    };
    tokio::time::timeout(t, rpc.call(c))
        .await
        .map_err(|_| io::Error::other("call timed out"))?
        .map_err(|e| io::Error::other(format!("{e}")))
}

/// PMAPPROC_GETPORT (RFC 1833 §3.2) of `prog` version `vers` over TCP
/// (protocol 6) from the rpcbind at `ip`:`rpcbind_port`.
pub(super) async fn getport(
    ip: IpAddr,
    rpcbind_port: u16,
    prog: u32,
    vers: u32,
) -> io::Result<u16> {
    let mut a = Vec::with_capacity(16);
    for v in [prog, vers, 6, 0] {
        a.extend_from_slice(&v.to_be_bytes());
    }
    let r = call(
        SocketAddr::new(ip, rpcbind_port),
        100_000,
        2,
        3,
        Bytes::from(a),
    )
    .await?;
    r.get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|p| (1..=65535).contains(p))
        .map(|p| p as u16)
        .ok_or_else(|| io::Error::other(format!("program {prog} not registered")))
}

async fn notify_one(ip: IpAddr, rpcbind_port: u16, name: &Bytes, state: i32) -> io::Result<()> {
    let port = getport(ip, rpcbind_port, SM_PROGRAM, SM_V1).await?;
    let args = StatChge {
        mon_name: Bounded(name.clone()),
        state,
    };
    call(
        SocketAddr::new(ip, port),
        SM_PROGRAM,
        SM_V1,
        SmProc::SM_NOTIFY.0,
        xdr::to_bytes(&args),
    )
    .await
    .map(|_| ())
}

fn path(dir: &Path, host: &[u8]) -> PathBuf {
    let h = blake3::hash(host);
    let hex: String = h.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(hex)
}

fn put_host(dir: &Path, host: &[u8], addr: IpAddr) -> io::Result<()> {
    let a = addr.to_string();
    let mut buf = Vec::new();
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&(a.len() as u32).to_be_bytes());
    buf.extend_from_slice(a.as_bytes());
    buf.extend_from_slice(host);
    write_durably(dir, &path(dir, host), &buf)
}

fn remove_host(dir: &Path, host: &[u8]) -> io::Result<()> {
    remove_durably(dir, &path(dir, host))
}

fn read_host(p: &Path) -> io::Result<(Bytes, IpAddr)> {
    let bad = |w: &str| io::Error::new(io::ErrorKind::InvalidData, w.to_string());
    let mut buf = Vec::new();
    File::open(p)?
        .take((12 + 64 + MAX_NAME) as u64 + 1)
        .read_to_end(&mut buf)?;
    if buf.len() < 12 || buf.len() > 12 + 64 + MAX_NAME || &buf[..8] != MAGIC {
        return Err(bad("not an NLM host record"));
    }
    let n = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let a = buf
        .get(12..12 + n)
        .and_then(|a| std::str::from_utf8(a).ok())
        .and_then(|a| a.parse::<IpAddr>().ok())
        .ok_or_else(|| bad("bad address"))?;
    Ok((Bytes::copy_from_slice(&buf[12 + n..]), a))
}

/// The next NSM state number: odd, above the last one kept in `dir` and
/// above the time in seconds; written durably.
fn next_state(dir: &Path) -> io::Result<i32> {
    let p = dir.join(STATE);
    let last: i32 = read_counter(&p)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() & 0x3fff_fffe)
        .unwrap_or(0) as i32;
    let state = (last.saturating_add(2) | 1).max(secs | 1);
    write_durably(dir, &p, format!("{state}\n").as_bytes())?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_kept_bounded_and_the_state_grows_odd() {
        let d = std::env::temp_dir().join(format!("nlm-restart-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let (r, first) = NlmRecovery::open(&d, Duration::from_secs(30), 2).unwrap();
        assert!(!r.in_grace());
        assert_eq!(first.state % 2, 1);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        r.record(&Bytes::from_static(b"a"), ip);
        r.record(&Bytes::from_static(b"b"), ip);
        let before = HOSTS.count();
        r.record(&Bytes::from_static(b"c"), ip);
        assert!(HOSTS.count() > before);
        r.forget(b"b");
        drop(r);
        let (r, second) = NlmRecovery::open(&d, Duration::from_secs(30), 2).unwrap();
        assert!(second.state > first.state && second.state % 2 == 1);
        assert!(r.in_grace());
        assert_eq!(second.hosts, vec![(Bytes::from_static(b"a"), ip)]);
        let _ = fs::remove_dir_all(&d);
    }
}
