//! READDIRPLUS pages served on the runtime thread ([`super::readdir`]):
//! a page of a directory the attribute cache holds finishes on its first
//! poll (no thread hand-off), a cold one yields first, and a page that
//! reaches a bound there goes on after the yield with every entry once,
//! exactly as a page served in one step.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nfs::v3::NfsFh3;

use super::attrcache::AttrCacheConfig;
use super::readdir::{AHEAD_MIN, NOW_ENTRIES, NOW_STATX};
use super::tests::{name, OwnedEntry, Tmp};
use super::LocalFs;
use crate::storage::{DirEntry, DirPage, DirRequest, Storage};

/// Whether `f` finishes on its first poll, and its output.
fn first_poll<F: core::future::Future>(f: F) -> (bool, F::Output) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut f = std::pin::pin!(f);
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(core::future::Future::poll(f.as_mut(), cx))
        })
        .await;
        match first {
            std::task::Poll::Ready(out) => (true, out),
            std::task::Poll::Pending => (false, f.await),
        }
    })
}

/// One READDIRPLUS page of up to `n` entries after `cookie`: whether it
/// finished on its first poll, its entries, its end.
fn page(lfs: &LocalFs, dir: &NfsFh3, cookie: u64, n: usize) -> (bool, Vec<OwnedEntry>, DirPage) {
    let mut out = Vec::new();
    let req = DirRequest {
        cookie,
        plus: true,
        size_hint: 64 * 1024,
    };
    let mut sink = |e: DirEntry<'_>| {
        if out.len() == n {
            return false;
        }
        out.push(OwnedEntry::from(e));
        true
    };
    let (now, page) = first_poll(lfs.readdir(dir, req, &mut sink));
    (now, out, page.unwrap())
}

/// A whole listing in pages of `n`: how many pages finished on their
/// first poll, how many there were, the entries.
fn listing(lfs: &LocalFs, dir: &NfsFh3, n: usize) -> (usize, usize, Vec<OwnedEntry>) {
    let (mut now, mut pages, mut all, mut cookie) = (0, 0, Vec::new(), 0);
    loop {
        let (ready, es, p) = page(lfs, dir, cookie, n);
        now += usize::from(ready);
        pages += 1;
        all.extend(es);
        if p.eof {
            return (now, pages, all);
        }
        cookie = all.last().unwrap().cookie;
    }
}

fn cached(t: &Tmp) -> (LocalFs, NfsFh3) {
    cached_for(t, Duration::from_secs(3600))
}

/// The export of `t` with attributes kept for `ttl`, and its directory `d`.
fn cached_for(t: &Tmp, ttl: Duration) -> (LocalFs, NfsFh3) {
    let cfg = AttrCacheConfig {
        ttl,
        ..AttrCacheConfig::default()
    };
    let lfs = LocalFs::new(&t.0, false).unwrap().with_attr_cache(cfg);
    let d = block_lookup(&lfs, "d");
    (lfs, d)
}

fn block_lookup(lfs: &LocalFs, n: &str) -> NfsFh3 {
    super::tests::block(lfs.lookup(&lfs.root(), &name(n))).unwrap()
}

fn names(es: &[OwnedEntry]) -> Vec<Vec<u8>> {
    es.iter().map(|e| e.name.0.to_vec()).collect()
}

