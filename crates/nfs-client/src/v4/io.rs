//! Streaming transfers over a [`Session`]: a window of READ COMPOUNDs in
//! flight delivered in order to a sink, as the NFSv3 [`crate::Mount`]
//! does, and windows of UNSTABLE WRITEs confirmed by COMMIT.

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_SIZE};
use nfs::v4::{NfsArgop4, Putfh4Args, Setattr4Args, StableHow4, Verifier4};
use oncrpc::ClientTransport;

use super::error::{Error, Result};
use super::fs::OpenFile;
use super::session::Session;

/// A file written in order with UNSTABLE WRITEs (RFC 8881 §18.32), at
/// most `in_flight` (by default one per session slot) in flight across
/// calls of [`Writer4::write`], whose data is kept until a COMMIT
/// (§18.3) confirms it under the same verifier: a COMMIT goes out when
/// `commit_window` bytes are pending and at [`Writer4::finish`]; a
/// verifier change (the server restarted) sends the pending data again
/// FILE_SYNC4.
///
/// Call [`Writer4::finish`]: dropping the writer abandons the WRITEs in
/// flight and leaves the file open.
pub struct Writer4<'s, T> {
    s: &'s Session<T>,
    file: OpenFile,
    at: u64,
    block: u32,
    window: usize,
    commit_window: u64,
    in_flight: FuturesUnordered<BoxFuture<'s, Result<Vec<Verifier4>>>>,
    pending: Vec<(u64, Bytes)>,
    pending_bytes: u64,
    verfs: Vec<Verifier4>,
    written: u64,
    resent: u64,
}

impl<T> std::fmt::Debug for Writer4<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer4")
            .field("file", &self.file)
            .field("at", &self.at)
            .field("in_flight", &self.in_flight.len())
            .field("pending_bytes", &self.pending_bytes)
            .field("written", &self.written)
            .finish()
    }
}

/// One WRITE of `piece` at `offset`, completed by further WRITEs after a
/// short one; the verifiers of its UNSTABLE4 replies.
async fn write_piece<T: ClientTransport>(
    s: &Session<T>,
    file: OpenFile,
    offset: u64,
    piece: Bytes,
    stable: StableHow4,
) -> Result<Vec<Verifier4>> {
    s.write_range(&file, offset, &piece, u32::MAX, stable).await
}

impl<'s, T: ClientTransport> Writer4<'s, T> {
    /// At most `n` WRITEs in flight (at least one, at most one per slot).
    pub fn with_in_flight(mut self, n: usize) -> Self {
        self.window = n.clamp(1, self.s.slot_count().max(1));
        self
    }

    /// Writes `data` after what was written so far. Returns once its
    /// WRITEs are sent and at most `in_flight` remain unanswered.
    pub async fn write(&mut self, data: Bytes) -> Result<()> {
        let block = self.block as usize;
        let mut at = 0usize;
        while at < data.len() {
            let end = (at + block).min(data.len());
            let piece = data.slice(at..end);
            at = end;
            while self.in_flight.len() >= self.window {
                self.reap_one().await?;
            }
            let n = piece.len() as u64;
            let fut = write_piece(
                self.s,
                self.file.clone(),
                self.at,
                piece.clone(),
                StableHow4::UNSTABLE4,
            );
            self.in_flight.push(Box::pin(fut));
            self.pending.push((self.at, piece));
            self.pending_bytes += n;
            self.at += n;
            self.written += n;
            if self.pending_bytes >= self.commit_window {
                self.commit().await?;
            }
        }
        Ok(())
    }

    async fn reap_one(&mut self) -> Result<()> {
        if let Some(r) = self.in_flight.next().await {
            for x in r? {
                if !self.verfs.contains(&x) {
                    self.verfs.push(x);
                }
            }
        }
        Ok(())
    }

    async fn commit(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.reap_one().await?;
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        if !self.verfs.is_empty() {
            let committed = self.s.commit(&self.file.fh).await?;
            if self.verfs.iter().any(|v| *v != committed) {
                for (at, data) in &self.pending {
                    self.s
                        .write_range(&self.file, *at, data, self.block, StableHow4::FILE_SYNC4)
                        .await?;
                }
                self.resent += self.pending_bytes;
            }
        }
        self.pending.clear();
        self.pending_bytes = 0;
        self.verfs.clear();
        Ok(())
    }

