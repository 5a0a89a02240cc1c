//! READDIRPLUS with the listing attribute cache ([`super::attrcache`]):
//! every change made before a call, locally or through the server, is in
//! that call's listing, which is always the one an uncached export gives;
//! the cache's bounds hold.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nfs::v3::{Fattr3, NfsFh3, StableHow};

use super::attrcache::{self, AttrCacheConfig};
use super::tests::{block, list, name, Tmp};
use super::LocalFs;
use crate::storage::Storage;

/// Every entry of `dir` (READDIRPLUS, pages of 5) with its attributes.
fn listing(lfs: &LocalFs, dir: &NfsFh3) -> BTreeMap<String, Fattr3> {
    let (mut out, mut cookie) = (BTreeMap::new(), 0);
    loop {
        let (es, page) = list(lfs, dir, cookie, 5, true);
        for e in &es {
            if let Some(Ok((_, a))) = &e.plus {
                let n = String::from_utf8(e.name.0.to_vec()).unwrap();
                out.insert(n, a.clone());
            }
        }
        if page.eof {
            return out;
        }
        cookie = es.last().unwrap().cookie;
    }
}

fn cached(t: &Tmp, cfg: AttrCacheConfig) -> (LocalFs, NfsFh3) {
    let lfs = LocalFs::new(&t.0, false).unwrap().with_attr_cache(cfg);
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    (lfs, d)
}

fn uncached(t: &Tmp) -> (LocalFs, NfsFh3) {
    cached(
        t,
        AttrCacheConfig {
            ttl: Duration::ZERO,
            ..AttrCacheConfig::default()
        },
    )
}

fn files(t: &Tmp, n: usize) {
    fs::create_dir_all(t.0.join("d")).unwrap();
    for i in 0..n {
        fs::write(t.0.join(format!("d/f{i}")), vec![b'x'; i]).unwrap();
    }
}

/// A change to make, named.
type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);

/// A long time-to-live: only events can make the cache read a file again.
fn long() -> AttrCacheConfig {
    AttrCacheConfig {
        ttl: Duration::from_secs(3600),
        ..AttrCacheConfig::default()
    }
}

#[test]
fn local_changes_are_in_the_very_next_listing() {
    let t = Tmp::new("ac-local");
    files(&t, 20);
    let (lfs, d) = cached(&t, long());
    let (off, od) = uncached(&t);
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    assert_eq!(lfs.attrs.len(), 20, "every file kept");
    assert_eq!(off.attrs.len(), 0);
    let hits = lfs.attrs.hits();
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    // Every file from the cache (and again the entries each page refused,
    // handed to the next page from the kept cursor's read-ahead).
    assert!(
        lfs.attrs.hits() - hits >= 20,
        "a second listing from the cache"
    );
    let p = |n: &str| t.0.join("d").join(n);
    let changes: Vec<Change<'_>> = vec![
        (
            "write",
            Box::new(|| fs::write(p("f1"), b"longer now").unwrap()),
        ),
        (
            "append",
            Box::new(|| {
                use std::io::Write;
                let mut f = fs::OpenOptions::new().append(true).open(p("f2")).unwrap();
                f.write_all(b"more").unwrap();
            }),
        ),
        (
            "truncate",
            Box::new(|| {
                fs::OpenOptions::new()
                    .write(true)
                    .open(p("f3"))
                    .unwrap()
                    .set_len(1)
                    .unwrap()
            }),
        ),
        (
            "chmod",
            Box::new(|| fs::set_permissions(p("f4"), fs::Permissions::from_mode(0o600)).unwrap()),
        ),
        (
            "utimes",
            Box::new(|| {
                let f = fs::File::options().write(true).open(p("f5")).unwrap();
                f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
                    .unwrap();
            }),
        ),
        ("rename", Box::new(|| fs::rename(p("f6"), p("g6")).unwrap())),
        (
            "rename-over",
            Box::new(|| fs::rename(p("f7"), p("f8")).unwrap()),
        ),
        ("unlink", Box::new(|| fs::remove_file(p("f9")).unwrap())),
        ("create", Box::new(|| fs::write(p("new"), b"abc").unwrap())),
        (
            "replace-by-dir",
            Box::new(|| {
                fs::remove_file(p("f10")).unwrap();
                fs::create_dir(p("f10")).unwrap();
            }),
        ),
        (
            "fd-write-after-rename-in",
            Box::new(|| {
                fs::rename(p("f11"), t.0.join("outside")).unwrap();
                fs::write(t.0.join("outside"), b"changed outside").unwrap();
                fs::rename(t.0.join("outside"), p("f11")).unwrap();
            }),
        ),
    ];
    for (what, change) in changes {
        change();
        assert_eq!(listing(&lfs, &d), listing(&off, &od), "after {what}");
    }
    assert!(
        lfs.attrs.hits() - hits > 20 * 5,
        "the untouched files came from the cache"
    );
}

