//! The kpeer captures of Linux siw (and of this project's own iWARP code
//! against it, `crates/iwarp/testdata/README.md`) as test vectors: every
//! frame decodes, none is unknown or malformed (except the one malformed
//! MPA Request probe kept on purpose), and the message counts match what
//! the iwarp crate's vector test and tshark find in them.

use dump::{decode_capture, Report, Verdict};

struct Decoded {
    report: Report,
    lines: Vec<String>,
    bad: Vec<String>,
}

fn decode(name: &str) -> Decoded {
    let path = format!("{}/../iwarp/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = vec![];
    let mut bad = vec![];
    let report = decode_capture(&bytes, |l| {
        if l.verdict != Verdict::Ok {
            bad.push(l.to_string());
        }
        lines.push(l.to_string());
    })
    .expect("a capture");
    if std::env::var_os("DUMP_PRINT").is_some() {
        lines.iter().for_each(|l| println!("{l}"));
        println!("{report}");
    }
    Decoded { report, lines, bad }
}

fn clean(name: &str) -> Decoded {
    let d = decode(name);
    assert!(d.bad.is_empty(), "{name}: {:#?}", d.bad);
    assert_eq!((d.report.unknown_frames, d.report.malformed_frames), (0, 0));
    d
}

#[test]
fn nfsv3_session_over_linux_siw() {
    let d = clean("nfsrdma-v3.pcap");
    let r = &d.report;
    assert_eq!(r.frames, 419);
    assert_eq!(r.count("mpa FPDU"), 235);
    assert_eq!(r.count("rdmap Send"), 82 + 79);
    assert_eq!(r.count("rdmap Send with Invalidate"), 3);
    assert_eq!(r.count("rdmap RDMA Write"), 66);
    assert_eq!(r.count("rdmap RDMA Read Request"), 1);
    assert_eq!(r.count("rdmap RDMA Read Response"), 1);
    assert_eq!(r.count("rpcrdma1 RDMA_MSG"), 108);
    assert_eq!(r.count("rpcrdma1 RDMA_NOMSG"), 56);
    assert_eq!(r.count("rpc call NFSv3 READ"), 2);
    assert_eq!(r.count("rpc call NFSv3 WRITE"), 2);
    assert_eq!(r.count("rpc call MOUNTv3 MNT"), 1);
    assert_eq!(
        r.count("rpc reply") + r.count("rpc reply (in reply chunk)"),
        88
    );
    // The 100 KiB READ's data came in 5 RDMA Writes to the STag its write
    // chunk named; the reply reports the same length.
    let read = d
        .lines
        .iter()
        .find(|l| l.contains("reply NFSv3 READ NFS3_OK") && l.contains("102400 bytes"))
        .expect("the large READ reply");
    assert!(read.contains("102400 carried by 5 RDMA Writes"), "{read}");
    assert!(!d.lines.iter().any(|l| l.contains("MISMATCH")));
    // RDMA_NOMSG replies are decoded from the bytes the RDMA Writes put in
    // the reply chunk.
    let nomsg = d
        .lines
        .iter()
        .find(|l| l.contains("RDMA_NOMSG") && l.contains("reply NFSv3 READDIRPLUS NFS3_OK"))
        .expect("a READDIRPLUS reply from its reply chunk");
    assert!(
        nomsg.contains("600 bytes, 600 carried by 3 RDMA Writes"),
        "{nomsg}"
    );
    let c = r.conns.iter().find(|c| c.server.port() == 20049).unwrap();
    assert_eq!(c.dirs[0].credits.max, 128);
    assert_eq!(c.dirs[1].credits.max, 64);
    assert_eq!(
        c.dirs[0].inline.as_deref(),
        Some("send 4096 / receive 4096 (remote invalidation)")
    );
    assert_eq!(c.dirs[0].read_response_bytes, 102400);
    // MOUNT and rpcbind over TCP in the same capture.
    assert_eq!(
        r.conns
            .iter()
            .filter(|c| c.protocol == "ONC RPC over TCP")
            .count(),
        5
    );
}

#[test]
fn nfsv41_session_over_linux_siw() {
    let d = clean("nfsrdma-v4.1.pcap");
    let r = &d.report;
    assert_eq!(r.count("mpa FPDU"), 98);
    assert_eq!(r.count("rdmap Send"), 38 + 29);
    assert_eq!(r.count("rdmap Send with Invalidate"), 9);
    assert_eq!(r.count("rdmap RDMA Write"), 17);
    assert_eq!(r.count("rpc call NFSv4.1 COMPOUND"), 37);
    assert_eq!(r.count("rpc call NFSv4 NULL"), 1);
    assert!(
        d.lines
            .iter()
            .any(|l| l.contains("call NFSv4.1 COMPOUND [SEQUENCE PUTFH WRITE")),
        "a WRITE whose data came by read chunk still lists its operations"
    );
}

#[test]
fn probes_against_knfsd_including_crc_and_rejects() {
    let d = decode("host-active-to-guest-knfsd.pcap");
    let r = &d.report;
    // The PD_Length 300 probe promises private data it never sends: the
    // one malformed frame, on purpose.
    assert_eq!(d.bad.len(), 1, "{:#?}", d.bad);
    assert!(d.bad[0].contains("stream ends inside a message"));
    assert_eq!((r.unknown_frames, r.malformed_frames), (0, 1));
    assert_eq!((r.count("mpa Request"), r.count("mpa Reply")), (8, 7));
    let with = |s: &str| r.conns.iter().filter(|c| c.protocol.contains(s)).count();
    assert_eq!(with("rejected"), 2);
    assert_eq!(with("CRC on"), 1);
    assert_eq!(r.count("rdmap Send"), 9);
}

#[test]
fn kernel_client_against_user_space_listeners() {
    let r = clean("guest-active-to-host-listener.pcap").report;
    assert_eq!((r.count("mpa Request"), r.count("mpa Reply")), (11, 2));
    assert_eq!(r.count("rdmap Send"), 4);
    let r = clean("kernel-client-to-iwarp-responder.pcap").report;
    assert_eq!(r.count("rdmap Send"), 3);
    assert_eq!(r.count("rpc call NFSv4.1 COMPOUND"), 1);
}

#[test]
fn our_initiator_against_knfsd_with_rtr_and_terminate() {
    let r = clean("iwarp-initiator-to-knfsd.pcap").report;
    assert_eq!((r.count("mpa Request"), r.count("mpa Reply")), (4, 4));
    assert_eq!(r.count("mpa FPDU"), 11);
    assert_eq!(r.count("rdmap RDMA Write"), 1);
    assert_eq!(r.count("rdmap RDMA Read Request"), 1);
    assert_eq!(r.count("rdmap RDMA Read Response"), 1);
    assert_eq!(r.count("rpc call NFSv3 NULL"), 4);
    let d = clean("iwarp-initiator-to-knfsd-terminate.pcap");
    assert_eq!(d.report.count("rdmap Terminate"), 2);
    let terms: Vec<&String> = d.lines.iter().filter(|l| l.contains("Terminate")).collect();
    assert_eq!(terms.len(), 2, "{terms:#?}");
}

/// This project's own RPC-over-RDMA version 2 traffic (softrnic on
/// loopback, `scripts/capture-own-v2.sh`): NFSv3 and NFSv4.1 WRITE by read
/// chunk, READ by write chunk, listings, plus MOUNT over TCP.
#[test]
fn our_own_version_two_traffic() {
    let path = format!(
        "{}/testdata/nfsrdma-own-v2.pcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = vec![];
    let r = decode_capture(&bytes, |l| lines.push(l)).expect("a capture");
    let bad: Vec<String> = lines
        .iter()
        .filter(|l| l.verdict != Verdict::Ok)
        .map(|l| l.to_string())
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(
        (r.frames, r.unknown_frames, r.malformed_frames),
        (313, 0, 0)
    );
    assert_eq!((r.count("mpa Request"), r.count("mpa Reply")), (7, 7));
    assert_eq!(r.count("mpa FPDU"), 160);
    assert_eq!(r.count("rpcrdma2 RDMA2_CONNPROP"), 14);
    assert_eq!(r.count("rpcrdma2 RDMA2_MSG"), 136);
    assert_eq!(r.count("rpcrdma1 RDMA_MSG"), 0);
    assert_eq!(r.count("rdmap Send with Invalidate"), 54);
    assert_eq!(r.count("rpc call NFSv3 WRITE"), 1);
    assert_eq!(r.count("rpc call NFSv3 READ"), 2);
    assert_eq!(r.count("rpc call NFSv4.1 COMPOUND"), 51);
    assert_eq!(r.count("rpc call MOUNTv3 MNT"), 5);
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    // Each 40 KiB READ (v3 and v4.1) paired with the RDMA Write that
    // carried it.
    let paired = text
        .iter()
        .filter(|l| l.contains("40960 bytes, 40960 carried by 1 RDMA Writes"))
        .count();
    assert_eq!(paired, 2, "{text:#?}");
    assert!(text
        .iter()
        .any(|l| l.contains("RDMA2_CONNPROP") && l.contains("receive buffer 4096")));
    let c = r
        .conns
        .iter()
        .find(|c| c.protocol.contains("iWARP"))
        .unwrap();
    assert_eq!(c.dirs[0].inline.as_deref(), Some("receive buffer 4096"));
    assert_eq!((c.dirs[0].credits.max, c.dirs[1].credits.max), (128, 64));
}
