//! RPCSEC_GSS through the command line, with a throw-away MIT KDC:
//! `nfsrdma serve --exports F --keytab K` (an export with
//! `sec=krb5p:krb5i:krb5`) as a child process and `nfsrdma cat
//! 'nfs://...?sec=krb5*'` and `'nfs+rdma://...?sec=krb5*'` with tickets in
//! `KRB5CCNAME`, NFSv3 and NFSv4.1, byte-exact; without a ticket, and with AUTH_SYS, `cat`
//! prints nothing and fails. One test: the Kerberos environment is the
//! process's.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::serve::{free_port, BIN};
use testkit::krb5::TestKdc;

/// Kills the server when the test ends, passed or not.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn data() -> Vec<u8> {
    (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect()
}

fn cat(url: &str, ccache: &str) -> Output {
    Command::new(BIN)
        .args(["cat", url])
        .env("KRB5CCNAME", ccache)
        .output()
        .expect("run nfsrdma cat")
}

#[test]
fn cat_with_kerberos_nfs3_and_nfs41() {
    let Some(kdc) = TestKdc::start("cli-krb5") else {
        return;
    };
    // Clients name the server by the URL's host.
    kdc.admin(&["addprinc", "-randkey", "nfs/127.0.0.1"]);
    let keytab = kdc.keytab();
    kdc.admin(&["ktadd", "-k", keytab.to_str().unwrap(), "nfs/127.0.0.1"]);
    let root = kdc.user_ccache("root");
    // The child processes inherit the realm's configuration.
    kdc.use_in_process(&root);
    let export = testkit::TempDir::new("cli-krb5");
    std::fs::write(export.path().join("f.bin"), data()).unwrap();
    let exports = kdc.dir().join("exports");
    std::fs::write(
        &exports,
        format!(
            "\"{}\" 127.0.0.1(rw,no_root_squash,sec=krb5p:krb5i:krb5)\n",
            export.path().display()
        ),
    )
    .unwrap();
    let log = kdc.dir().join("serve.log");
    let (nfs, mnt, rdma) = (free_port(), free_port(), free_port());
    let child = Command::new(BIN)
        .args(["serve", "--exports"])
        .arg(&exports)
        .arg("--keytab")
        .arg(&keytab)
        .arg("--state-dir")
        .arg(kdc.dir().join("state"))
        .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
        .args([
            "--mount-port",
            &mnt.to_string(),
            "--rdma-port",
            &rdma.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn serve");
    let _srv = Child(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    for port in [nfs, rdma] {
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server never listened: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let url = |opts: &str| {
        let (scheme, port) = match opts.strip_prefix("rdma") {
            Some(_) => ("nfs+rdma", rdma),
            None => ("nfs", nfs),
        };
        let opts = opts.trim_start_matches("rdma");
        format!(
            "{scheme}://127.0.0.1:{port}{}/f.bin?mountport={mnt}{opts}",
            export.path().display()
        )
    };
    for opts in [
        "&sec=krb5p",
        "&sec=krb5i",
        "&sec=krb5",
        "&sec=krb5p&version=4.1",
        "&sec=krb5&version=4.1",
        // RPC-over-RDMA (softrnic): NFSv3 in the three services, v2 of
        // the transport, and NFSv4.1.
        "rdma&sec=krb5p",
        "rdma&sec=krb5i",
        "rdma&sec=krb5",
        "rdma&sec=krb5p&version=2",
        "rdma&sec=krb5i&version=4.1",
    ] {
        let out = cat(&url(opts), &root);
        assert!(
            out.status.success(),
            "cat {opts}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == data(), "cat {opts} differs");
    }
    for (opts, cc) in [
        ("&sec=krb5p", kdc.empty_ccache()),
        ("", root.clone()),
        ("&version=4.1", root.clone()),
        ("rdma&sec=krb5p", kdc.empty_ccache()),
        ("rdma", root.clone()),
        ("rdma&version=4.1", root.clone()),
    ] {
        let out = cat(&url(opts), &cc);
        assert!(!out.status.success(), "cat {opts} with {cc} read the file");
        assert!(out.stdout.is_empty());
    }
    fuse_mounts(export.path(), nfs, rdma, mnt);
}

/// `nfsrdma mount -o sec=krb5*` (FUSE; the ticket in `KRB5CCNAME`, root's
/// here): over TCP (NFSv3, krb5p) and RDMA (NFSv4.1, krb5i) a file read
/// byte-exact and one written reach the export.
fn fuse_mounts(export: &std::path::Path, nfs: u16, rdma: u16, mnt: u16) {
    use support::fuse::mount_url;
    let dir = export.display();
    for (url, opts, tag) in [
        (
            format!("nfs://127.0.0.1:{nfs}{dir}?mountport={mnt}"),
            "sec=krb5p",
            "krb5p-tcp",
        ),
        (
            format!("nfs+rdma://127.0.0.1:{rdma}{dir}?mountport={mnt}"),
            "sec=krb5i,vers=4.1",
            "krb5i-rdma",
        ),
    ] {
        let Some(m) = mount_url(&url, tag, &["-o", opts]) else {
            return;
        };
        assert!(
            std::fs::read(m.path("f.bin")).unwrap() == data(),
            "{tag}: read differs"
        );
        let name = format!("w-{tag}");
        let written: Vec<u8> = data().into_iter().rev().collect();
        std::fs::write(m.path(&name), &written).unwrap();
        drop(m);
        assert!(
            std::fs::read(export.join(&name)).unwrap() == written,
            "{tag}"
        );
    }
}
