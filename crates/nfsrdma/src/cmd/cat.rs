//! `nfsrdma cat URL`: write a remote file to standard output.

use std::io::Write;

use anyhow::{bail, Context};
use nfs_client::nfs::v3::Ftype3;
use nfs_client::Mounted;
use oncrpc::ClientTransport;

use crate::url::{open, quiet_broken_pipe, with_remote, IoArgs, NfsUrl};

/// Arguments of `nfsrdma cat`.
#[derive(clap::Args, Debug)]
pub(crate) struct CatArgs {
    /// nfs://host[:port]/export/path/to/file, or nfs+rdma://host[:port]/...
    /// (RPC-over-RDMA; options ?mountport=N&crc=1&version=2)
    url: String,
    #[command(flatten)]
    io: IoArgs,
}

pub(crate) async fn run(args: CatArgs) -> anyhow::Result<()> {
    let url = NfsUrl::parse(&args.url)?;
    with_remote!(open(&url, args.io.options()).await?, |m| cat(m, &url).await)
}

async fn cat<T: ClientTransport>(m: Mounted<T>, url: &NfsUrl) -> anyhow::Result<()> {
    let Mounted { mount, rest, .. } = m;
    let f = mount
        .resolve(&rest)
        .await
        .with_context(|| url.path.clone())?;
    if f.attrs.ftype == Ftype3::NF3DIR {
        bail!("{}: is a directory", url.path);
    }
    let mut out = std::io::stdout().lock();
    let r = mount
        .read_to(&f.fh, 0, |b| out.write_all(b))
        .await
        .with_context(|| format!("reading {}", url.path));
    quiet_broken_pipe(r.and_then(|_| out.flush().map_err(Into::into)))
}
