//! LocalFs against a real directory: handles, the index, `*at` calls,
//! modes, long paths and escape attempts.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Instant;

use nfs::v3::{Createhow3, Fattr3, Filename3, Nfsstat3, Sattr3, StableHow};

use crate::storage::{DirEntry, DirPage, DirRequest, StorageResult};
use rustix::io::Errno;

use super::*;
use crate::fh::Handle;

pub(super) struct Tmp(pub(super) PathBuf);
impl Tmp {
    pub(super) fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("localfs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn block<F: core::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn errno_maps_like_linux_nfsd() {
    let e = |n: Errno| std::io::Error::from_raw_os_error(n.raw_os_error());
    assert_eq!(io_status(&e(Errno::NOENT)), Nfsstat3::NFS3ERR_NOENT);
    assert_eq!(io_status(&e(Errno::NOTEMPTY)), Nfsstat3::NFS3ERR_NOTEMPTY);
    assert_eq!(io_status(&e(Errno::LOOP)), Nfsstat3::NFS3ERR_INVAL);
    assert_eq!(io_status(&e(Errno::BADF)), Nfsstat3::NFS3ERR_IO);
    assert_eq!(
        io_status(&std::io::Error::other("no errno")),
        Nfsstat3::NFS3ERR_IO
    );
}

#[test]
fn read_returns_exact_bytes_up_to_eof_without_zero_fill() {
    let t = Tmp::new("read");
    let data: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 * 1024 + 17).collect();
    fs::write(t.0.join("f"), &data).unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let fh = block(lfs.lookup(&lfs.root(), &name("f"))).unwrap();
    let (b, eof) = block(lfs.read(&fh, 5, 1000)).unwrap();
    assert_eq!((&b[..], eof), (&data[5..1005], false));
    // A full-size read in the middle, then one spanning the end.
    let (b, eof) = block(lfs.read(&fh, 1024 * 1024, MAX_READ)).unwrap();
    let end = 1024 * 1024 + MAX_READ as usize;
    assert_eq!((&b[..], eof), (&data[1024 * 1024..end], false));
    let tail = data.len() as u64 - 10;
    let (b, eof) = block(lfs.read(&fh, tail, 4096)).unwrap();
    assert_eq!((&b[..], eof), (&data[data.len() - 10..], true));
    // At and past the end: no data, eof.
    let (b, eof) = block(lfs.read(&fh, data.len() as u64, 10)).unwrap();
    assert!(b.is_empty() && eof);
    let (b, eof) = block(lfs.read(&fh, u64::MAX, 10)).unwrap();
    assert!(b.is_empty() && eof);
    let (b, eof) = block(lfs.read(&fh, 0, 0)).unwrap();
    assert!(b.is_empty() && !eof);
}

#[test]
fn dotdot_at_root_is_root_and_dot_names_cannot_be_created() {
    let t = Tmp::new("dots");
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let dd = Filename3::from_static("..");
    assert_eq!(block(lfs.lookup(&root, &dd)), Ok(root.clone()));
    let how = Createhow3::Unchecked(Sattr3::default());
    assert_eq!(
        block(lfs.create(&root, &dd, &how)),
        Err(Nfsstat3::NFS3ERR_EXIST)
    );
    assert_eq!(
        block(lfs.rmdir(&root, &Filename3::from_static("."))),
        Err(Nfsstat3::NFS3ERR_INVAL)
    );
    assert_eq!(fs::read_dir(&t.0).unwrap().count(), 0);
}

#[test]
fn read_only_export_refuses_changes_before_touching_disk() {
    let t = Tmp::new("ro");
    fs::write(t.0.join("f"), b"data").unwrap();
    let lfs = LocalFs::new(&t.0, true).unwrap();
    let root = lfs.root();
    let f = block(lfs.lookup(&root, &Filename3::from_static("f"))).unwrap();
    assert_eq!(
        block(lfs.write(&f, 0, b"XX", StableHow::FILE_SYNC)),
        Err(Nfsstat3::NFS3ERR_ROFS)
    );
    assert_eq!(
        block(lfs.mkdir(&root, &Filename3::from_static("d"), &Sattr3::default())),
        Err(Nfsstat3::NFS3ERR_ROFS)
    );
    assert_eq!(block(lfs.commit(&f)), Err(Nfsstat3::NFS3ERR_ROFS));
    assert_eq!(fs::read(t.0.join("f")).unwrap(), b"data");
}

