//! Pipelined file transfer on a [`Mount`]: READs and WRITEs kept in
//! flight up to [`IoOptions::in_flight`](crate::IoOptions), UNSTABLE
//! writes with COMMIT and the write-verifier check (RFC 1813 §3.3.7,
//! §3.3.21).
//!
//! # Where READ data lands
//!
//! [`Mount::read_at`] fills the caller's buffer. Over TCP the reply
//! arrives in a receive buffer and is copied once into place. The READ
//! call carries a [`ReplyHint`](oncrpc::ReplyHint) whose DDP item is the
//! READ data ([`crate::client::reply_hint`]), so an RPC-over-RDMA
//! transport provisions a Write chunk of exactly the requested size
//! (RFC 8166 §3.4.6); the reply is rebuilt around the placed data, so
//! the one copy is from that buffer into the caller's slice. To have the
//! data placed straight into memory the caller owns, with no copy at all,
//! use [`Nfs3Client::read_into`](crate::Nfs3Client::read_into) with a
//! `BytesMut` (a `&mut [u8]` cannot be lent to the device across the
//! call).

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{self, FuturesUnordered, StreamExt, TryStreamExt};
use nfs::v3::{NfsFh3, StableHow, Writeverf3};
use oncrpc::ClientTransport;

use crate::error::{Error, Result};
use crate::mount::Mount;

/// Most rounds of "COMMIT, find lost writes, resend" before giving up.
const MAX_COMMIT_ROUNDS: u32 = 4;

/// One READ of `len` bytes at `offset`, repeated on short replies until
/// the range is full or the file ends: the pieces in order, and whether
/// the end of the file was reached.
async fn read_range<T: ClientTransport>(
    m: &Mount<T>,
    fh: &NfsFh3,
    offset: u64,
    len: u32,
) -> Result<(Vec<Bytes>, bool)> {
    let mut pieces = Vec::new();
    let mut done: u32 = 0;
    while done < len {
        let r = m
            .client()
            .read(fh, offset.saturating_add(u64::from(done)), len - done)
            .await?;
        done += r.count;
        let eof = r.eof;
        if r.count > 0 {
            pieces.push(r.data.0);
        }
        if eof {
            return Ok((pieces, true));
        }
        if r.count == 0 {
            return Err(Error::Protocol("READ returned no data before end of file"));
        }
    }
    Ok((pieces, false))
}

impl<T: ClientTransport> Mount<T> {
    /// Reads up to `buf.len()` bytes at `offset` into `buf` with
    /// [`Mount::in_flight`] READs of [`Mount::read_size`] in flight, and
    /// returns how many bytes were read (fewer only at the end of the
    /// file). See the module docs for where the data is placed.
    pub async fn read_at(&self, fh: &NfsFh3, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let bs = self.read_size() as usize;
        let results: Vec<(usize, usize, bool)> = stream::iter(buf.chunks_mut(bs).enumerate())
            .map(|(i, dst)| async move {
                let off = offset.saturating_add((i * bs) as u64);
                let (pieces, eof) = read_range(self, fh, off, dst.len() as u32).await?;
                let mut at = 0usize;
                for p in pieces {
                    let end = at + p.len();
                    let Some(slot) = dst.get_mut(at..end) else {
                        return Err(Error::Protocol("READ returned more than asked"));
                    };
                    slot.copy_from_slice(&p);
                    at = end;
                }
                Ok::<_, Error>((i, at, eof))
            })
            .buffer_unordered(self.in_flight())
            .try_collect()
            .await?;
        let mut by_index: Vec<(usize, usize, bool)> = results;
        by_index.sort_unstable_by_key(|r| r.0);
        let mut total = 0usize;
        for (_, n, eof) in by_index {
            total += n;
            if eof || n < bs {
                break;
            }
        }
        Ok(total)
    }

