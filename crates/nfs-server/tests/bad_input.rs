//! Issue 5 item 6: each bad input gets the answer Linux's nfsd gives and
//! leaves the export unchanged on disk.

mod common;

use bytes::Bytes;
use common::{snapshot, start, Client, Snapshot, TempDir};
use nfs::v3::*;
use oncrpc::client::RpcError;
use xdr::{Encoder, XdrBuf};

fn seed(t: &TempDir) {
    std::fs::create_dir(t.path().join("sub")).unwrap();
    std::fs::write(t.path().join("file"), b"contents").unwrap();
    std::fs::write(t.path().join("sub/inner"), b"inner").unwrap();
}

/// A server over a freshly seeded export, a client of it, and what the
/// export held on disk before the test.
struct Seeded {
    t: TempDir,
    srv: nfs_server::RunningServer,
    before: Snapshot,
    c: Client,
}

async fn seeded(tag: &str, read_only: bool) -> Seeded {
    let t = TempDir::new(tag);
    seed(&t);
    let srv = start(t.path(), read_only).await;
    let before = snapshot(t.path());
    let c = Client::connect(srv.nfs_addr()).await;
    Seeded { t, srv, before, c }
}

/// Ends a test: the export on disk is as it was, and the server stops.
fn unchanged(t: &TempDir, before: Snapshot, srv: nfs_server::RunningServer) {
    assert_eq!(snapshot(t.path()), before);
    srv.stop();
}

/// The handle of the seeded "file".
async fn file_of(c: &Client, srv: &nfs_server::RunningServer) -> NfsFh3 {
    c.lookup(&srv.root_handle(), "file")
        .await
        .ok()
        .unwrap()
        .object
}

/// Two exports of servers sharing a state directory (so a handle key):
/// a handle of one is well tagged but names another export.
#[tokio::test]
async fn handle_from_another_export_is_stale() {
    let (a, b) = (TempDir::new("exp-a"), TempDir::new("exp-b"));
    let state = TempDir::new("exp-state");
    seed(&a);
    seed(&b);
    let with_state = |dir: &std::path::Path| {
        let mut cfg = nfs_server::ServerConfig::new(dir);
        cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
        cfg.mount_addr = None;
        cfg.state_dir = Some(state.path().join("s"));
        cfg
    };
    let srv_a = nfs_server::start(with_state(a.path())).await.unwrap();
    let srv_b = nfs_server::start(with_state(b.path())).await.unwrap();
    let before = snapshot(a.path());
    let c = Client::connect(srv_a.nfs_addr()).await;
    let foreign = srv_b.root_handle();
    assert_ne!(foreign, srv_a.root_handle());
    assert_eq!(c.getattr(&foreign).await.status(), Nfsstat3::NFS3ERR_STALE);
    assert_eq!(
        c.create(&foreign, "new").await.status(),
        Nfsstat3::NFS3ERR_STALE
    );
    assert_eq!(snapshot(a.path()), before);
    srv_a.stop();
    srv_b.stop();
}

#[tokio::test]
async fn malformed_handle_is_badhandle() {
    let Seeded { t, srv, before, c } = seeded("badfh", false).await;
    let short = NfsFh3::new(&[1, 2, 3]).unwrap();
    assert_eq!(
        c.getattr(&short).await.status(),
        Nfsstat3::NFS3ERR_BADHANDLE
    );
    assert_eq!(
        c.create(&short, "x").await.status(),
        Nfsstat3::NFS3ERR_BADHANDLE
    );
    unchanged(&t, before, srv);
}

/// LOOKUP/CREATE arguments with a raw name, bypassing the typed encoder.
fn raw_dirop(dir: &NfsFh3, name: &[u8]) -> XdrBuf {
    let mut b = XdrBuf::new();
    b.put_opaque(dir.as_bytes());
    b.put_opaque(name);
    b
}

#[tokio::test]
async fn name_with_slash_is_garbage_args() {
    let Seeded { t, srv, before, c } = seeded("slash", false).await;
    let root = srv.root_handle();
    let r = c
        .raw(
            NFS_PROGRAM,
            3,
            Nfsproc3::LOOKUP.0,
            raw_dirop(&root, b"sub/inner"),
        )
        .await;
    assert_eq!(r.err(), Some(RpcError::GarbageArgs));
    // CREATE "../escape" UNCHECKED with empty sattr3.
    let mut args = raw_dirop(&root, b"../escape");
    for w in [0u32, 0, 0, 0, 0, 0, 0] {
        args.put_u32(w);
    }
    let r = c.raw(NFS_PROGRAM, 3, Nfsproc3::CREATE.0, args).await;
    assert_eq!(r.err(), Some(RpcError::GarbageArgs));
    assert!(!t.path().parent().unwrap().join("escape").exists());
    unchanged(&t, before, srv);
}

