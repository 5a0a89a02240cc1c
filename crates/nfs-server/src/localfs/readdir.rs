//! One READDIR / READDIRPLUS page (RFC 1813 §3.3.16, §3.3.17; NFSv4
//! READDIR, RFC 8881 §18.23, uses the same call), in two steps.
//!
//! A READDIRPLUS page of a directory whose attributes the listing cache
//! keeps ([`super::attrcache`]) is served on the calling runtime thread
//! ([`LocalFs::readdir_now`]): the handle's `statx`, the kept cursor (or
//! an `openat` of the directory), the inotify drain, the entries of the
//! kept read-ahead or one `getdents64`, each entry's attributes from the
//! cache. No thread hand-off: a transport that runs a connection's calls
//! inline up to their first wait (the TCP and RPC-over-RDMA shells)
//! answers it without a task of its own, as it does a READ the page
//! cache serves (`rw.rs`). The runtime thread is held for a bounded
//! time: at most [`NOW_ENTRIES`] entries and [`NOW_STATX`] entries the
//! cache does not have (subdirectories, changed files, entries older
//! than the time-to-live) are taken there; at the next one, or if the
//! handle index would have to read its store for the page's entries,
//! the page stops ([`DirStep::Wait`]) and the caller yields, then
//! finishes it under [`super::blocking`] ([`LocalFs::readdir_rest`]),
//! going on from the cursor where the first step stopped (no entry
//! repeated, none skipped). READDIR without attributes, and a directory
//! the cache does not hold, go to that step at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nfs::v3::{Fattr3, Ftype3, NfsFh3, Nfsstat3};
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::FileType;

use super::attrcache::{Kept, View};
use super::attrs::{io_status, sx, Meta};
use super::cursors::{Stamp, MAX_HELD_BYTES};
use super::index::Listed;
use super::ops::open_for_listing;
use super::prefetch::{Help, Owner, Split, CLAIM};
use super::resolve::Node;
use super::LocalFs;
use crate::dircursor::{CursorError, DirCursor, Entry as CursorEntry};
use crate::fh::{Handle, HandleKey, FH_LEN};
use crate::storage::{DirEntry, DirPage, DirRequest, DirSink, StorageResult};

/// Most entries a page takes on the runtime thread (about 0.5 ms of a
/// warm listing on the dev VM); the rest of a larger page is taken after
/// a yield, under [`super::blocking`].
pub(crate) const NOW_ENTRIES: usize = 512;

/// Most `statx` calls (entries the attribute cache does not have) a
/// page makes on the runtime thread.
pub(crate) const NOW_STATX: usize = 16;

/// Fewest entries a read-ahead job covers ([`super::prefetch`]): a
/// listing in small pages (libnfs asks for ~45 entries a call) queues
/// one job per this many entries, not one per page (a job per page cost
/// more in hand-offs, inotify drains and the cache's lock than the
/// `statx` calls it moved: 1.4x the server CPU of an expired libnfs
/// listing). A large page's job covers twice its entries, within
/// [`AHEAD_BYTES`].
pub(crate) const AHEAD_MIN: usize = 1024;

/// Most bytes of entries a cursor reads ahead for its job
/// ([`DirCursor::hold_more`]): half of what a kept cursor may hold.
const AHEAD_BYTES: usize = MAX_HELD_BYTES / 2;

/// A READDIRPLUS entry's attributes (or why there are none) and the
/// file (inode, generation, whether it has several links) to record in
/// the handle index if it is taken.
type PlusEntry = (StorageResult<Fattr3>, Option<(u64, u64, bool)>);

/// One page on its way: the directory, its cursor once open, the
/// attribute cache's view and the files the page listed so far.
pub(crate) struct DirPass<'a> {
    d: Node,
    gen: u64,
    stamp: Stamp,
    req: DirRequest,
    cur: Option<DirCursor>,
    view: Option<View<'a>>,
    listed: Listed,
    /// The cookie the entries go on from.
    from: u64,
    /// Whether the directory ended, once the entries are all in.
    ended: Option<Result<bool, CursorError>>,
    /// Entries the page took.
    taken: usize,
    /// The read-ahead job of the listing, if one came with the cursor
    /// (and still matches the entries the page lists).
    help: Option<Help>,
    /// Whether a read-ahead job came with the cursor.
    helped: bool,
}