    /// Streams the file from `offset` to its end into `sink`, in order,
    /// with [`Mount::in_flight`] READs in flight; returns the bytes
    /// delivered. The size is taken from GETATTR, and reading goes on past
    /// it until the server says `eof` (the file may grow).
    pub async fn read_to(
        &self,
        fh: &NfsFh3,
        offset: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        let size = self.client().getattr(fh).await?.size;
        let bs = u64::from(self.read_size());
        let mut delivered = 0u64;
        let mut next = offset;
        let mut eof = false;
        if size > offset {
            let ranges = (offset..size)
                .step_by(usize::try_from(bs).unwrap_or(usize::MAX))
                .map(|o| (o, (size - o).min(bs) as u32));
            let mut s = stream::iter(ranges)
                .map(|(o, n)| async move { read_range(self, fh, o, n).await.map(|r| (o, n, r)) })
                .buffered(self.in_flight());
            while let Some(item) = s.next().await {
                let (o, n, (pieces, at_end)) = item?;
                let mut got = 0u64;
                for p in pieces {
                    got += p.len() as u64;
                    sink(&p)?;
                }
                delivered += got;
                next = o + got;
                if at_end || got < u64::from(n) {
                    eof = true;
                    break;
                }
            }
        }
        while !eof {
            let (pieces, at_end) = read_range(self, fh, next, bs as u32).await?;
            for p in pieces {
                next += p.len() as u64;
                delivered += p.len() as u64;
                sink(&p)?;
            }
            eof = at_end;
        }
        Ok(delivered)
    }

    /// The whole file in memory.
    pub async fn read_file(&self, fh: &NfsFh3) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_to(fh, 0, |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// A pipelined writer to `fh` starting at `offset`.
    pub fn writer(&self, fh: &NfsFh3, offset: u64) -> FileWriter<'_, T> {
        FileWriter {
            m: self,
            fh: fh.clone(),
            next: offset,
            pending: FuturesUnordered::new(),
            unstable: BTreeMap::new(),
            unstable_bytes: 0,
            stats: WriteStats::default(),
        }
    }

    /// Creates or truncates the file at `path` (relative to the export)
    /// with `mode`, writes `data` with UNSTABLE WRITEs in flight and
    /// COMMITs it; returns the handle and the write statistics.
    pub async fn write_file(
        &self,
        path: &str,
        mode: u32,
        data: Bytes,
    ) -> Result<(NfsFh3, WriteStats)> {
        let (dir, name) = self.resolve_parent(path).await?;
        let fh = self.create_file(&dir, &name, mode).await?;
        let mut w = self.writer(&fh, 0);
        w.write(data).await?;
        let stats = w.finish().await?;
        Ok((fh, stats))
    }
}

/// What a [`FileWriter`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteStats {
    /// Bytes written (each byte once, however often it was sent).
    pub bytes: u64,
    /// WRITE calls, resends included.
    pub writes: u64,
    /// COMMIT calls.
    pub commits: u64,
    /// Bytes sent again because the write verifier changed.
    pub resent_bytes: u64,
}

/// One acknowledged piece of a WRITE.
struct Acked {
    offset: u64,
    data: Bytes,
    committed: StableHow,
    verf: Writeverf3,
    calls: u64,
}

/// Sends `data` at `offset`, repeating the rest after short writes.
async fn write_range<T: ClientTransport>(
    m: &Mount<T>,
    fh: NfsFh3,
    offset: u64,
    data: Bytes,
    stable: StableHow,
) -> Result<Vec<Acked>> {
    let mut done = 0usize;
    let mut out = Vec::new();
    while done < data.len() {
        let piece = data.slice(done..);
        let off = offset.saturating_add(done as u64);
        let r = m.client().write(&fh, off, piece.clone(), stable).await?;
        let n = r.count as usize;
        if n == 0 {
            return Err(Error::Protocol("WRITE wrote nothing"));
        }
        out.push(Acked {
            offset: off,
            data: piece.slice(..n),
            committed: r.committed,
            verf: r.verf,
            calls: 1,
        });
        done += n;
    }
    Ok(out)
}