/// A listed entry, owned (a [`DirEntry`] borrows from the storage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OwnedEntry {
    pub(super) fileid: u64,
    pub(super) name: Filename3,
    pub(super) cookie: u64,
    pub(super) plus: Option<StorageResult<(NfsFh3, Fattr3)>>,
}

impl From<DirEntry<'_>> for OwnedEntry {
    fn from(e: DirEntry<'_>) -> Self {
        Self {
            fileid: e.fileid,
            name: Filename3(Bytes::copy_from_slice(e.name)),
            cookie: e.cookie,
            plus: e
                .plus
                .map(|r| r.map(|(fh, a)| (NfsFh3::new(fh).unwrap(), a))),
        }
    }
}

/// Up to `n` entries after `cookie`, with the page's end.
pub(super) fn list(
    lfs: &LocalFs,
    dir: &NfsFh3,
    cookie: u64,
    n: usize,
    plus: bool,
) -> (Vec<OwnedEntry>, DirPage) {
    list_sized(lfs, dir, cookie, n, plus, 0)
}

/// [`list`] with the page's `size_hint` (the `getdents64` buffer).
pub(super) fn list_sized(
    lfs: &LocalFs,
    dir: &NfsFh3,
    cookie: u64,
    n: usize,
    plus: bool,
    size_hint: usize,
) -> (Vec<OwnedEntry>, DirPage) {
    let mut out = Vec::new();
    let req = DirRequest {
        cookie,
        plus,
        size_hint,
    };
    let page = block(lfs.readdir(dir, req, &mut |e: DirEntry<'_>| {
        if out.len() == n {
            return false;
        }
        out.push(OwnedEntry::from(e));
        true
    }))
    .unwrap();
    (out, page)
}

#[test]
fn readdir_resumes_after_a_deleted_cookie() {
    let t = Tmp::new("rd");
    for n in ["a", "b", "c", "d"] {
        fs::write(t.0.join(n), b"").unwrap();
    }
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let (all, page) = list(&lfs, &root, 0, 100, false);
    assert!(page.eof);
    assert_eq!(all.len(), 6);
    // The file system's order ("." and ".." need not come first): a
    // file in the middle.
    let k = (1..5).find(|&i| !ops::is_dot(&all[i].name.0)).unwrap();
    let third = &all[k];
    let after: Vec<_> = all[k + 1..].iter().map(|e| e.name.clone()).collect();
    fs::remove_file(t.0.join(std::str::from_utf8(&third.name.0).unwrap())).unwrap();
    let (rest, again) = list(&lfs, &root, third.cookie, 100, false);
    assert_eq!(again.verf, page.verf);
    assert_eq!(rest.into_iter().map(|e| e.name).collect::<Vec<_>>(), after);
    // A page cut short is not eof, and resumes where it stopped.
    let (two, p2) = list(&lfs, &root, 0, 2, false);
    assert!(!p2.eof);
    let (more, _) = list(&lfs, &root, two[1].cookie, 100, false);
    assert_eq!(two.len() + more.len(), 5);
}

#[test]
fn readdirplus_attributes_match_getattr_and_dotdot_at_root_has_none() {
    let t = Tmp::new("rdp");
    fs::create_dir(t.0.join("sub")).unwrap();
    fs::write(t.0.join("sub/f"), b"12345").unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let (ents, _) = list(&lfs, &root, 0, 100, true);
    for e in &ents {
        match &e.name.0[..] {
            b".." => {
                assert_eq!(e.fileid, lfs.root_ino);
                assert_eq!(e.plus, Some(Err(Nfsstat3::NFS3ERR_ACCES)));
            }
            _ => {
                let (fh, a) = e.plus.clone().unwrap().unwrap();
                assert_eq!(block(lfs.getattr(&fh)).unwrap(), a);
                assert_eq!(a.fileid, e.fileid);
            }
        }
    }
    let sub = block(lfs.lookup(&root, &Filename3::from_static("sub"))).unwrap();
    let (ents, _) = list(&lfs, &sub, 0, 100, true);
    let f = ents.iter().find(|e| e.name.0[..] == b"f"[..]).unwrap();
    let (_, a) = f.plus.clone().unwrap().unwrap();
    assert_eq!(a.size, 5);
    let dd = ents.iter().find(|e| e.name.0[..] == b".."[..]).unwrap();
    assert_eq!(dd.plus.clone().unwrap().unwrap().0, root);
}

