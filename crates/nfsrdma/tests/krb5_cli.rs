//! RPCSEC_GSS through the command line, with a throw-away MIT KDC:
//! `nfsrdma serve --exports F --keytab K` (an export with
//! `sec=krb5p:krb5i:krb5`) as a child process and `nfsrdma cat
//! 'nfs://...?sec=krb5*'` with tickets in `KRB5CCNAME`, NFSv3 and
//! NFSv4.1, byte-exact; without a ticket, and with AUTH_SYS, `cat`
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
    let (nfs, mnt) = (free_port(), free_port());
    let child = Command::new(BIN)
        .args(["serve", "--exports"])
        .arg(&exports)
        .arg("--keytab")
        .arg(&keytab)
        .arg("--state-dir")
        .arg(kdc.dir().join("state"))
        .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
        .args(["--mount-port", &mnt.to_string(), "--transports", "tcp"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn serve");
    let _srv = Child(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", nfs)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server never listened: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = |opts: &str| {
        format!(
            "nfs://127.0.0.1:{nfs}{}/f.bin?mountport={mnt}{opts}",
            export.path().display()
        )
    };
    for opts in [
        "&sec=krb5p",
        "&sec=krb5i",
        "&sec=krb5",
        "&sec=krb5p&version=4.1",
        "&sec=krb5&version=4.1",
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
    ] {
        let out = cat(&url(opts), &cc);
        assert!(!out.status.success(), "cat {opts} with {cc} read the file");
        assert!(out.stdout.is_empty());
    }
}
