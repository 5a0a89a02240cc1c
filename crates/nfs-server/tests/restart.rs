//! Handles across a crash and restart of the server with the same state
//! directory (docs/hardening.md, "State directory"): a server in a child
//! process (this test binary, re-run) hands out handles over NFSv4 (LOOKUP
//! and OPEN) and NFSv3 (LOOKUP), is killed with SIGKILL, and a new one on
//! the same state directory and export answers them; the handle of a file
//! removed meanwhile is STALE. A file with two links keeps its handle
//! through the other name it was looked up by when the first is renamed
//! over after the restart, until that one goes too. The child commits
//! the handle index durably once an hour only, so the handles it hands
//! out before the kill come back from the index's log alone
//! (`localfs/index/log.rs`), READDIRPLUS's among them.

mod common;
mod v4_common;

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{Nfsstat3, Res3};
use nfs::v4::attr::{Bitmap4, FATTR4_FILEID, FATTR4_SIZE};
use nfs::v4::*;
use nfs_server::v4::ManualClock;
use v4_common::{name, owner, Srv, C4};

const CHILD_ENV: &str = "NFS_SERVER_RESTART_CHILD";

/// The server of the child process: the export and state directory from
/// the environment, its address on stdout, then serves until killed.
#[tokio::test]
#[ignore = "the server process of `handles_survive_a_killed_server`"]
async fn restart_child_server() {
    let Ok(dirs) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (export, state) = dirs.split_once('\n').unwrap();
    let mut cfg = nfs_server::ServerConfig::new(export);
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    cfg.state_dir = Some(state.into());
    cfg.grace_time = std::time::Duration::from_millis(1);
    // No durable commit of the index before the kill: what survives is
    // what the log holds.
    nfs_server::localfs::set_index_commit_interval(std::time::Duration::from_secs(3600));
    let srv = nfs_server::start(cfg).await.unwrap();
    println!(
        "ADDR {} {}",
        srv.nfs_addr(),
        hex(srv.root_handle().as_bytes())
    );
    std::future::pending::<()>().await;
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Starts the child server; its process, address and root handle.
fn spawn(export: &Path, state: &Path) -> (Child, SocketAddr, Vec<u8>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "restart_child_server",
            "--ignored",
            "--nocapture",
        ])
        .env(
            CHILD_ENV,
            format!("{}\n{}", export.display(), state.display()),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(Ok(line)) = out.next() {
        if let Some(rest) = line.strip_prefix("ADDR ") {
            let (addr, root) = rest.split_once(' ').unwrap();
            // The rest of its output, drained.
            std::thread::spawn(move || out.for_each(drop));
            return (child, addr.parse().unwrap(), unhex(root));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the child server printed no address");
}

fn putfh(fh: &[u8]) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args {
        object: NfsFh4(Bytes::copy_from_slice(fh)),
    })
}

fn lookup(n: &'static str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args { objname: name(n) })
}

fn getattr() -> NfsArgop4 {
    NfsArgop4::Getattr(Getattr4Args {
        attr_request: Bitmap4::from_bits(&[FATTR4_SIZE, FATTR4_FILEID]),
    })
}

fn read(count: u32) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid: Stateid4 {
            seqid: 0,
            other: xdr::FixedOpaque([0; 12]),
        },
        offset: 0,
        count,
    })
}

/// OPEN of existing `file` for reading.
fn open(clientid: u64, file: &'static str) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(clientid, "restart-owner"),
        openhow: OpenHow4(None),
        claim: OpenClaim4::Null(name(file)),
    })
}

fn fh(r: &[NfsResop4]) -> Vec<u8> {
    r.iter()
        .rev()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(f)) => Some(f.object.as_bytes().to_vec()),
            _ => None,
        })
        .expect("a GETFH result")
}

fn read_data(r: &[NfsResop4]) -> Vec<u8> {
    r.iter()
        .rev()
        .find_map(|x| match x {
            NfsResop4::Read(Res4::Ok(d)) => Some(d.data.0.to_vec()),
            _ => None,
        })
        .expect("a READ result")
}

/// The names (files only) and handles of a whole READDIRPLUS listing of
/// `dir`, in pages of about 4 KiB.
async fn readdirplus_all(
    c: &common::Client,
    dir: &nfs::v3::NfsFh3,
) -> Vec<(String, nfs::v3::NfsFh3)> {
    use nfs::v3::{Nfsproc3, Readdirplus3Args, Readdirplus3Res};
    let (mut cookie, mut verf, mut out) = (0, [0; 8], Vec::new());
    loop {
        let args = Readdirplus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf: xdr::FixedOpaque(verf),
            dircount: 1024,
            maxcount: 4096,
        };
        let r: Readdirplus3Res = c.nfs(Nfsproc3::READDIRPLUS, &args).await;
        let page = r.ok().expect("READDIRPLUS");
        for e in &page.entries {
            let name = String::from_utf8(e.name.0.to_vec()).unwrap();
            if name != "." && name != ".." {
                out.push((name, e.name_handle.clone().expect("a handle")));
            }
            cookie = e.cookie;
        }
        verf = page.cookieverf.0;
        if page.eof {
            return out;
        }
    }
}

