//! Every NFSv3 procedure through the RPC layer against a LocalFs export.

mod common;

use bytes::Bytes;
use common::{fh_of, start, Client, TempDir};
use nfs::v3::*;
use xdr::FixedOpaque;

fn name(s: &'static str) -> Filename3 {
    Filename3::from_static(s)
}

fn dirop(dir: &NfsFh3, n: &'static str) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: name(n),
    }
}

#[tokio::test]
async fn null_getattr_fsinfo_pathconf_fsstat_answer_on_root() {
    let t = TempDir::new("root");
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.mount_addr().unwrap()).await;
    let root = c.root(t.path()).await;
    assert_eq!(root, srv.root_handle());
    let c = Client::connect(srv.nfs_addr()).await;
    let _: () = c.nfs(Nfsproc3::NULL, &()).await;
    let a = c.getattr(&root).await.ok().unwrap().obj_attributes;
    assert_eq!(a.ftype, Ftype3::NF3DIR);
    let info: Fsinfo3Res = c
        .nfs(
            Nfsproc3::FSINFO,
            &Fsroot3Args {
                object: root.clone(),
            },
        )
        .await;
    let info = info.ok().unwrap();
    assert_eq!((info.rtmax, info.wtmax), (1 << 20, 1 << 20));
    assert!(info.obj_attributes.is_some());
    let pc: Pathconf3Res = c
        .nfs(
            Nfsproc3::PATHCONF,
            &Fsroot3Args {
                object: root.clone(),
            },
        )
        .await;
    assert_eq!(pc.ok().unwrap().name_max, 255);
    let fs: Fsstat3Res = c.nfs(Nfsproc3::FSSTAT, &Fsroot3Args { object: root }).await;
    let fs = fs.ok().unwrap();
    assert!(fs.tbytes >= fs.fbytes && fs.fbytes >= fs.abytes && fs.tbytes > 0);
    srv.stop();
}

#[tokio::test]
async fn create_write_commit_read_round_trip_with_wcc() {
    let t = TempDir::new("rw");
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let created = c.create(&root, "f.txt").await;
    let Res3::Ok(ok) = created else {
        panic!("create failed")
    };
    assert_eq!(ok.obj_attributes.as_ref().map(|a| a.mode), Some(0o644));
    assert!(ok.dir_wcc.before.is_some() && ok.dir_wcc.after.is_some());
    let f = ok.obj.unwrap();
    let w = c
        .write(&f, 0, b"hello world", StableHow::UNSTABLE)
        .await
        .ok()
        .unwrap();
    assert_eq!((w.count, w.committed), (11, StableHow::UNSTABLE));
    assert_eq!(w.verf.0, srv.write_verifier());
    assert_eq!(w.file_wcc.before.map(|b| b.size), Some(0));
    assert_eq!(w.file_wcc.after.as_ref().map(|a| a.size), Some(11));
    let cm: Commit3Res = c
        .nfs(
            Nfsproc3::COMMIT,
            &Commit3Args {
                file: f.clone(),
                offset: 0,
                count: 0,
            },
        )
        .await;
    assert_eq!(cm.ok().unwrap().verf, w.verf);
    let fs = c
        .write(&f, 6, b"WORLD", StableHow::FILE_SYNC)
        .await
        .ok()
        .unwrap();
    assert_eq!(fs.committed, StableHow::FILE_SYNC);
    let r = c.read(&f, 0, 100).await.ok().unwrap();
    assert_eq!(
        (&r.data.0[..], r.eof, r.count),
        (&b"hello WORLD"[..], true, 11)
    );
    let r = c.read(&f, 2, 3).await.ok().unwrap();
    assert_eq!((&r.data.0[..], r.eof), (&b"llo"[..], false));
    assert_eq!(
        std::fs::read(t.path().join("f.txt")).unwrap(),
        b"hello WORLD"
    );
    let l = c.lookup(&root, "f.txt").await.ok().unwrap();
    assert_eq!(l.object, f);
    assert_eq!(
        c.lookup(&root, "nope").await.status(),
        Nfsstat3::NFS3ERR_NOENT
    );
    srv.stop();
}