#[test]
fn changes_through_the_server_are_in_the_next_listing() {
    let t = Tmp::new("ac-server");
    files(&t, 10);
    let (lfs, d) = cached(&t, long());
    let (off, od) = uncached(&t);
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    let f = block(lfs.lookup(&d, &name("f3"))).unwrap();
    block(lfs.write(&f, 100, b"abc", StableHow::UNSTABLE)).unwrap();
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    assert_eq!(listing(&lfs, &d)["f3"].size, 103);
    // Through the other export (another server on the same files).
    let g = block(off.lookup(&od, &name("f4"))).unwrap();
    block(off.write(&g, 0, &[1; 50], StableHow::FILE_SYNC)).unwrap();
    assert_eq!(listing(&lfs, &d)["f4"].size, 50);
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
}

/// A file with two links is never kept (a change through the other name
/// is reported to the other directory); a LINK through the server drops
/// what was kept of the file.
#[test]
fn hard_linked_files_are_read_each_time() {
    let t = Tmp::new("ac-links");
    files(&t, 4);
    fs::create_dir(t.0.join("e")).unwrap();
    fs::hard_link(t.0.join("d/f1"), t.0.join("e/other")).unwrap();
    let (lfs, d) = cached(&t, long());
    assert_eq!(listing(&lfs, &d)["f1"].nlink, 2);
    assert_eq!(lfs.attrs.len(), 3, "f1 not kept");
    fs::write(t.0.join("e/other"), b"through the other link").unwrap();
    assert_eq!(listing(&lfs, &d)["f1"].size, 22);
    // f2 is kept; the server links it elsewhere, then it is written
    // through the new name.
    let f2 = block(lfs.lookup(&d, &name("f2"))).unwrap();
    let e = block(lfs.lookup(&lfs.root(), &name("e"))).unwrap();
    block(lfs.link(&f2, &e, &name("f2-link"))).unwrap();
    fs::write(t.0.join("e/f2-link"), b"0123456789").unwrap();
    let l = listing(&lfs, &d);
    assert_eq!((l["f2"].nlink, l["f2"].size), (2, 10));
}

/// What inotify cannot see (here a link made by another process, then a
/// write through it) is read again once the time-to-live is over.
#[test]
fn the_time_to_live_bounds_what_no_event_reports() {
    let t = Tmp::new("ac-ttl");
    files(&t, 3);
    fs::create_dir(t.0.join("e")).unwrap();
    let ttl = Duration::from_millis(200);
    let (lfs, d) = cached(
        &t,
        AttrCacheConfig {
            ttl,
            ..AttrCacheConfig::default()
        },
    );
    let (off, od) = uncached(&t);
    listing(&lfs, &d);
    fs::hard_link(t.0.join("d/f2"), t.0.join("e/x")).unwrap();
    fs::write(t.0.join("e/x"), b"unseen by d's watch").unwrap();
    std::thread::sleep(ttl + Duration::from_millis(50));
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    assert_eq!(listing(&lfs, &d)["f2"].size, 19);
}

