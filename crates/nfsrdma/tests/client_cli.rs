//! `nfsrdma ls`, `cat` and `cp` as a user runs them, against the project's
//! NFSv3 server started in this test process on 127.0.0.1: over TCP
//! (`nfs://`) and over RPC-over-RDMA on the software iWARP device
//! (`nfs+rdma://`, MOUNT over TCP).

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

mod support;

use support::{Server, TempDir};

impl Server {
    /// An `nfs+rdma://` URL: NFS on the RDMA port, MOUNT on the TCP one,
    /// with extra query options `opts` (`&`-joined).
    fn rdma_url(&self, rel: &str, opts: &str) -> String {
        format!(
            "nfs+rdma://127.0.0.1:{}{}/{rel}?mountport={}{}{opts}",
            self.rdma_port,
            self.dir().display(),
            self.port,
            if opts.is_empty() { "" } else { "&" },
        )
    }

    fn url(&self, rel: &str) -> String {
        format!(
            "nfs://127.0.0.1:{}{}/{rel}",
            self.port,
            self.dir().display()
        )
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run nfsrdma")
}

fn ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "nfsrdma {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7919) % 253) as u8).collect()
}

#[test]
fn cp_local_to_remote_to_local_is_byte_exact() {
    let srv = Server::start("cp");
    let local = TempDir::new("cp-local");
    let data = pattern(3 << 20);
    let src = local.0.join("data.bin");
    std::fs::write(&src, &data).unwrap();

    let out = ok(&[
        "cp",
        "--in-flight",
        "8",
        "--block-size",
        "64k",
        src.to_str().unwrap(),
        &srv.url(""),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("copied 3145728 bytes in") && stderr.contains("MiB/s"),
        "{stderr}"
    );
    assert!(std::fs::read(srv.dir().join("data.bin")).unwrap() == data);

    let back = local.0.join("back.bin");
    ok(&["cp", &srv.url("data.bin"), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "copied back differs");

    ok(&["cp", &srv.url("data.bin"), &srv.url("copy.bin")]);
    assert!(std::fs::read(srv.dir().join("copy.bin")).unwrap() == data);
}

#[test]
fn ls_lists_names_and_long_format() {
    let srv = Server::start("ls");
    std::fs::write(srv.dir().join("b.txt"), b"12345").unwrap();
    std::fs::write(srv.dir().join("a.txt"), b"").unwrap();
    std::fs::write(srv.dir().join(".hidden"), b"").unwrap();
    std::fs::create_dir(srv.dir().join("sub")).unwrap();
    std::os::unix::fs::symlink("b.txt", srv.dir().join("link")).unwrap();
    std::fs::set_permissions(
        srv.dir().join("b.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();

    let out = ok(&["ls", "--sort", &srv.url("")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a.txt\nb.txt\nlink\nsub\n"
    );
    // Unsorted (streamed in the server's order): the same names.
    let out = ok(&["ls", &srv.url("")]);
    let mut names: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.txt", "link", "sub"]);
    let out = ok(&["ls", "-a", "-s", &srv.url("")]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(".hidden\n"));

    let out = ok(&["ls", "-l", "--sort", &srv.url("")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].starts_with("-rw-r----- "), "{text}");
    assert!(
        lines[1].contains(" 5 ") && lines[1].ends_with(" b.txt"),
        "{text}"
    );
    assert!(
        lines[2].starts_with('l') && lines[2].ends_with("link -> b.txt"),
        "{text}"
    );
    assert!(lines[3].starts_with("drwx"), "{text}");

    let out = ok(&["ls", &srv.url("b.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b.txt\n");
}

#[test]
fn cat_writes_the_file_to_stdout() {
    let srv = Server::start("cat");
    let data = pattern(300_000);
    std::fs::create_dir(srv.dir().join("d")).unwrap();
    std::fs::write(srv.dir().join("d/f"), &data).unwrap();
    let out = ok(&["cat", "--block-size", "32k", &srv.url("d/f")]);
    assert!(out.stdout == data, "cat output differs");
    let out = run(&["cat", &srv.url("d")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
}

#[test]
fn missing_files_and_rdma_urls_fail_with_clear_errors() {
    let srv = Server::start("errs");
    let out = run(&["cat", &srv.url("nope")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NFS3ERR_NOENT"));

    // Nothing listens for RDMA on a port that was just free.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!(
        "nfs+rdma://127.0.0.1:{free}{}/?mountport={}",
        srv.dir().display(),
        srv.port
    );
    let out = run(&["ls", &url]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("over RDMA") && stderr.contains("refused"),
        "{stderr}"
    );
    let out = run(&["ls", &format!("{}&crc=2", srv.rdma_url("", ""))]);
    assert!(!out.status.success());

    let out = run(&["ls", "http://127.0.0.1/x"]);
    assert!(!out.status.success());
    let out = run(&["cp", "/etc/hostname", "/tmp/x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be an nfs:// URL"));
}

#[test]
fn a_closed_stdout_ends_cat_quietly() {
    let srv = Server::start("pipe");
    // Far more than a pipe buffer holds, so cat meets EPIPE.
    std::fs::write(srv.dir().join("big"), pattern(4 << 20)).unwrap();
    let mut child = Command::new(BIN)
        .args(["cat", "--block-size", "4k", &srv.url("big")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

/// cp local → nfs+rdma → local, remote → remote across transports, ls
/// and cat, all over RPC-over-RDMA with the URL's options `opts`.
fn rdma_round_trip(srv: &Server, opts: &str) {
    let local = TempDir::new("rdma-local");
    let data = pattern((2 << 20) + 4321);
    let src = local.0.join("data.bin");
    std::fs::write(&src, &data).unwrap();
    std::fs::create_dir(srv.dir().join("sub")).unwrap();

    let out = ok(&[
        "cp",
        "--in-flight",
        "8",
        "--block-size",
        "64k",
        src.to_str().unwrap(),
        &srv.rdma_url("sub/", opts),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("copied 2101473 bytes in"), "{stderr}");
    assert!(std::fs::read(srv.dir().join("sub/data.bin")).unwrap() == data);

    let back = local.0.join("back.bin");
    ok(&[
        "cp",
        "--block-size",
        "256k",
        &srv.rdma_url("sub/data.bin", opts),
        back.to_str().unwrap(),
    ]);
    assert!(std::fs::read(&back).unwrap() == data, "copied back differs");

    // RDMA source, TCP destination.
    ok(&[
        "cp",
        &srv.rdma_url("sub/data.bin", opts),
        &srv.url("copy.bin"),
    ]);
    assert!(std::fs::read(srv.dir().join("copy.bin")).unwrap() == data);

    let out = ok(&["ls", "--sort", &srv.rdma_url("", opts)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "copy.bin\nsub\n");
    let out = ok(&["ls", "-l", &srv.rdma_url("sub", opts)]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.starts_with("-rw") && text.contains(" 2101473 ") && text.ends_with(" data.bin\n"),
        "{text}"
    );

    let out = ok(&[
        "cat",
        "--block-size",
        "32k",
        &srv.rdma_url("sub/data.bin", opts),
    ]);
    assert!(out.stdout == data, "cat over RDMA differs");
}

#[test]
fn cp_ls_cat_work_over_rpc_over_rdma() {
    let srv = Server::start("rdma");
    rdma_round_trip(&srv, "");
}

#[test]
fn cp_ls_cat_work_over_rdma_with_crc_and_version_2() {
    let srv = Server::start_with("rdma-crc", true);
    rdma_round_trip(&srv, "crc=1&version=2");
}

/// `ls`, `cat` and `cp` over NFSv4 (`version=`) on `url` (a function of
/// the path below the export): byte-exact both ways, a listing with the
/// names, sizes and types the export holds, and a copy between servers.
fn nfs4_commands_work(srv: &Server, url: impl Fn(&str) -> String) {
    let exp = srv.dir();
    let data = pattern((5 << 20) + 4321);
    std::fs::create_dir(exp.join("sub")).unwrap();
    std::fs::write(exp.join("sub/small.txt"), b"small\n").unwrap();
    std::fs::write(exp.join("seed.bin"), &data).unwrap();

    let out = ok(&["cat", &url("seed.bin")]);
    assert!(out.stdout == data, "cat: {} bytes", out.stdout.len());

    let ls = ok(&["ls", "-s", &url("")]);
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "seed.bin\nsub\n");
    let ls = ok(&["ls", "-l", &url("sub")]);
    let line = String::from_utf8_lossy(&ls.stdout).into_owned();
    assert!(line.starts_with("-rw"), "{line}");
    assert!(
        line.trim_end().ends_with(" 6 ") || line.contains(" 6 "),
        "{line}"
    );
    assert!(line.trim_end().ends_with("small.txt"), "{line}");
    // numlinks, owner and owner_group come with the attributes.
    assert!(!line.contains('?'), "{line}");

    let local = TempDir::new("v4-local");
    let up = local.0.join("up.bin");
    let up_data = pattern(3 << 20);
    std::fs::write(&up, &up_data).unwrap();
    ok(&["cp", up.to_str().unwrap(), &url("sub/")]);
    assert!(std::fs::read(exp.join("sub/up.bin")).unwrap() == up_data);
    // Over an existing, longer file: truncated first.
    ok(&["cp", up.to_str().unwrap(), &url("seed.bin")]);
    assert!(std::fs::read(exp.join("seed.bin")).unwrap() == up_data);
    let back = local.0.join("back.bin");
    ok(&["cp", &url("sub/up.bin"), back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == up_data);
    // Server to server (here the same one), the other version on one side.
    ok(&["cp", &url("sub/up.bin"), &srv.url("copy.bin")]);
    assert!(std::fs::read(exp.join("copy.bin")).unwrap() == up_data);

    let missing = run(&["cat", &url("no/such")]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no such file"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

#[test]
fn nfs4_ls_cat_cp_over_tcp() {
    let srv = Server::start("v4-tcp");
    let url = |rel: &str| format!("{}?version=4.1", srv.url(rel));
    nfs4_commands_work(&srv, url);
}

#[test]
fn nfs4_ls_cat_cp_over_rdma() {
    let srv = Server::start("v4-rdma");
    // NFSv4.2 on RPC-over-RDMA version 2: each `version=` names its own.
    let url = |rel: &str| srv.rdma_url(rel, "version=4.2&version=2");
    nfs4_commands_work(&srv, url);
}

/// A server laid out as the Linux server with an `fsid=0` export: its
/// NFSv4 root is the export itself (no pseudo file system above it) and
/// it answers no MOUNT (an NFSv4-only server). Serves `dir` over TCP
/// until the runtime is dropped; returns the NFS port.
fn v4_only_root_server(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> u16 {
    rt.block_on(async {
        let fs = std::sync::Arc::new(nfs_server::localfs::LocalFs::new(dir, false).unwrap());
        let mut rpc = oncrpc::Server::new();
        rpc.register(nfs_server::v4::Nfs4Service::new(fs));
        let tcp = oncrpc::tcp::TcpServer::bind(
            "127.0.0.1:0",
            std::sync::Arc::new(rpc),
            oncrpc::tcp::TcpConfig::default(),
        )
        .await
        .unwrap();
        let port = tcp.local_addr().unwrap().port();
        tcp.spawn();
        port
    })
}

/// `cp` to a new file named in the NFSv4 root of such a server (seen
/// with the Linux server in the VM: the name, not being in the root yet,
/// was asked of MOUNT, which did not answer): the file is created in the
/// root, and in a directory of it; `cat` reads both back byte-exact; a
/// missing directory is named by the server's NOENT.
#[test]
fn nfs4_cp_creates_a_new_file_in_a_root_that_is_the_export() {
    let export = TempDir::new("v4root");
    std::fs::create_dir(export.0.join("sub")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let port = v4_only_root_server(&rt, &export.0);
    // No MOUNT anywhere: an unused port for it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = |rel: &str| format!("nfs://127.0.0.1:{port}/{rel}?version=4.1&mountport={closed}");
    let local = TempDir::new("v4root-local");
    let data = pattern(300_000);
    let src = local.0.join("data.bin");
    std::fs::write(&src, &data).unwrap();
    for rel in ["new.bin", "sub/new.bin"] {
        ok(&["cp", src.to_str().unwrap(), &url(rel)]);
        assert!(std::fs::read(export.0.join(rel)).unwrap() == data, "{rel}");
        let out = ok(&["cat", &url(rel)]);
        assert!(out.stdout == data, "cat {rel}");
    }
    let missing = run(&["cp", src.to_str().unwrap(), &url("nope/new.bin")]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("NOENT") && !err.contains("MOUNT"), "{err}");
}

#[test]
fn nconnect_in_the_url_reads_and_writes_byte_exact_and_is_refused_where_it_cannot_apply() {
    let srv = Server::start("nconnect");
    let local = TempDir::new("nconnect-local");
    let data = pattern(2 << 20);
    let src = local.0.join("data.bin");
    std::fs::write(&src, &data).unwrap();
    let url = |rel: &str, q: &str| format!("{}?{q}", srv.url(rel));
    ok(&["cp", src.to_str().unwrap(), &url("", "nconnect=4")]);
    assert!(std::fs::read(srv.dir().join("data.bin")).unwrap() == data);
    let out = ok(&["cat", &url("data.bin", "nconnect=4")]);
    assert!(out.stdout == data, "cat with nconnect=4 differs");
    for (q, says) in [
        ("nconnect=17", "between 1 and 16"),
        ("nconnect=2&version=4.1", "NFSv4 over several connections"),
    ] {
        let out = run(&["cat", &url("data.bin", q)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{q}: {err}");
    }
}
