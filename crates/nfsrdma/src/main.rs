//! `nfsrdma`: the command-line front end of the workspace.
//!
//! Logging goes to standard error through `tracing`; set `RUST_LOG`
//! (for example `RUST_LOG=debug` or `RUST_LOG=oncrpc=trace`) to choose
//! what is shown.
#![forbid(unsafe_code)]

mod cmd;
mod device;
mod remote;
mod url;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// NFS over RDMA in Rust: servers, clients and tools for ONC RPC over TCP
/// and RPC-over-RDMA.
///
/// Logging: set RUST_LOG (error, warn, info, debug, trace, or per crate such
/// as RUST_LOG=oncrpc=debug); messages go to standard error.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of `serve`'s options costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a local directory over NFS: NFSv3, NFSv4.1/4.2 and MOUNT v3,
    /// over TCP and over RPC-over-RDMA (software iWARP).
    ///
    /// File handles stay valid across restarts; the write verifier changes
    /// on each start. Runs until interrupted.
    Serve(cmd::serve::ServeArgs),
    /// Serve the RPC echo test program (0x20004E52, NULL and ECHO) over TCP.
    ///
    /// A peer for testing ONC RPC stacks: NULL returns nothing, ECHO
    /// returns its opaque argument unchanged. Runs until interrupted.
    EchoServer(cmd::echo::ServerArgs),
    /// Call the echo test program: NULL round trips and ECHO payloads,
    /// checked byte for byte, with latency and throughput.
    RpcPing(cmd::echo::PingArgs),
    /// List a remote directory: nfs://host[:port]/export/path.
    Ls(cmd::ls::LsArgs),
    /// Write a remote file to standard output.
    Cat(cmd::cat::CatArgs),
    /// Copy a file; either side may be local or nfs://host[:port]/path.
    ///
    /// READs and WRITEs are pipelined (--in-flight); writes are UNSTABLE
    /// and COMMITted, with a resend if the server's write verifier changes.
    /// Prints bytes, seconds and MiB/s when done.
    Cp(cmd::cp::CpArgs),
    /// The 2003 NFS/RDMA paper's experiment: sequential read (and write)
    /// of a file by READ size and reads in flight, over RDMA and TCP.
    ///
    /// Prints MiB/s and client/server CPU seconds per GiB for each point,
    /// and the best RDMA vs best TCP figures; --csv and --plot-dir write
    /// the points and PNG plots. Starts `nfsrdma serve` on loopback as a
    /// child process unless given --url.
    Bench(cmd::bench::BenchArgs),
    /// Mount a remote directory on a local one through FUSE:
    /// nfs://host[:port]/export/path DIR (or nfs+rdma://...).
    ///
    /// Ordinary tools then work on DIR. Runs in the background unless
    /// --foreground; SIGINT/SIGTERM or `fusermount3 -u DIR` unmount it.
    Mount(cmd::mount::MountArgs),
    /// List the RDMA devices rdma-core sees (name, transport, port state,
    /// largest memory region, largest gather list, IRD/ORD), the ones
    /// `serve --rdma-device NAME` and `?device=NAME` can use.
    Devices(device::DevicesArgs),
    /// Summarize a running server's metrics (its `serve --metrics ADDR`):
    /// calls per procedure with errors and mean latency, rejected calls,
    /// limits tripped, open connections.
    Stat(cmd::stat::StatArgs),
    /// Print a packet capture (pcap or pcapng) of NFS traffic: iWARP
    /// (MPA/DDP/RDMAP), RPC-over-RDMA v1 and v2, ONC RPC over TCP, and the
    /// NFS procedures inside, one line per message, then a summary per
    /// connection (credits, inline sizes, chunks, Send With Invalidate,
    /// Terminates).
    ///
    /// Unknown and malformed frames are printed and counted as such.
    Dump(cmd::dump::DumpArgs),
    /// Write the manual pages: nfsrdma.1 and nfsrdma-SUBCOMMAND.1 for each
    /// subcommand.
    Man(cmd::man::ManArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish,
    /// powershell) to standard output.
    ///
    /// For example `nfsrdma completions bash >
    /// /usr/share/bash-completion/completions/nfsrdma`.
    Completions(cmd::man::CompletionsArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let command = match cli.command {
        Command::Man(a) => return cmd::man::man(Cli::command(), &a),
        Command::Dump(a) => return cmd::dump::run(a),
        Command::Completions(a) => {
            cmd::man::completions(Cli::command(), &a);
            return Ok(());
        }
        // The options of a config file join the command line's.
        Command::Serve(a) => Command::Serve(cmd::serve::with_config(
            a,
            matches.subcommand_matches("serve"),
        )?),
        c => c,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match command {
            Command::Serve(a) => cmd::serve::run(a).await,
            Command::EchoServer(a) => cmd::echo::serve(a).await,
            Command::RpcPing(a) => cmd::echo::ping(a).await,
            Command::Ls(a) => cmd::ls::run(a).await,
            Command::Cat(a) => cmd::cat::run(a).await,
            Command::Cp(a) => cmd::cp::run(a).await,
            Command::Bench(a) => cmd::bench::run(a).await,
            Command::Mount(a) => cmd::mount::run(a).await,
            Command::Devices(a) => device::list(a),
            Command::Stat(a) => cmd::stat::run(a).await,
            Command::Man(_) | Command::Completions(_) | Command::Dump(_) => Ok(()),
        }
    })
}