/// How far a page got on the runtime thread.
pub(crate) enum DirStep<'a> {
    /// The whole page (or why there is none).
    Done(StorageResult<DirPage>),
    /// The rest would hold the thread too long or wait for the store:
    /// [`LocalFs::readdir_rest`] it after a yield.
    Wait(Box<DirPass<'a>>),
}

impl LocalFs {
    /// A READDIR page as far as it goes from memory on this thread
    /// (module docs): the directory resolved and its attributes handed
    /// to `sink` (its access check), then, for a READDIRPLUS page of a
    /// directory the attribute cache holds, entries until the page ends
    /// or one of the bounds is reached.
    pub(crate) fn readdir_now<'a>(
        &'a self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> DirStep<'a> {
        let mut pass = match self.start_page(dir, req, sink) {
            Ok(p) => p,
            Err(e) => return DirStep::Done(Err(e)),
        };
        if !req.plus || !self.attrs.holds(pass.d.ino, pass.gen) {
            return DirStep::Wait(Box::new(pass));
        }
        if let Err(e) = self.open_cursor(&mut pass) {
            return DirStep::Done(Err(e));
        }
        let ended = match self.entries_now(&mut pass, sink) {
            Some(r) => r,
            None => return DirStep::Wait(Box::new(pass)),
        };
        if !self.index.all_known(pass.d.ino, &pass.listed) {
            // The entries are in; recording them reads the store.
            pass.ended = Some(ended);
            return DirStep::Wait(Box::new(pass));
        }
        DirStep::Done(self.end_page(pass, ended))
    }