pub(super) fn name(s: &str) -> Filename3 {
    Filename3(Bytes::copy_from_slice(s.as_bytes()))
}

fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

/// A handle for `ino` with a good tag (what only the server can make).
fn minted(lfs: &LocalFs, ino: u64, gen: u64) -> NfsFh3 {
    Handle {
        export_id: lfs.export_id,
        ino,
        gen,
    }
    .to_fh(&lfs.key)
}

#[test]
fn forged_flipped_and_unknown_handles_are_refused() {
    let t = Tmp::new("forge");
    fs::create_dir(t.0.join("d")).unwrap();
    fs::write(t.0.join("d/f"), b"secret").unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let d = block(lfs.lookup(&lfs.root(), &name("d"))).unwrap();
    let f = block(lfs.lookup(&d, &name("f"))).unwrap();
    for bit in [0, 40, 100, 170, 200, 300, 351] {
        let mut b = f.as_bytes().to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        let bad = NfsFh3::new(&b).unwrap();
        assert_eq!(block(lfs.getattr(&bad)), Err(Nfsstat3::NFS3ERR_BADHANDLE));
    }
    // The old unkeyed format: export id and inode with an XOR check word.
    let ino = fs::metadata(t.0.join("d/f")).unwrap().ino();
    let mut old = vec![1u8, 0, 0, 0];
    old.extend_from_slice(&lfs.export_id().to_be_bytes());
    old.extend_from_slice(&ino.to_be_bytes());
    old.extend_from_slice(&((lfs.export_id() as u32) ^ (ino as u32)).to_be_bytes());
    let old = NfsFh3::new(&old).unwrap();
    assert_eq!(
        block(lfs.read(&old, 0, 10)),
        Err(Nfsstat3::NFS3ERR_BADHANDLE)
    );
    // A well-tagged handle for an inode never handed out: STALE, no walk.
    let other = fs::metadata(t.0.join("d")).unwrap().ino() + 1_000_000;
    assert_eq!(
        block(lfs.getattr(&minted(&lfs, other, 0))),
        Err(Nfsstat3::NFS3ERR_STALE)
    );
    assert_eq!(&block(lfs.read(&f, 0, 10)).unwrap().0[..], b"secret");
}

#[test]
fn handles_survive_a_restart_with_the_same_state_dir_only() {
    let t = Tmp::new("restart");
    let st = Tmp::new("restart-state");
    let other = Tmp::new("restart-other");
    fs::create_dir_all(t.0.join("a/b")).unwrap();
    fs::write(t.0.join("a/b/f"), b"x").unwrap();
    let sd = StateDir::open(st.0.join("s")).unwrap();
    let (f, root) = {
        let lfs = LocalFs::with_state_dir(&t.0, false, &sd).unwrap();
        let a = block(lfs.lookup(&lfs.root(), &name("a"))).unwrap();
        let b = block(lfs.lookup(&a, &name("b"))).unwrap();
        (block(lfs.lookup(&b, &name("f"))).unwrap(), lfs.root())
    };
    let lfs = LocalFs::with_state_dir(&t.0, false, &sd).unwrap();
    assert_eq!(lfs.root(), root);
    let ino = fs::metadata(t.0.join("a/b/f")).unwrap().ino();
    assert_eq!(block(lfs.getattr(&f)).unwrap().fileid, ino);
    drop(lfs);
    let inside = StateDir::open(t.0.join("a/state")).unwrap();
    assert!(LocalFs::with_state_dir(&t.0, false, &inside).is_err());
    let sd2 = StateDir::open(other.0.join("s")).unwrap();
    let lfs2 = LocalFs::with_state_dir(&t.0, false, &sd2).unwrap();
    assert_eq!(block(lfs2.getattr(&f)), Err(Nfsstat3::NFS3ERR_BADHANDLE));
}

