//! `nfsrdma cat URL`: write a remote file to standard output (NFSv3 or,
//! with `?version=4.1`, NFSv4).

use std::io::Write;

use anyhow::{bail, Context};
use oncrpc::ClientTransport;

use crate::remote::{open_fs, with_fs, Fs};
use crate::url::{quiet_broken_pipe, IoArgs, NfsUrl};

/// Arguments of `nfsrdma cat`.
#[derive(clap::Args, Debug)]
pub(crate) struct CatArgs {
    /// nfs://host[:port]/export/path/to/file, or nfs+rdma://host[:port]/...
    /// (RPC-over-RDMA; options ?mountport=N&crc=1&version=2, and
    /// version=4.1|4.2|4 for NFSv4)
    url: String,
    #[command(flatten)]
    io: IoArgs,
}

pub(crate) async fn run(args: CatArgs) -> anyhow::Result<()> {
    let url = NfsUrl::parse(&args.url)?;
    with_fs!(open_fs(&url, args.io.options()).await?, |fs| {
        let r = cat(&fs, &url).await;
        let closed = fs.close().await;
        r.and(closed)
    })
}

async fn cat<T: ClientTransport>(fs: &Fs<T>, url: &NfsUrl) -> anyhow::Result<()> {
    let (h, a) = fs.resolve(fs.rest(), &url.path).await?;
    if a.is_dir() {
        bail!("{}: is a directory", url.path);
    }
    let mut out = std::io::stdout().lock();
    let r = fs
        .read_to(&h, |b| out.write_all(b))
        .await
        .with_context(|| format!("reading {}", url.path));
    quiet_broken_pipe(r.and_then(|_| out.flush().map_err(Into::into)))
}