#[tokio::test]
async fn setattr_guard_create_modes_and_access() {
    let t = TempDir::new("attr");
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let f = fh_of(c.create(&root, "a").await);
    c.write(&f, 0, b"0123456789", StableHow::FILE_SYNC)
        .await
        .ok()
        .unwrap();
    let attrs = c.getattr(&f).await.ok().unwrap().obj_attributes;
    let set = |guard| Setattr3Args {
        object: f.clone(),
        new_attributes: Sattr3 {
            size: Some(4),
            mode: Some(0o600),
            ..Sattr3::default()
        },
        guard,
    };
    let bad: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &set(Some(Nfstime3 {
                seconds: 1,
                nseconds: 0,
            })),
        )
        .await;
    assert_eq!(bad.status(), Nfsstat3::NFS3ERR_NOT_SYNC);
    assert_eq!(std::fs::metadata(t.path().join("a")).unwrap().len(), 10);
    let good: Setattr3Res = c.nfs(Nfsproc3::SETATTR, &set(Some(attrs.ctime))).await;
    let Res3::Ok(w) = good else {
        panic!("setattr failed")
    };
    assert_eq!(w.before.map(|b| b.size), Some(10));
    assert_eq!(w.after.as_ref().map(|a| (a.size, a.mode)), Some((4, 0o600)));
    // GUARDED refuses an existing name; EXCLUSIVE is idempotent per verifier.
    let g: Create3Res = c
        .nfs(
            Nfsproc3::CREATE,
            &Create3Args {
                dir: dirop(&root, "a"),
                how: Createhow3::Guarded(Sattr3::default()),
            },
        )
        .await;
    assert_eq!(g.status(), Nfsstat3::NFS3ERR_EXIST);
    let ex = |v| Create3Args {
        dir: dirop(&root, "x"),
        how: Createhow3::Exclusive(FixedOpaque(v)),
    };
    let e1 = fh_of(c.nfs(Nfsproc3::CREATE, &ex([1, 2, 3, 4, 5, 6, 7, 8])).await);
    let e2 = fh_of(c.nfs(Nfsproc3::CREATE, &ex([1, 2, 3, 4, 5, 6, 7, 8])).await);
    assert_eq!(e1, e2);
    let e3: Create3Res = c.nfs(Nfsproc3::CREATE, &ex([9; 8])).await;
    assert_eq!(e3.status(), Nfsstat3::NFS3ERR_EXIST);
    let acc: Access3Res = c
        .nfs(
            Nfsproc3::ACCESS,
            &Access3Args {
                object: f.clone(),
                access: 0x3f,
            },
        )
        .await;
    let acc = acc.ok().unwrap().access;
    assert_eq!(
        acc & (ACCESS3_READ | ACCESS3_MODIFY),
        ACCESS3_READ | ACCESS3_MODIFY
    );
    assert_eq!(
        acc & ACCESS3_EXECUTE,
        0,
        "0600 file is not executable even for root"
    );
    srv.stop();
}

#[tokio::test]
async fn namespace_procedures_change_the_tree() {
    let t = TempDir::new("ns");
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let d = fh_of(
        c.nfs(
            Nfsproc3::MKDIR,
            &Mkdir3Args {
                dir: dirop(&root, "d"),
                attributes: Sattr3::default(),
            },
        )
        .await,
    );
    let f = fh_of(c.create(&d, "f").await);
    let s = fh_of(
        c.nfs(
            Nfsproc3::SYMLINK,
            &Symlink3Args {
                dir: dirop(&root, "ln"),
                symlink_attributes: Sattr3::default(),
                symlink_data: Nfspath3(Bytes::from_static(b"d/f")),
            },
        )
        .await,
    );
    let rl: Readlink3Res = c
        .nfs(Nfsproc3::READLINK, &Readlink3Args { symlink: s.clone() })
        .await;
    assert_eq!(&rl.ok().unwrap().data.0[..], b"d/f");
    assert_eq!(c.read(&s, 0, 10).await.status(), Nfsstat3::NFS3ERR_INVAL);
    let fifo: Create3Res = c
        .nfs(
            Nfsproc3::MKNOD,
            &Mknod3Args {
                dir: dirop(&root, "p"),
                what: Mknoddata3::Special {
                    ftype: Ftype3::NF3FIFO,
                    attributes: Sattr3::default(),
                },
            },
        )
        .await;
    let Res3::Ok(fifo) = fifo else {
        panic!("mknod failed")
    };
    assert_eq!(fifo.obj_attributes.map(|a| a.ftype), Some(Ftype3::NF3FIFO));
    let bad: Create3Res = c
        .nfs(
            Nfsproc3::MKNOD,
            &Mknod3Args {
                dir: dirop(&root, "q"),
                what: Mknoddata3::Other(Ftype3::NF3REG),
            },
        )
        .await;
    assert_eq!(bad.status(), Nfsstat3::NFS3ERR_BADTYPE);
    let ln: Link3Res = c
        .nfs(
            Nfsproc3::LINK,
            &Link3Args {
                file: f.clone(),
                link: dirop(&root, "hard"),
            },
        )
        .await;
    assert_eq!(ln.ok().unwrap().file_attributes.map(|a| a.nlink), Some(2));
    let rn: Rename3Res = c
        .nfs(
            Nfsproc3::RENAME,
            &Rename3Args {
                from: dirop(&d, "f"),
                to: dirop(&root, "moved"),
            },
        )
        .await;
    assert!(rn.ok().unwrap().fromdir_wcc.after.is_some());
    // The handle follows the inode across the rename.
    assert!(c.getattr(&f).await.ok().is_some());
    assert_eq!(c.lookup(&root, "moved").await.ok().unwrap().object, f);
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::RMDIR,
            &Remove3Args {
                object: dirop(&root, "hard"),
            },
        )
        .await;
    assert_eq!(rm.status(), Nfsstat3::NFS3ERR_NOTDIR);
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::REMOVE,
            &Remove3Args {
                object: dirop(&root, "d"),
            },
        )
        .await;
    assert_eq!(rm.status(), Nfsstat3::NFS3ERR_ISDIR);
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::REMOVE,
            &Remove3Args {
                object: dirop(&root, "hard"),
            },
        )
        .await;
    assert!(rm.ok().is_some());
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::RMDIR,
            &Remove3Args {
                object: dirop(&root, "d"),
            },
        )
        .await;
    assert!(rm.ok().is_some());
    let mut names: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["ln", "moved", "p"]);
    srv.stop();
}

