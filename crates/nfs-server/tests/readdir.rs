//! NFSv3 READDIR/READDIRPLUS paging (RFC 1813 §3.3.16, §3.3.17): exact
//! page sizes, listings while the directory changes, stale cookies.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{start, Client, TempDir};
use nfs::v3::*;
use xdr::{Encode, FixedOpaque};

/// One READDIR call.
async fn readdir(c: &Client, dir: &NfsFh3, cookie: u64, verf: [u8; 8], count: u32) -> Readdir3Res {
    c.nfs(
        Nfsproc3::READDIR,
        &Readdir3Args {
            dir: dir.clone(),
            cookie,
            cookieverf: FixedOpaque(verf),
            count,
        },
    )
    .await
}

/// One READDIRPLUS call.
async fn readdirplus(
    c: &Client,
    dir: &NfsFh3,
    cookie: u64,
    verf: [u8; 8],
    dircount: u32,
    maxcount: u32,
) -> Readdirplus3Res {
    c.nfs(
        Nfsproc3::READDIRPLUS,
        &Readdirplus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf: FixedOpaque(verf),
            dircount,
            maxcount,
        },
    )
    .await
}

fn files(dir: &Path, prefix: &str, n: usize) {
    for i in 0..n {
        std::fs::write(dir.join(format!("{prefix}-{i:05}")), b"").unwrap();
    }
}

/// Size of READDIR3resok / READDIRPLUS3resok without entries, with the
/// directory's attributes: post_op_attr, verifier, list end, eof.
const FIXED: usize = 4 + FATTR3_LEN + 8 + 4 + 4;

#[tokio::test]
async fn readdir_count_is_the_exact_size_of_the_reply_structure() {
    let t = TempDir::new("rd-exact");
    files(t.path(), "f", 40);
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let all = readdir(&c, &root, 0, [0; 8], 65536).await.ok().unwrap();
    assert!(all.eof);
    assert_eq!(all.entries.len(), 42);
    let size = |k: usize| {
        FIXED
            + all.entries[..k]
                .iter()
                .map(|e| 4 + e.encoded_len())
                .sum::<usize>()
    };
    for k in [1, 7, 41] {
        let r = readdir(&c, &root, 0, [0; 8], size(k) as u32)
            .await
            .ok()
            .unwrap();
        assert_eq!((r.entries.len(), r.eof), (k, false), "count for {k}");
        assert_eq!(r.entries, all.entries[..k]);
        let r = readdir(&c, &root, 0, [0; 8], size(k) as u32 - 1).await;
        match r {
            Res3::Ok(r) => assert_eq!(r.entries.len(), k - 1),
            Res3::Fail(s, _) => assert_eq!((s, k), (Nfsstat3::NFS3ERR_TOOSMALL, 1)),
        }
    }
    // Exactly the whole directory fits: eof in the same reply.
    let r = readdir(&c, &root, 0, [0; 8], size(42) as u32)
        .await
        .ok()
        .unwrap();
    assert_eq!((r.entries.len(), r.eof), (42, true));
    srv.stop();
}

#[tokio::test]
async fn readdirplus_maxcount_and_dircount_are_exact() {
    let t = TempDir::new("rdp-exact");
    files(t.path(), "plus", 30);
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let all = readdirplus(&c, &root, 0, [0; 8], 1 << 20, 1 << 20)
        .await
        .ok()
        .unwrap();
    assert_eq!((all.entries.len(), all.eof), (32, true));
    let size = |k: usize| {
        FIXED
            + all.entries[..k]
                .iter()
                .map(|e| 4 + e.encoded_len())
                .sum::<usize>()
    };
    let dirc = |k: usize| {
        all.entries[..k]
            .iter()
            .map(|e| 8 + 4 + xdr::padded_len(e.name.0.len()) + 8)
            .sum::<usize>()
    };
    for k in [2, 11, 31] {
        let r = readdirplus(&c, &root, 0, [0; 8], 1 << 20, size(k) as u32).await;
        assert_eq!(r.ok().unwrap().entries.len(), k, "maxcount for {k}");
        let r = readdirplus(&c, &root, 0, [0; 8], 1 << 20, size(k) as u32 - 1).await;
        assert_eq!(r.ok().unwrap().entries.len(), k - 1);
        let r = readdirplus(&c, &root, 0, [0; 8], dirc(k) as u32, 1 << 20).await;
        assert_eq!(r.ok().unwrap().entries.len(), k, "dircount for {k}");
        let r = readdirplus(&c, &root, 0, [0; 8], dirc(k) as u32 - 1, 1 << 20).await;
        assert_eq!(r.ok().unwrap().entries.len(), k - 1);
    }
    // Handles and attributes agree with LOOKUP/GETATTR.
    for e in all.entries.iter().filter(|e| e.name.0.starts_with(b"plus")) {
        let fh = e.name_handle.clone().unwrap();
        let a = c.getattr(&fh).await.ok().unwrap().obj_attributes;
        assert_eq!(Some(a.fileid), e.name_attributes.as_ref().map(|x| x.fileid));
    }
    // Too small for one entry.
    let r = readdirplus(&c, &root, 0, [0; 8], 1 << 20, size(1) as u32 - 1).await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_TOOSMALL);
    srv.stop();
}

