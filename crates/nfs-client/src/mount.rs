//! [`Mount`]: a mounted export, with path resolution, directory
//! iteration and the transfer settings learned from FSINFO.

use std::collections::VecDeque;

use nfs::v3::{
    Cookieverf3, Createhow3, Entryplus3, Fattr3, Fsinfo3ResOk, Ftype3, NfsFh3, Nfsproc3, Nfsstat3,
    Sattr3,
};
use oncrpc::msg::OpaqueAuth;
use oncrpc::ClientTransport;
use xdr::FixedOpaque;

use crate::client::Nfs3Client;
use crate::error::{Error, Result};

/// Smallest READ/WRITE size used whatever the server advertises.
pub const MIN_IO_SIZE: u32 = 4096;
/// Largest READ/WRITE size used whatever the server advertises.
pub const MAX_IO_SIZE: u32 = 4 << 20;
/// Smallest default READDIRPLUS reply size (`maxcount`).
pub const DEFAULT_DIR_BYTES: u32 = 64 << 10;
/// The first READDIRPLUS reply of a listing asks for at most this much,
/// each next one for twice the last, up to the listing's `maxcount`: a
/// caller that shows each reply as it arrives while the next is asked
/// for (`nfsrdma ls`) waits for the server's first page alone, so a
/// small first page starts that overlap sooner.
pub const FIRST_DIR_BYTES: u32 = 32 << 10;
/// Path components followed before giving up.
pub const MAX_PATH_COMPONENTS: usize = 256;

/// Transfer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoOptions {
    /// READs or WRITEs kept in flight at once by the streaming helpers.
    pub in_flight: usize,
    /// READ/WRITE size; `None` uses the server's preferred sizes
    /// (FSINFO `rtpref`/`wtpref`). Always capped by `rtmax`/`wtmax`.
    pub block_size: Option<u32>,
    /// READ size alone (nfs(5) `rsize`), over `block_size`; capped the
    /// same way.
    pub rsize: Option<u32>,
    /// WRITE size alone (nfs(5) `wsize`), over `block_size`.
    pub wsize: Option<u32>,
    /// READDIRPLUS `maxcount` (the reply size); `dircount` is a quarter of
    /// it. `None` uses FSINFO `dtpref` times 8, at least 64 KiB, so a
    /// large directory takes few calls.
    pub dir_bytes: Option<u32>,
    /// Bytes of UNSTABLE writes kept for a possible resend before a
    /// COMMIT is forced (RFC 1813 §3.3.7).
    pub commit_window: u64,
}

impl Default for IoOptions {
    fn default() -> Self {
        Self {
            in_flight: 16,
            block_size: None,
            rsize: None,
            wsize: None,
            dir_bytes: None,
            commit_window: 64 << 20,
        }
    }
}

/// A file or directory found by [`Mount::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Its handle.
    pub fh: NfsFh3,
    /// Its attributes.
    pub attrs: Fattr3,
}

/// A mounted export: an [`Nfs3Client`], the export's root handle and the
/// FSINFO limits, with the high-level helpers (path resolution, directory
/// listing, pipelined reads and writes in `io`).
#[derive(Debug)]
pub struct Mount<T> {
    nfs: Nfs3Client<T>,
    root: NfsFh3,
    fsinfo: Fsinfo3ResOk,
    opts: IoOptions,
}

impl<T: ClientTransport> Mount<T> {
    /// Wraps a client and a root handle (from MOUNT), asking FSINFO for
    /// the transfer sizes (RFC 1813 §3.3.19).
    pub async fn new(nfs: Nfs3Client<T>, root: NfsFh3, opts: IoOptions) -> Result<Self> {
        let fsinfo = nfs.fsinfo(&root).await?;
        Ok(Self {
            nfs,
            root,
            fsinfo,
            opts,
        })
    }

    /// The procedure-level client.
    pub fn client(&self) -> &Nfs3Client<T> {
        &self.nfs
    }

    /// A view of this mount whose calls carry `cred` instead of the
    /// mount's credential ([`Nfs3Client::with_credential`]): same
    /// transport, root and transfer settings.
    pub fn with_credential(&self, cred: OpaqueAuth) -> Mount<&T> {
        Mount {
            nfs: self.nfs.with_credential(cred),
            root: self.root.clone(),
            fsinfo: self.fsinfo.clone(),
            opts: self.opts,
        }
    }

