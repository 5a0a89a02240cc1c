//! Listings in pages with the kept directory cursors ([`super::cursors`]):
//! entries neither repeated nor skipped, changes between pages seen, the
//! cursor bound holding.

use std::collections::BTreeMap;
use std::fs;

use nfs::v3::NfsFh3;

use super::cursors::{self, Cursors};
use super::tests::{block, list, list_sized, name, Tmp};
use super::LocalFs;
use crate::storage::Storage;

fn names(es: &[super::tests::OwnedEntry]) -> Vec<String> {
    es.iter()
        .map(|e| String::from_utf8(e.name.0.to_vec()).unwrap())
        .collect()
}

/// Lists `dir` from `cookie` to the end in pages of `n`: every name and
/// how many times it came.
fn rest(lfs: &LocalFs, dir: &NfsFh3, mut cookie: u64, n: usize) -> BTreeMap<String, u32> {
    let mut seen = BTreeMap::new();
    loop {
        let (es, page) = list(lfs, dir, cookie, n, true);
        for e in &es {
            let (fh, a) = match &e.plus {
                Some(Ok(p)) => p.clone(),
                other => panic!("{:?}: {other:?}", e.name),
            };
            if e.name.0[..] != b".."[..] {
                assert_eq!(block(lfs.getattr(&fh)).unwrap(), a, "{:?}", e.name);
            }
        }
        for n in names(&es) {
            *seen.entry(n).or_default() += 1;
        }
        if page.eof {
            return seen;
        }
        cookie = es.last().unwrap().cookie;
    }
}

fn files(t: &Tmp, sub: &str, n: usize) {
    fs::create_dir_all(t.0.join(sub)).unwrap();
    for i in 0..n {
        fs::write(t.0.join(sub).join(format!("f-{i:04}")), b"").unwrap();
    }
}

#[test]
fn pages_go_on_with_the_kept_cursor_and_return_every_entry_once() {
    let t = Tmp::new("cur-pages");
    files(&t, "d", 300);
    let lfs = LocalFs::new(&t.0, true).unwrap();
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    let seen = rest(&lfs, &d, 0, 7);
    assert_eq!(seen.len(), 302);
    assert!(seen.values().all(|&c| c == 1), "an entry came twice");
    // All but the first page went on with the cursor of the one before.
    assert!(
        lfs.cursors.resumed() >= 300 / 7,
        "{}",
        lfs.cursors.resumed()
    );
    // A finished listing keeps nothing open.
    assert_eq!(lfs.cursors.len(), 0);
}

/// Large READDIRPLUS pages (their `statx` shared with a helper thread,
/// [`crate::inorder`]): every entry once, each with its own attributes
/// and a handle that resolves to the same file, also across the pages'
/// ends where the helper had gone on ahead.
#[test]
fn large_pages_give_each_entry_its_own_attributes() {
    crate::set_listing_helpers(usize::MAX);
    let t = Tmp::new("cur-large");
    fs::create_dir_all(t.0.join("d")).unwrap();
    for i in 0..3000u64 {
        let f = fs::File::create(t.0.join("d").join(format!("f-{i:04}"))).unwrap();
        f.set_len(i).unwrap();
    }
    let lfs = LocalFs::new(&t.0, true).unwrap();
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    let mut seen = BTreeMap::new();
    let mut cookie = 0;
    loop {
        let (es, page) = list_sized(&lfs, &d, cookie, 1100, true, 256 << 10);
        for e in &es {
            let n = String::from_utf8(e.name.0.to_vec()).unwrap();
            let Some(Ok((fh, a))) = &e.plus else {
                panic!("{n}: {:?}", e.plus)
            };
            if let Some(i) = n.strip_prefix("f-") {
                assert_eq!(a.size, i.parse::<u64>().unwrap(), "{n}");
                assert_eq!(block(lfs.getattr(fh)).unwrap(), *a, "{n}");
            }
            *seen.entry(n).or_insert(0) += 1;
        }
        if page.eof {
            break;
        }
        cookie = es.last().unwrap().cookie;
    }
    assert_eq!(seen.len(), 3002);
    assert!(seen.values().all(|&c| c == 1), "an entry came twice");
}

#[test]
fn entries_removed_or_renamed_between_pages_are_not_listed_from_read_ahead() {
    let t = Tmp::new("cur-change");
    files(&t, "d", 200);
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    let (all, _) = list(&lfs, &d, 0, 1000, false);
    let order = names(&all);
    // First page: two entries; the cursor read ahead (1 KiB buffer: tens
    // of entries) and is kept.
    let (first, page) = list(&lfs, &d, 0, 2, true);
    assert!(!page.eof);
    assert_eq!(lfs.cursors.len(), 1);
    let later: Vec<&String> = order[2..].iter().filter(|n| n.starts_with("f-")).collect();
    let (gone, moved) = (later[0].clone(), later[3].clone());
    // One removed through the server, one renamed behind its back.
    block(lfs.remove(&d, &name(&gone))).unwrap();
    fs::rename(t.0.join("d").join(&moved), t.0.join("d/renamed")).unwrap();
    let seen = rest(&lfs, &d, first[1].cookie, 5);
    assert!(!seen.contains_key(&gone), "{gone} listed after its removal");
    assert!(
        !seen.contains_key(&moved),
        "{moved} listed after its rename"
    );
    assert!(seen.get("renamed").copied().unwrap_or(0) <= 1);
    for n in order[2..].iter().filter(|n| **n != gone && **n != moved) {
        assert_eq!(seen.get(n), Some(&1), "{n}");
    }
}

#[test]
fn the_cursor_bound_holds_and_an_evicted_listing_still_completes() {
    let t = Tmp::new("cur-bound");
    for d in ["a", "b", "c"] {
        files(&t, d, 60);
    }
    let mut lfs = LocalFs::new(&t.0, true).unwrap();
    lfs.cursors = Cursors::new(2);
    let dirs: Vec<NfsFh3> = ["a", "b", "c"]
        .iter()
        .map(|d| block(lfs.lookup(&lfs.root(), &name(d))).unwrap())
        .collect();
    let before = cursors::trips();
    let mut firsts = Vec::new();
    for d in &dirs {
        let (es, page) = list(&lfs, d, 0, 3, true);
        assert!(!page.eof);
        firsts.push(es);
    }
    assert_eq!(lfs.cursors.len(), 2);
    assert!(cursors::trips() > before);
    // "a" was dropped: its listing goes on from a fresh open, complete.
    for (d, first) in dirs.iter().zip(&firsts) {
        let mut seen = rest(&lfs, d, first[2].cookie, 10);
        for n in names(first) {
            *seen.entry(n).or_default() += 1;
        }
        assert_eq!(seen.len(), 62);
        assert!(seen.values().all(|&c| c == 1));
    }
}

#[test]
fn removing_a_directory_closes_its_cursors() {
    let t = Tmp::new("cur-rmdir");
    files(&t, "d", 40);
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    let (_, page) = list(&lfs, &d, 0, 3, false);
    assert!(!page.eof);
    assert_eq!(lfs.cursors.len(), 1);
    for i in 0..40 {
        fs::remove_file(t.0.join(format!("d/f-{i:04}"))).unwrap();
    }
    block(lfs.rmdir(&lfs.root(), &name("d"))).unwrap();
    assert_eq!(lfs.cursors.len(), 0);
}
