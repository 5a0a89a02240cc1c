//! `nfsrdma dump`: prints a capture of NFS over RDMA (the kpeer NFSv3
//! capture of Linux siw) and its summary; `--strict` fails on a capture
//! with a malformed frame.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

fn testdata(name: &str) -> String {
    format!("{}/../iwarp/testdata/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn dump_prints_messages_and_summary() {
    let out = Command::new(BIN)
        .args(["dump", "--strict", &testdata("nfsrdma-v3.pcap")])
        .output()
        .expect("run nfsrdma dump");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("MPA Request rev 2"), "{text}");
    assert!(text.contains("| call NFSv3 READ"), "{text}");
    assert!(text.contains("102400 carried by 5 RDMA Writes"), "{text}");
    assert!(
        text.contains("419 frames: 417 TCP, 2 other, 0 unknown, 0 malformed"),
        "{text}"
    );
    assert!(text.contains("credits 64..64"), "{text}");
}

#[test]
fn strict_dump_fails_on_a_malformed_frame() {
    let out = Command::new(BIN)
        .args([
            "dump",
            "--summary",
            "--strict",
            &testdata("host-active-to-guest-knfsd.pcap"),
        ])
        .output()
        .expect("run nfsrdma dump");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 unknown, 1 malformed"), "{text}");
    assert!(
        !text.contains("| call"),
        "--summary prints no message lines: {text}"
    );
}

#[test]
fn dump_refuses_a_file_that_is_no_capture() {
    let out = Command::new(BIN)
        .args([
            "dump",
            &format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR")),
        ])
        .output()
        .expect("run nfsrdma dump");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap or pcapng file"));
}
