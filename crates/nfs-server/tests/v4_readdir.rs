//! NFSv4.1 READDIR paging (RFC 8881 §18.23): exact `maxcount`, listings
//! while the directory changes, stale cookies and verifiers.

mod v4_common;

use std::collections::BTreeMap;
use std::path::Path;

use nfs::v4::attr::*;
use nfs::v4::*;
use nfs_server::v4::SessionLimits;
use v4_common::*;
use xdr::{Encode, FixedOpaque};

fn readdir_op(cookie: u64, verf: [u8; 8], maxcount: u32, attrs: &[u32]) -> NfsArgop4 {
    NfsArgop4::Readdir(Readdir4Args {
        cookie,
        cookieverf: FixedOpaque(verf),
        dircount: maxcount,
        maxcount,
        attr_request: Bitmap4::from_bits(attrs),
    })
}

/// READDIR of the export root: the result or the failing status.
async fn readdir(
    me: &C4,
    cookie: u64,
    verf: [u8; 8],
    maxcount: u32,
    attrs: &[u32],
) -> Result<Readdir4ResOk, Nfsstat4> {
    readdir_in(me, None, cookie, verf, maxcount, attrs).await
}

/// READDIR of the root's child `sub` (the root itself with `None`).
async fn readdir_in(
    me: &C4,
    sub: Option<&'static str>,
    cookie: u64,
    verf: [u8; 8],
    maxcount: u32,
    attrs: &[u32],
) -> Result<Readdir4ResOk, Nfsstat4> {
    // Not cached (cachethis false): listings may be larger than the
    // session's cached-reply limit.
    let id = me.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let r = me
        .ops(
            [me.sequence(0, id, false), NfsArgop4::Putrootfh(())]
                .into_iter()
                .chain(sub.map(|n| NfsArgop4::Lookup(Lookup4Args { objname: name(n) })))
                .chain([readdir_op(cookie, verf, maxcount, attrs)])
                .collect(),
        )
        .await;
    match r.resarray.last() {
        Some(NfsResop4::Readdir(Res4::Ok(d))) => Ok(d.clone()),
        _ => Err(r.status),
    }
}

fn files(dir: &Path, prefix: &str, n: usize) {
    for i in 0..n {
        std::fs::write(dir.join(format!("{prefix}-{i:05}")), b"").unwrap();
    }
}

