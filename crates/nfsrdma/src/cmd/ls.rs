//! `nfsrdma ls URL`: list a remote directory (or show one file), over
//! NFSv3 or, with `?version=4.1`, NFSv4.

use std::io::Write;

use oncrpc::ClientTransport;

use crate::remote::{open_fs, with_fs, Attr, Entry, Fs, Handle};
use crate::url::{quiet_broken_pipe, NfsUrl};
use nfs_client::nfs::v3::Ftype3;

/// Arguments of `nfsrdma ls`.
#[derive(clap::Args, Debug)]
pub(crate) struct LsArgs {
    /// nfs://host[:port]/export/path (a directory or a file), or
    /// nfs+rdma://host[:port]/export/path (RPC-over-RDMA; options
    /// ?mountport=N&crc=1&version=2, and version=4.1|4.2|4 for NFSv4).
    url: String,
    /// Long format: type and mode, links, owner, group, size, mtime, name
    /// (links, owner and group show as `?` over NFSv4).
    #[arg(short = 'l', long)]
    long: bool,
    /// Include entries whose names start with '.'.
    #[arg(short = 'a', long)]
    all: bool,
    /// Sort by name (waits for the whole listing). Without it, entries
    /// print in the server's order as each READDIRPLUS reply arrives, like
    /// `ls -U`, so a huge directory starts printing at once.
    #[arg(short = 's', long)]
    sort: bool,
}

pub(crate) async fn run(args: LsArgs) -> anyhow::Result<()> {
    let url = NfsUrl::parse(&args.url)?;
    let any = open_fs(&url, nfs_client::IoOptions::default()).await?;
    with_fs!(any, |fs| {
        let r = list(&fs, &url, &args).await;
        let closed = fs.close().await;
        r.and(closed)
    })
}

async fn list<T: ClientTransport>(fs: &Fs<T>, url: &NfsUrl, args: &LsArgs) -> anyhow::Result<()> {
    let (h, a) = fs.resolve(fs.rest(), &url.path).await?;
    // 64 KiB: a `-l` line is written in several pieces, and with the
    // default 8 KiB buffer every eighth KiB cost two `write`s.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout());
    let r = if a.is_dir() {
        list_dir(fs, &h, url, args, &mut out).await
    } else {
        let name = url.file_name().unwrap_or("/").to_owned();
        let line = if args.long {
            long_line(&a, None, &name)
        } else {
            name
        };
        writeln!(out, "{line}").map_err(Into::into)
    };
    quiet_broken_pipe(r.and_then(|()| out.flush().map_err(Into::into)))
}

