//! pNFS metadata server with the flexible-files layout (RFC 8881 §12,
//! RFC 8435), loosely coupled to NFSv3 data servers.
//!
//! - EXCHANGE_ID answers EXCHGID4_FLAG_USE_PNFS_MDS (RFC 8881 §13.1) and
//!   every file system reports `fs_layout_types` = LAYOUT4_FLEX_FILES.
//! - LAYOUTGET (§18.43) grants whole-file layouts, one mirror of one data
//!   server per file. Placement ([`placement`]): on first need, the data
//!   server with the fewest files, recorded (in the state directory) so
//!   it survives restarts. The data file is `<fsid>.<fileid>` (hexadecimal) in the
//!   data server's export root, created through the control path
//!   ([`control`]) with the synthetic owner and group (RFC 8435 §2.2) and
//!   mode 0660; clients write to it with AUTH_SYS as that uid and the
//!   anonymous stateid (§5.1: an NFSv3 data server has no stateids).
//! - GETDEVICEINFO (§18.40) gives each data server's `tcp` and, when it
//!   serves RPC-over-RDMA, `rdma` address, NFS version 3.
//! - LAYOUTCOMMIT (§18.42) sets the file's size and mtime at the metadata
//!   server from the client's last write offset and time.
//! - LAYOUTRETURN (§18.44) with the flex-files body (RFC 8435 §9.3): I/O
//!   errors logged as warnings, statistics at debug level; LAYOUTERROR
//!   and LAYOUTSTATS (RFC 7862 §15.6, §15.7) likewise.
//! - REMOVE of a file drops its layouts and removes its data file.
//!
//! - READ, WRITE and COMMIT through the metadata server, of any NFS
//!   version, reach the data file ([`proxy`]).
//! - CB_LAYOUTRECALL on truncation, chmod/chown, removal and the loss of
//!   a data server; fencing by rotating the synthetic ids when a
//!   read-write layout is recalled for a truncation or chmod/chown (I/O
//!   still in flight under it is refused) and when a recall is not
//!   answered within the lease ([`recall`]).
//!
//! - Mirroring (RFC 8435 §8, [`mirrors`]): with `mirrors` = 2 every file
//!   has a copy on two data servers, both in its layouts; a copy a client
//!   or the control path could not reach is marked stale, left out of
//!   layouts and rebuilt from the good one when its server answers.
//!
//! Not done yet (docs/pnfs.md): striping.

mod control;
mod events;
mod fencing;
mod holds;
mod layouts;
mod mirrors;
mod ops;
mod placement;
mod proxy;
mod recall;
mod written;

pub use proxy::Written;
pub use recall::{Why, DEFAULT_FENCE_WAIT, FENCE_IDS};

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Mutex;
use std::time::Duration;

use nfs::v4::Deviceid4;
use xdr::FixedOpaque;

use control::DsControl;
use layouts::LayoutTable;
use placement::{Mirror, Placement};

/// The synthetic uid and gid data files get by default (RFC 8435 §2.2).
pub const DEFAULT_SYNTHETIC_ID: u32 = 40001;
/// Layout stateids held at once by default.
pub const DEFAULT_MAX_LAYOUTS: usize = 65536;
/// Mirrors a file may have at most (RFC 8435 §8).
pub const MAX_MIRRORS: usize = 4;
/// How long a control-path call waits for a data server by default.
pub const DEFAULT_CONTROL_TIMEOUT: Duration = Duration::from_secs(60);
/// Stale mirrors rebuilt at once by default (`pnfs.rebuilds`).
pub const DEFAULT_MAX_REBUILDS: usize = 4;

/// Mode of data files (RFC 8435 §2.2: only the synthetic owner and group
/// may read and write them).
const DATA_FILE_MODE: u32 = 0o660;

/// One NFSv3 data server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataServer {
    /// Its NFS address over TCP (also where clients reach it).
    pub tcp: SocketAddr,
    /// Its RPC-over-RDMA address, if it serves one (advertised to clients
    /// with the `rdma` netid).
    pub rdma: Option<SocketAddr>,
    /// Its MOUNT port, when not the NFS port or the port mapper's answer.
    pub mount_port: Option<u16>,
    /// The export holding the data files.
    pub export: String,
    /// The address clients are told to reach it at, when not the one
    /// the metadata server uses (a data server behind a port forward);
    /// the ports stay the same.
    pub advertise: Option<std::net::IpAddr>,
}

