//! `serve`: the NFS server (NFSv3 + MOUNT v3, optional rpcbind) on a local
//! directory.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;

/// Transports the server can run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// ONC RPC over TCP with record marking (RFC 5531 §11).
    Tcp,
}

/// Arguments of `nfsrdma serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// The directory to export.
    dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    addr: IpAddr,
    /// NFS port over TCP (0 picks an ephemeral port).
    #[arg(long, default_value_t = 2049)]
    port: u16,
    /// MOUNT v3 port over TCP (MOUNT is also served on the NFS port).
    #[arg(long, default_value_t = 20048)]
    mount_port: u16,
    /// Also answer rpcbind/portmapper (v2 GETPORT, v3/v4 GETADDR) on this
    /// port, usually 111, so clients that ask the portmapper find NFS and
    /// MOUNT. Off by default: the system's rpcbind usually owns 111.
    #[arg(long)]
    rpcbind_port: Option<u16>,
    /// Refuse every change with NFS3ERR_ROFS.
    #[arg(long)]
    read_only: bool,
    /// Transports to run (RPC-over-RDMA is not built yet).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp")]
    transports: Vec<Transport>,
    /// Extra names a client may MOUNT for the export (besides its full path),
    /// for example /export.
    #[arg(long = "alias")]
    aliases: Vec<String>,
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.transports.contains(&Transport::Tcp),
        "no transport selected"
    );
    let mut config = nfs_server::ServerConfig::new(&args.dir);
    config.read_only = args.read_only;
    config.nfs_addr = SocketAddr::new(args.addr, args.port);
    config.mount_addr = Some(SocketAddr::new(args.addr, args.mount_port));
    config.rpcbind_addr = args.rpcbind_port.map(|p| SocketAddr::new(args.addr, p));
    config.aliases = args.aliases;
    let server = nfs_server::start(config)
        .await
        .with_context(|| format!("serving {}", args.dir.display()))?;
    println!(
        "serving {} over tcp: nfs {} mount {}{}",
        server.storage().path().display(),
        server.nfs_addr(),
        server
            .mount_addr()
            .map_or_else(|| "-".to_string(), |a| a.to_string()),
        server
            .rpcbind_addr()
            .map_or_else(String::new, |a| format!(" rpcbind {a}")),
    );
    tokio::select! {
        r = server.wait() => r.context("listener failed"),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted, stopping");
            Ok(())
        }
    }
}