/// Lists `dir` in pages of `count` bytes; between pages runs `between`.
/// Returns how often each name came.
async fn list_counting(
    c: &Client,
    dir: &NfsFh3,
    count: u32,
    plus: bool,
    mut between: impl FnMut(usize),
) -> BTreeMap<String, u32> {
    let (mut cookie, mut verf) = (0, [0; 8]);
    let mut seen = BTreeMap::new();
    for page in 0.. {
        let (names, next, v, eof): (Vec<_>, _, _, _) = if plus {
            let r = readdirplus(c, dir, cookie, verf, count, count)
                .await
                .ok()
                .unwrap();
            let last = r.entries.last().map_or(cookie, |e| e.cookie);
            let n = r.entries.into_iter().map(|e| e.name).collect();
            (n, last, r.cookieverf.0, r.eof)
        } else {
            let r = readdir(c, dir, cookie, verf, count).await.ok().unwrap();
            let last = r.entries.last().map_or(cookie, |e| e.cookie);
            let n = r.entries.into_iter().map(|e| e.name).collect();
            (n, last, r.cookieverf.0, r.eof)
        };
        for n in names {
            *seen
                .entry(String::from_utf8(n.0.to_vec()).unwrap())
                .or_insert(0) += 1;
        }
        (cookie, verf) = (next, v);
        if eof {
            break;
        }
        between(page);
    }
    seen
}

#[tokio::test]
async fn listing_while_entries_come_and_go_returns_each_untouched_entry_once() {
    let t = TempDir::new("rd-churn");
    files(t.path(), "keep", 500);
    files(t.path(), "gone", 200);
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    for plus in [false, true] {
        let p = t.path().to_path_buf();
        let tag = if plus { "p" } else { "r" };
        let seen = list_counting(&c, &root, 1024, plus, |page| {
            for k in 0..3 {
                let _ = std::fs::remove_file(p.join(format!("gone-{:05}", page * 3 + k)));
                std::fs::write(p.join(format!("new-{tag}-{page}-{k}")), b"").unwrap();
            }
        })
        .await;
        for i in 0..500 {
            assert_eq!(
                seen.get(&format!("keep-{i:05}")),
                Some(&1),
                "keep-{i:05} plus={plus}"
            );
        }
        assert!(seen.values().all(|&n| n == 1), "a name came twice");
        files(t.path(), "gone", 200);
    }
    // And with another process's writes racing the listing.
    let p = t.path().to_path_buf();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut i = 0u32;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let f = p.join(format!("race-{}", i % 97));
            if i % 3 == 2 {
                let _ = std::fs::remove_file(&f);
            } else {
                let _ = std::fs::write(&f, b"");
            }
            i += 1;
        }
    });
    let seen = list_counting(&c, &root, 700, true, |_| {}).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    for i in 0..500 {
        assert_eq!(
            seen.get(&format!("keep-{i:05}")),
            Some(&1),
            "keep-{i:05} racing"
        );
    }
    srv.stop();
}