/// Metadata server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdsConfig {
    /// The data servers, in device id order.
    pub data_servers: Vec<DataServer>,
    /// Synthetic uid of data files.
    pub uid: u32,
    /// Synthetic gid of data files.
    pub gid: u32,
    /// Layout stateids held at once (`pnfs.layouts`).
    pub max_layouts: usize,
    /// READ and WRITE sizes advertised per data server.
    pub io_size: u32,
    /// Copies of each new file, each on its own data server (RFC 8435
    /// §8; 1 to [`MAX_MIRRORS`], at most the number of data servers).
    pub mirrors: usize,
    /// Stale mirrors rebuilt at once (`pnfs.rebuilds`).
    pub max_rebuilds: usize,
    /// How often stale mirrors' data servers are probed.
    pub rebuild_poll: Duration,
    /// How long a recalled layout may stay unreturned before it is
    /// revoked and its data files fenced (RFC 8435 §2.2; `serve
    /// --mds-recall-timeout`). `None`: the lease (RFC 8881 §12.5.5.2).
    pub recall_timeout: Option<Duration>,
    /// How long a client that reported a data server unreachable
    /// (NFS4ERR_NXIO) gets NFS4ERR_LAYOUTUNAVAILABLE for files there
    /// (`serve --mds-ds-error-hold`; [`holds`]).
    pub ds_error_hold: Duration,
    /// How long a recall for a change of size or attributes waits for the
    /// fencing of its read-write layouts' data files before its callbacks
    /// go out regardless (limit `pnfs.fence_wait`; [`fencing`]).
    pub fence_wait: Duration,
    /// How long one control-path call to a data server (or its MOUNT)
    /// may wait for the answer; then the data server counts as
    /// unreachable (limit `pnfs.control_timeout`; [`control`]).
    pub control_timeout: Duration,
}

impl MdsConfig {
    /// Defaults over `data_servers`.
    pub fn new(data_servers: Vec<DataServer>) -> Self {
        Self {
            data_servers,
            uid: DEFAULT_SYNTHETIC_ID,
            gid: DEFAULT_SYNTHETIC_ID,
            max_layouts: DEFAULT_MAX_LAYOUTS,
            io_size: 1 << 20,
            mirrors: 1,
            max_rebuilds: DEFAULT_MAX_REBUILDS,
            rebuild_poll: Duration::from_secs(1),
            recall_timeout: None,
            ds_error_hold: Duration::from_secs(120),
            fence_wait: DEFAULT_FENCE_WAIT,
            control_timeout: DEFAULT_CONTROL_TIMEOUT,
        }
    }

    /// Copies per new file as configured, within 1 to [`MAX_MIRRORS`] and
    /// the number of data servers.
    fn copies(&self) -> usize {
        self.mirrors
            .clamp(1, MAX_MIRRORS)
            .min(self.data_servers.len().max(1))
    }
}

/// The metadata server's state: its data servers and the layouts out.
#[derive(Debug)]
pub struct Mds {
    cfg: MdsConfig,
    ds: Vec<DsControl>,
    /// Each data server's fencing queue ([`fencing`]).
    fencers: Vec<fencing::Fencer>,
    layouts: Mutex<LayoutTable>,
    /// Which data server holds each file.
    placement: Mutex<Placement>,
    /// Held while a WRITE through the metadata server grows its file.
    grow: tokio::sync::Mutex<()>,
    /// How layouts are recalled, once the NFSv4.1 service is bound.
    recaller: std::sync::RwLock<Option<recall::Recaller>>,
    /// Files whose stale mirror is being rebuilt (file system id, file id).
    rebuilding: Mutex<HashSet<(u64, u64)>>,
    /// Files whose stale mirror waits for their layouts to come back.
    held: Mutex<HashSet<(u64, u64)>>,
    /// The most rebuilds there ever were at once.
    peak_rebuilds: AtomicUsize,
    /// Whether the rebuilder task runs.
    rebuilder_on: AtomicBool,
    /// Held (shared) by WRITEs through the metadata server; a rebuild
    /// takes it once to let those under way finish.
    gate: tokio::sync::RwLock<()>,
    /// Files that may hold data written through a layout beyond the
    /// size known here ([`written`]).
    written: Mutex<written::Written>,
    /// Whether the sizes of the files marked by the previous instance
    /// are being (or were) recovered.
    recovering: AtomicBool,
    /// Data servers clients reported unreachable ([`holds`]).
    holds: Mutex<holds::Holds>,
}

impl Mds {
    /// A metadata server over `cfg.data_servers` (at least one) whose
    /// placements are kept in memory only (tests; a restart loses them).
    pub fn new(cfg: MdsConfig) -> Self {
        let p = Placement::memory(cfg.data_servers.len(), cfg.copies());
        Self::with_placement(cfg, p, written::Written::memory())
    }

