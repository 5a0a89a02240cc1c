//! Every RPC-over-RDMA header in the kpeer captures (Linux xprtrdma and
//! svcrdma over siw) decodes and re-encodes to the same bytes.

use rpcrdma::wire::v1::{Body, Header, Proc};
use rpcrdma::wire::{Limits, RdmaSegment, ReadSegment};
use testkit::hex;

struct Vector {
    pcap: String,
    frame: u32,
    c2s: bool,
    bytes: Vec<u8>,
}

fn vectors() -> Vec<Vector> {
    parse_vectors(include_str!("../testdata/kpeer-headers.txt"))
}

fn parse_vectors(text: &str) -> Vec<Vector> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "line {l}");
            Vector {
                pcap: f[0].to_string(),
                frame: f[1].parse().expect("frame number"),
                c2s: f[2] == "c2s",
                bytes: hex(f[3]),
            }
        })
        .collect()
}

fn find(pcap: &str, frame: u32) -> Header {
    let v = vectors()
        .into_iter()
        .find(|v| v.pcap == pcap && v.frame == frame)
        .expect("vector present");
    let (h, len) = Header::parse(&v.bytes, &Limits::default()).expect("decodes");
    assert_eq!(len, v.bytes.len());
    h
}

#[test]
fn every_captured_header_round_trips() {
    let all = vectors();
    assert_eq!(all.len(), 240);
    let (mut calls, mut replies, mut nomsg) = (0, 0, 0);
    for v in &all {
        let (h, len) = Header::parse(&v.bytes, &Limits::default())
            .unwrap_or_else(|e| panic!("{} frame {}: {e}", v.pcap, v.frame));
        assert_eq!(len, v.bytes.len(), "{} frame {}", v.pcap, v.frame);
        let mut out = vec![0xa5u8; v.bytes.len()];
        assert_eq!(h.emit(&mut out), Ok(v.bytes.len()));
        assert_eq!(out, v.bytes, "{} frame {}: {h}", v.pcap, v.frame);
        if v.c2s {
            calls += 1;
            assert_eq!(h.credits, 128, "client asks 128");
        } else {
            replies += 1;
            assert_eq!(h.credits, 64, "server grants 64");
        }
        if h.proc_() == Proc::RDMA_NOMSG {
            nomsg += 1;
            assert!(!v.c2s);
        }
    }
    assert_eq!((calls, replies), (120, 120));
    assert_eq!(nomsg, 64);
}

#[test]
fn decodes_inline_null_call() {
    let h = find("nfsrdma-v3.pcap", 32);
    assert_eq!(h.xid, 0x9da5_2432);
    assert_eq!(h.body, Body::Msg(Default::default()));
}

#[test]
fn decodes_write_call_with_read_list() {
    let h = find("nfsrdma-v3.pcap", 75);
    let c = h.chunks().unwrap();
    assert_eq!(
        c.reads,
        [ReadSegment {
            position: 112,
            target: RdmaSegment {
                handle: 0xbef3_3201,
                length: 102_400,
                offset: 0xaca5_2432_453d_4000
            }
        }]
    );
    assert!(c.writes.is_empty() && c.reply.is_none());
}

#[test]
fn decodes_read_call_with_write_list_and_its_reply() {
    let call = find("nfsrdma-v3.pcap", 99);
    let reply = find("nfsrdma-v3.pcap", 146);
    let cw = &call.chunks().unwrap().writes;
    assert_eq!(cw.len(), 1);
    assert_eq!(cw[0].total_len(), 102_400);
    assert_eq!(reply.proc_(), Proc::RDMA_MSG);
    assert_eq!(reply.chunks().unwrap().writes, *cw);
}

#[test]
fn decodes_readdirplus_reply_chunk_and_nomsg_reply() {
    let call = find("nfsrdma-v3.pcap", 56);
    let reply = find("nfsrdma-v3.pcap", 61);
    let rc = call.chunks().unwrap().reply.clone().unwrap();
    assert_eq!(rc.segments.len(), 3);
    assert_eq!(reply.proc_(), Proc::RDMA_NOMSG);
    let rr = reply.chunks().unwrap().reply.clone().unwrap();
    let written: Vec<u32> = rr.segments.iter().map(|s| s.length).collect();
    assert_eq!(written, [124, 476, 0], "segments filled in order");
    for (a, b) in rc.segments.iter().zip(&rr.segments) {
        assert_eq!((a.handle, a.offset), (b.handle, b.offset));
    }
}

/// Our own client's headers as exchanged with knfsd: each decodes and
/// re-encodes to the bytes on the wire, and knfsd's replies parse.
#[test]
fn interop_headers_with_knfsd_round_trip() {
    let all = parse_vectors(include_str!("../testdata/kpeer-interop-headers.txt"));
    assert_eq!(all.len(), 20);
    for v in &all {
        let (h, len) = Header::parse(&v.bytes, &Limits::default())
            .unwrap_or_else(|e| panic!("{} frame {}: {e}", v.pcap, v.frame));
        assert_eq!(len, v.bytes.len());
        assert_eq!(xdr::to_bytes(&h).as_ref(), v.bytes.as_slice());
        assert_eq!(h.credits, if v.c2s { 128 } else { 64 });
    }
    let read_call = all.iter().find(|v| v.frame == 18).unwrap();
    let (h, _) = Header::parse(&read_call.bytes, &Limits::default()).unwrap();
    let reads = &h.chunks().unwrap().reads;
    assert_eq!((reads[0].position, reads[0].target.length), (44, 102_400));
    let nomsg_reply = all.iter().find(|v| v.frame == 16).unwrap();
    let (h, _) = Header::parse(&nomsg_reply.bytes, &Limits::default()).unwrap();
    assert_eq!(h.proc_(), Proc::RDMA_NOMSG);
    assert_eq!(h.chunks().unwrap().reply.as_ref().unwrap().total_len(), 24);
}