#[tokio::test]
async fn dotdot_at_the_root_stays_inside_the_export() {
    let Seeded { t, srv, before, c } = seeded("dotdot", false).await;
    let root = srv.root_handle();
    let up = c.lookup(&root, "..").await.ok().unwrap().object;
    assert_eq!(up, root, "'..' of the export root is the root");
    let sub = c.lookup(&root, "sub").await.ok().unwrap().object;
    assert_eq!(c.lookup(&sub, "..").await.ok().unwrap().object, root);
    // Creating or removing "..": Linux answers EXIST / ACCES.
    assert_eq!(
        c.create(&root, "..").await.status(),
        Nfsstat3::NFS3ERR_EXIST
    );
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::REMOVE,
            &Remove3Args {
                object: Diropargs3 {
                    dir: root.clone(),
                    name: Filename3::from_static(".."),
                },
            },
        )
        .await;
    assert_eq!(rm.status(), Nfsstat3::NFS3ERR_ACCES);
    // A symlink pointing out of the export is never followed by the server.
    std::fs::write(
        t.path()
            .parent()
            .unwrap()
            .join(format!("outside-{}", std::process::id())),
        b"secret",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        t.path()
            .parent()
            .unwrap()
            .join(format!("outside-{}", std::process::id())),
        t.path().join("escape"),
    )
    .unwrap();
    let before = {
        let mut b = before;
        b.extend(
            snapshot(t.path())
                .into_iter()
                .filter(|(p, _)| p.ends_with("escape")),
        );
        b
    };
    let l = c.lookup(&root, "escape").await.ok().unwrap();
    assert_eq!(l.obj_attributes.map(|a| a.ftype), Some(Ftype3::NF3LNK));
    assert_eq!(
        c.read(&l.object, 0, 100).await.status(),
        Nfsstat3::NFS3ERR_INVAL
    );
    assert_eq!(
        c.write(&l.object, 0, b"pwned", StableHow::FILE_SYNC)
            .await
            .status(),
        Nfsstat3::NFS3ERR_INVAL
    );
    let outside = t
        .path()
        .parent()
        .unwrap()
        .join(format!("outside-{}", std::process::id()));
    assert_eq!(std::fs::read(&outside).unwrap(), b"secret");
    std::fs::remove_file(outside).unwrap();
    unchanged(&t, before, srv);
}

#[tokio::test]
async fn read_past_eof_returns_no_data_and_eof() {
    let Seeded { t, srv, before, c } = seeded("eof", false).await;
    let f = file_of(&c, &srv).await;
    let r = c.read(&f, 1000, 4096).await.ok().unwrap();
    assert_eq!((r.count, r.eof, r.data.0.len()), (0, true, 0));
    let r = c.read(&f, 4, 4096).await.ok().unwrap();
    assert_eq!((&r.data.0[..], r.eof), (&b"ents"[..], true));
    unchanged(&t, before, srv);
}

#[tokio::test]
async fn changes_to_a_read_only_export_are_rofs() {
    let Seeded { t, srv, before, c } = seeded("ro", true).await;
    let root = srv.root_handle();
    let f = c.lookup(&root, "file").await.ok().unwrap().object;
    assert_eq!(
        c.write(&f, 0, b"XXXX", StableHow::FILE_SYNC).await.status(),
        Nfsstat3::NFS3ERR_ROFS
    );
    assert_eq!(
        c.create(&root, "new").await.status(),
        Nfsstat3::NFS3ERR_ROFS
    );
    let sa: Setattr3Res = c
        .nfs(
            Nfsproc3::SETATTR,
            &Setattr3Args {
                object: f.clone(),
                new_attributes: Sattr3 {
                    size: Some(0),
                    ..Sattr3::default()
                },
                guard: None,
            },
        )
        .await;
    assert_eq!(sa.status(), Nfsstat3::NFS3ERR_ROFS);
    let rm: Remove3Res = c
        .nfs(
            Nfsproc3::REMOVE,
            &Remove3Args {
                object: Diropargs3 {
                    dir: root.clone(),
                    name: Filename3::from_static("file"),
                },
            },
        )
        .await;
    assert_eq!(rm.status(), Nfsstat3::NFS3ERR_ROFS);
    // Reads still work, and ACCESS grants no modification.
    assert_eq!(
        &c.read(&f, 0, 100).await.ok().unwrap().data.0[..],
        b"contents"
    );
    let acc: Access3Res = c
        .nfs(
            Nfsproc3::ACCESS,
            &Access3Args {
                object: f,
                access: 0x3f,
            },
        )
        .await;
    assert_eq!(
        acc.ok().unwrap().access & (ACCESS3_MODIFY | ACCESS3_EXTEND),
        0
    );
    unchanged(&t, before, srv);
}

