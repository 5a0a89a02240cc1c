//! RPC-over-TLS through the command line: `nfsrdma serve --tls-cert
//! --tls-key` as a child process and `nfsrdma cat` with `?xprtsec=tls`,
//! NFSv3 and NFSv4.1, with certificates the test makes; and a client that
//! asks for TLS from a server without it fails instead of going plain.

use std::process::{Command, Output};

mod support;

use support::serve::{ServeChild as Serve, BIN};
use testkit::tls::TestPki;

fn data() -> Vec<u8> {
    (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn cat(url: &str) -> Output {
    Command::new(BIN)
        .args(["cat", url])
        .output()
        .expect("run nfsrdma cat")
}

fn url(srv: &Serve, pki: &TestPki, opts: &str) -> String {
    format!(
        "nfs://127.0.0.1:{}{}/f.bin?mountport={}&xprtsec=tls&tls-ca={}{opts}",
        srv.nfs,
        srv.export.0.display(),
        srv.mnt,
        pki.ca.display()
    )
}

#[test]
fn cat_over_tls_nfs3_and_nfs41() {
    let pki = TestPki::new("cli-tls");
    let (cert, key) = (
        pki.server_cert.to_str().unwrap(),
        pki.server_key.to_str().unwrap(),
    );
    let srv = Serve::start(
        "cli-tls",
        &["--no-root-squash", "--tls-cert", cert, "--tls-key", key],
        |dir| std::fs::write(dir.join("f.bin"), data()).unwrap(),
    );
    for opts in ["", "&version=4.1"] {
        let out = cat(&url(&srv, &pki, opts));
        assert!(
            out.status.success(),
            "cat {opts}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == data(), "cat {opts} differs");
    }
}

#[test]
fn asking_a_server_without_tls_fails() {
    let pki = TestPki::new("cli-notls");
    let srv = Serve::start("cli-notls", &["--no-root-squash"], |dir| {
        std::fs::write(dir.join("f.bin"), data()).unwrap()
    });
    let out = cat(&url(&srv, &pki, ""));
    assert!(!out.status.success(), "read in the clear");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RPC-over-TLS"), "{err}");
    assert!(out.stdout.is_empty());
}