#[test]
fn warm_pages_finish_on_their_first_poll_and_cold_ones_yield() {
    let t = Tmp::new("rd-now");
    fs::create_dir_all(t.0.join("d")).unwrap();
    for i in 0..200 {
        fs::write(t.0.join(format!("d/f{i}")), vec![b'x'; i]).unwrap();
    }
    let (lfs, d) = cached(&t);
    let (now, pages, cold) = listing(&lfs, &d, 20);
    assert_eq!(cold.len(), 202);
    assert!(
        now < pages,
        "a cold listing's first page yields ({now} of {pages} at once)"
    );
    // Once the cache and the handle index hold the directory, every page
    // is served at once, and exactly as the cold listing was.
    let _ = listing(&lfs, &d, 20);
    let (now, pages, warm) = listing(&lfs, &d, 20);
    assert_eq!((now, pages), (pages, 11));
    assert_eq!(warm, cold);
    // A file changed locally: still at once (one `statx` on the thread),
    // with the new mode.
    let f = t.0.join("d/f7");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let (now, pages, after) = listing(&lfs, &d, 20);
    assert_eq!(now, pages);
    let e = after.iter().find(|e| &e.name.0[..] == b"f7").unwrap();
    match &e.plus {
        Some(Ok((_, a))) => assert_eq!(a.mode & 0o777, 0o600),
        other => panic!("{other:?}"),
    }
    // A READDIR without attributes takes no entry on the thread.
    let req = DirRequest {
        cookie: 0,
        plus: false,
        size_hint: 4096,
    };
    let (ready, r) = first_poll(lfs.readdir(&d, req, &mut |_: DirEntry<'_>| true));
    assert!(!ready && r.unwrap().eof);
}

/// A warm page past [`NOW_ENTRIES`] entries, and one with more than
/// [`NOW_STATX`] entries the cache never keeps (subdirectories), stop on
/// the runtime thread and go on after the yield: the same entries, in
/// the same order, with the same cookies, handles and attributes as
/// small pages give, each once.
#[test]
fn a_page_past_a_bound_goes_on_after_the_yield_with_every_entry_once() {
    let t = Tmp::new("rd-bound");
    fs::create_dir_all(t.0.join("d")).unwrap();
    for i in 0..NOW_ENTRIES + 300 {
        fs::write(t.0.join(format!("d/f{i}")), b"").unwrap();
    }
    fs::create_dir_all(t.0.join("s")).unwrap();
    for i in 0..3 * NOW_STATX {
        fs::create_dir(t.0.join(format!("s/sub{i}"))).unwrap();
        fs::write(t.0.join(format!("s/f{i}")), b"y").unwrap();
    }
    let (lfs, d) = cached(&t);
    let s = block_lookup(&lfs, "s");
    for dir in [&d, &s] {
        let (_, _, small) = listing(&lfs, dir, 7);
        let (_, _, again) = listing(&lfs, dir, 7);
        assert_eq!(again, small);
        let (ready, whole, p) = page(&lfs, dir, 0, usize::MAX);
        assert!(!ready, "the page stops at a bound and yields");
        assert!(p.eof);
        assert_eq!(whole, small);
        let mut n = names(&whole);
        n.sort();
        n.dedup();
        assert_eq!(n.len(), whole.len(), "an entry came twice");
    }
    // The stop was not at the cookie the page began at: a later page
    // goes on from a bound in the middle as well.
    let (_, first, _) = page(&lfs, &d, 0, 100);
    let (ready, rest, p) = page(&lfs, &d, first.last().unwrap().cookie, usize::MAX);
    assert!(!ready && p.eof);
    assert_eq!(first.len() + rest.len(), NOW_ENTRIES + 302);
}

/// Names of `dir`'s entries in directory order (an export without the
/// attribute cache, so nothing of `lfs`'s is touched).
fn order(t: &Tmp, dir: &str) -> Vec<String> {
    let off = LocalFs::new(&t.0, false)
        .unwrap()
        .with_attr_cache(AttrCacheConfig {
            ttl: Duration::ZERO,
            ..AttrCacheConfig::default()
        });
    let d = block_lookup(&off, dir);
    let (_, _, all) = listing(&off, &d, 1000);
    all.iter()
        .map(|e| String::from_utf8(e.name.0.to_vec()).unwrap())
        .collect()
}

fn attrs_of<'a>(es: &'a [OwnedEntry], n: &str) -> &'a nfs::v3::Fattr3 {
    match &es
        .iter()
        .find(|e| e.name.0[..] == *n.as_bytes())
        .unwrap()
        .plus
    {
        Some(Ok((_, a))) => a,
        other => panic!("{n}: {other:?}"),
    }
}