#[test]
fn removed_reused_and_moved_files_are_stale() {
    let t = Tmp::new("stale");
    fs::create_dir(t.0.join("d")).unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let how = Createhow3::Unchecked(Sattr3::default());
    let f = block(lfs.create(&root, &name("f"), &how)).unwrap();
    let attr = block(lfs.getattr(&f)).unwrap();
    // The same inode under another generation (a reused inode number).
    let h = Handle::parse(&f, &lfs.key, lfs.export_id).unwrap();
    assert_eq!(
        block(lfs.getattr(&minted(&lfs, attr.fileid, h.gen ^ 1))),
        Err(Nfsstat3::NFS3ERR_STALE)
    );
    // Removed and made again (on ext4 often with the same inode number).
    block(lfs.remove(&root, &name("f"))).unwrap();
    let f2 = block(lfs.create(&root, &name("f"), &how)).unwrap();
    assert_eq!(block(lfs.getattr(&f)), Err(Nfsstat3::NFS3ERR_STALE));
    assert!(block(lfs.getattr(&f2)).is_ok());
    // Moved behind the server's back: STALE until looked up again.
    fs::rename(t.0.join("f"), t.0.join("d/g")).unwrap();
    assert_eq!(block(lfs.getattr(&f2)), Err(Nfsstat3::NFS3ERR_STALE));
    let d = block(lfs.lookup(&root, &name("d"))).unwrap();
    assert_eq!(block(lfs.lookup(&d, &name("g"))).unwrap(), f2);
    assert!(block(lfs.getattr(&f2)).is_ok());
}

#[test]
fn renames_among_links_keep_the_handle_until_the_last_link_goes() {
    let t = Tmp::new("links-rename");
    fs::create_dir(t.0.join("d")).unwrap();
    fs::write(t.0.join("a"), b"data").unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let d = block(lfs.lookup(&root, &name("d"))).unwrap();
    let a = block(lfs.lookup(&root, &name("a"))).unwrap();
    block(lfs.link(&a, &d, &name("b"))).unwrap();
    // rename(2) between two links of one file leaves both.
    block(lfs.rename(&root, &name("a"), &d, &name("b"))).unwrap();
    assert!(t.0.join("a").exists());
    // The recorded name moves, then the name it moved to is removed.
    block(lfs.rename(&root, &name("a"), &d, &name("c"))).unwrap();
    block(lfs.remove(&d, &name("b"))).unwrap();
    assert_eq!(&block(lfs.read(&a, 0, 10)).unwrap().0[..], b"data");
    block(lfs.remove(&d, &name("c"))).unwrap();
    assert_eq!(block(lfs.getattr(&a)), Err(Nfsstat3::NFS3ERR_STALE));
}

#[test]
fn a_client_linking_one_file_many_times_holds_a_bounded_index() {
    let t = Tmp::new("links-bound");
    fs::write(t.0.join("f"), b"data").unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let f = block(lfs.lookup(&root, &name("f"))).unwrap();
    let links = index::MAX_NAMES + 40;
    for i in 0..links {
        let n = name(&format!("l{i}"));
        block(lfs.link(&f, &root, &n)).unwrap();
        block(lfs.lookup(&root, &n)).unwrap();
    }
    let h = Handle::parse(&f, &lfs.key, lfs.export_id).unwrap();
    assert_eq!(lfs.index.other_names(h.ino, h.gen).len(), index::MAX_NAMES);
    // The recorded names serve: the first ones all gone, the file lives.
    block(lfs.remove(&root, &name("f"))).unwrap();
    for i in 0..index::MAX_NAMES - 1 {
        block(lfs.remove(&root, &name(&format!("l{i}")))).unwrap();
    }
    assert_eq!(&block(lfs.read(&f, 0, 10)).unwrap().0[..], b"data");
    assert_eq!(block(lfs.getattr(&f)).unwrap().nlink, 41);
}