/// Lists directory `dir`: each reply printed and flushed as it arrives
/// (server order), or with `--sort` all of them sorted by name. The next
/// READDIRPLUS goes out before a page is printed ([`pages_overlapped`]).
async fn list_dir<T: ClientTransport>(
    fs: &Fs<T>,
    dir: &Handle,
    url: &NfsUrl,
    args: &LsArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut pages = fs.list(dir);
    let mut sorted = Vec::new();
    pages_overlapped(
        async || {
            pages
                .next_page()
                .await
                .with_context(|| format!("listing {}", url.path))
        },
        async |page| show_page(fs, dir, args, page, out, &mut sorted).await,
    )
    .await?;
    sorted.sort();
    for (_, line) in sorted {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Runs `show` on each page `fetch` returns while `fetch` already gets
/// the next one: a READDIRPLUS call needs only the last cookie of the
/// page before, so the server works on the next page while this one is
/// formatted and written (at 50,000 entries the client's formatting was
/// a fifth of the listing's wall time, the server waiting).
async fn pages_overlapped<P>(
    mut fetch: impl AsyncFnMut() -> anyhow::Result<Option<P>>,
    mut show: impl AsyncFnMut(P) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut page = fetch().await?;
    while let Some(p) = page {
        let (next, shown) = tokio::join!(fetch(), show(p));
        shown?;
        page = next?;
    }
    Ok(())
}

/// Prints one page (or, with `--sort`, keeps its lines in `sorted`).
async fn show_page<T: ClientTransport>(
    fs: &Fs<T>,
    dir: &Handle,
    args: &LsArgs,
    page: Vec<Entry>,
    out: &mut impl Write,
    sorted: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    for e in page {
        if !args.all && e.name.starts_with('.') {
            continue;
        }
        match (args.long, args.sort) {
            (true, false) => {
                let (a, link) = fs.entry_attr(dir, &e).await?;
                write_long(out, &a, link.as_deref(), &e.name)?;
            }
            (false, false) => writeln!(out, "{}", e.name)?,
            (true, true) => {
                let line = entry_line(fs, dir, &e).await?;
                sorted.push((e.name, line));
            }
            (false, true) => sorted.push((e.name.clone(), e.name)),
        }
    }
    out.flush()?;
    Ok(())
}

/// The `-l` line of one entry; attributes the server left out are
/// fetched.
async fn entry_line<T: ClientTransport>(
    fs: &Fs<T>,
    dir: &Handle,
    e: &Entry,
) -> anyhow::Result<String> {
    let (a, link) = fs.entry_attr(dir, e).await?;
    Ok(long_line(&a, link.as_deref(), &e.name))
}

fn long_line(a: &Attr, link: Option<&str>, name: &str) -> String {
    let mut line = Vec::with_capacity(64 + name.len());
    // Writing into a Vec cannot fail.
    let _ = write_long(&mut line, a, link, name);
    line.pop(); // the newline
    String::from_utf8_lossy(&line).into_owned()
}

/// Writes the `-l` line of one entry and its newline straight to `out`
/// (no `String` per field: at 50,000 entries the per-entry allocations
/// were a visible part of the client's time).
fn write_long(
    out: &mut impl Write,
    a: &Attr,
    link: Option<&str>,
    name: &str,
) -> std::io::Result<()> {
    let (nlink, uid, gid) = match a.ids {
        Some((n, u, g)) => (Some(n), Some(u), Some(g)),
        None => (None, None, None),
    };
    write!(
        out,
        "{} {:>3} {:>5} {:>5} {:>12} {} {}",
        Mode(a.ftype, a.mode),
        Shown(nlink),
        Shown(uid),
        Shown(gid),
        a.size,
        Time(a.mtime),
        name
    )?;
    if let Some(l) = link {
        write!(out, " -> {l}")?;
    }
    writeln!(out)
}

/// A number, or `?` when the server did not say (NFSv4 owner and group).
struct Shown(Option<u32>);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(v) => v.fmt(f),
            None => "?".fmt(f),
        }
    }
}

/// `ls -l`'s mode column.
struct Mode(Ftype3, u32);

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = mode_chars(self.0, self.1);
        f.write_str(std::str::from_utf8(&b).unwrap_or("??????????"))
    }
}

/// `ls -l`'s time column (UTC).
struct Time(u32);

impl std::fmt::Display for Time {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (year, month, day, hour, minute) = civil(self.0);
        write!(f, "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
    }
}