    /// A metadata server whose placements are recorded in `state_dir`
    /// ([`placement`]), so files stay where they were across restarts.
    pub fn open(cfg: MdsConfig, state_dir: &std::path::Path) -> std::io::Result<Self> {
        let p = Placement::open(state_dir, cfg.data_servers.len(), cfg.copies())?;
        let w = written::Written::open(state_dir)?;
        Ok(Self::with_placement(cfg, p, w))
    }

    fn with_placement(cfg: MdsConfig, placement: Placement, written: written::Written) -> Self {
        let ds = cfg
            .data_servers
            .iter()
            .cloned()
            .map(|d| DsControl::new(d, cfg.control_timeout))
            .collect();
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u32);
        let layouts = Mutex::new(LayoutTable::new(cfg.max_layouts, boot));
        let fencers = cfg
            .data_servers
            .iter()
            .map(|_| fencing::Fencer::default())
            .collect();
        Self {
            cfg,
            ds,
            fencers,
            layouts,
            placement: Mutex::new(placement),
            grow: tokio::sync::Mutex::new(()),
            recaller: std::sync::RwLock::new(None),
            rebuilding: Mutex::new(HashSet::new()),
            held: Mutex::new(HashSet::new()),
            peak_rebuilds: AtomicUsize::new(0),
            rebuilder_on: AtomicBool::new(false),
            gate: tokio::sync::RwLock::new(()),
            written: Mutex::new(written),
            recovering: AtomicBool::new(false),
            holds: Mutex::new(holds::Holds::default()),
        }
    }

    /// Layout stateids held now.
    pub fn layouts_held(&self) -> usize {
        self.layouts.lock().map(|l| l.len()).unwrap_or(0)
    }

    /// Files placed on each data server.
    pub fn placed_counts(&self) -> Vec<u64> {
        self.placement
            .lock()
            .map(|p| p.counts().to_vec())
            .unwrap_or_default()
    }

    /// The copies of the file `attr`, if it was placed (a file never
    /// placed has no data file).
    fn placed(&self, attr: &nfs::v3::Fattr3) -> Option<Vec<Mirror>> {
        self.placement.lock().ok()?.get(attr.fsid, attr.fileid)
    }

    /// The copies of the file `attr`, placing it first ([`placement`]);
    /// `None` when the placement cannot be recorded.
    fn place(&self, attr: &nfs::v3::Fattr3) -> Option<Vec<Mirror>> {
        let mut p = self.placement.lock().ok()?;
        blocking(|| p.place(attr.fsid, attr.fileid))
            .map_err(|e| tracing::error!(error = %e, "pNFS placement not recorded"))
            .ok()
    }

    /// The file `attr` was removed: its placement goes.
    fn unplace(&self, attr: &nfs::v3::Fattr3) {
        self.unhold(attr);
        self.settle(attr.fsid, attr.fileid);
        if let Ok(mut p) = self.placement.lock() {
            if let Err(e) = blocking(|| p.remove(attr.fsid, attr.fileid)) {
                tracing::error!(error = %e, "pNFS placement removal not recorded");
            }
        }
    }
}

/// Runs a blocking file write (the placement log): on a multi-threaded
/// tokio runtime the worker hands its other tasks on first.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// The device id of data server `i`: "DS" and the index (RFC 8881
/// §12.2.10: unique and stable for the server's life).
fn device_id(i: usize) -> Deviceid4 {
    let mut d = [0u8; 16];
    d[..2].copy_from_slice(b"DS");
    d[12..].copy_from_slice(&(i as u32).to_be_bytes());
    FixedOpaque(d)
}

/// The data server index of a device id, if it is one of ours.
fn device_index(d: &Deviceid4) -> Option<usize> {
    if d.0[..2] != *b"DS" || d.0[2..12].iter().any(|&b| b != 0) {
        return None;
    }
    let mut n = [0u8; 4];
    n.copy_from_slice(&d.0[12..]);
    Some(u32::from_be_bytes(n) as usize)
}

/// The data file's name for the file `fileid` of file system `fsid`.
fn data_file_name(fsid: u64, fileid: u64) -> String {
    format!("{fsid:x}.{fileid:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_round_trip_and_foreign_ones_are_refused() {
        for i in [0, 1, 7, 1000] {
            assert_eq!(device_index(&device_id(i)), Some(i));
        }
        assert_eq!(device_index(&FixedOpaque([0; 16])), None);
        let mut d = device_id(1);
        d.0[5] = 1;
        assert_eq!(device_index(&d), None);
    }

    #[test]
    fn data_file_names_are_fsid_and_fileid_in_hex() {
        assert_eq!(data_file_name(0x10, 0xab), "10.ab");
    }
}