    /// The export's root handle.
    pub fn root(&self) -> &NfsFh3 {
        &self.root
    }

    /// The FSINFO reply read at mount time.
    pub fn fsinfo(&self) -> &Fsinfo3ResOk {
        &self.fsinfo
    }

    /// The transfer settings.
    pub fn options(&self) -> &IoOptions {
        &self.opts
    }

    /// Changes the transfer settings.
    pub fn set_options(&mut self, opts: IoOptions) {
        self.opts = opts;
    }

    /// READ size: the `rsize` or block size option, else `rtpref`,
    /// capped by `rtmax` (RFC 1813 §3.3.19), within
    /// [`MIN_IO_SIZE`]..=[`MAX_IO_SIZE`].
    pub fn read_size(&self) -> u32 {
        let opt = self.opts.rsize.or(self.opts.block_size);
        io_size(opt, self.fsinfo.rtpref, self.fsinfo.rtmax)
    }

    /// WRITE size: the `wsize` or block size option, else `wtpref`,
    /// capped by `wtmax`.
    pub fn write_size(&self) -> u32 {
        let opt = self.opts.wsize.or(self.opts.block_size);
        io_size(opt, self.fsinfo.wtpref, self.fsinfo.wtmax)
    }

    /// READs or WRITEs in flight (at least one).
    pub fn in_flight(&self) -> usize {
        self.opts.in_flight.max(1)
    }

    /// Looks up `path` (components separated by `/`, relative to the
    /// export root; `.` and empty components are skipped, `..` is looked
    /// up on the server). Symbolic links are not followed.
    pub async fn resolve(&self, path: &str) -> Result<Resolved> {
        let mut fh = self.root.clone();
        let mut attrs = None;
        for (i, comp) in components(path).enumerate() {
            if i >= MAX_PATH_COMPONENTS {
                return Err(Error::InvalidName(path.to_owned()));
            }
            let r = self.nfs.lookup(&fh, comp).await?;
            fh = r.object;
            attrs = r.obj_attributes;
        }
        let attrs = match attrs {
            Some(a) => a,
            None => self.nfs.getattr(&fh).await?,
        };
        Ok(Resolved { fh, attrs })
    }

    /// The directory holding the last component of `path`, and that
    /// component's name. The directory must exist.
    pub async fn resolve_parent(&self, path: &str) -> Result<(NfsFh3, String)> {
        let comps: Vec<&str> = components(path).collect();
        let Some((name, dirs)) = comps.split_last() else {
            return Err(Error::InvalidName(path.to_owned()));
        };
        let dir = self.resolve(&dirs.join("/")).await?;
        if dir.attrs.ftype != Ftype3::NF3DIR {
            return Err(Error::Nfs {
                proc: Nfsproc3::LOOKUP,
                status: Nfsstat3::NFS3ERR_NOTDIR,
            });
        }
        Ok((dir.fh, (*name).to_owned()))
    }

    /// Creates (or truncates, CREATE UNCHECKED with size 0,
    /// RFC 1813 §3.3.8) the regular file `name` in `dir` with `mode`, and
    /// returns its handle.
    pub async fn create_file(&self, dir: &NfsFh3, name: &str, mode: u32) -> Result<NfsFh3> {
        let how = Createhow3::Unchecked(Sattr3 {
            mode: Some(mode),
            size: Some(0),
            ..Sattr3::default()
        });
        let r = self.nfs.create(dir, name, how).await?;
        match r.obj {
            Some(fh) => Ok(fh),
            // RFC 1813 §3.3.8: the handle is optional; look it up.
            None => Ok(self.nfs.lookup(dir, name).await?.object),
        }
    }

    /// Iterates over the entries of directory `dir` with READDIRPLUS
    /// (RFC 1813 §3.3.17), `.` and `..` included.
    pub fn read_dir(&self, dir: &NfsFh3) -> ReadDirPlus<'_, T> {
        let maxcount = self
            .opts
            .dir_bytes
            .unwrap_or_else(|| self.fsinfo.dtpref.saturating_mul(8).max(DEFAULT_DIR_BYTES))
            .clamp(1024, 1 << 20);
        ReadDirPlus {
            mount: self,
            dir: dir.clone(),
            cookie: 0,
            verf: FixedOpaque([0; 8]),
            buf: VecDeque::new(),
            eof: false,
            calls: 0,
            maxcount,
        }
    }

    /// Every entry of directory `dir` except `.` and `..`, in server
    /// order.
    pub async fn list_dir(&self, dir: &NfsFh3) -> Result<Vec<Entryplus3>> {
        let mut it = self.read_dir(dir);
        let mut out = Vec::new();
        while let Some(e) = it.next_entry().await? {
            if e.name.0[..] != *b"." && e.name.0[..] != *b".." {
                out.push(e);
            }
        }
        Ok(out)
    }
}

