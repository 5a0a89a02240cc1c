//! `nfsrdma`: the command-line front end of the workspace.

use clap::Parser;

/// NFS over RDMA in Rust.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let _cli = Cli::parse();
    Ok(())
}
