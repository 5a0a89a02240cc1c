//! A throw-away MIT Kerberos realm for tests: Debian's `krb5-kdc` started
//! on a loopback port with its database, configuration, keytabs and
//! credential caches in a temporary directory. [`TestKdc::start`] returns
//! `None`, after printing why, when the programs are not installed
//! (`scripts/install-deps.sh` installs them).

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TempDir;

/// The realm every test KDC serves.
pub const REALM: &str = "NFSRDMA.TEST";

const PROGRAMS: [&str; 4] = [
    "/usr/sbin/krb5kdc",
    "/usr/sbin/kdb5_util",
    "/usr/sbin/kadmin.local",
    "/usr/bin/kinit",
];

/// A running KDC; stopped and its files removed on drop.
#[derive(Debug)]
pub struct TestKdc {
    dir: TempDir,
    kdc: Child,
    port: u16,
}

impl Drop for TestKdc {
    fn drop(&mut self) {
        let _ = self.kdc.kill();
        let _ = self.kdc.wait();
    }
}

/// A port free for both TCP and UDP on 127.0.0.1, from the ephemeral
/// range.
fn free_port() -> u16 {
    for _ in 0..64 {
        let Ok(t) = TcpListener::bind("127.0.0.1:0") else {
            continue;
        };
        let Ok(a) = t.local_addr() else { continue };
        if UdpSocket::bind(("127.0.0.1", a.port())).is_ok() {
            return a.port();
        }
    }
    panic!("no free loopback port for the KDC");
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a Kerberos admin program");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn command(dir: &Path, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("KRB5_CONFIG", dir.join("krb5.conf"))
        .env("KRB5_KDC_PROFILE", dir.join("kdc.conf"));
    c
}

fn admin(dir: &Path, query: &[&str]) {
    run(command(dir, "/usr/sbin/kadmin.local").args(["-r", REALM, "-q", &query.join(" ")]));
}

/// `krb5.conf` (clients) and `kdc.conf` (the KDC) for a KDC on `port`.
fn write_config(dir: &Path, port: u16) {
    let d = dir.display();
    std::fs::write(
        dir.join("krb5.conf"),
        format!(
            "[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n \
             dns_lookup_realm = false\n rdns = false\n dns_canonicalize_hostname = false\n \
             udp_preference_limit = 1\n\n[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n\
             [domain_realm]\n localhost = {REALM}\n"
        ),
    )
    .expect("write the realm configuration");
    std::fs::write(
        dir.join("kdc.conf"),
        format!(
            "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\n[realms]\n {REALM} = {{\n  \
             database_name = {d}/principal\n  key_stash_file = {d}/stash\n  \
             acl_file = {d}/kadm5.acl\n  kdc_ports = {port}\n  kdc_tcp_ports = {port}\n }}\n\n\
             [logging]\n kdc = FILE:{d}/kdc.log\n"
        ),
    )
    .expect("write the realm configuration");
}

impl TestKdc {
    /// Creates the realm (`kdb5_util create -s`), the service principal
    /// `nfs/localhost` with its keys in [`Self::keytab`], and starts the
    /// KDC. `None` when the Kerberos programs are missing.
    pub fn start(tag: &str) -> Option<Self> {
        if let Some(p) = PROGRAMS.iter().find(|p| !Path::new(p).exists()) {
            eprintln!(
                "SKIPPED: {p} is not installed (apt-get install krb5-kdc krb5-admin-server \
                 krb5-user, or scripts/install-deps.sh): Kerberos tests not run"
            );
            return None;
        }
        let mut dir = TempDir::new(tag);
        write_config(dir.path(), free_port());
        let keytab = dir.path().join("nfs.keytab");
        run(command(dir.path(), "/usr/sbin/kdb5_util").args([
            "create",
            "-s",
            "-r",
            REALM,
            "-P",
            "master-password",
        ]));
        admin(dir.path(), &["addprinc", "-randkey", "nfs/localhost"]);
        admin(
            dir.path(),
            &["ktadd", "-k", &keytab.to_string_lossy(), "nfs/localhost"],
        );
        // A port picked free may be taken before the KDC binds it (tests
        // in parallel open many): a KDC that does not answer a ticket
        // request is started again on another port.
        for attempt in 0..4 {
            let port = free_port();
            write_config(dir.path(), port);
            let child = command(dir.path(), "/usr/sbin/krb5kdc")
                .args(["-n", "-r", REALM])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start krb5kdc");
            let mut kdc = Self {
                dir,
                kdc: child,
                port,
            };
            if kdc.answers() {
                return Some(kdc);
            }
            assert!(attempt < 3, "krb5kdc never answered");
            let _ = kdc.kdc.kill();
            let _ = kdc.kdc.wait();
            dir = std::mem::replace(&mut kdc.dir, TempDir::new("unused"));
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Whether the KDC issues tickets: a `kinit` of the service's own key
    /// into a scratch cache succeeds, within 10 s.
    fn answers(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        let cc = format!("FILE:{}/cc_probe", self.dir.path().display());
        while Instant::now() < deadline {
            if matches!(self.kdc.try_wait(), Ok(Some(_))) {
                return false;
            }
            let ok = self
                .command("/usr/bin/kinit")
                .env("KRB5CCNAME", &cc)
                .args([
                    "-k",
                    "-t",
                    &self.keytab().to_string_lossy(),
                    "nfs/localhost",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// A command with this realm's configuration in its environment.
    pub fn command(&self, program: &str) -> Command {
        command(self.dir.path(), program)
    }

    /// Runs one `kadmin.local` query.
    pub fn admin(&self, query: &[&str]) {
        admin(self.dir.path(), query);
    }

    /// The KDC's port on 127.0.0.1 (TCP and UDP).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `krb5.conf` clients and servers use (`KRB5_CONFIG`).
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("krb5.conf")
    }

    /// The keytab holding `nfs/localhost@REALM` (`KRB5_KTNAME`).
    pub fn keytab(&self) -> PathBuf {
        self.dir.path().join("nfs.keytab")
    }

    /// Creates `user@REALM` (random keys, kept in a keytab of its own) and
    /// gets it a ticket-granting ticket in a private credential cache,
    /// whose `KRB5CCNAME` value is returned.
    pub fn user_ccache(&self, user: &str) -> String {
        let kt = self.dir.path().join(format!("{user}.keytab"));
        self.admin(&["addprinc", "-randkey", user]);
        self.admin(&["ktadd", "-k", &kt.to_string_lossy(), user]);
        let cc = format!("FILE:{}/cc_{user}", self.dir.path().display());
        run(self.command("/usr/bin/kinit").env("KRB5CCNAME", &cc).args([
            "-k",
            "-t",
            &kt.to_string_lossy(),
            &format!("{user}@{REALM}"),
        ]));
        cc
    }

    /// A credential cache with no tickets (`KRB5CCNAME` value).
    pub fn empty_ccache(&self) -> String {
        format!("FILE:{}/cc_empty", self.dir.path().display())
    }

    /// The directory holding the realm's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Points this process's Kerberos library at the realm: `KRB5_CONFIG`,
    /// `KRB5_KTNAME` (the service keytab) and `KRB5CCNAME` (`ccache`).
    /// The environment is the process's: call it from a test binary's
    /// one test, before Kerberos is used on other threads.
    pub fn use_in_process(&self, ccache: &str) {
        std::env::set_var("KRB5_CONFIG", self.config());
        std::env::set_var("KRB5_KTNAME", self.keytab());
        std::env::set_var("KRB5CCNAME", ccache);
    }
}
