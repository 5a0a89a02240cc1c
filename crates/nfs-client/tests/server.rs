//! The client against the project's NFSv3 server (crates/nfs-server) over
//! TCP on 127.0.0.1: every procedure, pipelined transfers, multi-call
//! READDIRPLUS, error mapping.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use testkit::TempDir;

use bytes::Bytes;
use nfs::v3::*;
use nfs_client::{
    connect_tcp, process_auth_sys, Error, IoOptions, Mount, MountClient, Nfs3Client, TcpOptions,
    TcpTarget,
};
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{TcpClient, TcpConfig};
use oncrpc::{ClientTransport, RpcCall, RpcError};

async fn server(dir: &Path) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(dir);
    // The tests run as root and act as the export's owner.
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    nfs_server::start(cfg).await.unwrap()
}

fn target(srv: &nfs_server::RunningServer, path: &Path) -> TcpTarget {
    TcpTarget {
        host: "127.0.0.1".into(),
        nfs_port: Some(srv.nfs_addr().port()),
        mount_port: None,
        path: path.to_str().unwrap().into(),
    }
}

/// A transport that counts calls in flight, to show pipelining.
struct Counting {
    inner: TcpClient,
    now: AtomicUsize,
    max: AtomicUsize,
    calls: AtomicUsize,
}