/// Every entry of `dir` (READDIRPLUS, pages of 5) with its handle.
fn handles(lfs: &LocalFs, dir: &NfsFh3) -> BTreeMap<String, NfsFh3> {
    let (mut out, mut cookie) = (BTreeMap::new(), 0);
    loop {
        let (es, page) = list(lfs, dir, cookie, 5, true);
        for e in &es {
            let n = String::from_utf8(e.name.0.to_vec()).unwrap();
            if let (Some(Ok((fh, _))), false) = (&e.plus, n.starts_with('.')) {
                out.insert(n, fh.clone());
            }
        }
        if page.eof {
            return out;
        }
        cookie = es.last().unwrap().cookie;
    }
}

/// The handles of a listing are the files' own (LOOKUP's) whether the
/// cache computes them (cold), keeps them (warm) or reads the entry again
/// past the time-to-live and keeps the tag of the same inode and
/// generation; a file replaced under the same name gets its new handle.
#[test]
fn listed_handles_are_lookups_cold_warm_and_past_the_ttl() {
    let t = Tmp::new("ac-fh");
    files(&t, 12);
    let ttl = Duration::from_millis(200);
    let (lfs, d) = cached(
        &t,
        AttrCacheConfig {
            ttl,
            ..AttrCacheConfig::default()
        },
    );
    let lookups = |lfs: &LocalFs| -> BTreeMap<String, NfsFh3> {
        (0..12)
            .map(|i| {
                let n = format!("f{i}");
                let fh = block(lfs.lookup(&d, &name(&n))).unwrap();
                (n, fh)
            })
            .collect()
    };
    let want = lookups(&lfs);
    let hits = lfs.attrs.hits();
    assert_eq!(handles(&lfs, &d), want, "cold");
    assert_eq!(handles(&lfs, &d), want, "warm");
    assert!(
        lfs.attrs.hits() >= hits + 12,
        "the warm listing came from the cache"
    );
    std::thread::sleep(ttl + Duration::from_millis(50));
    assert_eq!(handles(&lfs, &d), want, "past the time-to-live");
    fs::remove_file(t.0.join("d/f3")).unwrap();
    fs::write(t.0.join("d/f3"), b"new file").unwrap();
    std::thread::sleep(ttl + Duration::from_millis(50));
    let now = handles(&lfs, &d);
    assert_eq!(now, lookups(&lfs));
    assert_ne!(now["f3"], want["f3"]);
}

/// Hostile: more directories listed than `max_dirs`, more files than
/// `max_entries`, watches refused: the bounds trip, and every listing is
/// still the uncached one.
#[test]
fn the_bounds_hold_and_listings_stay_exact() {
    let t = Tmp::new("ac-bounds");
    files(&t, 30);
    for s in ["a", "b", "c"] {
        fs::create_dir(t.0.join(s)).unwrap();
        for i in 0..8 {
            fs::write(t.0.join(s).join(format!("{i}")), b"").unwrap();
        }
    }
    let cfg = AttrCacheConfig {
        ttl: Duration::from_secs(3600),
        max_dirs: 2,
        max_entries: 20,
    };
    let (lfs, d) = cached(&t, cfg);
    let (off, od) = uncached(&t);
    let (dirs0, entries0, watches0) = attrcache::trips();
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    assert_eq!(lfs.attrs.len(), 20, "at most max_entries kept");
    assert!(attrcache::trips().1 > entries0);
    for s in ["a", "b", "c"] {
        let sd = block(lfs.lookup(&lfs.root(), &name(s))).unwrap();
        let so = block(off.lookup(&off.root(), &name(s))).unwrap();
        assert_eq!(listing(&lfs, &sd), listing(&off, &so));
        assert!(lfs.attrs.dirs() <= 2);
        assert!(lfs.attrs.len() <= 20);
    }
    assert!(attrcache::trips().0 > dirs0, "a directory dropped");
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    // The system refuses watches: nothing kept, listings exact.
    let (lfs, d) = cached(&t, long());
    lfs.attrs
        .refuse_watches
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(listing(&lfs, &d), listing(&off, &od));
    assert_eq!((lfs.attrs.len(), lfs.attrs.dirs()), (0, 0));
    assert!(attrcache::trips().2 > watches0);
}