#[tokio::test]
async fn a_stale_cookie_is_bad_cookie_not_a_wrong_listing() {
    let t = TempDir::new("rd-stale");
    let d = t.path().join("d");
    std::fs::create_dir(&d).unwrap();
    files(&d, "old", 100);
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let dh = c.lookup(&root, "d").await.ok().unwrap().object;
    let p1 = readdir(&c, &dh, 0, [0; 8], 1024).await.ok().unwrap();
    assert!(!p1.eof);
    let (cookie, verf) = (p1.entries.last().unwrap().cookie, p1.cookieverf.0);
    // Entries added and removed: the cookie is still honoured.
    files(&d, "more", 10);
    std::fs::remove_file(d.join("old-00050")).unwrap();
    let p2 = readdir(&c, &dh, cookie, verf, 1024).await.ok().unwrap();
    assert_eq!(p2.cookieverf.0, verf);
    // The directory rewritten: removed and made again under the same name.
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::create_dir(&d).unwrap();
    files(&d, "new", 100);
    let again = c.lookup(&root, "d").await.ok().unwrap().object;
    let r = readdir(&c, &again, cookie, verf, 1024).await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_BAD_COOKIE);
    let r = readdirplus(&c, &again, cookie, verf, 1024, 4096).await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_BAD_COOKIE);
    // The old handle: stale, or (inode number reused) a bad cookie.
    let r = readdir(&c, &dh, cookie, verf, 1024).await;
    assert!(
        matches!(
            r.status(),
            Nfsstat3::NFS3ERR_STALE | Nfsstat3::NFS3ERR_BAD_COOKIE
        ),
        "{:?}",
        r.status()
    );
    // A cookie the file system cannot seek to, with the right verifier.
    let fresh = readdir(&c, &again, 0, [0; 8], 1024).await.ok().unwrap();
    let r = readdir(&c, &again, 1 << 63, fresh.cookieverf.0, 1024).await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_BAD_COOKIE);
    // And the server still lists normally afterwards.
    let n = list_counting(&c, &again, 4096, false, |_| {}).await;
    assert_eq!(n.len(), 102);
    srv.stop();
}

/// The access check of READDIR/READDIRPLUS (RFC 1813 §3.3.16: read
/// permission on the directory) is made on the attributes the listing
/// itself reads: a caller without read permission gets NFS3ERR_ACCES with
/// the directory's attributes and no entry, one with it the listing.
#[tokio::test]
async fn an_unreadable_directory_is_acces_with_its_attributes() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new("rd-acces");
    for (name, mode) in [("shut", 0o711), ("open", 0o755)] {
        let d = t.path().join(name);
        std::fs::create_dir(&d).unwrap();
        files(&d, "f", 5);
        std::fs::set_permissions(&d, PermissionsExt::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(t.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let srv = start(t.path(), false).await;
    let mut c = Client::connect(srv.nfs_addr()).await;
    c.cred = oncrpc::msg::AuthSys {
        stamp: 3,
        machinename: bytes::Bytes::from_static(b"user"),
        uid: 1000,
        gid: 1000,
        gids: vec![],
    }
    .to_opaque_auth();
    let root = srv.root_handle();
    let shut = c.lookup(&root, "shut").await.ok().unwrap().object;
    let open = c.lookup(&root, "open").await.ok().unwrap().object;
    let mode = |r: &PostOpAttr| r.as_ref().map(|a| a.mode);
    match readdir(&c, &shut, 0, [0; 8], 4096).await {
        Res3::Fail(s, attrs) => {
            assert_eq!((s, mode(&attrs)), (Nfsstat3::NFS3ERR_ACCES, Some(0o711)))
        }
        Res3::Ok(r) => panic!("listed {} entries", r.entries.len()),
    }
    match readdirplus(&c, &shut, 0, [0; 8], 4096, 8192).await {
        Res3::Fail(s, attrs) => {
            assert_eq!((s, mode(&attrs)), (Nfsstat3::NFS3ERR_ACCES, Some(0o711)))
        }
        Res3::Ok(r) => panic!("listed {} entries", r.entries.len()),
    }
    let r = readdirplus(&c, &open, 0, [0; 8], 4096, 8192)
        .await
        .ok()
        .unwrap();
    assert_eq!((r.entries.len(), r.eof), (7, true));
    assert_eq!(mode(&r.dir_attributes), Some(0o755));
    srv.stop();
}
