//! The metadata server's control path to its NFSv3 data servers (RFC 8435
//! §2.2, loosely coupled): through the project's own NFSv3 client
//! ([`nfs_client`]) over TCP, it creates each file's data file with the
//! synthetic owner, group and mode, and removes it with the file.
//!
//! The control path mounts the data server's export with AUTH_SYS as
//! root, so the export must let the metadata server's address in with
//! `no_root_squash` (it sets the data file's owner to the synthetic uid).
//! Connections are opened on first use and reopened after a failure.
//! Each call, and the MOUNT of a connection, waits for the data server at
//! most `MdsConfig::control_timeout` (limit `pnfs.control_timeout`); one
//! that does not answer by then counts as unreachable.
//!
//! It also carries READ, WRITE and COMMIT of clients that do their I/O
//! through the metadata server ([`super::proxy`]); data file handles are
//! kept (at most [`MAX_HANDLES`]) so that such I/O costs one call to the
//! data server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use nfs::v3::{Createhow3, NfsFh3, Nfsstat3, Sattr3, StableHow};
use nfs_client::{connect_tcp, Error, Mount, TcpOptions, TcpTarget};
use oncrpc::client::RpcError;
use oncrpc::limits::Limit;
use tokio::sync::Mutex;

use super::DataServer;

/// How long the control path waits to connect to a data server.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A data server did not answer a control-path call (or its MOUNT)
/// within the control timeout: the connection is dropped and the data
/// server treated as unreachable.
static CONTROL_TIMEOUT: Limit = Limit::new("pnfs.control_timeout");

/// Data file handles kept per data server; past it the cache is
/// emptied and refilled by LOOKUPs.
pub(crate) const MAX_HANDLES: usize = 4096;

/// One data server as the control path reaches it.
#[derive(Debug)]
pub(crate) struct DsControl {
    spec: DataServer,
    /// How long one call (or the MOUNT) may wait for the data server.
    timeout: std::time::Duration,
    mount: Mutex<Option<std::sync::Arc<Mount<nfs_client::TcpConns>>>>,
    handles: std::sync::Mutex<HashMap<String, DataFh>>,
    /// The largest READ and WRITE the data server takes (FSINFO `rtmax`,
    /// `wtmax`, RFC 1813 §3.3.19), once the control path has mounted it;
    /// 0 while unknown.
    rtmax: AtomicU32,
    wtmax: AtomicU32,
}

/// A data file as the control path knows it: its handle and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataFh {
    pub(crate) fh: NfsFh3,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// A WRITE or COMMIT done at a data server: how stable the data is and
/// the data server's write verifier (RFC 1813 §3.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DsWritten {
    pub(crate) how: StableHow,
    pub(crate) verf: [u8; 8],
}

/// Why the control path failed: the data server's NFS status, or that
/// it could not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ControlError {
    /// The data server answered with this status.
    Nfs(Nfsstat3),
    /// It could not be reached (or answered nonsense).
    Unreachable,
}

impl DsControl {
    pub(crate) fn new(spec: DataServer, timeout: std::time::Duration) -> Self {
        Self {
            spec,
            timeout,
            mount: Mutex::new(None),
            handles: std::sync::Mutex::new(HashMap::new()),
            rtmax: AtomicU32::new(0),
            wtmax: AtomicU32::new(0),
        }
    }

    /// The READ and WRITE sizes to advertise for this data server: `io`
    /// capped by what it said it takes (a stock knfsd may take less than
    /// 1 MiB; Linux then refuses the larger calls outright).
    pub(crate) fn io_sizes(&self, io: u32) -> (u32, u32) {
        let cap = |m: &AtomicU32| match m.load(Ordering::Relaxed) {
            0 => io,
            m => io.min(m),
        };
        (cap(&self.rtmax), cap(&self.wtmax))
    }

    /// Mounts the data server if its FSINFO limits are not known yet
    /// (a GETDEVICEINFO before any LAYOUTGET, e.g. after a restart of the
    /// metadata server); one that cannot be reached stays unknown.
    pub(crate) async fn learn_limits(&self) {
        if self.wtmax.load(Ordering::Relaxed) == 0 {
            let _ = self.mount().await;
        }
    }

    /// Records the data server's FSINFO limits.
    pub(crate) fn set_limits(&self, rtmax: u32, wtmax: u32) {
        self.rtmax.store(rtmax, Ordering::Relaxed);
        self.wtmax.store(wtmax, Ordering::Relaxed);
    }