async fn list_all(c: &Client, dir: &NfsFh3, count: u32) -> Vec<(String, u64)> {
    let mut cookie = 0;
    let mut verf = FixedOpaque([0; 8]);
    let mut out = Vec::new();
    for _ in 0..1000 {
        let r: Readdir3Res = c
            .nfs(
                Nfsproc3::READDIR,
                &Readdir3Args {
                    dir: dir.clone(),
                    cookie,
                    cookieverf: verf,
                    count,
                },
            )
            .await;
        let ok = r.ok().unwrap();
        verf = ok.cookieverf;
        for e in &ok.entries {
            out.push((String::from_utf8(e.name.0.to_vec()).unwrap(), e.fileid));
            cookie = e.cookie;
        }
        if ok.eof {
            return out;
        }
    }
    panic!("READDIR never reached eof");
}

#[tokio::test]
async fn readdir_pages_by_cookie_and_readdirplus_returns_handles() {
    let t = TempDir::new("rd");
    for i in 0..100 {
        std::fs::write(t.path().join(format!("file-{i:03}")), b"x").unwrap();
    }
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let small = list_all(&c, &root, 1024).await;
    let big = list_all(&c, &root, 65536).await;
    assert_eq!(small.len(), 102);
    let mut a: Vec<_> = small.iter().map(|e| e.0.clone()).collect();
    let mut b: Vec<_> = big.iter().map(|e| e.0.clone()).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    a.dedup();
    assert_eq!(a.len(), 102);
    // A tiny count cannot hold one entry.
    let r: Readdir3Res = c
        .nfs(
            Nfsproc3::READDIR,
            &Readdir3Args {
                dir: root.clone(),
                cookie: 0,
                cookieverf: FixedOpaque([0; 8]),
                count: 50,
            },
        )
        .await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_TOOSMALL);
    // A verifier from elsewhere is refused for a non-zero cookie.
    let r: Readdir3Res = c
        .nfs(
            Nfsproc3::READDIR,
            &Readdir3Args {
                dir: root.clone(),
                cookie: 5,
                cookieverf: FixedOpaque([7; 8]),
                count: 4096,
            },
        )
        .await;
    assert_eq!(r.status(), Nfsstat3::NFS3ERR_BAD_COOKIE);
    let rp: Readdirplus3Res = c
        .nfs(
            Nfsproc3::READDIRPLUS,
            &Readdirplus3Args {
                dir: root.clone(),
                cookie: 0,
                cookieverf: FixedOpaque([0; 8]),
                dircount: 65536,
                maxcount: 1 << 20,
            },
        )
        .await;
    let rp = rp.ok().unwrap();
    assert!(rp.eof);
    assert_eq!(rp.entries.len(), 102);
    for e in &rp.entries {
        if e.name.0[..] == b".."[..] {
            // As Linux: nothing for ".." at the export root.
            assert_eq!((&e.name_attributes, &e.name_handle), (&None, &None));
            continue;
        }
        let fh = e.name_handle.clone().unwrap();
        let a = c.getattr(&fh).await.ok().unwrap().obj_attributes;
        assert_eq!(Some(a.fileid), e.name_attributes.as_ref().map(|x| x.fileid));
        assert_eq!(a.fileid, e.fileid);
    }
    srv.stop();
}