    /// The rest of a page [`Self::readdir_now`] stopped: blocking work
    /// (run it under [`super::blocking`]). The entries after the cookie
    /// until `sink` refuses one; the cursor of the listing's last page is
    /// taken up again when this page resumes where it stopped
    /// ([`super::cursors`]); the files a READDIRPLUS page returns are
    /// recorded in the handle index together once the page is done,
    /// before the reply.
    pub(crate) fn readdir_rest<'a>(
        &'a self,
        mut pass: Box<DirPass<'a>>,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPage> {
        if pass.cur.is_none() {
            self.open_cursor(&mut pass)?;
        }
        let ended = match pass.ended.take() {
            Some(r) => r,
            None => self.entries(&mut pass, sink),
        };
        self.index.put_listed(pass.d.ino, &pass.listed);
        self.end_page(*pass, ended)
    }

    /// The directory resolved and its attributes handed to `sink` (its
    /// access check, from the `statx` that resolves the handle, RFC 1813
    /// §3.3.16), before any entry is read.
    fn start_page(
        &self,
        dir: &NfsFh3,
        req: DirRequest,
        sink: &mut dyn DirSink,
    ) -> StorageResult<DirPass<'_>> {
        let d = self.resolve_dir(dir)?;
        sink.dir(&d.meta.fattr(self.fsid()))?;
        let (gen, stamp) = (d.meta.gen(), Stamp::of(&d.meta));
        Ok(DirPass {
            d,
            gen,
            stamp,
            req,
            cur: None,
            view: None,
            listed: Listed::default(),
            from: req.cookie,
            ended: None,
            taken: 0,
            help: None,
            helped: false,
        })
    }

    /// The listing's kept cursor at the page's cookie, or the directory
    /// opened afresh; for READDIRPLUS the attribute cache's view (its
    /// watch set before any entry is read).
    fn open_cursor<'a>(&'a self, pass: &mut DirPass<'a>) -> StorageResult<()> {
        let (ino, gen) = (pass.d.ino, pass.gen);
        let cur = match self.cursors.take(ino, gen, pass.req.cookie, pass.stamp) {
            Some((c, help)) => {
                // Listed with its read-ahead job, whose entries it holds
                // (a READDIRPLUS page, in turn: not shared with the
                // helper threads of `inorder`).
                pass.helped = help.is_some();
                pass.help = help.filter(|_| pass.req.plus && crate::inorder::helpers() == 0);
                c
            }
            None => {
                DirCursor::new(open_for_listing(&**pass.d.dir()?)?).map_err(|e| io_status(&e))?
            }
        };
        // Attributes kept from an earlier listing, if still coherent
        // (`attrcache`).
        if pass.req.plus {
            pass.view = self.attrs.open(ino, gen, cur.fd());
        }
        pass.cur = Some(cur);
        Ok(())
    }

    /// The entries on this thread, within [`NOW_ENTRIES`] and
    /// [`NOW_STATX`]: whether the directory ended, or `None` when the
    /// page stopped at a bound (then [`DirPass::from`] is where it goes
    /// on).
    fn entries_now(
        &self,
        pass: &mut DirPass<'_>,
        sink: &mut dyn DirSink,
    ) -> Option<Result<bool, CursorError>> {
        let (mut entries, mut statx) = (NOW_ENTRIES, NOW_STATX);
        let mut bound = false;
        let DirPass {
            d,
            cur,
            view,
            listed,
            from,
            req,
            taken,
            help,
            ..
        } = pass;
        let cur = cur.as_mut()?;
        let r = cur.read(*from, req.size_hint, |e| {
            let mut fh = [0u8; FH_LEN];
            let at = Self::help_at(help, e);
            // An entry its job is reading now is waited for after the
            // yield, not on this thread.
            let kept = match self.entry_helped(d, e, view.as_ref(), help, at, false, &mut fh) {
                Ok(k) => Ok(k),
                Err(Some(stale)) if statx > 0 && entries > 0 => {
                    statx -= 1;
                    Err(stale)
                }
                Err(_) => {
                    bound = true;
                    return false;
                }
            };
            if entries == 0 {
                bound = true;
                return false;
            }
            entries -= 1;
            let (r, file) = match kept {
                Ok(k) => k,
                Err(stale) => self.entry_stat(d, e, view.as_ref(), stale, &mut fh),
            };
            let t = self.take_plus(sink, d, e, r, file, &fh, listed);
            Self::took(help, at, t);
            *taken += usize::from(t);
            t
        });
        if bound && matches!(r, Ok(false)) {
            *from = cur.resume_cookie().unwrap_or(*from);
            return None;
        }
        Some(r)
    }

    /// The entries (all of them blocking work): whether the directory
    /// ended.
    fn entries(&self, pass: &mut DirPass<'_>, sink: &mut dyn DirSink) -> Result<bool, CursorError> {
        let DirPass {
            d,
            cur,
            view,
            listed,
            from,
            req,
            taken,
            help,
            ..
        } = pass;
        let Some(cur) = cur.as_mut() else {
            return Err(CursorError::Io(std::io::Error::other("no cursor")));
        };
        if req.plus && help.is_some() {
            // With the listing's read-ahead job: in turn, waiting for
            // the entries the job is reading.
            let view = view.as_ref();
            return cur.read(*from, req.size_hint, |e| {
                let mut fh = [0u8; FH_LEN];
                let at = Self::help_at(help, e);
                let (r, file) = match self.entry_helped(d, e, view, help, at, true, &mut fh) {
                    Ok(k) => k,
                    Err(stale) => self.entry_stat(d, e, view, stale.flatten(), &mut fh),
                };
                let t = self.take_plus(sink, d, e, r, file, &fh, listed);
                Self::took(help, at, t);
                *taken += usize::from(t);
                t
            });
        }
        if !req.plus {
            return cur.read(*from, req.size_hint, |e| {
                sink.entry(DirEntry {
                    fileid: self.entry_fileid(d, e),
                    name: e.name(),
                    cookie: e.cookie(),
                    plus: None,
                })
            });
        }
        let view = view.as_ref();
        // The entries' `statx` (most of a page's time) runs partly on a
        // helper thread, ahead of the sink in directory order.
        let prep = |e: &CursorEntry<'_>| {
            let mut fh = [0u8; FH_LEN];
            let (r, file) = self.entry_plus(d, e, view, &mut fh);
            (r, file, fh)
        };
        cur.read_prepared(*from, req.size_hint, &prep, |e, (r, file, fh)| {
            let t = self.take_plus(sink, d, e, r, file, &fh, listed);
            *taken += usize::from(t);
            t
        })
    }

    /// Where entry `e` is in the listing's read-ahead job ([`Split`]), if
    /// it is the job's next one; a page that lists another entry there
    /// (the directory changed, or the job's entries are all listed)
    /// drops the job.
    fn help_at(help: &mut Option<Help>, e: &CursorEntry<'_>) -> Option<usize> {
        let at = help.as_ref()?.index_of(e.name());
        if at.is_none() {
            *help = None;
        }
        at
    }

    /// The page took (`taken`) the entry at `at` of its job, or not.
    fn took(help: &mut Option<Help>, at: Option<usize>, taken: bool) {
        if let (true, Some(_), Some(h)) = (taken, at, help.as_mut()) {
            h.took();
        }
    }

    /// [`Self::entry_kept`] for entry `e`, at `at` in the listing's
    /// read-ahead job: an entry the job claimed and has not read yet is
    /// waited for (`wait`; at most [`super::prefetch`]'s stall time) and
    /// then taken from the cache; one the job has not claimed is claimed
    /// for the page. `Err(Some(stale))`: the page reads it with `statx`
    /// (`stale` as for [`Self::entry_kept`]); `Err(None)`: the job is
    /// reading it and the page may not wait.
    #[allow(clippy::too_many_arguments)]
    fn entry_helped(
        &self,
        d: &Node,
        e: &CursorEntry<'_>,
        view: Option<&View<'_>>,
        help: &Option<Help>,
        at: Option<usize>,
        wait: bool,
        fh: &mut [u8; FH_LEN],
    ) -> Result<PlusEntry, Option<Option<Kept>>> {
        let stale = match self.entry_kept(d, e, view, fh) {
            Ok(k) => return Ok(k),
            Err(stale) => stale,
        };
        let (Some(h), Some(i), Some(_)) = (help, at, view_of(e, view)) else {
            return Err(Some(stale));
        };
        match h.split().owner(i) {
            Owner::Page => return Err(Some(stale)),
            Owner::Job(false) if !wait => return Err(None),
            Owner::Job(false) => {
                h.split().wait(i);
            }
            Owner::Job(true) => {}
        }
        // What the job read (or, if it could not keep it, a `statx`).
        self.entry_kept(d, e, view, fh).map_err(Some)
    }

    /// Offers a READDIRPLUS entry to `sink`, noting its file in `listed`
    /// if taken: whether it was.
    #[allow(clippy::too_many_arguments)]
    fn take_plus(
        &self,
        sink: &mut dyn DirSink,
        d: &Node,
        e: &CursorEntry<'_>,
        r: StorageResult<Fattr3>,
        file: Option<(u64, u64, bool)>,
        fh: &[u8],
        listed: &mut Listed,
    ) -> bool {
        let taken = sink.entry(DirEntry {
            fileid: self.entry_fileid(d, e),
            name: e.name(),
            cookie: e.cookie(),
            plus: Some(r.map(|at| (fh, at))),
        });
        if let (true, Some((ino, gen, linked))) = (taken, file) {
            listed.push(ino, gen, linked, e.name());
        }
        taken
    }

    /// The end of a page: the cursor kept if the directory goes on, the
    /// verifier its cookies are valid under.
    fn end_page(
        &self,
        mut pass: DirPass<'_>,
        ended: Result<bool, CursorError>,
    ) -> StorageResult<DirPage> {
        let Some(cur) = pass.cur.take() else {
            return Err(Nfsstat3::NFS3ERR_SERVERFAULT);
        };
        let mut cur = cur;
        match ended {
            Ok(eof) => {
                let verf = cur.verifier();
                if !eof {
                    // The listing's job goes on with the cursor while it
                    // has entries for the next pages; else a new one.
                    let help = match pass.help.take().filter(|h| !h.spent()) {
                        Some(h) => Some(h),
                        None => match self.read_ahead(&pass, &mut cur) {
                            Ok(h) => h,
                            // The read-ahead failed: the next page
                            // opens the directory afresh.
                            Err(_) => return Ok(DirPage { verf, eof }),
                        },
                    };
                    self.cursors
                        .keep(pass.d.ino, pass.gen, pass.stamp, cur, help);
                }
                Ok(DirPage { verf, eof })
            }
            Err(CursorError::BadCookie) => Err(Nfsstat3::NFS3ERR_BAD_COOKIE),
            Err(CursorError::Io(e)) => Err(io_status(&e)),
        }
    }

    /// The attributes of the entries of the listing's next pages read
    /// into the cache on the export's prefetch thread
    /// ([`super::prefetch`]), if this page had to read some itself or
    /// had a job (so a warm listing queues nothing): `cur` first reads
    /// ahead until it holds twice the page's entries, at least
    /// [`AHEAD_MIN`] (within [`AHEAD_BYTES`]), and the job covers those.
    /// The job, to keep with the cursor; `Err` if reading ahead failed.
    fn read_ahead(&self, pass: &DirPass<'_>, cur: &mut DirCursor) -> Result<Option<Help>, ()> {
        let Some(view) = pass.view.as_ref() else {
            return Ok(None);
        };
        if view.missed() == 0 && !pass.helped {
            return Ok(None);
        }
        let want = pass.taken.saturating_mul(2).max(AHEAD_MIN);
        cur.hold_more(want, AHEAD_BYTES).map_err(|_| ())?;
        let held = cur.held_entries(want);
        if held.is_empty() {
            return Ok(None);
        }
        let (ino, gen) = (pass.d.ino, pass.gen);
        let Ok(dir) = pass.d.dir() else {
            return Ok(None);
        };
        let dir = Arc::clone(dir);
        let cache = Arc::clone(&self.attrs);
        let (export_id, dev, key) = (self.export_id, self.dev, self.key.clone());
        let split = Arc::new(Split::new(held));
        let job = Arc::clone(&split);
        let ticket = self.prefetch.submit(move |cancel| {
            let tagger = Tagger {
                export_id,
                dev,
                key: &key,
            };
            // Drains the events so far; its epoch and time are taken
            // before any `statx` (`attrcache`).
            let Some(view) = cache.open_watched(ino, gen) else {
                return;
            };
            while !cancel.load(Ordering::Relaxed) {
                let Some(r) = job.claim(CLAIM) else {
                    return;
                };
                for i in r.clone() {
                    let Some((c_name, ino, file_type)) = job.entries().get(i) else {
                        continue;
                    };
                    let name = c_name.to_bytes();
                    if matches!(name, b"." | b"..") || file_type == FileType::Directory {
                        continue;
                    }
                    let stale = match view.peek(name, ino) {
                        Ok(()) => continue,
                        Err(stale) => stale,
                    };
                    if let Ok((m, kept)) = tagger.stat(dir.as_fd(), c_name, stale) {
                        if !m.is_dir() && m.nlink() == 1 {
                            view.put(name, kept);
                        }
                    }
                }
                job.finish(r);
            }
        });
        Ok(ticket.map(|t| Help::new(split, t)))
    }

    /// A READDIR entry's file id: ".." at the export root is the root
    /// itself (as Linux).
    fn entry_fileid(&self, d: &Node, e: &CursorEntry<'_>) -> u64 {
        if d.ino == self.root_ino && e.name() == b".." {
            self.root_ino
        } else {
            e.ino()
        }
    }

    /// A READDIRPLUS entry's attributes, its handle's bytes into `fh`:
    /// kept in `view` from an earlier listing ([`Self::entry_kept`]), or
    /// from one `statx` ([`Self::entry_stat`]). Also the file (inode,
    /// generation, whether it has several links) to record in the index
    /// as a LOOKUP would, if the entry is taken.
    fn entry_plus(
        &self,
        d: &Node,
        e: &CursorEntry<'_>,
        view: Option<&View<'_>>,
        fh: &mut [u8; FH_LEN],
    ) -> PlusEntry {
        match self.entry_kept(d, e, view, fh) {
            Ok(r) => r,
            Err(stale) => self.entry_stat(d, e, view, stale, fh),
        }
    }

    /// [`Self::entry_plus`] when it needs no system call: none for ".."
    /// at the export root (as Linux), or the attributes `view` keeps.
    /// `Err`: a `statx` is needed, with the entry `view` keeps past its
    /// time-to-live, if any.
    fn entry_kept(
        &self,
        d: &Node,
        e: &CursorEntry<'_>,
        view: Option<&View<'_>>,
        fh: &mut [u8; FH_LEN],
    ) -> Result<PlusEntry, Option<Kept>> {
        if d.ino == self.root_ino && e.name() == b".." {
            return Ok((Err(Nfsstat3::NFS3ERR_ACCES), None));
        }
        let kept = view_of(e, view).ok_or(None)?.lookup(e.name(), e.ino())?;
        Ok(self.entry_of(e, kept, fh))
    }

    /// [`Self::entry_plus`] by one `statx` relative to the open directory
    /// (then kept, if the watch covers the entry); none for a mount point
    /// inside the export (not crossed). The handle's tag is `stale`'s
    /// (the entry kept past its time-to-live) when that was the same
    /// inode and generation, else computed.
    fn entry_stat(
        &self,
        d: &Node,
        e: &CursorEntry<'_>,
        view: Option<&View<'_>>,
        stale: Option<Kept>,
        fh: &mut [u8; FH_LEN],
    ) -> PlusEntry {
        let tagger = Tagger {
            export_id: self.export_id,
            dev: self.dev,
            key: &self.key,
        };
        let (m, kept) = match d
            .dir()
            .and_then(|fd| tagger.stat(fd.as_fd(), e.c_name(), stale))
        {
            Ok(r) => r,
            Err(s) => return (Err(s), None),
        };
        // What the parent's watch covers (`attrcache`).
        if let Some(v) = view_of(e, view).filter(|_| !m.is_dir() && m.nlink() == 1) {
            v.put(e.name(), kept.clone());
        }
        self.entry_of(e, kept, fh)
    }

    /// The entry's attributes and handle, and the file to record.
    fn entry_of(&self, e: &CursorEntry<'_>, kept: Kept, fh: &mut [u8; FH_LEN]) -> PlusEntry {
        let ino = kept.attrs.fileid;
        let linked = kept.attrs.nlink > 1 && kept.attrs.ftype != Ftype3::NF3DIR;
        let file = (!e.is_dot() && ino != self.root_ino).then_some((ino, kept.gen, linked));
        *fh = self.handle_of(ino, kept.gen).with_tag(&kept.tag);
        (Ok(kept.attrs), file)
    }

    /// The handle of inode `ino`, generation `gen` in this export.
    fn handle_of(&self, ino: u64, gen: u64) -> Handle {
        Handle {
            export_id: self.export_id,
            ino,
            gen,
        }
    }
}

