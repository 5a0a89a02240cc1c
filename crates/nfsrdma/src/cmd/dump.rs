//! `nfsrdma dump CAPTURE`: prints a packet capture decoded by the `dump`
//! crate, one line per message, then a per-connection summary.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};

/// Arguments of `nfsrdma dump`.
#[derive(clap::Args, Debug)]
pub(crate) struct DumpArgs {
    /// A pcap or pcapng file (tcpdump -w, tshark -w).
    pub(crate) capture: PathBuf,
    /// Print only the summary, not one line per message.
    #[arg(long, short)]
    pub(crate) summary: bool,
    /// Exit with status 1 if any frame is unknown or malformed.
    #[arg(long)]
    pub(crate) strict: bool,
}

/// Runs the command.
pub(crate) fn run(args: DumpArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.capture)
        .with_context(|| format!("reading {}", args.capture.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut failed = None;
    let report = dump::decode_capture(&bytes, |l| {
        if !args.summary && failed.is_none() {
            if let Err(e) = writeln!(out, "{l}") {
                failed = Some(e);
            }
        }
    })
    .with_context(|| args.capture.display().to_string())?;
    if let Some(e) = failed {
        // A closed pipe (`| head`) ends the listing quietly.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e.into());
    }
    let tail = (|| -> std::io::Result<()> {
        if !args.summary {
            writeln!(out)?;
        }
        write!(out, "{report}")?;
        out.flush()
    })();
    match tail {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        other => other?,
    }
    if args.strict && report.unknown_frames + report.malformed_frames > 0 {
        bail!(
            "{} unknown and {} malformed frames",
            report.unknown_frames,
            report.malformed_frames
        );
    }
    Ok(())
}