/// A pipelined writer: [`FileWriter::write`] sends WRITE UNSTABLE calls of
/// [`Mount::write_size`] with up to [`Mount::in_flight`] in flight, keeps
/// the data of each until a COMMIT whose verifier matches the WRITE's
/// proves it stable, and sends again (FILE_SYNC) what a changed verifier
/// shows the server lost (RFC 1813 §3.3.7, §3.3.21). A COMMIT is forced
/// whenever more than `IoOptions::commit_window` bytes are unstable.
///
/// Call [`FileWriter::finish`]: dropping the writer abandons the WRITEs
/// still in flight and leaves unstable data uncommitted.
pub struct FileWriter<'m, T> {
    m: &'m Mount<T>,
    fh: NfsFh3,
    next: u64,
    pending: FuturesUnordered<BoxFuture<'m, Result<Vec<Acked>>>>,
    /// Unstable pieces by offset, with the verifier of their WRITE.
    unstable: BTreeMap<u64, (Bytes, Writeverf3)>,
    unstable_bytes: u64,
    stats: WriteStats,
}

impl<T> core::fmt::Debug for FileWriter<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FileWriter")
            .field("fh", &self.fh)
            .field("next", &self.next)
            .field("in_flight", &self.pending.len())
            .field("unstable_bytes", &self.unstable_bytes)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'m, T: ClientTransport> FileWriter<'m, T> {
    /// Appends `data` at the current offset. Returns once the WRITEs are
    /// sent and at most `in_flight` remain unanswered.
    pub async fn write(&mut self, data: Bytes) -> Result<()> {
        let ws = self.m.write_size() as usize;
        let mut at = 0usize;
        while at < data.len() {
            let end = (at + ws).min(data.len());
            let piece = data.slice(at..end);
            at = end;
            while self.pending.len() >= self.m.in_flight() {
                self.reap_one().await?;
            }
            let off = self.next;
            self.next += piece.len() as u64;
            self.stats.bytes += piece.len() as u64;
            let m = self.m;
            let fh = self.fh.clone();
            self.pending.push(Box::pin(write_range(
                m,
                fh,
                off,
                piece,
                StableHow::UNSTABLE,
            )));
            if self.unstable_bytes >= self.m.options().commit_window {
                self.commit_round().await?;
            }
        }
        Ok(())
    }

    /// The offset the next [`FileWriter::write`] writes at.
    pub fn position(&self) -> u64 {
        self.next
    }

    async fn reap_one(&mut self) -> Result<()> {
        if let Some(r) = self.pending.next().await {
            for a in r? {
                self.stats.writes += a.calls;
                if a.committed == StableHow::UNSTABLE {
                    self.unstable_bytes += a.data.len() as u64;
                    self.unstable.insert(a.offset, (a.data, a.verf));
                }
            }
        }
        Ok(())
    }

    /// Waits for every WRITE, COMMITs, and resends what the verifier shows
    /// lost until a COMMIT covers everything.
    async fn commit_round(&mut self) -> Result<()> {
        while !self.pending.is_empty() {
            self.reap_one().await?;
        }
        for _ in 0..MAX_COMMIT_ROUNDS {
            if self.unstable.is_empty() {
                return Ok(());
            }
            let c = self.m.client().commit(&self.fh, 0, 0).await?;
            self.stats.commits += 1;
            let lost: Vec<(u64, Bytes)> = self
                .unstable
                .iter()
                .filter(|(_, (_, v))| *v != c.verf)
                .map(|(o, (d, _))| (*o, d.clone()))
                .collect();
            self.unstable.clear();
            self.unstable_bytes = 0;
            if lost.is_empty() {
                return Ok(());
            }
            tracing::info!(
                pieces = lost.len(),
                "write verifier changed: the server lost unstable data; resending"
            );
            for (off, data) in lost {
                self.stats.resent_bytes += data.len() as u64;
                let m = self.m;
                let fh = self.fh.clone();
                while self.pending.len() >= self.m.in_flight() {
                    self.reap_one().await?;
                }
                self.pending.push(Box::pin(write_range(
                    m,
                    fh,
                    off,
                    data,
                    StableHow::FILE_SYNC,
                )));
            }
            while !self.pending.is_empty() {
                self.reap_one().await?;
            }
        }
        Err(Error::Protocol("write verifier kept changing"))
    }

    /// Sends what is left, waits for every reply, COMMITs and resends as
    /// needed; returns the statistics.
    pub async fn finish(mut self) -> Result<WriteStats> {
        self.commit_round().await?;
        Ok(self.stats)
    }
}
