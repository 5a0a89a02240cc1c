//! `nfsrdma mount` through FUSE, exercised with ordinary tools (ls, cp,
//! cmp, dd, find, mkdir, mv, rm, ln, readlink, diff, chmod, truncate)
//! against the project's NFSv3 server started in this test process.
//!
//! Where FUSE is unavailable (no /dev/fuse, no fusermount3 for a non-root
//! user, or mounting refused) each test prints a loud `SKIPPED:` line and
//! returns; once a mount is in place, any misbehaviour fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod support;

use support::fuse::*;
use support::{Server, TempDir};

#[test]
fn ordinary_tools_work_on_the_mount() {
    let srv = Server::start("exp");
    let exp = srv.dir().to_path_buf();
    std::fs::write(exp.join("hello.txt"), b"hello over nfs\n").unwrap();
    std::fs::create_dir(exp.join("sub")).unwrap();
    std::fs::write(exp.join("sub/inner"), b"inner\n").unwrap();
    let Some(m) = mount(&srv, "mnt", &[]) else {
        return;
    };
    let local = TempDir::new("local");

    // ls sees what the server holds.
    let ls = ok("ls", &["-a", s(&m.path(""))]);
    let names: Vec<&str> = ls.lines().collect();
    for n in ["hello.txt", "sub"] {
        assert!(names.contains(&n), "ls shows {names:?}");
    }
    assert_eq!(
        std::fs::read(m.path("hello.txt")).unwrap(),
        b"hello over nfs\n"
    );

    // cp of a few MiB in, then out again; cmp both ways.
    let big = pattern(3 << 20 | 12_345);
    std::fs::write(local.0.join("big"), &big).unwrap();
    ok("cp", &[s(&local.0.join("big")), s(&m.path("big"))]);
    assert_holds(&exp.join("big"), &big);
    ok("cp", &[s(&m.path("big")), s(&local.0.join("back"))]);
    ok("cmp", &[s(&local.0.join("big")), s(&local.0.join("back"))]);

    // dd writes in 64 KiB blocks with an fsync, then reads back.
    let dd_src = local.0.join("dd-src");
    std::fs::write(&dd_src, pattern(1 << 20)).unwrap();
    ok(
        "dd",
        &[
            &format!("if={}", s(&dd_src)),
            &format!("of={}", s(&m.path("dd.bin"))),
            "bs=64k",
            "conv=fsync",
            "status=none",
        ],
    );
    ok("cmp", &[s(&dd_src), s(&exp.join("dd.bin"))]);
    let dd_back = local.0.join("dd-back");
    ok(
        "dd",
        &[
            &format!("if={}", s(&m.path("dd.bin"))),
            &format!("of={}", s(&dd_back)),
            "bs=1M",
            "status=none",
        ],
    );
    ok("cmp", &[s(&dd_src), s(&dd_back)]);

    // mkdir, mv, find.
    ok("mkdir", &["-p", s(&m.path("a/b/c"))]);
    assert!(exp.join("a/b/c").is_dir());
    ok(
        "mv",
        &[s(&m.path("hello.txt")), s(&m.path("a/b/hello.txt"))],
    );
    assert!(!exp.join("hello.txt").exists());
    assert!(exp.join("a/b/hello.txt").is_file());
    let found = ok("find", &[s(&m.path("")), "-type", "f", "-name", "*.txt"]);
    assert_eq!(found.trim(), s(&m.path("a/b/hello.txt")));

    // ln -s and readlink; the link resolves through the mount.
    ok("ln", &["-s", "a/b/hello.txt", s(&m.path("link"))]);
    assert_eq!(
        std::fs::read_link(exp.join("link")).unwrap(),
        Path::new("a/b/hello.txt")
    );
    assert_eq!(
        ok("readlink", &[s(&m.path("link"))]).trim(),
        "a/b/hello.txt"
    );
    assert_eq!(ok("cat", &[s(&m.path("link"))]), "hello over nfs\n");

    // A hard link shares the inode.
    ok("ln", &[s(&m.path("big")), s(&m.path("big2"))]);
    let st = ok(
        "stat",
        &["-c", "%h %i", s(&m.path("big")), s(&m.path("big2"))],
    );
    let lines: Vec<&str> = st.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], lines[1]);
    assert!(lines[0].starts_with("2 "), "{st}");

    // chmod, truncate and touch reach the server.
    ok("chmod", &["640", s(&m.path("dd.bin"))]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(exp.join("dd.bin"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    ok("truncate", &["-s", "1000", s(&m.path("dd.bin"))]);
    assert_eq!(std::fs::metadata(exp.join("dd.bin")).unwrap().len(), 1000);
    ok(
        "touch",
        &["-d", "2001-02-03 04:05:06Z", s(&m.path("dd.bin"))],
    );
    let mtime = std::fs::metadata(exp.join("dd.bin"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        mtime
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
        981_173_106
    );

    // The whole tree is the same seen through the mount and directly.
    ok("diff", &["-r", s(&m.path("")), s(&exp)]);

    // rm and rmdir; errors come back as errnos.
    ok("rm", &[s(&m.path("big2")), s(&m.path("link"))]);
    let out = sh("rmdir", &[s(&m.path("a"))]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok("rm", &["-r", s(&m.path("a"))]);
    assert!(!exp.join("a").exists());
    let out = sh("cat", &[s(&m.path("missing"))]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));

    // df reads FSSTAT.
    ok("df", &[s(&m.path(""))]);

    // SIGTERM unmounts cleanly and ends the process.
    let mut m = m;
    let mut child = m.child.take().unwrap();
    // The shell's own `kill`: no procps needed.
    ok("sh", &["-c", &format!("kill -TERM {}", child.id())]);
    let deadline = Instant::now() + Duration::from_secs(8);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit {status}:\n{}", m.log());
    assert!(!is_mounted(&m.dir.0), "still mounted after SIGTERM");
    assert!(m.log().contains("unmounting"), "{}", m.log());
}

#[test]
fn read_only_mount_refuses_changes_and_ends_on_external_unmount() {
    let srv = Server::start("ro");
    std::fs::write(srv.dir().join("f"), b"data\n").unwrap();
    let Some(mut m) = mount(&srv, "ro-mnt", &["--read-only", "--attr-timeout", "0"]) else {
        return;
    };
    assert_eq!(ok("cat", &[s(&m.path("f"))]), "data\n");
    let out = sh("touch", &[s(&m.path("new"))]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!srv.dir().join("new").exists());
    assert!(!sh("rm", &[s(&m.path("f"))]).status.success());
    assert!(srv.dir().join("f").exists());

    // fusermount3 -u from outside ends the mount process by itself.
    let out = sh("fusermount3", &["-u", s(&m.path(""))]);
    if !out.status.success() {
        ok("umount", &[s(&m.path(""))]);
    }
    let mut child = m.child.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "still running after unmount");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit {status}:\n{}", m.log());
}

#[test]
fn background_mount_returns_once_mounted_and_reports_failures() {
    let srv = Server::start("bg");
    std::fs::write(srv.dir().join("f"), b"bg\n").unwrap();
    if let Some(why) = fuse_unavailable() {
        skip(&why);
        return;
    }
    let dir = TempDir::new("bg-mnt");
    let out = Command::new(BIN)
        .args(["mount", &srv.fuse_url(), s(&dir.0)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() && refused(&err) {
        skip(&format!("mounting was refused: {err}"));
        return;
    }
    // Unmounted at the end even if an assertion fails.
    let m = Mounted {
        dir,
        child: None,
        log: PathBuf::new(),
    };
    assert!(out.status.success(), "{err}");
    assert!(
        is_mounted(&m.dir.0),
        "not mounted when the command returned"
    );
    assert_eq!(ok("cat", &[s(&m.path("f"))]), "bg\n");
    drop(m);

    // A missing export fails the command with the server's answer.
    let dir = TempDir::new("bg-bad");
    let bad = format!("nfs://127.0.0.1:{}/no/such/export", srv.port);
    let out = Command::new(BIN)
        .args(["mount", &bad, s(&dir.0)])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!is_mounted(&dir.0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MOUNT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn writeback_cache_mount_keeps_small_and_partial_writes_intact() {
    let srv = Server::start("wb");
    let exp = srv.dir().to_path_buf();
    let Some(m) = mount(&srv, "wb-mnt", &["--writeback-cache"]) else {
        return;
    };
    let local = TempDir::new("wb-local");
    let src = local.0.join("src");
    std::fs::write(&src, pattern((2 << 20) + 777)).unwrap();
    // 4 KiB writes, gathered by the kernel into large WRITEs.
    ok(
        "dd",
        &[
            &format!("if={}", s(&src)),
            &format!("of={}", s(&m.path("small"))),
            "bs=4k",
            "status=none",
        ],
    );
    // close(2) committed it: the export holds every byte.
    ok("cmp", &[s(&src), s(&exp.join("small"))]);
    // Overwrite 100 bytes in the middle, then append, in place.
    let patch = local.0.join("patch");
    std::fs::write(&patch, [0x5a; 100]).unwrap();
    ok(
        "dd",
        &[
            &format!("if={}", s(&patch)),
            &format!("of={}", s(&m.path("small"))),
            "bs=1",
            "seek=5000",
            "conv=notrunc",
            "status=none",
        ],
    );
    let mut want = std::fs::read(&src).unwrap();
    want[5000..5100].fill(0x5a);
    assert_holds(&exp.join("small"), &want);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(m.path("small"))
            .unwrap();
        f.write_all(b"tail").unwrap();
        f.sync_all().unwrap();
    }
    want.extend_from_slice(b"tail");
    assert_holds(&exp.join("small"), &want);
    assert_holds(&m.path("small"), &want);
}

#[test]
fn large_directories_list_completely_and_fifos_are_created() {
    let srv = Server::start("big-dir");
    let exp = srv.dir().to_path_buf();
    std::fs::create_dir(exp.join("many")).unwrap();
    // Far more than one READDIRPLUS reply holds.
    let n = 3000;
    for i in 0..n {
        let name = format!("entry-with-a-fairly-long-name-{i:05}");
        std::fs::write(exp.join("many").join(name), b"").unwrap();
    }
    let Some(m) = mount(&srv, "big-dir-mnt", &[]) else {
        return;
    };
    let ls = ok("ls", &[s(&m.path("many"))]);
    let names: Vec<&str> = ls.lines().collect();
    assert_eq!(names.len(), n);
    assert_eq!(names[0], "entry-with-a-fairly-long-name-00000");
    assert_eq!(
        names[n - 1],
        format!("entry-with-a-fairly-long-name-{:05}", n - 1)
    );
    let found = ok("find", &[s(&m.path("many")), "-type", "f"]);
    assert_eq!(found.lines().count(), n);
    // `ls -l` stats every entry (attributes from READDIRPLUS or GETATTR).
    let long = ok("ls", &["-l", s(&m.path("many"))]);
    assert_eq!(long.lines().filter(|l| l.starts_with("-rw")).count(), n);

    ok("mkfifo", &["-m", "600", s(&m.path("fifo"))]);
    use std::os::unix::fs::FileTypeExt;
    let ft = std::fs::symlink_metadata(exp.join("fifo"))
        .unwrap()
        .file_type();
    assert!(ft.is_fifo(), "{ft:?}");
    assert_eq!(
        ok("stat", &["-c", "%F %a", s(&m.path("fifo"))]).trim(),
        "fifo 600"
    );
}

#[test]
fn rdma_mount_copies_files_both_ways() {
    let srv = Server::start("rdma");
    let exp = srv.dir().to_path_buf();
    std::fs::write(exp.join("hello"), b"over rdma\n").unwrap();
    let Some(m) = mount_url(&srv.fuse_rdma_url(), "rdma-mnt", &[]) else {
        return;
    };
    assert_eq!(ok("cat", &[s(&m.path("hello"))]), "over rdma\n");
    let local = TempDir::new("rdma-local");
    let big = pattern((2 << 20) + 4321);
    std::fs::write(local.0.join("big"), &big).unwrap();
    ok("cp", &[s(&local.0.join("big")), s(&m.path("big"))]);
    assert_holds(&exp.join("big"), &big);
    ok("cp", &[s(&m.path("big")), s(&local.0.join("back"))]);
    ok("cmp", &[s(&local.0.join("big")), s(&local.0.join("back"))]);
    ok("ln", &["-s", "hello", s(&m.path("link"))]);
    assert_eq!(ok("readlink", &[s(&m.path("link"))]).trim(), "hello");
    ok("diff", &["-r", s(&m.path("")), s(&exp)]);
}

#[test]
fn close_to_open_sees_changes_made_on_the_server() {
    let srv = Server::start("cto");
    let f = srv.dir().join("f");
    std::fs::write(&f, b"version 1\n").unwrap();
    // nfs(5)'s default attribute cache: 3 s or more for this file.
    let Some(m) = mount(&srv, "cto-mnt", &[]) else {
        return;
    };
    let p = m.path("f");
    assert_eq!(ok("cat", &[s(&p)]), "version 1\n");
    assert_eq!(ok("cat", &[s(&p)]), "version 1\n");
    // Changed behind the mount's back: same size, then longer.
    let later = |secs| std::time::SystemTime::now() + Duration::from_secs(secs);
    std::fs::write(&f, b"version 2\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(later(10))
        .unwrap();
    assert_eq!(ok("cat", &[s(&p)]), "version 2\n", "an open revalidates");
    std::fs::write(&f, b"version 3, longer\n").unwrap();
    assert_eq!(ok("cat", &[s(&p)]), "version 3, longer\n");
    // A new name made on the server is found at once (no negative cache).
    std::fs::write(srv.dir().join("g"), b"g\n").unwrap();
    assert_eq!(ok("cat", &[s(&m.path("g"))]), "g\n");
}

#[test]
fn mount_options_set_sizes_and_timeouts() {
    let srv = Server::start("opts");
    std::fs::write(srv.dir().join("f"), pattern(200_000)).unwrap();
    let Some(m) = mount(
        &srv,
        "opts-mnt",
        &["-o", "rsize=16384,wsize=8192", "-o", "noac,ro"],
    ) else {
        return;
    };
    assert_holds(&m.path("f"), &pattern(200_000));
    let out = sh("touch", &[s(&m.path("new"))]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    // noac: a change on the server shows in the next stat.
    std::fs::write(srv.dir().join("f"), b"short").unwrap();
    assert_eq!(ok("stat", &["-c", "%s", s(&m.path("f"))]).trim(), "5");
}
