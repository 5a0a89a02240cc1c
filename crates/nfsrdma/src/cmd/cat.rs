//! `nfsrdma cat URL`: write a remote file to standard output.

use std::io::Write;

use anyhow::{bail, Context};
use nfs_client::nfs::v3::Ftype3;
use nfs_client::TcpMount;

use crate::url::{connect, quiet_broken_pipe, IoArgs, NfsUrl};

/// Arguments of `nfsrdma cat`.
#[derive(clap::Args, Debug)]
pub(crate) struct CatArgs {
    /// nfs://host[:port]/export/path/to/file
    url: String,
    #[command(flatten)]
    io: IoArgs,
}

pub(crate) async fn run(args: CatArgs) -> anyhow::Result<()> {
    let url = NfsUrl::parse(&args.url)?;
    let TcpMount { mount, rest, .. } = connect(&url, args.io.options()).await?;
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