#[tokio::test]
async fn handles_survive_restart_and_write_verifier_changes() {
    let t = TempDir::new("restart");
    std::fs::create_dir_all(t.path().join("a/b")).unwrap();
    std::fs::write(t.path().join("a/b/deep.txt"), b"deep").unwrap();
    let state = TempDir::new("restart-state");
    let with_state = || {
        let mut cfg = nfs_server::ServerConfig::new(t.path());
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        cfg.state_dir = Some(state.path().to_path_buf());
        cfg
    };
    let srv = nfs_server::start(with_state()).await.unwrap();
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let a = c.lookup(&root, "a").await.ok().unwrap().object;
    let b = c.lookup(&a, "b").await.ok().unwrap().object;
    let deep = c.lookup(&b, "deep.txt").await.ok().unwrap().object;
    let v1 = c
        .write(&deep, 0, b"DEEP", StableHow::UNSTABLE)
        .await
        .ok()
        .unwrap()
        .verf;
    let old = std::sync::Arc::downgrade(srv.storage());
    srv.stop();
    drop(c);
    // The old instance lets go of the state directory once its last
    // connection is gone (one instance per state directory and export).
    for _ in 0..200 {
        if old.upgrade().is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let srv2 = nfs_server::start(with_state()).await.unwrap();
    let c2 = Client::connect(srv2.nfs_addr()).await;
    assert_eq!(srv2.root_handle(), root);
    // The new instance resolves the handle from the index in the state
    // directory, without a walk.
    let r = c2.read(&deep, 0, 100).await.ok().unwrap();
    assert_eq!(&r.data.0[..], b"DEEP");
    let v2 = c2
        .write(&deep, 0, b"deep", StableHow::UNSTABLE)
        .await
        .ok()
        .unwrap()
        .verf;
    assert_ne!(v1, v2, "write verifier must change across a restart");
    // A deleted file's handle is stale.
    std::fs::remove_file(t.path().join("a/b/deep.txt")).unwrap();
    assert_eq!(c2.getattr(&deep).await.status(), Nfsstat3::NFS3ERR_STALE);
    srv2.stop();
}

#[tokio::test]
async fn callers_are_held_to_mode_bits_and_own_what_they_create() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let t = TempDir::new("perm");
    std::fs::write(t.path().join("root-file"), b"root").unwrap();
    std::fs::set_permissions(t.path().join("root-file"), PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::create_dir(t.path().join("open")).unwrap();
    std::fs::set_permissions(t.path().join("open"), PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::set_permissions(t.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let srv = start(t.path(), false).await;
    let mut c = Client::connect(srv.nfs_addr()).await;
    c.cred = oncrpc::msg::AuthSys {
        stamp: 2,
        machinename: Bytes::from_static(b"user"),
        uid: 1000,
        gid: 1000,
        gids: vec![],
    }
    .to_opaque_auth();
    let root = srv.root_handle();
    let f = c.lookup(&root, "root-file").await.ok().unwrap().object;
    assert_eq!(
        c.write(&f, 0, b"user", StableHow::FILE_SYNC).await.status(),
        Nfsstat3::NFS3ERR_ACCES
    );
    assert_eq!(
        c.create(&root, "mine").await.status(),
        Nfsstat3::NFS3ERR_ACCES
    );
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::REMOVE,
            &Remove3Args {
                object: dirop(&root, "root-file"),
            },
        )
        .await;
    assert_eq!(rm.status(), Nfsstat3::NFS3ERR_ACCES);
    let chmod: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &Setattr3Args {
                object: f.clone(),
                new_attributes: Sattr3 {
                    mode: Some(0o666),
                    ..Sattr3::default()
                },
                guard: None,
            },
        )
        .await;
    assert_eq!(chmod.status(), Nfsstat3::NFS3ERR_PERM);
    assert_eq!(std::fs::read(t.path().join("root-file")).unwrap(), b"root");
    assert_eq!(c.read(&f, 0, 10).await.ok().map(|r| r.count), Some(4));
    // In a world-writable directory the user creates a file it owns.
    let open = c.lookup(&root, "open").await.ok().unwrap().object;
    let mine = fh_of(c.create(&open, "mine").await);
    let m = std::fs::metadata(t.path().join("open/mine")).unwrap();
    // Only a server running as root can give the file away.
    if std::fs::metadata(t.path()).unwrap().uid() == 0 {
        assert_eq!((m.uid(), m.gid()), (1000, 1000));
    }
    assert_eq!(
        c.write(&mine, 0, b"ok", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::NFS3_OK
    );
    srv.stop();
}