async fn client(addr: SocketAddr, uid: u32, tag: &str) -> C4 {
    let srv = Srv {
        addr,
        uid,
        clock: Arc::new(ManualClock::new()),
        dir: v4_common::TempDir::new(tag),
    };
    let mut c = C4::connect(&srv).await;
    c.establish(tag).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_killed_server() {
    let t = common::TempDir::new("killed");
    let export = t.path().join("export");
    let state = t.path().join("state");
    std::fs::create_dir_all(export.join("d")).unwrap();
    for (f, data) in [
        ("d/looked", "looked up"),
        ("d/opened", "opened"),
        ("v3", "v3"),
        ("gone", "gone"),
        ("d/ln-a", "two links"),
        ("d/over", "over"),
    ] {
        std::fs::write(export.join(f), data).unwrap();
    }
    std::fs::hard_link(export.join("d/ln-a"), export.join("d/ln-b")).unwrap();
    std::fs::create_dir(export.join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(export.join(format!("many/f{i:03}")), format!("many {i}")).unwrap();
    }
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&export).unwrap());

    let (mut first, addr, root) = spawn(&export, &state);
    let c = client(addr, uid, "restart-a").await;
    let looked = fh(&c
        .ok(vec![
            putfh(&root),
            lookup("d"),
            lookup("looked"),
            NfsArgop4::Getfh(()),
        ])
        .await);
    let r = c
        .ok(vec![
            putfh(&root),
            lookup("d"),
            open(c.clientid, "opened"),
            NfsArgop4::Getfh(()),
        ])
        .await;
    let opened = fh(&r);
    let gone = fh(&c
        .ok(vec![putfh(&root), lookup("gone"), NfsArgop4::Getfh(())])
        .await);
    let linked = fh(&c
        .ok(vec![
            putfh(&root),
            lookup("d"),
            lookup("ln-a"),
            NfsArgop4::Getfh(()),
        ])
        .await);
    let other = c
        .ok(vec![
            putfh(&root),
            lookup("d"),
            lookup("ln-b"),
            NfsArgop4::Getfh(()),
        ])
        .await;
    assert_eq!(fh(&other), linked);
    // The first name looked up again (the one a server keeping one name
    // per file would now have).
    c.ok(vec![putfh(&root), lookup("d"), lookup("ln-a")]).await;
    let v3c = common::Client::connect(addr).await;
    let root3 = nfs::v3::NfsFh3::new(&root).unwrap();
    let v3 = match v3c.lookup(&root3, "v3").await {
        Res3::Ok(ok) => ok.object,
        Res3::Fail(s, _) => panic!("v3 LOOKUP: {s}"),
    };
    // A fresh directory listed with READDIRPLUS: every entry's handle
    // goes to the index (and its log) with the page.
    let many = match v3c.lookup(&root3, "many").await {
        Res3::Ok(ok) => ok.object,
        Res3::Fail(s, _) => panic!("v3 LOOKUP: {s}"),
    };
    let listed = readdirplus_all(&v3c, &many).await;
    assert_eq!(listed.len(), 300);
    // A crash: no index flush on the way out.
    first.kill().unwrap();
    first.wait().unwrap();
    drop((c, v3c));
    std::fs::remove_file(export.join("gone")).unwrap();

    let (mut second, addr, root2) = spawn(&export, &state);
    assert_eq!(root2, root);
    let c = client(addr, uid, "restart-b").await;
    for (h, want) in [
        (&looked, "looked up"),
        (&opened, "opened"),
        (&v3.as_bytes().to_vec(), "v3"),
    ] {
        let r = c.ok(vec![putfh(h), getattr(), read(100)]).await;
        assert_eq!(read_data(&r), want.as_bytes());
    }
    let r = c.seq(vec![putfh(&gone), getattr()]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE, "{r:?}");
    let v3c = common::Client::connect(addr).await;
    for (h, want) in [(&looked, "looked up"), (&v3.as_bytes().to_vec(), "v3")] {
        let h = nfs::v3::NfsFh3::new(h).unwrap();
        match v3c.read(&h, 0, 100).await {
            Res3::Ok(ok) => assert_eq!(&ok.data.0[..], want.as_bytes()),
            Res3::Fail(s, _) => panic!("v3 READ: {s}"),
        }
    }
    let g = nfs::v3::NfsFh3::new(&gone).unwrap();
    assert_eq!(v3c.getattr(&g).await.status(), Nfsstat3::NFS3ERR_STALE);
    // Every handle the listing handed out reads its file.
    for (name, h) in &listed {
        let want = format!("many {}", name[1..].parse::<usize>().unwrap());
        match v3c.read(h, 0, 100).await {
            Res3::Ok(ok) => assert_eq!(&ok.data.0[..], want.as_bytes(), "{name}"),
            Res3::Fail(s, _) => panic!("v3 READ of listed {name}: {s}"),
        }
    }
    // The name the linked file was first looked up by, renamed over.
    let d = fh(&c
        .ok(vec![putfh(&root), lookup("d"), NfsArgop4::Getfh(())])
        .await);
    c.ok(vec![
        putfh(&d),
        NfsArgop4::Savefh(()),
        putfh(&d),
        NfsArgop4::Rename(Rename4Args {
            oldname: name("over"),
            newname: name("ln-a"),
        }),
    ])
    .await;
    let r = c.ok(vec![putfh(&linked), read(100)]).await;
    assert_eq!(read_data(&r), b"two links");
    c.ok(vec![
        putfh(&d),
        NfsArgop4::Remove(Remove4Args {
            target: name("ln-b"),
        }),
    ])
    .await;
    let r = c.seq(vec![putfh(&linked), getattr()]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_STALE, "{r:?}");
    second.kill().unwrap();
    second.wait().unwrap();
}
