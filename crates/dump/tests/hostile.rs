//! Hostile captures: corrupted payloads, truncated frames and reordered
//! segments never make the decoder panic, and corruption shows up as
//! malformed or unknown frames rather than silently.

use std::borrow::Cow;

use dump::{Dump, Frame, Frames, Verdict};

fn frames(name: &str) -> Vec<Frame<'static>> {
    let path = format!("{}/../iwarp/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes: &'static [u8] = Box::leak(std::fs::read(&path).expect("capture").into_boxed_slice());
    Frames::new(bytes)
        .expect("capture")
        .map(|f| f.expect("frame"))
        .collect()
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn run(frames: &[Frame<'_>]) -> dump::Report {
    let mut d = Dump::new();
    for f in frames {
        d.frame(f);
        while d.poll_line().is_some() {}
    }
    d.end();
    while d.poll_line().is_some() {}
    d.finish()
}

#[test]
fn corrupted_payload_bytes_are_reported_not_panicked_on() {
    let base = frames("nfsrdma-v3.pcap");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut flagged = 0;
    for _ in 0..40 {
        let mut fs = base.clone();
        for _ in 0..4 {
            let i = (rng.next() as usize) % fs.len();
            let data = fs[i].data.to_mut();
            // Past Ethernet, IP and TCP headers: protocol bytes only.
            if data.len() > 66 {
                let at = 66 + (rng.next() as usize) % (data.len() - 66);
                data[at] ^= 1 << (rng.next() % 8);
            }
        }
        let r = run(&fs);
        if r.malformed_frames + r.unknown_frames > 0 {
            flagged += 1;
        }
    }
    // Most single-bit flips land in bulk data that no header covers (CRC is
    // off in this capture), but some hit headers and must be flagged.
    assert!(flagged > 0);
}

#[test]
fn truncated_and_shuffled_frames_never_panic() {
    let base = frames("nfsrdma-v4.1.pcap");
    let mut rng = Rng(12345);
    for round in 0..20 {
        let mut fs = base.clone();
        for f in fs.iter_mut() {
            if rng.next() % 7 == 0 {
                let keep = (rng.next() as usize) % (f.data.len() + 1);
                f.data = Cow::Owned(f.data[..keep].to_vec());
            }
        }
        if round % 2 == 0 {
            for i in (1..fs.len()).rev() {
                if rng.next() % 5 == 0 {
                    fs.swap(i, i - 1);
                }
            }
        }
        let r = run(&fs);
        assert_eq!(r.frames, base.len() as u64);
    }
}

#[test]
fn garbage_on_a_known_port_is_unknown() {
    // Hand-made: a TCP stream of text on port 20049 is not iWARP.
    let mut d = Dump::new();
    let pkt = tcp_frame(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    d.frame(&Frame {
        number: 1,
        ts: Default::default(),
        link: dump::Link::Ethernet,
        data: Cow::Owned(pkt.clone()),
        orig_len: pkt.len() as u32,
    });
    let l = d.poll_line().expect("a line");
    assert_eq!(l.verdict, Verdict::Unknown, "{l}");
    assert_eq!(d.finish().unknown_frames, 1);
}

/// Ethernet + IPv4 + TCP (no options) carrying `payload`, 10.0.0.1:40000 to
/// 10.0.0.2:20049 (checksums are not checked by the decoder).
fn tcp_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&20049u16.to_be_bytes());
    f.extend_from_slice(&1000u32.to_be_bytes());
    f.extend_from_slice(&0u32.to_be_bytes());
    f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}