#[test]
fn modes_are_exactly_those_asked() {
    let t = Tmp::new("modes");
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let m = |p: &str| {
        fs::symlink_metadata(t.0.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    block(lfs.mkdir(&root, &name("d"), &mode(0o777))).unwrap();
    assert_eq!(m("d"), 0o777);
    block(lfs.mkdir(&root, &name("s"), &mode(0o2775))).unwrap();
    assert_eq!(m("s"), 0o2775);
    let how = Createhow3::Guarded(mode(0o666));
    block(lfs.create(&root, &name("f"), &how)).unwrap();
    assert_eq!(m("f"), 0o666);
}

#[test]
fn a_4000_byte_path_works_for_every_namespace_op() {
    let t = Tmp::new("long");
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let comp = "c".repeat(199);
    let mut dir = lfs.root();
    let mut rel = PathBuf::new();
    while rel.as_os_str().len() < 4000 {
        dir = block(lfs.mkdir(&dir, &name(&comp), &mode(0o755))).unwrap();
        rel.push(&comp);
    }
    assert!(rel.as_os_str().len() + t.0.as_os_str().len() > 4096);
    let how = Createhow3::Unchecked(Sattr3::default());
    let f = block(lfs.create(&dir, &name("f"), &how)).unwrap();
    block(lfs.write(&f, 0, b"deep", StableHow::FILE_SYNC)).unwrap();
    block(lfs.rename(&dir, &name("f"), &dir, &name("g"))).unwrap();
    block(lfs.link(&f, &dir, &name("h"))).unwrap();
    let l = block(lfs.symlink(&dir, &name("l"), b"g", &Sattr3::default())).unwrap();
    assert_eq!(&block(lfs.readlink(&l)).unwrap()[..], b"g");
    assert_eq!(&block(lfs.read(&f, 0, 10)).unwrap().0[..], b"deep");
    assert_eq!(block(lfs.getattr(&f)).unwrap().nlink, 2);
    for n in ["g", "h", "l"] {
        block(lfs.remove(&dir, &name(n))).unwrap();
    }
    let (left, _) = list(&lfs, &dir, 0, 100, false);
    assert_eq!(left.len(), 2, "only . and .. are left");
    // A fresh instance (empty index) cannot be walked into the deep dir,
    // but a server with the index resolves it without any path.
    assert!(block(lfs.getattr(&dir)).is_ok());
}

#[test]
fn a_symlink_swapped_for_a_directory_does_not_lead_outside() {
    let t = Tmp::new("swap");
    let outside = Tmp::new("swap-outside");
    fs::write(outside.0.join("secret"), b"outside").unwrap();
    fs::set_permissions(&outside.0, fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir(t.0.join("d")).unwrap();
    fs::write(t.0.join("d/secret"), b"inside").unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let d = block(lfs.lookup(&root, &name("d"))).unwrap();
    // The directory is swapped for a link to a directory outside.
    fs::rename(t.0.join("d"), t.0.join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside.0, t.0.join("d")).unwrap();
    assert_eq!(
        block(lfs.lookup(&d, &name("secret"))),
        Err(Nfsstat3::NFS3ERR_STALE)
    );
    let how = Createhow3::Unchecked(Sattr3::default());
    assert_eq!(
        block(lfs.create(&d, &name("new"), &how)),
        Err(Nfsstat3::NFS3ERR_STALE)
    );
    let link = block(lfs.lookup(&root, &name("d"))).unwrap();
    assert_eq!(
        block(lfs.lookup(&link, &name("secret"))),
        Err(Nfsstat3::NFS3ERR_NOTDIR)
    );
    assert_eq!(
        block(lfs.create(&link, &name("new"), &how)),
        Err(Nfsstat3::NFS3ERR_NOTDIR)
    );
    assert_eq!(
        block(lfs.setattr(&link, &mode(0o777), None)),
        Ok(()),
        "a mode change on a link is dropped, never applied to its target"
    );
    assert_eq!(
        fs::metadata(&outside.0).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let names: Vec<_> = fs::read_dir(&outside.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"]);
}

/// Time per bad handle with a small and a large export: the cost of a
/// refused handle does not grow with the export (figures in
/// docs/hardening.md, "Handles and storage"). Run with
/// `cargo test -p nfs-server --release -- --ignored bad_handle_time`.
#[test]
#[ignore]
fn bad_handle_time_is_independent_of_export_size() {
    for files in [100usize, 50_000] {
        let t = Tmp::new(&format!("time{files}"));
        for i in 0..files {
            let sub = t.0.join(format!("d{}", i % 100));
            if i < 100 {
                fs::create_dir(&sub).unwrap();
            }
            fs::write(sub.join(format!("f{i}")), b"").unwrap();
        }
        let lfs = LocalFs::new(&t.0, false).unwrap();
        let good = lfs.root();
        let n = 2000u64;
        let t0 = Instant::now();
        for i in 0..n {
            let mut b = good.as_bytes().to_vec();
            b[12 + (i as usize % 8)] ^= 1;
            let bad = NfsFh3::new(&b).unwrap();
            assert_eq!(block(lfs.getattr(&bad)), Err(Nfsstat3::NFS3ERR_BADHANDLE));
        }
        let flipped = t0.elapsed() / n as u32;
        let t0 = Instant::now();
        for i in 0..n {
            let fh = minted(&lfs, 1 << 40 | i, 0);
            assert_eq!(block(lfs.getattr(&fh)), Err(Nfsstat3::NFS3ERR_STALE));
        }
        let unknown = t0.elapsed() / n as u32;
        println!(
            "{files} files: bit-flipped handle {flipped:?}, unknown inode {unknown:?} per call"
        );
    }
}

#[test]
fn errno_of_rustix_maps_too() {
    assert_eq!(
        attrs::errno_status(Errno::NAMETOOLONG),
        Nfsstat3::NFS3ERR_NAMETOOLONG
    );
}

/// A client looking up far more files and directories than the caches
/// hold: the open directory fds and the index entries waiting in memory
/// stay within their bounds, and every handle still resolves.
#[test]
fn memory_held_stays_bounded_however_many_files_are_looked_up() {
    let t = Tmp::new("bounded");
    let dirs = resolve::DIR_CACHE + 40;
    for i in 0..dirs {
        fs::create_dir(t.0.join(format!("d{i}"))).unwrap();
    }
    for i in 0..index::PENDING_MAX + 100 {
        fs::write(t.0.join(format!("d{}/f{i}", i % dirs)), b"").unwrap();
    }
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let mut dhs = Vec::new();
    for i in 0..dirs {
        let d = block(lfs.lookup(&root, &name(&format!("d{i}")))).unwrap();
        assert!(block(lfs.getattr(&d)).is_ok());
        dhs.push(d);
    }
    let mut first = None;
    for i in 0..index::PENDING_MAX + 100 {
        let f = block(lfs.lookup(&dhs[i % dirs], &name(&format!("f{i}")))).unwrap();
        first.get_or_insert(f);
    }
    assert!(lfs.dirs.lock().unwrap().len() <= resolve::DIR_CACHE);
    assert!(lfs.index.pending_len() < index::PENDING_MAX);
    assert!(block(lfs.getattr(&first.unwrap())).is_ok());
    assert!(block(lfs.getattr(&dhs[0])).is_ok());
}

/// A local process swaps a directory for a symbolic link to a directory
/// outside the export, over and over, while the server looks it up and
/// creates, renames and removes in it: whatever each call answers,
/// nothing outside the export is created, changed or removed.
#[test]
fn racing_a_symlink_swap_never_touches_outside() {
    let t = Tmp::new("race");
    let outside = Tmp::new("race-outside");
    fs::write(outside.0.join("secret"), b"outside").unwrap();
    fs::set_permissions(&outside.0, fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir(t.0.join("d")).unwrap();
    let lfs = LocalFs::new(&t.0, false).unwrap();
    let root = lfs.root();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (dir, out, stop) = (t.0.clone(), outside.0.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fs::rename(dir.join("d"), dir.join("real"));
                let _ = std::os::unix::fs::symlink(&out, dir.join("d"));
                std::thread::sleep(std::time::Duration::from_micros(100));
                let _ = fs::remove_file(dir.join("d"));
                let _ = fs::rename(dir.join("real"), dir.join("d"));
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };
    let how = Createhow3::Unchecked(mode(0o666));
    let mut made = 0;
    for i in 0..300 {
        let Ok(d) = block(lfs.lookup(&root, &name("d"))) else {
            continue;
        };
        let f = format!("f{i}");
        made += usize::from(block(lfs.create(&d, &name(&f), &how)).is_ok());
        let _ = block(lfs.mkdir(&d, &name(&format!("m{i}")), &mode(0o777)));
        let _ = block(lfs.rename(&d, &name(&f), &d, &name("secret")));
        let _ = block(lfs.remove(&d, &name("secret")));
        let _ = block(lfs.setattr(&d, &mode(0o777), None));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        made > 0,
        "the race never let a create through: nothing tested"
    );
    let names: Vec<_> = fs::read_dir(&outside.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    assert_eq!(fs::read(outside.0.join("secret")).unwrap(), b"outside");
    let m = fs::metadata(&outside.0).unwrap().permissions().mode() & 0o777;
    assert_eq!(m, 0o700);
}