    /// COMMITs what is pending and CLOSEs the file (RFC 8881 §18.2);
    /// returns the bytes written and those sent again.
    pub async fn finish(mut self) -> Result<(u64, u64)> {
        self.commit().await?;
        self.s.close_file(self.file).await?;
        Ok((self.written, self.resent))
    }
}

impl<T: ClientTransport> Session<T> {
    /// Streams `file` from `offset` to its end into `sink`, in order, in
    /// READs (RFC 8881 §18.22) of `block` bytes with at most `in_flight`
    /// (and at most one per slot) in flight; returns the bytes
    /// delivered. The size comes from GETATTR, and reading goes on past
    /// it until a READ says `eof` (the file may grow); a short READ is
    /// completed by further READs of the rest of its block.
    pub async fn read_to(
        &self,
        file: &OpenFile,
        offset: u64,
        block: u32,
        in_flight: usize,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        let size = self.getattr(&file.fh).await?.size;
        let block = block.max(1);
        let bs = u64::from(block);
        let window = in_flight.clamp(1, self.slot_count().max(1));
        let mut next = offset;
        let mut eof = false;
        if size > offset {
            let starts = (0..(size - offset).div_ceil(bs)).map(|i| offset + i * bs);
            let mut s = futures::stream::iter(starts)
                .map(|start| {
                    let want = (size - start).min(bs) as u32;
                    async move { (start, want, self.read(file, start, want).await) }
                })
                .buffered(window);
            while let Some((start, want, res)) = s.next().await {
                let (mut data, mut at_end) = res?;
                let mut got = 0u64;
                loop {
                    got += data.len() as u64;
                    sink(&data)?;
                    if at_end || got >= u64::from(want) {
                        break;
                    }
                    if data.is_empty() {
                        return Err(Error::Protocol("READ without data before end of file"));
                    }
                    (data, at_end) = self.read(file, start + got, want - got as u32).await?;
                }
                next = start + got;
                if at_end {
                    eof = true;
                    break;
                }
            }
        }
        while !eof {
            let (data, at_end) = self.read(file, next, block).await?;
            if data.is_empty() && !at_end {
                return Err(Error::Protocol("READ without data before end of file"));
            }
            next += data.len() as u64;
            sink(&data)?;
            eof = at_end;
        }
        Ok(next - offset)
    }

    /// SETATTR of the size of an open file (RFC 8881 §18.30: a size
    /// change carries the open stateid), as `O_TRUNC` or `ftruncate`.
    pub async fn truncate(&self, file: &OpenFile, size: u64) -> Result<()> {
        let attrs = FileAttrs {
            size: Some(size),
            ..FileAttrs::default()
        };
        let ops = vec![
            NfsArgop4::Putfh(Putfh4Args {
                object: file.fh.clone(),
            }),
            NfsArgop4::Setattr(Setattr4Args {
                stateid: file.stateid,
                obj_attributes: attrs.to_fattr4(&Bitmap4::from_bits(&[FATTR4_SIZE])),
            }),
        ];
        self.compound(ops).await.map(drop)
    }

    /// A [`Writer4`] of `file` from `offset` in WRITEs of `block` bytes,
    /// COMMITting every `commit_window` bytes.
    pub fn writer(
        &self,
        file: OpenFile,
        offset: u64,
        block: u32,
        commit_window: u64,
    ) -> Writer4<'_, T> {
        Writer4 {
            s: self,
            file,
            at: offset,
            block: block.max(1),
            window: self.slot_count().max(1),
            commit_window: commit_window.max(1),
            in_flight: FuturesUnordered::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            verfs: Vec::new(),
            written: 0,
            resent: 0,
        }
    }

    /// Writes `data` at `offset` in UNSTABLE WRITEs (RFC 8881 §18.32) of
    /// `block` bytes, one in flight per slot, then COMMITs (§18.3): when a
    /// WRITE's verifier differs from the COMMIT's (the server restarted
    /// and may have lost them), the data is written again FILE_SYNC4.
    /// The caller keeps no copy: `data` is held until the COMMIT.
    pub async fn write_committed(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &Bytes,
        block: u32,
    ) -> Result<()> {
        let verfs = self
            .write_range(file, offset, data, block, StableHow4::UNSTABLE4)
            .await?;
        if verfs.is_empty() {
            return Ok(());
        }
        let committed = self.commit(&file.fh).await?;
        if verfs.iter().any(|v| *v != committed) {
            self.write_range(file, offset, data, block, StableHow4::FILE_SYNC4)
                .await?;
        }
        Ok(())
    }
}