/// Past the time-to-live a page that had to read its entries' attributes
/// has the next ones read ahead on the prefetch thread, so the next page
/// is served from the cache on its first poll; a change made after the
/// read-ahead is in the next page when inotify reports it, and once the
/// time-to-live is over when it does not: what the read-ahead read is
/// never served older than the time-to-live.
#[test]
fn the_next_pages_attributes_are_read_ahead_and_never_served_stale() {
    let t = Tmp::new("rd-ahead");
    fs::create_dir_all(t.0.join("d")).unwrap();
    fs::create_dir_all(t.0.join("e")).unwrap();
    for i in 0..1000 {
        fs::write(t.0.join(format!("d/f{i}")), vec![b'x'; i % 300]).unwrap();
    }
    let ord = order(&t, "d");
    let ttl = Duration::from_secs(1);
    let (lfs, d) = cached_for(&t, ttl);
    // The handle index and the cache learn the directory; then every kept
    // entry grows older than the time-to-live.
    let (_, _, cold) = listing(&lfs, &d, 1000);
    assert_eq!(cold.len(), 1002);
    lfs.prefetch.wait_idle();
    std::thread::sleep(ttl + Duration::from_millis(50));

    // Page 1 reads its entries again (more than NOW_STATX: it yields) and
    // queues the read-ahead of the next AHEAD_MIN entries (here: the rest
    // of the directory, which the next pages list with it).
    let n = 256;
    assert!(3 * n <= AHEAD_MIN);
    let (ready, p1, _) = page(&lfs, &d, 0, n);
    assert!(!ready, "past the time-to-live: read again, after a yield");
    assert_eq!(names(&p1), names(&cold[..n]));
    lfs.prefetch.wait_idle();
    // Changed after the read-ahead, with an event: seen.
    let changed = &ord[n + 25];
    fs::set_permissions(
        t.0.join("d").join(changed),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (ready, p2, _) = page(&lfs, &d, p1.last().unwrap().cookie, n);
    assert!(
        ready,
        "read ahead: the next page comes from the cache at once"
    );
    assert_eq!(names(&p2), names(&cold[n..2 * n]));
    assert_eq!(attrs_of(&p2, changed).mode & 0o777, 0o600);
    for e in &p2 {
        let n = String::from_utf8(e.name.0.to_vec()).unwrap();
        let m = fs::symlink_metadata(t.0.join("d").join(&n)).unwrap();
        assert_eq!(attrs_of(&p2, &n).size, m.len(), "{n}");
    }

    // Page 3 was read ahead too (the same job). A change no
    // event reports (a write through a link made elsewhere) is not seen
    // within the time-to-live, and is once it is over.
    let unseen = &ord[2 * n + 45];
    fs::hard_link(t.0.join("d").join(unseen), t.0.join("e/x")).unwrap();
    fs::write(t.0.join("e/x"), b"written through another name").unwrap();
    std::thread::sleep(ttl + Duration::from_millis(50));
    let (ready, p3, _) = page(&lfs, &d, p2.last().unwrap().cookie, n);
    assert!(
        !ready,
        "the read-ahead is past the time-to-live: read again"
    );
    assert_eq!(names(&p3), names(&cold[2 * n..3 * n]));
    assert_eq!(attrs_of(&p3, unseen).size, 28);
    assert_eq!(attrs_of(&p3, unseen).nlink, 2);
}

/// One read-ahead per kept cursor: a page that takes the cursor takes
/// its read-ahead job too, and keeps it with the cursor while the job has
/// entries for the next pages (no second job); listings a client leaves
/// unfinished hold no more read-aheads than kept cursors (at most
/// `MAX_CURSORS`), however many; a warm listing queues none.
#[test]
fn read_aheads_are_bounded_by_the_kept_cursors() {
    // The same bounds as the defaults (one job per cursor), smaller.
    const MAX_CURSORS: usize = 4;
    let t = Tmp::new("rd-ahead-bound");
    let dirs = MAX_CURSORS + 4;
    for k in 0..dirs {
        let d = t.0.join(format!("d{k}"));
        fs::create_dir_all(&d).unwrap();
        for i in 0..if k == 0 { 2 * AHEAD_MIN } else { 40 } {
            fs::write(d.join(format!("f{i}")), b"").unwrap();
        }
    }
    let (mut lfs, _) = {
        fs::create_dir_all(t.0.join("d")).unwrap();
        cached(&t)
    };
    lfs.cursors = super::cursors::Cursors::new(MAX_CURSORS);
    lfs.prefetch = super::prefetch::Prefetch::new(MAX_CURSORS);
    lfs.prefetch.pause(true);
    let d0 = block_lookup(&lfs, "d0");
    let (_, p1, _) = page(&lfs, &d0, 0, 4);
    assert_eq!(lfs.prefetch.waiting(), 1, "a page that read its entries");
    let (_, p2, _) = page(&lfs, &d0, p1.last().unwrap().cookie, 4);
    assert_eq!(
        lfs.prefetch.waiting(),
        1,
        "the next page took the cursor and its job, and kept them: no second job"
    );
    let (_, p3, _) = page(&lfs, &d0, p2.last().unwrap().cookie, 2 * AHEAD_MIN);
    assert_eq!(p1.len() + p2.len() + p3.len(), 2 * AHEAD_MIN + 2);
    assert_eq!(lfs.prefetch.waiting(), 0, "the listing ended: its job too");
    // A warm listing (every entry kept) queues none.
    lfs.prefetch.pause(false);
    lfs.prefetch.wait_idle();
    lfs.prefetch.pause(true);
    let (_, w1, _) = page(&lfs, &d0, 0, AHEAD_MIN);
    let _ = page(&lfs, &d0, w1.last().unwrap().cookie, 4);
    assert_eq!(lfs.prefetch.waiting(), 0);
    // A hostile client: first pages of many directories, never the rest.
    for k in 1..dirs {
        let d = block_lookup(&lfs, &format!("d{k}"));
        let _ = page(&lfs, &d, 0, 4);
    }
    let (waiting, kept) = (lfs.prefetch.waiting(), lfs.cursors.len());
    assert!(kept <= MAX_CURSORS, "{kept}");
    assert!(
        waiting > 0 && waiting <= kept,
        "{waiting} read-aheads for {kept} cursors"
    );
    lfs.prefetch.pause(false);
    lfs.prefetch.wait_idle();
}

/// Past the time-to-live, pages listed while their read-ahead job runs
/// (the page and the job split the entries' `statx` calls): every entry
/// exactly once, in the order of a listing without the cache, each with
/// the attributes the file has (none older than a change inotify
/// reported before the page); a change made while the job runs is in
/// the page. Repeated, as the split depends on timing.
#[test]
fn pages_and_their_read_ahead_split_the_entries_and_list_each_once() {
    let t = Tmp::new("rd-split");
    fs::create_dir_all(t.0.join("d")).unwrap();
    let files = 3 * AHEAD_MIN;
    for i in 0..files {
        fs::write(t.0.join(format!("d/f{i}")), vec![b'x'; i % 200]).unwrap();
    }
    let ord = order(&t, "d");
    let ttl = Duration::from_millis(300);
    let (lfs, d) = cached_for(&t, ttl);
    let (_, _, cold) = listing(&lfs, &d, 1000);
    assert_eq!(
        names(&cold),
        ord.iter()
            .map(|n| n.as_bytes().to_vec())
            .collect::<Vec<_>>()
    );
    let mut mode = 0o640;
    for round in 0..6 {
        lfs.prefetch.wait_idle();
        std::thread::sleep(ttl + Duration::from_millis(20));
        let hits = lfs.attrs.hits();
        // Pages of varying sizes: the job of one is taken up by the next
        // (while it runs), which lists what the job has read from the
        // cache and reads the rest itself.
        let (mut all, mut cookie, mut k) = (Vec::new(), 0, 0usize);
        loop {
            let n = [300, 700, 64, 1500][(round + k) % 4];
            let (_, es, p) = page(&lfs, &d, cookie, n);
            all.extend(es);
            k += 1;
            if k == 2 {
                // Changed while the job reads ahead: reported by inotify,
                // so in the next page.
                mode ^= 0o040;
                let f = t.0.join("d").join(&ord[files - 10]);
                fs::set_permissions(f, fs::Permissions::from_mode(mode)).unwrap();
            }
            if p.eof {
                break;
            }
            cookie = all.last().unwrap().cookie;
        }
        assert_eq!(names(&all), names(&cold), "round {round}");
        for e in &all {
            let n = String::from_utf8(e.name.0.to_vec()).unwrap();
            if n == "." || n == ".." {
                continue;
            }
            let m = fs::symlink_metadata(t.0.join("d").join(&n)).unwrap();
            let a = attrs_of(&all, &n);
            assert_eq!(
                (a.size, a.mode & 0o777),
                (m.len(), m.permissions().mode() & 0o777),
                "{n}"
            );
        }
        assert!(
            lfs.attrs.hits() > hits,
            "the jobs' entries came from the cache"
        );
    }
}