    /// One control-path call, at most the control timeout: the control
    /// path's TCP connection has no call timeout of its own, and a data
    /// server that keeps it and never answers would hold the caller (a
    /// client's SETATTR, LAYOUTGET or I/O through the metadata server,
    /// the fencing task) for good. A call that times out fails as
    /// unreachable ([`Self::failed`] drops the connection).
    async fn call<T>(
        &self,
        f: impl core::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r,
            Err(_) => {
                CONTROL_TIMEOUT.trip(format_args!(
                    "pNFS data server {} did not answer a control-path call within {:?}",
                    self.spec.tcp, self.timeout
                ));
                Err(Error::Rpc(RpcError::TimedOut))
            }
        }
    }

    fn cached(&self, name: &str) -> Option<DataFh> {
        self.handles.lock().ok()?.get(name).cloned()
    }

    fn keep(&self, name: &str, d: &DataFh) {
        if let Ok(mut h) = self.handles.lock() {
            if h.len() >= MAX_HANDLES {
                h.clear();
            }
            h.insert(name.to_owned(), d.clone());
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut h) = self.handles.lock() {
            h.remove(name);
        }
    }

    /// The data file's handle, from the cache or a LOOKUP; `None` when
    /// it does not exist.
    async fn handle(
        &self,
        m: &Mount<nfs_client::TcpConns>,
        name: &str,
    ) -> Result<Option<DataFh>, ControlError> {
        if let Some(d) = self.cached(name) {
            return Ok(Some(d));
        }
        match self.call(m.client().lookup(m.root(), name)).await {
            Ok(ok) => {
                let a = match ok.obj_attributes {
                    Some(a) => a,
                    None => match self.call(m.client().getattr(&ok.object)).await {
                        Ok(a) => a,
                        Err(e) => return Err(self.failed(e).await),
                    },
                };
                let d = DataFh {
                    fh: ok.object,
                    uid: a.uid,
                    gid: a.gid,
                };
                self.keep(name, &d);
                Ok(Some(d))
            }
            Err(Error::Nfs {
                status: Nfsstat3::NFS3ERR_NOENT,
                ..
            }) => Ok(None),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// A data server call on the data file's handle that answered STALE
    /// (the file was replaced behind the cache): the handle is dropped.
    fn stale(&self, name: &str, e: &Error) -> bool {
        let stale = matches!(
            e,
            Error::Nfs {
                status: Nfsstat3::NFS3ERR_STALE | Nfsstat3::NFS3ERR_BADHANDLE,
                ..
            }
        );
        if stale {
            self.forget(name);
        }
        stale
    }

    /// READ (RFC 1813 §3.3.6) of the data file: the bytes and whether
    /// they reach its end, or `None` when there is no data file.
    pub(crate) async fn read(
        &self,
        name: &str,
        offset: u64,
        count: u32,
    ) -> Result<Option<(Bytes, bool)>, ControlError> {
        let m = self.mount().await?;
        for _ in 0..2 {
            let Some(d) = self.handle(&m, name).await? else {
                return Ok(None);
            };
            match self.call(m.client().read(&d.fh, offset, count)).await {
                Ok(r) => return Ok(Some((r.data.0, r.eof))),
                Err(e) if self.stale(name, &e) => continue,
                Err(e) => return Err(self.failed(e).await),
            }
        }
        Err(ControlError::Nfs(Nfsstat3::NFS3ERR_STALE))
    }

    /// WRITE (RFC 1813 §3.3.7) to the data file `fh`.
    pub(crate) async fn write(
        &self,
        name: &str,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<DsWritten, ControlError> {
        let m = self.mount().await?;
        match self.call(m.client().write(fh, offset, data, stable)).await {
            Ok(r) => Ok(DsWritten {
                how: r.committed,
                verf: r.verf.0,
            }),
            Err(e) => {
                self.stale(name, &e);
                Err(self.failed(e).await)
            }
        }
    }

    /// COMMIT (RFC 1813 §3.3.21) of the whole data file; `None` when
    /// there is no data file (nothing to flush).
    pub(crate) async fn commit(&self, name: &str) -> Result<Option<[u8; 8]>, ControlError> {
        let m = self.mount().await?;
        let Some(d) = self.handle(&m, name).await? else {
            return Ok(None);
        };
        match self.call(m.client().commit(&d.fh, 0, 0)).await {
            Ok(r) => Ok(Some(r.verf.0)),
            Err(e) => {
                self.stale(name, &e);
                Err(self.failed(e).await)
            }
        }
    }

    async fn mount(&self) -> Result<std::sync::Arc<Mount<nfs_client::TcpConns>>, ControlError> {
        let mut m = self.mount.lock().await;
        if let Some(m) = m.as_ref() {
            return Ok(std::sync::Arc::clone(m));
        }
        let target = TcpTarget {
            host: self.spec.tcp.ip().to_string(),
            nfs_port: Some(self.spec.tcp.port()),
            mount_port: self.spec.mount_port,
            path: self.spec.export.clone(),
        };
        let opts = TcpOptions {
            connect_timeout: CONNECT_TIMEOUT,
            ..TcpOptions::default()
        };
        let mounted = self.call(connect_tcp(&target, &opts)).await.map_err(|e| {
            tracing::warn!(ds = %self.spec.tcp, export = %self.spec.export, error = %e, "pNFS data server unreachable");
            ControlError::Unreachable
        })?;
        let fi = mounted.mount.fsinfo();
        self.set_limits(fi.rtmax, fi.wtmax);
        let mount = std::sync::Arc::new(mounted.mount);
        *m = Some(std::sync::Arc::clone(&mount));
        Ok(mount)
    }

    /// Forgets the connection after a transport failure, so the next call
    /// reconnects.
    async fn failed(&self, e: Error) -> ControlError {
        match e {
            Error::Nfs { status, .. } => ControlError::Nfs(status),
            other => {
                tracing::warn!(ds = %self.spec.tcp, error = %other, "pNFS control path failed");
                *self.mount.lock().await = None;
                // Handles are checked again once it answers (a cached one
                // would hide that it is still gone).
                if let Ok(mut h) = self.handles.lock() {
                    h.clear();
                }
                ControlError::Unreachable
            }
        }
    }

    /// The data file `name` in the export's root, created (RFC 1813
    /// §3.3.8, UNCHECKED without size, so an existing file keeps its
    /// data) owned by `uid`:`gid` with `mode` when it does not exist.
    pub(crate) async fn ensure(
        &self,
        name: &str,
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> Result<DataFh, ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        if let Some(d) = self.handle(&m, name).await? {
            return Ok(d);
        }
        let how = Createhow3::Unchecked(Sattr3 {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            ..Sattr3::default()
        });
        let r = match self.call(m.client().create(&root, name, how)).await {
            Ok(r) => r,
            Err(e) => return Err(self.failed(e).await),
        };
        let fh = match r.obj {
            Some(fh) => fh,
            None => match self.call(m.client().lookup(&root, name)).await {
                Ok(ok) => ok.object,
                Err(e) => return Err(self.failed(e).await),
            },
        };
        // A server may give a new file to its creator whatever CREATE's
        // attributes said (this project's does, like Linux with
        // `root_squash` off): set the owner again.
        let owner = Sattr3 {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            ..Sattr3::default()
        };
        match self.call(m.client().setattr(&fh, owner, None)).await {
            Ok(_) => {
                let d = DataFh { fh, uid, gid };
                self.keep(name, &d);
                Ok(d)
            }
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Gives the data file to `uid`:`gid` (fencing, RFC 8435 §2.2: the
    /// credentials of layouts handed out before no longer pass the data
    /// server's permission check); `None` when there is no data file.
    pub(crate) async fn set_owner(
        &self,
        name: &str,
        uid: u32,
        gid: u32,
    ) -> Result<Option<DataFh>, ControlError> {
        let m = self.mount().await?;
        self.forget(name);
        let Some(d) = self.handle(&m, name).await? else {
            return Ok(None);
        };
        let s = Sattr3 {
            uid: Some(uid),
            gid: Some(gid),
            ..Sattr3::default()
        };
        match self.call(m.client().setattr(&d.fh, s, None)).await {
            Ok(_) => {
                let d = DataFh { uid, gid, ..d };
                self.keep(name, &d);
                Ok(Some(d))
            }
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Removes the data file `name`; one already gone is not an error.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), ControlError> {
        self.forget(name);
        let m = self.mount().await?;
        let root = m.root().clone();
        match self.call(m.client().remove(&root, name)).await {
            Ok(_)
            | Err(Error::Nfs {
                status: Nfsstat3::NFS3ERR_NOENT,
                ..
            }) => Ok(()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Whether the data server answers: a GETATTR of its export's root
    /// (mounting it first if need be).
    pub(crate) async fn probe(&self) -> Result<(), ControlError> {
        let m = self.mount().await?;
        match self.call(m.client().getattr(m.root())).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Sets the data file's size (SETATTR, RFC 1813 §3.3.2).
    pub(crate) async fn set_size(&self, name: &str, size: u64) -> Result<(), ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        let fh = match self.call(m.client().lookup(&root, name)).await {
            Ok(ok) => ok.object,
            Err(e) => return Err(self.failed(e).await),
        };
        let s = Sattr3 {
            size: Some(size),
            ..Sattr3::default()
        };
        match self.call(m.client().setattr(&fh, s, None)).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// The data file's size on the data server.
    pub(crate) async fn size(&self, name: &str) -> Result<u64, ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        match self.call(m.client().lookup(&root, name)).await {
            Ok(ok) => match self.call(m.client().getattr(&ok.object)).await {
                Ok(a) => Ok(a.size),
                Err(e) => Err(self.failed(e).await),
            },
            Err(e) => Err(self.failed(e).await),
        }
    }
}
