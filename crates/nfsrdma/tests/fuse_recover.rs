//! Recovery of the NFSv4.1 FUSE mount (`nfsrdma mount -o vers=4.1`,
//! RFC 8881 §8.4.2, §8.4.3): a file held open by this test process keeps
//! reading and writing, byte-exact, across a crash and restart of the
//! server (`nfsrdma serve` with its state directory: the mount
//! reconnects, gets BADSESSION, makes a new client id and session,
//! reclaims the open with CLAIM_PREVIOUS in the grace period, then
//! RECLAIM_COMPLETE) and across an expired lease (the mount process
//! stopped past the lease: a new client id, CLAIM_PREVIOUS refused with
//! NFS4ERR_NO_GRACE, the open made again with CLAIM_FH).
//!
//! Where FUSE is unavailable each test prints a loud `SKIPPED:` line and
//! returns.

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

mod support;

use support::fuse::*;
use support::serve::ServeChild;
use support::Server;

/// Reads the whole file through `f` from the start, after dropping the
/// kernel's clean cached pages (as root) so that the READs reach the
/// mount.
fn read_all(f: &mut std::fs::File) -> Vec<u8> {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    got
}

/// Writes `data` at `at` through `f`, and into `want`.
fn write_at(f: &mut std::fs::File, want: &mut [u8], at: usize, data: &[u8]) {
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    f.write_all(data).unwrap();
    want[at..at + data.len()].copy_from_slice(data);
}

/// The mount's log without its terminal colour sequences (`ESC [ ... m`).
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A file held open on a mount over `scheme` (`nfs` or `nfs+rdma`)
/// with `vers` survives a restart of the server.
fn an_open_file_survives_a_server_restart_over(scheme: &str, vers: &str) {
    let tag = if scheme == "nfs" {
        "v4-restart"
    } else {
        "v4-restart-rdma"
    };
    let data = pattern(1 << 20);
    let mut srv = ServeChild::start(tag, &["--no-root-squash"], |d| {
        std::fs::write(d.join("data"), &data).unwrap();
    });
    let url = srv.url(scheme, "").replacen("/?", "?", 1);
    let Some(m) = mount_url(&url, &format!("{tag}-mnt"), &["-o", vers]) else {
        return;
    };
    let mut restarter = srv.restarter(&["--no-root-squash"]);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("data"))
        .unwrap();
    let mut want = data.clone();
    write_at(&mut f, &mut want, 100_000, &[0xa1; 70_000]);
    assert!(read_all(&mut f) == want, "before the restart");

    srv.restart(&mut restarter);

    // The same descriptor, after the restart: a write, then the whole
    // file read back.
    f.seek(SeekFrom::Start(600_000)).unwrap();
    if let Err(e) = f.write_all(&[0xb2; 90_000]) {
        panic!("write after the restart: {e}\n{}", m.log());
    }
    want[600_000..690_000].fill(0xb2);
    let got = read_all(&mut f);
    assert!(
        got == want,
        "after the restart: {} bytes, first difference at {:?}\n{}",
        got.len(),
        got.iter().zip(&want).position(|(a, b)| a != b),
        m.log()
    );
    f.sync_all().unwrap();
    drop(f);
    assert_holds(&srv.export.0.join("data"), &want);
    let log = plain(&m.log());
    assert!(
        log.contains("NFSv4 session recovered") && log.contains("new_client=true"),
        "{log}"
    );
    // The open was reclaimed in the grace period, which then ended.
    assert!(!log.contains("could not be reclaimed"), "{log}");
    // New opens work after RECLAIM_COMPLETE.
    assert!(std::fs::read(m.path("data")).unwrap() == want);
}

#[test]
fn an_open_file_survives_a_server_restart() {
    an_open_file_survives_a_server_restart_over("nfs", "vers=4.1");
}

/// Over RPC-over-RDMA (softrnic): the mount's RDMA connection is made
/// again after the restart and the open reclaimed, as over TCP.
#[test]
fn an_open_file_survives_a_server_restart_over_rdma() {
    an_open_file_survives_a_server_restart_over("nfs+rdma", "vers=4.2");
}

#[test]
fn an_open_file_survives_an_expired_lease() {
    let srv = Server::start_config("v4-expire", false, |c| {
        c.nfs4_limits.lease = Duration::from_secs(2);
    });
    let data = pattern(300_000);
    std::fs::write(srv.dir().join("data"), &data).unwrap();
    let Some(m) = mount_url(&srv.fuse_url(), "v4-expire-mnt", &["-o", "vers=4.1"]) else {
        return;
    };
    // Stops and continues the mount process when told (made before the
    // file is opened: see `ServeChild::restarter`).
    let mut stopper = std::process::Command::new("sh")
        .args(["-c", "read _ && kill -STOP $0 && read _ && kill -CONT $0"])
        .arg(m.pid().to_string())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut tell = stopper.stdin.take().unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("data"))
        .unwrap();
    let mut want = data.clone();
    write_at(&mut f, &mut want, 1000, b"before expiry");
    // The mount process stopped past two leases: the server expires its
    // client id and the open with it.
    tell.write_all(b"stop\n").unwrap();
    std::thread::sleep(Duration::from_secs(6));
    tell.write_all(b"cont\n").unwrap();
    drop(tell);
    assert!(stopper.wait().unwrap().success());
    f.seek(SeekFrom::Start(200_000)).unwrap();
    if let Err(e) = f.write_all(b"after expiry") {
        panic!("write after the expiry: {e}\n{}", m.log());
    }
    want[200_000..200_012].copy_from_slice(b"after expiry");
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut got = Vec::new();
    if let Err(e) = f.read_to_end(&mut got) {
        panic!("read after the expiry: {e}\n{}", m.log());
    }
    assert!(got == want, "{}", m.log());
    if let Err(e) = f.sync_all() {
        panic!("fsync after the expiry: {e}\n{}", m.log());
    }
    drop(f);
    assert_holds(&srv.dir().join("data"), &want);
    let log = m.log();
    assert!(log.contains("NFSv4 session recovered"), "{log}");
    assert!(!log.contains("could not be reclaimed"), "{log}");
}