impl ClientTransport for Counting {
    async fn call(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.call(call).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

async fn counting_mount(
    srv: &nfs_server::RunningServer,
    export: &Path,
    io: IoOptions,
) -> Mount<Counting> {
    let cred = process_auth_sys().to_opaque_auth();
    let tcp = |seed| {
        TcpClient::connect(
            srv.nfs_addr(),
            seed,
            ClientConfig::default(),
            TcpConfig::default(),
        )
    };
    let mnt = MountClient::new(tcp(1).await.unwrap(), cred.clone());
    let root = mnt.mnt(export.to_str().unwrap()).await.unwrap().fhandle;
    let t = Counting {
        inner: tcp(0x5000).await.unwrap(),
        now: AtomicUsize::new(0),
        max: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    };
    Mount::new(Nfs3Client::new(t, cred), root, io)
        .await
        .unwrap()
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn status(e: Error) -> Nfsstat3 {
    e.nfs_status()
        .unwrap_or_else(|| panic!("not an NFS status: {e}"))
}

#[tokio::test]
async fn every_procedure_works_against_the_project_server() {
    let dir = TempDir::new("procs");
    let srv = server(dir.path()).await;
    let m = connect_tcp(&target(&srv, dir.path()), &TcpOptions::default())
        .await
        .unwrap();
    assert_eq!(m.export, dir.path().to_str().unwrap());
    assert_eq!(m.rest, "");
    let mount = &m.mount;
    let c = mount.client();
    let root = mount.root().clone();

    c.null().await.unwrap();
    assert_eq!(c.getattr(&root).await.unwrap().ftype, Ftype3::NF3DIR);
    assert!(mount.fsinfo().rtmax >= 4096);
    assert!(c.fsstat(&root).await.unwrap().tbytes > 0);
    assert!(c.pathconf(&root).await.unwrap().name_max >= 255);
    let granted = c
        .access(&root, ACCESS3_READ | ACCESS3_LOOKUP)
        .await
        .unwrap();
    assert_eq!(granted.access & ACCESS3_LOOKUP, ACCESS3_LOOKUP);

    let sub = c.mkdir(
        &root,
        "sub",
        Sattr3 {
            mode: Some(0o755),
            ..Default::default()
        },
    );
    let sub = sub.await.unwrap().obj.unwrap();
    let f = c
        .create(
            &sub,
            "f",
            Createhow3::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Default::default()
            }),
        )
        .await
        .unwrap()
        .obj
        .unwrap();
    let w = c
        .write(
            &f,
            0,
            Bytes::from_static(b"hello, nfs"),
            StableHow::UNSTABLE,
        )
        .await
        .unwrap();
    assert_eq!(w.count, 10);
    let cm = c.commit(&f, 0, 0).await.unwrap();
    assert_eq!(cm.verf, w.verf);
    let r = c.read(&f, 7, 100).await.unwrap();
    assert_eq!((&r.data.0[..], r.eof), (&b"nfs"[..], true));
    c.setattr(
        &f,
        Sattr3 {
            size: Some(5),
            mode: Some(0o600),
            ..Default::default()
        },
        None,
    )
    .await
    .unwrap();
    let attrs = c.lookup(&sub, "f").await.unwrap().obj_attributes.unwrap();
    assert_eq!((attrs.size, attrs.mode & 0o777), (5, 0o600));
    assert_eq!(std::fs::read(dir.path().join("sub/f")).unwrap(), b"hello");

    let l = c.symlink(&sub, "ln", "f", Sattr3::default()).await.unwrap();
    let l = l.obj.unwrap();
    assert_eq!(&c.readlink(&l).await.unwrap().data.0[..], b"f");
    c.link(&f, &root, "hard").await.unwrap();
    assert_eq!(c.getattr(&f).await.unwrap().nlink, 2);
    let fifo = Mknoddata3::Special {
        ftype: Ftype3::NF3FIFO,
        attributes: Sattr3 {
            mode: Some(0o644),
            ..Default::default()
        },
    };
    c.mknod(&sub, "fifo", fifo).await.unwrap();
    assert_eq!(
        c.lookup(&sub, "fifo")
            .await
            .unwrap()
            .obj_attributes
            .unwrap()
            .ftype,
        Ftype3::NF3FIFO
    );

    let rd = c
        .readdir(&sub, 0, xdr::FixedOpaque([0; 8]), 8192)
        .await
        .unwrap();
    let mut names: Vec<_> = rd.entries.iter().map(|e| e.name.0.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [".", "..", "f", "fifo", "ln"].map(|s| Bytes::from_static(s.as_bytes()))
    );
    let rdp = c
        .readdirplus(&sub, 0, xdr::FixedOpaque([0; 8]), 4096, 32768)
        .await
        .unwrap();
    assert!(rdp.eof);
    let fe = rdp.entries.iter().find(|e| &e.name.0[..] == b"f").unwrap();
    assert_eq!(fe.name_handle.as_ref(), Some(&f));

    c.rename(&sub, "f", &root, "moved").await.unwrap();
    assert!(dir.path().join("moved").exists());
    c.remove(&root, "moved").await.unwrap();
    c.remove(&root, "hard").await.unwrap();
    c.remove(&sub, "ln").await.unwrap();
    c.remove(&sub, "fifo").await.unwrap();
    c.rmdir(&root, "sub").await.unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    srv.stop();
}

#[tokio::test]
async fn multi_mib_file_round_trips_with_many_ops_in_flight() {
    let dir = TempDir::new("big");
    let srv = server(dir.path()).await;
    let io = IoOptions {
        in_flight: 16,
        block_size: Some(64 * 1024),
        ..IoOptions::default()
    };
    let m = counting_mount(&srv, dir.path(), io).await;
    let data = pattern(6 << 20, 7);
    let (fh, stats) = m
        .write_file("big.bin", 0o644, Bytes::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(stats.bytes, data.len() as u64);
    assert_eq!(stats.writes, 96);
    assert!(stats.commits >= 1);
    assert_eq!(stats.resent_bytes, 0);
    let t = m.client().transport();
    assert!(
        t.max.load(Ordering::SeqCst) > 4,
        "writes were not pipelined"
    );
    assert_eq!(std::fs::read(dir.path().join("big.bin")).unwrap(), data);

    t.max.store(0, Ordering::SeqCst);
    let back = m.read_file(&fh).await.unwrap();
    assert!(back == data, "read back differs");
    assert!(t.max.load(Ordering::SeqCst) > 4, "reads were not pipelined");

    let mut buf = vec![0u8; 1 << 20];
    let n = m.read_at(&fh, (5 << 20) + 12345, &mut buf).await.unwrap();
    let tail = &data[(5 << 20) + 12345..];
    assert_eq!(n, tail.len());
    assert!(buf[..n] == *tail);
    let n = m.read_at(&fh, 100, &mut buf).await.unwrap();
    assert_eq!(n, buf.len());
    assert!(buf[..] == data[100..100 + (1 << 20)]);
    srv.stop();
}

#[tokio::test]
async fn readdirplus_lists_more_than_100_entries_over_several_calls() {
    let dir = TempDir::new("dir");
    let mut want: Vec<String> = (0..150)
        .map(|i| format!("entry-with-a-long-name-{i:04}"))
        .collect();
    for n in &want {
        std::fs::write(dir.path().join(n), n.as_bytes()).unwrap();
    }
    let srv = server(dir.path()).await;
    let io = IoOptions {
        dir_bytes: Some(4096),
        ..IoOptions::default()
    };
    let m = counting_mount(&srv, dir.path(), io).await;
    let mut it = m.read_dir(m.root());
    let mut got = Vec::new();
    while let Some(e) = it.next_entry().await.unwrap() {
        // Linux gives no handle for '..' at the export root, nor does
        // this server.
        if &e.name.0[..] != b".." {
            assert!(e.name_handle.is_some(), "{e:?}");
        }
        got.push(nfs_client::entry_name(&e));
    }
    assert!(it.calls() > 2, "only {} READDIRPLUS calls", it.calls());
    got.retain(|n| n != "." && n != "..");
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(m.list_dir(m.root()).await.unwrap().len(), 150);
    srv.stop();
}

#[tokio::test]
async fn errors_map_to_nfs_statuses() {
    let dir = TempDir::new("errs");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/x"), b"x").unwrap();
    std::fs::write(dir.path().join("file"), b"data").unwrap();
    let srv = server(dir.path()).await;
    let m = connect_tcp(&target(&srv, dir.path()), &TcpOptions::default())
        .await
        .unwrap();
    let (m, c) = (&m.mount, m.mount.client());
    let root = m.root().clone();
    let file = m.resolve("file").await.unwrap().fh;
    let d = m.resolve("/d/").await.unwrap().fh;

    let e = m.resolve("nope").await.unwrap_err();
    assert!(e.is_not_found());
    assert_eq!(status(e), Nfsstat3::NFS3ERR_NOENT);
    let guarded = Createhow3::Guarded(Sattr3::default());
    assert_eq!(
        status(c.create(&root, "file", guarded).await.unwrap_err()),
        Nfsstat3::NFS3ERR_EXIST
    );
    assert_eq!(
        status(c.mkdir(&root, "d", Sattr3::default()).await.unwrap_err()),
        Nfsstat3::NFS3ERR_EXIST
    );
    let verf = xdr::FixedOpaque([0; 8]);
    assert_eq!(
        status(c.readdirplus(&file, 0, verf, 1024, 4096).await.unwrap_err()),
        Nfsstat3::NFS3ERR_NOTDIR
    );
    assert_eq!(
        status(c.read(&d, 0, 10).await.unwrap_err()),
        Nfsstat3::NFS3ERR_ISDIR
    );
    assert_eq!(
        status(c.rmdir(&root, "d").await.unwrap_err()),
        Nfsstat3::NFS3ERR_NOTEMPTY
    );
    assert_eq!(
        status(m.resolve_parent("file/y").await.unwrap_err()),
        Nfsstat3::NFS3ERR_NOTDIR
    );
    let Error::Nfs { proc, .. } = c.remove(&root, "nope").await.unwrap_err() else {
        panic!("not an NFS error");
    };
    assert_eq!(proc, Nfsproc3::REMOVE);
    assert!(matches!(
        c.lookup(&root, "a/b").await,
        Err(Error::InvalidName(_))
    ));
    srv.stop();
}

#[tokio::test]
async fn mounting_an_unexported_path_fails_with_a_mount_status() {
    let dir = TempDir::new("mnt");
    let srv = server(dir.path()).await;
    let mut t = target(&srv, dir.path());
    t.path = "/definitely/not/exported".into();
    let e = connect_tcp(&t, &TcpOptions::default()).await.unwrap_err();
    assert!(matches!(e, Error::Mount { .. }), "{e}");
    srv.stop();
}

#[tokio::test]
async fn a_path_below_the_export_mounts_the_export() {
    let dir = TempDir::new("below");
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::write(dir.path().join("a/b/c.txt"), b"below").unwrap();
    let srv = server(dir.path()).await;
    let t = target(&srv, &dir.path().join("a/b/c.txt"));
    let m = connect_tcp(&t, &TcpOptions::default()).await.unwrap();
    assert_eq!(m.export, dir.path().to_str().unwrap());
    assert_eq!(m.rest, "a/b/c.txt");
    let f = m.mount.resolve(&m.rest).await.unwrap();
    assert_eq!(m.mount.read_file(&f.fh).await.unwrap(), b"below");
    srv.stop();
}

#[tokio::test]
async fn default_read_dir_pages_a_large_directory_in_few_large_replies() {
    let dir = TempDir::new("bigdir");
    for i in 0..4000 {
        std::fs::write(dir.path().join(format!("file-{i:05}")), b"").unwrap();
    }
    let srv = server(dir.path()).await;
    let m = counting_mount(&srv, dir.path(), IoOptions::default()).await;
    let mut it = m.read_dir(m.root());
    let mut sizes = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    while let Some(page) = it.next_page().await.unwrap() {
        sizes.push(page.len());
        names.extend(page.iter().map(nfs_client::entry_name));
    }
    assert_eq!(names.len(), 4002);
    // The first reply is small (32 KiB: the caller can show it while the
    // server reads the rest), each next one twice as large up to 512 KiB
    // or more: a few calls in all.
    assert!(
        it.calls() <= 6,
        "{} READDIRPLUS calls: {sizes:?}",
        it.calls()
    );
    assert_eq!(sizes.len() as u32, it.calls());
    assert!((100..400).contains(&sizes[0]), "{sizes:?}");
    assert!(sizes[1] > sizes[0] * 3 / 2, "{sizes:?}");
    srv.stop();
}