#[tokio::test]
async fn truncated_arguments_are_garbage_args() {
    let Seeded { t, srv, before, c } = seeded("trunc", false).await;
    let f = file_of(&c, &srv).await;
    let full = xdr::to_bytes(&Write3Args {
        file: f,
        offset: 0,
        count: 8,
        stable: StableHow::FILE_SYNC,
        data: xdr::DdpOpaque(Bytes::from_static(b"XXXXXXXX")),
    });
    for cut in [4, 20, full.len() - 4] {
        let mut b = XdrBuf::new();
        b.put_raw(&full[..cut]);
        let r = c.raw(NFS_PROGRAM, 3, Nfsproc3::WRITE.0, b).await;
        assert_eq!(r.err(), Some(RpcError::GarbageArgs), "cut at {cut}");
    }
    // WRITE whose count disagrees with its data: GARBAGE_ARGS (Linux).
    let mut b = XdrBuf::new();
    b.put_raw(&full[..full.len() - 20]);
    b.put_u32(9);
    b.put_raw(&full[full.len() - 16..]);
    let r = c.raw(NFS_PROGRAM, 3, Nfsproc3::WRITE.0, b).await;
    assert_eq!(r.err(), Some(RpcError::GarbageArgs));
    let r = c.raw(NFS_PROGRAM, 3, 22, XdrBuf::new()).await;
    assert_eq!(r.err(), Some(RpcError::ProcUnavail));
    unchanged(&t, before, srv);
}

#[tokio::test]
async fn rpcbind_answers_getport_and_getaddr() {
    let t = TempDir::new("rpcb");
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.rpcbind_addr().unwrap()).await;
    // PMAPPROC_GETPORT (v2) for NFS v3 and MOUNT v3 over TCP.
    let port: u32 = c.call(100_000, 2, 3, &[100_003u32, 3, 6, 0]).await.unwrap();
    assert_eq!(port, u32::from(srv.nfs_addr().port()));
    let port: u32 = c.call(100_000, 2, 3, &[100_005u32, 3, 6, 0]).await.unwrap();
    assert_eq!(port, u32::from(srv.mount_addr().unwrap().port()));
    let port: u32 = c.call(100_000, 2, 3, &[100_003u32, 4, 6, 0]).await.unwrap();
    assert_eq!(port, 0);
    // RPCBPROC_GETADDR (v3 and v4).
    let q = nfs_server::rpcbind::Rpcb {
        r_prog: 100_005,
        r_vers: 3,
        r_netid: Bytes::from_static(b"tcp"),
        ..Default::default()
    };
    for vers in [3, 4] {
        let a: String = c.call(100_000, vers, 3, &q).await.unwrap();
        let p = srv.mount_addr().unwrap().port();
        assert_eq!(a, format!("127.0.0.1.{}.{}", p >> 8, p & 0xff));
    }
    srv.stop();
}

#[tokio::test]
async fn random_arguments_get_replies_and_never_break_the_server() {
    let t = TempDir::new("random");
    seed(&t);
    let srv = start(t.path(), false).await;
    let c = Client::connect(srv.nfs_addr()).await;
    let root = srv.root_handle();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..60 {
        for proc_ in 0..22u32 {
            // Half the calls start with a valid handle so decoding goes deeper.
            let mut b = XdrBuf::new();
            if round % 2 == 0 {
                b.put_opaque(root.as_bytes());
            }
            let len = (next() % 64) as usize;
            let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            b.put_raw(&junk);
            match c.raw(NFS_PROGRAM, 3, proc_, b).await {
                Ok(_) | Err(RpcError::GarbageArgs) => {}
                Err(e) => panic!("proc {proc_}: {e}"),
            }
        }
    }
    // The connection survived every call and the server still answers.
    assert!(c.getattr(&root).await.ok().is_some());
    srv.stop();
}

/// Issue 12 item 4: a handle altered anywhere (inode, generation, tag) is
/// NFS3ERR_BADHANDLE, so a client cannot reach an inode it was never
/// given; the server still serves the real handle afterwards.
#[tokio::test]
async fn altered_handles_are_badhandle_and_reach_nothing() {
    let Seeded { t, srv, before, c } = seeded("alter", false).await;
    let file = file_of(&c, &srv).await;
    for byte in 0..file.as_bytes().len() {
        let mut b = file.as_bytes().to_vec();
        b[byte] ^= 0x01;
        let bad = NfsFh3::new(&b).unwrap();
        assert_eq!(
            c.read(&bad, 0, 100).await.status(),
            Nfsstat3::NFS3ERR_BADHANDLE,
            "byte {byte}"
        );
    }
    let r = c.read(&file, 0, 100).await.ok().unwrap();
    assert_eq!(&r.data.0[..], b"contents");
    unchanged(&t, before, srv);
}
