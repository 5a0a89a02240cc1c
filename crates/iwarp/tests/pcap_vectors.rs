//! Every MPA frame and FPDU in the kpeer captures of Linux siw decodes, and
//! re-encoding gives the same bytes (the kernel's frames are canonical).

mod support;

use std::collections::BTreeMap;

use iwarp::deframe::{Deframer, RxEvent};
use iwarp::negotiation::{FrameReader, RequestReceived};
use iwarp::wire::terminate::Layout;
use iwarp::wire::{
    DdpRepr, FpduPacket, FpduRepr, FrameKind, MpaError, MpaRepr, Opcode, ReadRequest, TermError,
    TerminateRepr,
};

const PORT: u16 = 20049;

fn load(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Segment counts per (direction, opcode); direction true = client to server.
type Counts = BTreeMap<(bool, &'static str), usize>;

#[derive(Default, Debug)]
struct Summary {
    requests: usize,
    replies: usize,
    rejects: usize,
    malformed_requests: Vec<MpaError>,
    fpdus: usize,
    crc_fpdus: usize,
    nonzero_pads: usize,
    terminates: Vec<(TermError, Layout)>,
    counts: Counts,
}

/// Decodes one direction's FPDU stream two ways (whole-FPDU views and the
/// streaming deframer) and checks the round trip of every layer.
fn check_fpdus(stream: &[u8], crc: bool, c2s: bool, sum: &mut Summary) {
    let mut rest = stream;
    let mut segments = vec![];
    while !rest.is_empty() {
        let p = FpduPacket::new_checked(rest).expect("complete FPDU");
        let len = p.fpdu_len();
        let raw = &rest[..len];
        if crc {
            p.verify_crc().expect("CRC matches");
            sum.crc_fpdus += 1;
        } else {
            assert_eq!(
                p.crc_field(),
                [0; 4],
                "CRC field is zero when not negotiated"
            );
        }
        let f = FpduRepr::parse(&p, crc).expect("FPDU parses");
        // RFC 5044 §4.3 says the sender zeroes the pad, but Linux siw sends
        // stale bytes there (e.g. after a 10-byte RDMA Write). The receiver
        // ignores them; we compare the re-encoding with the pad zeroed.
        let mut canonical = raw.to_vec();
        let pad_start = 2 + f.ulpdu.len();
        let pad_end = len - 4;
        if canonical[pad_start..pad_end].iter().any(|&b| b != 0) {
            sum.nonzero_pads += 1;
            canonical[pad_start..pad_end].fill(0);
        }
        if !crc {
            assert_eq!(f.to_vec().unwrap(), canonical, "FPDU re-encodes");
        } else {
            let mine = f.to_vec().unwrap();
            assert_eq!(mine[..pad_end], canonical[..pad_end], "FPDU re-encodes");
            if sum.nonzero_pads == 0 {
                assert_eq!(mine, raw, "FPDU with CRC re-encodes");
            }
        }
        let (h, hlen) = DdpRepr::parse_bytes(f.ulpdu).expect("DDP/RDMAP header parses");
        assert_eq!(h.to_vec(), &f.ulpdu[..hlen], "DDP header re-encodes: {h}");
        let payload = &f.ulpdu[hlen..];
        match h.opcode {
            Opcode::ReadRequest => {
                let r = ReadRequest::parse_bytes(payload).expect("Read Request body");
                assert_eq!(r.to_bytes(), payload);
            }
            Opcode::Terminate => {
                let t = TerminateRepr::parse(payload).expect("Terminate body");
                assert_eq!(t.to_vec().unwrap(), &payload[..t.buffer_len()]);
                sum.terminates.push((t.error, t.layout));
            }
            _ => {}
        }
        *sum.counts.entry((c2s, h.opcode.name())).or_default() += 1;
        sum.fpdus += 1;
        segments.push((h, payload.to_vec()));
        rest = &rest[len..];
    }
    // The streaming deframer, fed in odd-sized chunks, finds the same segments.
    let mut d = Deframer::new(crc, 65535);
    let mut got: Vec<(DdpRepr, Vec<u8>)> = vec![];
    for chunk in stream.chunks(977) {
        let mut part = chunk;
        while !part.is_empty() {
            let (n, ev) = d.advance(part).expect("deframer accepts the stream");
            match ev {
                Some(RxEvent::Segment { header, .. }) => got.push((header, vec![])),
                Some(RxEvent::Payload { len }) => {
                    got.last_mut().unwrap().1.extend_from_slice(&part[..len])
                }
                Some(RxEvent::End) | None => {}
            }
            part = &part[n..];
        }
    }
    assert!(d.at_boundary());
    assert_eq!(got, segments);
}

fn check_capture(name: &str) -> Summary {
    let pcap = load(name);
    let mut sum = Summary::default();
    for conn in support::tcp_conns(&pcap, PORT) {
        assert_eq!(conn.server.1, PORT);
        assert_ne!(conn.client, conn.server);
        if conn.c2s.is_empty() {
            continue;
        }
        let mut rd = FrameReader::new();
        let (req_len, req_frame) = match rd.feed(&conn.c2s) {
            Ok((n, Some(f))) => (n, f),
            Ok((_, None)) => {
                // The stream ended inside the frame: PD_Length promised more.
                let err = MpaRepr::parse_bytes(&conn.c2s).expect_err("incomplete request");
                sum.malformed_requests.push(err);
                continue;
            }
            Err(e) => {
                sum.malformed_requests.push(e);
                continue;
            }
        };
        let (req, _) = MpaRepr::parse_bytes(&req_frame).expect("MPA Request parses");
        assert_eq!(req.kind, FrameKind::Request);
        assert_eq!(req.to_vec().unwrap(), req_frame, "Request re-encodes");
        sum.requests += 1;
        if conn.s2c.is_empty() {
            continue;
        }
        let mut rd = FrameReader::new();
        let (rep_len, rep_frame) = match rd.feed(&conn.s2c) {
            Ok((n, Some(f))) => (n, f),
            other => panic!("{name}: incomplete MPA Reply: {other:?}"),
        };
        let (rep, _) = MpaRepr::parse_bytes(&rep_frame).expect("MPA Reply parses");
        assert_eq!(rep.kind, FrameKind::Reply);
        assert_eq!(rep.to_vec().unwrap(), rep_frame, "Reply re-encodes");
        sum.replies += 1;
        if rep.reject {
            sum.rejects += 1;
            assert_eq!(conn.s2c.len(), rep_len, "nothing follows a reject");
            continue;
        }
        // Our own responder accepts every Request siw accepted.
        RequestReceived::parse(&req_frame).expect("negotiation parses the Request");
        let crc = req.crc || rep.crc;
        check_fpdus(&conn.c2s[req_len..], crc, true, &mut sum);
        check_fpdus(&conn.s2c[rep_len..], crc, false, &mut sum);
    }
    sum
}

fn count(s: &Summary, c2s: bool, op: Opcode) -> usize {
    s.counts.get(&(c2s, op.name())).copied().unwrap_or(0)
}

#[test]
fn decodes_every_frame_of_the_nfsv3_capture() {
    let s = check_capture("nfsrdma-v3.pcap");
    assert!(s.requests >= 1 && s.replies == s.requests, "{s:?}");
    assert_eq!(s.crc_fpdus, 0);
    // kpeer README step 4: DDP segments per opcode and direction.
    assert_eq!(count(&s, true, Opcode::Send), 82);
    assert_eq!(count(&s, false, Opcode::Send), 79);
    assert_eq!(count(&s, false, Opcode::SendInvalidate), 3);
    assert_eq!(count(&s, false, Opcode::Write), 66);
    assert_eq!(count(&s, false, Opcode::ReadRequest), 1);
    assert_eq!(count(&s, true, Opcode::ReadResponse), 4);
    assert_eq!(s.fpdus, 235);
    // siw leaves stale bytes in the pad of short RDMA Writes.
    assert!(s.nonzero_pads > 0);
}

#[test]
fn decodes_every_frame_of_the_nfsv41_capture() {
    let s = check_capture("nfsrdma-v4.1.pcap");
    assert_eq!(count(&s, true, Opcode::Send), 38);
    assert_eq!(count(&s, false, Opcode::Send), 29);
    assert_eq!(count(&s, false, Opcode::SendInvalidate), 9);
    assert_eq!(count(&s, false, Opcode::Write), 17);
    assert_eq!(count(&s, false, Opcode::ReadRequest), 1);
    assert_eq!(count(&s, true, Opcode::ReadResponse), 4);
    assert_eq!(s.fpdus, 98);
}

#[test]
fn decodes_the_probes_against_knfsd_including_crc() {
    let s = check_capture("host-active-to-guest-knfsd.pcap");
    // Probes: 2x plain, CRC, rev 1 (rejected), no RPC-RDMA pd, markers
    // (rejected), rev 3 (no reply), PD_Length 300 (malformed), after.
    assert_eq!(s.rejects, 2, "{s:?}");
    assert_eq!(s.crc_fpdus, 2, "the CRC probe's call and reply");
    assert_eq!(s.malformed_requests.len(), 1, "{s:?}");
    assert!(matches!(
        s.malformed_requests[0],
        MpaError::Truncated { need: 320, .. }
    ));
    assert_eq!(count(&s, true, Opcode::Send), 5);
    assert_eq!(count(&s, false, Opcode::Send), 4);
}

#[test]
fn decodes_the_kernel_client_against_a_user_space_listener() {
    let s = check_capture("guest-active-to-host-listener.pcap");
    assert!(s.requests >= 1, "{s:?}");
    assert!(s.fpdus >= 2, "{s:?}");
    assert_eq!(s.malformed_requests, vec![]);
}

#[test]
fn decodes_our_initiator_against_knfsd_including_rtr() {
    // Four sessions of this crate's initiator with Linux knfsd/siw: plain,
    // CRC, P2P with a Write RTR, P2P with a Read RTR (siw answers the Read
    // RTR with a zero-length Read Response).
    let s = check_capture("iwarp-initiator-to-knfsd.pcap");
    assert_eq!((s.requests, s.replies, s.rejects), (4, 4, 0), "{s:?}");
    assert_eq!(s.crc_fpdus, 2);
    assert_eq!(count(&s, true, Opcode::Send), 4);
    assert_eq!(count(&s, false, Opcode::Send), 4);
    assert_eq!(count(&s, true, Opcode::Write), 1);
    assert_eq!(count(&s, true, Opcode::ReadRequest), 1);
    assert_eq!(count(&s, false, Opcode::ReadResponse), 1);
}

#[test]
fn decodes_the_kernel_client_against_our_responder() {
    // The kernel accepted our Reply and NULL reply: its next Send (MSN 2,
    // EXCHANGE_ID) is in the capture.
    let s = check_capture("kernel-client-to-iwarp-responder.pcap");
    assert_eq!(s.replies, 1, "{s:?}");
    assert_eq!(count(&s, true, Opcode::Send), 2);
    assert_eq!(count(&s, false, Opcode::Send), 1);
}

#[test]
fn decodes_the_terminate_linux_siw_sends_for_a_bad_stag() {
    let s = check_capture("iwarp-initiator-to-knfsd-terminate.pcap");
    assert_eq!(s.crc_fpdus, 4, "{s:?}");
    assert_eq!(count(&s, true, Opcode::Write), 2);
    assert_eq!(
        s.terminates,
        vec![(TermError::DDP_INVALID_STAG, Layout::LinuxSiw); 2]
    );
}