const ATTRS: &[u32] = &[FATTR4_TYPE, FATTR4_FILEID, FATTR4_SIZE, FATTR4_RDATTR_ERROR];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxcount_is_exact_and_pages_survive_entries_coming_and_going() {
    let srv = serve("v4rd", SessionLimits::default()).await;
    files(srv.dir.path(), "keep", 300);
    files(srv.dir.path(), "gone", 100);
    let mut me = C4::connect(&srv).await;
    me.establish("v4rd").await;
    let all = readdir(&me, 0, [0; 8], 1 << 20, ATTRS).await.unwrap();
    assert!(all.eof);
    assert_eq!(all.entries.len(), 400, "no . or ..");
    // READDIR4resok: verifier, entries (each with its list word), list
    // end, eof.
    let size = |k: usize| {
        8 + all.entries[..k]
            .iter()
            .map(|e| 4 + e.encoded_len())
            .sum::<usize>()
            + 8
    };
    for k in [1, 13, 399] {
        let r = readdir(&me, 0, [0; 8], size(k) as u32, ATTRS)
            .await
            .unwrap();
        assert_eq!((r.entries.len(), r.eof), (k, false), "maxcount for {k}");
        let r = readdir(&me, 0, [0; 8], size(k) as u32 - 1, ATTRS).await;
        match r {
            Ok(r) => assert_eq!(r.entries.len(), k - 1),
            Err(s) => assert_eq!((s, k), (Nfsstat4::NFS4ERR_TOOSMALL, 1)),
        }
    }
    // Small pages while entries are removed and created between them.
    let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let (mut cookie, mut verf) = (0, [0; 8]);
    for page in 0.. {
        let r = readdir(&me, cookie, verf, 1200, ATTRS).await.unwrap();
        for e in &r.entries {
            *seen.entry(e.name.0.to_vec()).or_default() += 1;
            let a = FileAttrs::from_fattr4(&e.attrs).unwrap();
            assert!(a.fileid.is_some());
            assert_eq!(a.rdattr_error, Some(Nfsstat4::NFS4_OK));
        }
        cookie = r.entries.last().map_or(cookie, |e| e.cookie);
        verf = r.cookieverf.0;
        if r.eof {
            break;
        }
        for k in 0..2 {
            let _ = std::fs::remove_file(srv.dir.path().join(format!("gone-{:05}", page * 2 + k)));
            std::fs::write(srv.dir.path().join(format!("new-{page}-{k}")), b"").unwrap();
        }
    }
    for i in 0..300 {
        let n = format!("keep-{i:05}").into_bytes();
        assert_eq!(seen.get(&n), Some(&1), "keep-{i:05}");
    }
    assert!(seen.values().all(|&n| n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cookies_and_verifiers_are_refused() {
    let srv = serve("v4stale", SessionLimits::default()).await;
    files(srv.dir.path(), "f", 50);
    let mut me = C4::connect(&srv).await;
    me.establish("v4stale").await;
    let p1 = readdir(&me, 0, [0; 8], 600, &[]).await.unwrap();
    assert!(!p1.eof);
    let (cookie, verf) = (p1.entries.last().unwrap().cookie, p1.cookieverf.0);
    // Another verifier: NOT_SAME; a position the file system refuses, or
    // a reserved cookie: BAD_COOKIE.
    assert_eq!(
        readdir(&me, cookie, [9; 8], 4096, &[]).await.unwrap_err(),
        Nfsstat4::NFS4ERR_NOT_SAME
    );
    assert_eq!(
        readdir(&me, 1 << 63, verf, 4096, &[]).await.unwrap_err(),
        Nfsstat4::NFS4ERR_BAD_COOKIE
    );
    assert_eq!(
        readdir(&me, 2, verf, 4096, &[]).await.unwrap_err(),
        Nfsstat4::NFS4ERR_BAD_COOKIE
    );
    // The good cookie still resumes, and the two pages are the listing.
    let mut names: Vec<_> = p1.entries.iter().map(|e| e.name.0.clone()).collect();
    let (mut c, mut eof) = (cookie, false);
    while !eof {
        let r = readdir(&me, c, verf, 600, &[]).await.unwrap();
        names.extend(r.entries.iter().map(|e| e.name.0.clone()));
        c = r.entries.last().map_or(c, |e| e.cookie);
        eof = r.eof;
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 50);
}

/// A directory removed and made again under the same name while a client
/// holds a cookie of the old one: the old cookie and verifier against the
/// new directory are refused (NFS4ERR_NOT_SAME, RFC 8881 §18.23.3), never
/// a listing from the wrong place; a fresh listing of the new directory is
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_of_a_rewritten_directory_is_refused() {
    let srv = serve("v4rewrite", SessionLimits::default()).await;
    let d = srv.dir.path().join("d");
    std::fs::create_dir(&d).unwrap();
    files(&d, "old", 60);
    let mut me = C4::connect(&srv).await;
    me.establish("v4rewrite").await;
    let p1 = readdir_in(&me, Some("d"), 0, [0; 8], 600, &[])
        .await
        .unwrap();
    assert!(!p1.eof);
    let (cookie, verf) = (p1.entries.last().unwrap().cookie, p1.cookieverf.0);
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::create_dir(&d).unwrap();
    files(&d, "new", 60);
    let r = readdir_in(&me, Some("d"), cookie, verf, 600, &[]).await;
    assert!(
        matches!(
            r,
            Err(Nfsstat4::NFS4ERR_NOT_SAME | Nfsstat4::NFS4ERR_BAD_COOKIE)
        ),
        "{r:?}"
    );
    let all = readdir_in(&me, Some("d"), 0, [0; 8], 1 << 20, &[])
        .await
        .unwrap();
    assert!(all.eof);
    assert_eq!(all.entries.len(), 60);
    assert!(all.entries.iter().all(|e| e.name.0.starts_with(b"new-")));
}

/// READDIR's checks, now made on the attributes the listing itself reads
/// (one storage call, no GETATTR first): a caller without read permission
/// gets NFS4ERR_ACCESS and no entry, a file NFS4ERR_NOTDIR and a symbolic
/// link NFS4ERR_SYMLINK (RFC 8881 §18.23.4), a reserved cookie
/// NFS4ERR_BAD_COOKIE (§18.23.3); a readable directory lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_directories_files_and_links_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let srv = serve("v4rdcheck", SessionLimits::default()).await;
    let root = srv.dir.path();
    for (n, mode) in [("shut", 0o711), ("open", 0o755)] {
        let d = root.join(n);
        std::fs::create_dir(&d).unwrap();
        files(&d, "f", 3);
        std::fs::set_permissions(&d, PermissionsExt::from_mode(mode)).unwrap();
    }
    std::fs::write(root.join("file"), b"").unwrap();
    std::os::unix::fs::symlink("open", root.join("link")).unwrap();
    let mut me = C4::connect(&srv).await;
    me.establish("v4rdcheck").await;
    // Someone other than the owner.
    me.cred = sys_cred(srv.uid.wrapping_add(4242));
    let list = |sub, cookie| readdir_in(&me, Some(sub), cookie, [0; 8], 4096, ATTRS);
    assert_eq!(list("shut", 0).await.unwrap_err(), Nfsstat4::NFS4ERR_ACCESS);
    assert_eq!(list("file", 0).await.unwrap_err(), Nfsstat4::NFS4ERR_NOTDIR);
    assert_eq!(
        list("link", 0).await.unwrap_err(),
        Nfsstat4::NFS4ERR_SYMLINK
    );
    assert_eq!(
        list("open", 1).await.unwrap_err(),
        Nfsstat4::NFS4ERR_BAD_COOKIE
    );
    let r = list("open", 0).await.unwrap();
    assert_eq!((r.entries.len(), r.eof), (3, true));
}

/// READDIR attributes come from the server's listing attribute cache
/// once a directory was listed (nfs_server::localfs, docs/listing.md);
/// a change made locally before a READDIR is in that READDIR's
/// attributes, as it would be without the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_changes_are_in_the_next_readdirs_attributes() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let srv = serve("v4rd-attrs", SessionLimits::default()).await;
    let dir = srv.dir.path().to_path_buf();
    files(&dir, "f", 12);
    let mut me = C4::connect(&srv).await;
    me.establish("v4rd-attrs").await;
    const SIZE_MODE: &[u32] = &[FATTR4_FILEID, FATTR4_SIZE, FATTR4_MODE, FATTR4_CHANGE];
    // Every entry's (size, mode) as READDIR gives them, and as the files
    // have them.
    let listed = |r: &Readdir4ResOk| -> BTreeMap<Vec<u8>, (u64, u32)> {
        r.entries
            .iter()
            .map(|e| {
                let a = FileAttrs::from_fattr4(&e.attrs).unwrap();
                (e.name.0.to_vec(), (a.size.unwrap(), a.mode.unwrap()))
            })
            .collect()
    };
    let actual = || -> BTreeMap<Vec<u8>, (u64, u32)> {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                (
                    e.file_name().into_encoded_bytes(),
                    (m.size(), m.mode() & 0o7777),
                )
            })
            .collect()
    };
    let p = |i: usize| dir.join(format!("f-{i:05}"));
    for round in 0..3 {
        let r = readdir(&me, 0, [0; 8], 1 << 20, SIZE_MODE).await.unwrap();
        assert_eq!(listed(&r), actual(), "round {round}");
        std::fs::write(p(round), vec![b'x'; 100 + round]).unwrap();
        std::fs::set_permissions(p(round + 3), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(p(round + 6))
            .unwrap()
            .set_len(7)
            .unwrap();
        std::fs::rename(p(round + 9), dir.join(format!("moved-{round}"))).unwrap();
    }
    let r = readdir(&me, 0, [0; 8], 1 << 20, SIZE_MODE).await.unwrap();
    assert_eq!(listed(&r), actual());
}