/// What an entry's `statx` needs of its export to make what the
/// attribute cache keeps: the handle's tag.
struct Tagger<'k> {
    export_id: u64,
    dev: u64,
    key: &'k HandleKey,
}

impl Tagger<'_> {
    /// One `statx` of `name` relative to the open directory `dir` and what
    /// the cache keeps of it; ACCES for a mount point inside the export
    /// (not crossed). The handle's tag is `stale`'s (the entry kept past
    /// its time-to-live) when that was the same inode and generation, else
    /// computed.
    fn stat(
        &self,
        dir: BorrowedFd<'_>,
        name: impl rustix::path::Arg,
        stale: Option<Kept>,
    ) -> StorageResult<(Meta, Kept)> {
        let m = sx(Meta::at_c(dir, name))?;
        if m.dev() != self.dev {
            return Err(Nfsstat3::NFS3ERR_ACCES);
        }
        // The fsid is the export id (`LocalFs::fsid`).
        let attrs = m.fattr(self.export_id);
        let gen = m.gen();
        let tag = match stale {
            Some(s) if s.attrs.fileid == attrs.fileid && s.gen == gen => s.tag,
            _ => {
                let h = Handle {
                    export_id: self.export_id,
                    ino: attrs.fileid,
                    gen,
                };
                Handle::tag_of(&h.to_bytes(self.key))
            }
        };
        Ok((m, Kept { attrs, gen, tag }))
    }
}

/// The cache's view for an entry it may keep: not "." or "..", not a
/// directory.
fn view_of<'v, 'a>(e: &CursorEntry<'_>, view: Option<&'v View<'a>>) -> Option<&'v View<'a>> {
    view.filter(|_| !e.is_dot() && e.file_type() != FileType::Directory)
}