fn io_size(opt: Option<u32>, pref: u32, max: u32) -> u32 {
    // A server advertising 0 says nothing: use 64 KiB.
    let cap = if max == 0 { 64 << 10 } else { max };
    let want = opt.unwrap_or(if pref == 0 { cap } else { pref });
    want.min(cap).clamp(MIN_IO_SIZE.min(cap), MAX_IO_SIZE)
}

fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// A READDIRPLUS iterator (RFC 1813 §3.3.17): each call resumes at the
/// last entry's cookie with the verifier the server returned, until a
/// reply says `eof`.
#[derive(Debug)]
pub struct ReadDirPlus<'m, T> {
    mount: &'m Mount<T>,
    dir: NfsFh3,
    cookie: u64,
    verf: Cookieverf3,
    buf: VecDeque<Entryplus3>,
    eof: bool,
    calls: u32,
    maxcount: u32,
}

impl<T: ClientTransport> ReadDirPlus<'_, T> {
    /// The next entry, or `None` after the last. A reply that ends
    /// neither with `eof` nor with a new cookie is an
    /// [`Error::Protocol`] (the listing would never end).
    pub async fn next_entry(&mut self) -> Result<Option<Entryplus3>> {
        loop {
            if let Some(e) = self.buf.pop_front() {
                return Ok(Some(e));
            }
            match self.next_page().await? {
                Some(page) => self.buf.extend(page),
                None => return Ok(None),
            }
        }
    }

    /// The entries not yet returned of the current page, else those of
    /// the next READDIRPLUS reply (possibly empty), or `None` after the
    /// last: for callers that act once per reply (streaming output).
    pub async fn next_page(&mut self) -> Result<Option<Vec<Entryplus3>>> {
        if !self.buf.is_empty() {
            return Ok(Some(self.buf.drain(..).collect()));
        }
        if self.eof {
            return Ok(None);
        }
        let r = self
            .mount
            .nfs
            .readdirplus(
                &self.dir,
                self.cookie,
                self.verf,
                self.page_bytes() / 4,
                self.page_bytes(),
            )
            .await?;
        self.calls += 1;
        self.verf = r.cookieverf;
        self.eof = r.eof;
        if !r.eof {
            match r.entries.last() {
                Some(last) if last.cookie != self.cookie => self.cookie = last.cookie,
                _ => return Err(Error::Protocol("READDIRPLUS made no progress")),
            }
        }
        Ok(Some(r.entries))
    }

    /// READDIRPLUS calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// The `maxcount` of the next call: [`FIRST_DIR_BYTES`] doubled per
    /// call made, up to the listing's.
    fn page_bytes(&self) -> u32 {
        FIRST_DIR_BYTES
            .checked_shl(self.calls.min(16))
            .unwrap_or(u32::MAX)
            .min(self.maxcount)
    }
}

/// The name of a directory entry as text (lossy for non-UTF-8 names).
pub fn entry_name(e: &Entryplus3) -> String {
    String::from_utf8_lossy(&e.name.0).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_size_prefers_option_then_pref_and_caps_at_max() {
        assert_eq!(io_size(None, 65536, 1 << 20), 65536);
        assert_eq!(io_size(Some(1 << 20), 65536, 262144), 262144);
        assert_eq!(io_size(Some(100), 65536, 1 << 20), MIN_IO_SIZE);
        assert_eq!(io_size(None, 0, 0), 65536);
        assert_eq!(io_size(Some(8 << 20), 0, 16 << 20), MAX_IO_SIZE);
        assert_eq!(io_size(None, 0, 512), 512);
    }

    #[test]
    fn components_skip_empty_and_dot() {
        let c: Vec<&str> = components("/a//./b/../c/").collect();
        assert_eq!(c, ["a", "b", "..", "c"]);
    }
}
