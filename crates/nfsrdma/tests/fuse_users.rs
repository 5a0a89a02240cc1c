//! `nfsrdma mount -o allow_other` as a multi-user client, over TCP and
//! RDMA: processes of other users (started with util-linux `setpriv`)
//! act as themselves towards the server, which decides by their uid, gid
//! and supplementary groups; a file unlinked while open stays readable
//! by its holder (silly rename) and leaves no trace after its last close.
//!
//! The tests run as root (to mount with allow_other and to switch
//! users); otherwise, or where FUSE is unavailable, they print a loud
//! `SKIPPED:` line and return.

use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;

use support::fuse::*;
use support::Server;

/// User A, user B, and a group B may be given.
const ALICE: u32 = 41001;
const BOB: u32 = 41002;
const SHARED: u32 = 42001;

/// Fills the export: a 0600 file of A, a 0640 file of group SHARED, and
/// a directory anyone may write in.
fn populate(exp: &Path) {
    let file = |name: &str, body: &[u8], uid: u32, gid: u32, mode: u32| {
        let p = exp.join(name);
        std::fs::write(&p, body).unwrap();
        chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    file("alice-only", b"alice's secret\n", ALICE, ALICE, 0o600);
    file("group-file", b"for the group\n", 0, SHARED, 0o640);
    std::fs::set_permissions(exp, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = exp.join("shared");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
}

fn setup(tag: &str, rdma: bool, opts: &str) -> Option<(Server, Mounted)> {
    if !is_root() {
        eprintln!("SKIPPED: multi-user FUSE test not run: needs root (setpriv, allow_other)");
        return None;
    }
    let srv = Server::start(tag);
    populate(srv.dir());
    let url = if rdma {
        srv.fuse_rdma_url()
    } else {
        srv.fuse_url()
    };
    let m = mount_url(&url, &format!("{tag}-mnt"), &["-o", opts])?;
    Some((srv, m))
}

/// The server decides per caller: A reads its 0600 file, B gets EACCES
/// (from the server: the mount has no default_permissions), B reads the
/// group file only with the group among its supplementary groups, and
/// what A creates belongs to A on the server.
fn permissions_are_the_servers_per_caller(rdma: bool) {
    let tag = if rdma { "users-rdma" } else { "users-tcp" };
    let Some((srv, m)) = setup(tag, rdma, "allow_other") else {
        return;
    };
    let mnt = m.path("");
    let cat = |f: &str| format!("cat {}/{f}", mnt.display());

    let a = as_user(ALICE, &[], &cat("alice-only"));
    assert!(a.status.success(), "A: {}", text(&a.stderr));
    assert_eq!(text(&a.stdout), "alice's secret\n");
    let b = as_user(BOB, &[], &cat("alice-only"));
    assert!(!b.status.success(), "B read A's 0600 file");
    assert!(
        text(&b.stderr).contains("Permission denied"),
        "{}",
        text(&b.stderr)
    );
    assert!(b.stdout.is_empty());

    let b = as_user(BOB, &[], &cat("group-file"));
    assert!(
        !b.status.success(),
        "B read the group's file outside the group"
    );
    assert!(
        text(&b.stderr).contains("Permission denied"),
        "{}",
        text(&b.stderr)
    );
    let b = as_user(BOB, &[7, SHARED], &cat("group-file"));
    assert!(b.status.success(), "B in the group: {}", text(&b.stderr));
    assert_eq!(text(&b.stdout), "for the group\n");

    // Root (not squashed by this server) reads everything.
    assert_eq!(ok("cat", &[s(&m.path("alice-only"))]), "alice's secret\n");

    // A creates a file: the server made it A's, and B may not write it.
    let w = as_user(
        ALICE,
        &[],
        &format!("umask 022; echo made by A > {}/shared/by-a", mnt.display()),
    );
    assert!(w.status.success(), "{}", text(&w.stderr));
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(srv.dir().join("shared/by-a")).unwrap();
    assert_eq!((md.uid(), md.gid()), (ALICE, ALICE));
    assert_eq!(md.mode() & 0o777, 0o644);
    let b = as_user(
        BOB,
        &[],
        &format!("echo B >> {}/shared/by-a", mnt.display()),
    );
    assert!(!b.status.success(), "B appended to A's 0644 file");
    assert!(
        text(&b.stderr).contains("Permission denied"),
        "{}",
        text(&b.stderr)
    );
    assert_eq!(
        std::fs::read(srv.dir().join("shared/by-a")).unwrap(),
        b"made by A\n"
    );
    // B may not create in the export root (root's 0755).
    let b = as_user(BOB, &[], &format!("touch {}/nope", mnt.display()));
    assert!(
        !b.status.success(),
        "B created a file in root's 0755 directory"
    );
    assert!(!srv.dir().join("nope").exists());
}

#[test]
fn permissions_are_the_servers_per_caller_over_tcp() {
    permissions_are_the_servers_per_caller(false);
}

#[test]
fn permissions_are_the_servers_per_caller_over_rdma() {
    permissions_are_the_servers_per_caller(true);
}

#[test]
fn default_permissions_has_the_kernel_check_modes_too() {
    let Some((_srv, m)) = setup("users-dp", false, "allow_other,default_permissions") else {
        return;
    };
    let mnt = m.path("");
    let b = as_user(BOB, &[], &format!("cat {}/alice-only", mnt.display()));
    assert!(!b.status.success());
    assert!(
        text(&b.stderr).contains("Permission denied"),
        "{}",
        text(&b.stderr)
    );
    let a = as_user(ALICE, &[], &format!("cat {}/alice-only", mnt.display()));
    assert_eq!(text(&a.stdout), "alice's secret\n", "{}", text(&a.stderr));
    let b = as_user(BOB, &[SHARED], &format!("cat {}/group-file", mnt.display()));
    assert_eq!(text(&b.stdout), "for the group\n", "{}", text(&b.stderr));
}

/// Names in the export's directory `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A file unlinked (and one replaced by a rename) while a process holds
/// it open stays readable by that process, its name is gone from the
/// listing at once, and the hidden `.nfs` name goes at its last close.
fn open_unlinked_file_stays_readable(rdma: bool) {
    let tag = if rdma { "silly-rdma" } else { "silly-tcp" };
    let Some((srv, m)) = setup(tag, rdma, "allow_other") else {
        return;
    };
    let shared = srv.dir().join("shared");
    let body = pattern(300_000);
    std::fs::write(shared.join("victim"), &body).unwrap();
    std::fs::write(shared.join("old"), b"old contents\n").unwrap();
    std::fs::write(shared.join("new"), b"new contents\n").unwrap();
    let d = m.path("shared");
    let d = d.display();
    // As A: open both, unlink one and rename over the other, list, then
    // read through the open descriptors.
    let script = format!(
        "exec 3< {d}/victim 4< {d}/old; rm {d}/victim; mv {d}/new {d}/old; \
         ls -a {d} >&2; cat <&4; cat <&3"
    );
    let out = as_user(ALICE, &[], &script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stderr);
    assert!(
        !listed.lines().any(|l| l == "victim" || l == "new"),
        "{listed}"
    );
    assert_eq!(
        listed.lines().filter(|l| l.starts_with(".nfs")).count(),
        2,
        "{listed}"
    );
    let mut want = b"old contents\n".to_vec();
    want.extend_from_slice(&body);
    assert!(out.stdout == want, "read {} bytes", out.stdout.len());
    assert_eq!(
        std::fs::read(shared.join("old")).unwrap(),
        b"new contents\n"
    );
    // The shell has exited: the last closes remove the hidden names.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = names(&shared);
        if n == ["old"] {
            break;
        }
        assert!(Instant::now() < deadline, "left on the server: {n:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Unlinking a file nobody holds removes it outright.
    std::fs::write(shared.join("plain"), b"x").unwrap();
    ok("rm", &[s(&m.path("shared/plain"))]);
    assert_eq!(names(&shared), ["old"]);
}

#[test]
fn open_unlinked_file_stays_readable_over_tcp() {
    open_unlinked_file_stays_readable(false);
}

#[test]
fn open_unlinked_file_stays_readable_over_rdma() {
    open_unlinked_file_stays_readable(true);
}

#[test]
fn unknown_mount_options_are_refused_by_name() {
    let out = Command::new(BIN)
        .args(["mount", "-o", "allow_other,bogus", "nfs://127.0.0.1/x", "/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("unknown mount option \"bogus\""), "{err}");
    let out = Command::new(BIN)
        .args(["mount", "-o", "vers=4.0", "nfs://127.0.0.1/x", "/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("vers=4.0"),
        "{}",
        text(&out.stderr)
    );
}

/// What a user does with a project, as that user on the mount: a git
/// repository created, cloned, garbage-collected and checked, and a small
/// C project built with `make -j2`, run, packed with tar, unpacked and
/// built again.
fn a_user_works_on_a_project(rdma: bool) {
    let tag = if rdma { "project-rdma" } else { "project-tcp" };
    a_user_works_on_a_project_with(tag, rdma, "");
}

/// [`a_user_works_on_a_project`] with `-o allow_other` plus `more`
/// (empty: NFSv3).
fn a_user_works_on_a_project_with(tag: &str, rdma: bool, more: &str) {
    let opts = if more.is_empty() {
        "allow_other".to_owned()
    } else {
        format!("allow_other,{more}")
    };
    let Some((srv, m)) = setup(tag, rdma, &opts) else {
        return;
    };
    let d = m.path("shared");
    let script = format!(
        r#"set -e
cd {d}
mkdir home; export HOME={d}/home
git init -q src; cd src
printf '#include "util.h"\nint main(void) {{ return twice(21) == 42 ? 0 : 1; }}\n' > main.c
printf 'int twice(int x);\n' > util.h
printf '#include "util.h"\nint twice(int x) {{ return 2 * x; }}\n' > util.c
printf 'prog: main.o util.o\n\tcc -o prog main.o util.o\n%%.o: %%.c util.h\n\tcc -c -o $@ $<\n' > Makefile
git add . && git -c user.name=A -c user.email=a@x commit -q -m one
for i in 1 2 3; do echo "/* change $i */" >> util.h; git -c user.name=A -c user.email=a@x commit -qam "c$i"; done
cd .. && git clone -q src clone && cd clone
git gc -q && git fsck --no-progress 2>&1 && test "$(git log --oneline | wc -l)" = 4
make -s -j2 && ./prog
tar czf ../clone.tgz --exclude=.git . && mkdir ../untar && tar xzf ../clone.tgz -C ../untar
make -s -C ../untar -B -j2 && ../untar/prog && echo built"#,
        d = d.display()
    );
    let out = as_user(ALICE, &[], &script);
    assert!(
        out.status.success(),
        "{}\n{}\nmount log:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        m.log()
    );
    assert!(
        text(&out.stdout).ends_with("built\n"),
        "{}",
        text(&out.stdout)
    );
    use std::os::unix::fs::MetadataExt;
    let prog = std::fs::metadata(srv.dir().join("shared/untar/prog")).unwrap();
    assert_eq!(prog.uid(), ALICE);
    assert!(prog.mode() & 0o100 != 0);
}

#[test]
fn a_user_works_on_a_project_over_tcp() {
    a_user_works_on_a_project(false);
}

#[test]
fn a_user_works_on_a_project_over_rdma() {
    a_user_works_on_a_project(true);
}

#[test]
fn a_user_works_on_a_project_over_nfs41_tcp() {
    a_user_works_on_a_project_with("project4-tcp", false, "vers=4.1");
}

#[test]
fn a_user_works_on_a_project_over_nfs42_rdma() {
    a_user_works_on_a_project_with("project4-rdma", true, "vers=4.2");
}