/// `ls -l`'s type letter and permission bits.
fn mode_chars(t: Ftype3, mode: u32) -> [u8; 10] {
    let kind = match t {
        Ftype3::NF3DIR => 'd',
        Ftype3::NF3LNK => 'l',
        Ftype3::NF3BLK => 'b',
        Ftype3::NF3CHR => 'c',
        Ftype3::NF3SOCK => 's',
        Ftype3::NF3FIFO => 'p',
        _ => '-',
    };
    let mut s = [b'-'; 10];
    let mut i = 0;
    let mut push = |c: char| {
        if let Some(b) = s.get_mut(i) {
            *b = c as u8;
        }
        i += 1;
    };
    push(kind);
    for (shift, special, lower, upper) in [(6, 0o4000, 's', 'S'), (3, 0o2000, 's', 'S')] {
        let bits = (mode >> shift) & 7;
        push(if bits & 4 != 0 { 'r' } else { '-' });
        push(if bits & 2 != 0 { 'w' } else { '-' });
        push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    let bits = mode & 7;
    push(if bits & 4 != 0 { 'r' } else { '-' });
    push(if bits & 2 != 0 { 'w' } else { '-' });
    push(match (bits & 1 != 0, mode & 0o1000 != 0) {
        (true, true) => 't',
        (false, true) => 'T',
        (true, false) => 'x',
        (false, false) => '-',
    });
    s
}

/// Year, month, day, hour and minute (UTC) of seconds since the epoch
/// (days to civil date by the proleptic Gregorian calendar).
fn civil(secs: u32) -> (i64, i64, i64, u32, u32) {
    let days = i64::from(secs / 86_400);
    let rem = secs % 86_400;
    // Shift the epoch to 0000-03-01 so leap days end each 4/100/400 cycle.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, (rem % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next page is asked for before the page in hand is shown, and
    /// every page is shown once, in order; an error of either side ends
    /// the listing.
    #[tokio::test]
    async fn the_next_page_is_fetched_while_a_page_is_shown() {
        let log = std::cell::RefCell::new(Vec::new());
        let mut n = 0;
        let r = pages_overlapped(
            async || {
                n += 1;
                log.borrow_mut().push(format!("fetch {n}"));
                tokio::task::yield_now().await;
                Ok((n <= 3).then_some(n))
            },
            async |p| {
                log.borrow_mut().push(format!("show {p}"));
                tokio::task::yield_now().await;
                log.borrow_mut().push(format!("shown {p}"));
                Ok(())
            },
        )
        .await;
        assert!(r.is_ok());
        let log = log.into_inner();
        let at = |s: &str| log.iter().position(|l| l == s).unwrap();
        for p in 1..=3 {
            assert!(
                at(&format!("fetch {}", p + 1)) < at(&format!("shown {p}")),
                "{log:?}"
            );
            if p < 3 {
                assert!(
                    at(&format!("shown {p}")) < at(&format!("show {}", p + 1)),
                    "{log:?}"
                );
            }
        }
        assert_eq!(
            log.iter().filter(|l| l.starts_with("show ")).count(),
            3,
            "{log:?}"
        );
        assert_eq!(
            log.iter().filter(|l| l.starts_with("fetch")).count(),
            4,
            "{log:?}"
        );

        let failed = pages_overlapped(
            async || Ok(Some(1)),
            async |_| Err(anyhow::anyhow!("stdout closed")),
        )
        .await;
        assert!(failed.is_err());
    }

    #[test]
    fn mode_strings_match_ls() {
        assert_eq!(Mode(Ftype3::NF3DIR, 0o755).to_string(), "drwxr-xr-x");
        assert_eq!(Mode(Ftype3::NF3REG, 0o4644).to_string(), "-rwSr--r--");
        assert_eq!(Mode(Ftype3::NF3DIR, 0o1777).to_string(), "drwxrwxrwt");
        assert_eq!(Mode(Ftype3::NF3LNK, 0o777).to_string(), "lrwxrwxrwx");
    }

    #[test]
    fn times_format_as_utc_dates() {
        assert_eq!(Time(0).to_string(), "1970-01-01 00:00");
        assert_eq!(Time(951_782_400).to_string(), "2000-02-29 00:00");
        assert_eq!(Time(1_700_000_000).to_string(), "2023-11-14 22:13");
        assert_eq!(Time(u32::MAX).to_string(), "2106-02-07 06:28");
    }

    #[test]
    fn long_lines_have_every_column() {
        let a = Attr {
            ftype: Ftype3::NF3LNK,
            mode: 0o777,
            size: 12,
            mtime: 1_700_000_000,
            ids: Some((1, 1000, 100)),
        };
        assert_eq!(
            long_line(&a, Some("target"), "name"),
            "lrwxrwxrwx   1  1000   100           12 2023-11-14 22:13 name -> target"
        );
        let v4 = Attr { ids: None, ..a };
        let mut out = Vec::new();
        write_long(&mut out, &v4, None, "f").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "lrwxrwxrwx   ?     ?     ?           12 2023-11-14 22:13 f\n"
        );
    }
}
