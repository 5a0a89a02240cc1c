//! The metadata server's control path to its NFSv3 data servers (RFC 8435
//! §2.2, loosely coupled): through the project's own NFSv3 client
//! ([`nfs_client`]) over TCP, it creates each file's data file with the
//! synthetic owner, group and mode, and removes it with the file.
//!
//! The control path mounts the data server's export with AUTH_SYS as
//! root, so the export must let the metadata server's address in with
//! `no_root_squash` (it sets the data file's owner to the synthetic uid).
//! Connections are opened on first use and reopened after a failure.

use nfs::v3::{Createhow3, NfsFh3, Nfsstat3, Sattr3};
use nfs_client::{connect_tcp, Error, Mount, TcpOptions, TcpTarget};
use oncrpc::tcp::TcpClient;
use tokio::sync::Mutex;

use super::DataServer;

/// How long the control path waits to connect to a data server.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One data server as the control path reaches it.
#[derive(Debug)]
pub(crate) struct DsControl {
    spec: DataServer,
    mount: Mutex<Option<std::sync::Arc<Mount<TcpClient>>>>,
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
    pub(crate) fn new(spec: DataServer) -> Self {
        Self {
            spec,
            mount: Mutex::new(None),
        }
    }

    async fn mount(&self) -> Result<std::sync::Arc<Mount<TcpClient>>, ControlError> {
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
        let mounted = connect_tcp(&target, &opts).await.map_err(|e| {
            tracing::warn!(ds = %self.spec.tcp, export = %self.spec.export, error = %e, "pNFS data server unreachable");
            ControlError::Unreachable
        })?;
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
    ) -> Result<NfsFh3, ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        match m.client().lookup(&root, name).await {
            Ok(ok) => return Ok(ok.object),
            Err(Error::Nfs {
                status: Nfsstat3::NFS3ERR_NOENT,
                ..
            }) => {}
            Err(e) => return Err(self.failed(e).await),
        }
        let how = Createhow3::Unchecked(Sattr3 {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            ..Sattr3::default()
        });
        let r = match m.client().create(&root, name, how).await {
            Ok(r) => r,
            Err(e) => return Err(self.failed(e).await),
        };
        let fh = match r.obj {
            Some(fh) => fh,
            None => match m.client().lookup(&root, name).await {
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
        match m.client().setattr(&fh, owner, None).await {
            Ok(_) => Ok(fh),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Removes the data file `name`; one already gone is not an error.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        match m.client().remove(&root, name).await {
            Ok(_)
            | Err(Error::Nfs {
                status: Nfsstat3::NFS3ERR_NOENT,
                ..
            }) => Ok(()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// Sets the data file's size (SETATTR, RFC 1813 §3.3.2).
    pub(crate) async fn set_size(&self, name: &str, size: u64) -> Result<(), ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        let fh = match m.client().lookup(&root, name).await {
            Ok(ok) => ok.object,
            Err(e) => return Err(self.failed(e).await),
        };
        let s = Sattr3 {
            size: Some(size),
            ..Sattr3::default()
        };
        match m.client().setattr(&fh, s, None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed(e).await),
        }
    }

    /// The data file's size on the data server.
    pub(crate) async fn size(&self, name: &str) -> Result<u64, ControlError> {
        let m = self.mount().await?;
        let root = m.root().clone();
        match m.client().lookup(&root, name).await {
            Ok(ok) => match m.client().getattr(&ok.object).await {
                Ok(a) => Ok(a.size),
                Err(e) => Err(self.failed(e).await),
            },
            Err(e) => Err(self.failed(e).await),
        }
    }
}
