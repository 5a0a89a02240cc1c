//! Arbitrary operation sequences on a loopback queue-pair pair and its region
//! tables: register, invalidate (local and remote), RDMA Write/Read and Sends
//! with random STags, offsets and lengths. Must never panic, and a shadow copy
//! of every region proves that nothing is ever placed outside an access that
//! completed successfully.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use rnic::loopback::{LoopbackDevice, LoopbackNetwork, LoopbackQp};
use rnic::{
    Access, CompletionQueue, ConnectRequest, Device, Listener, MemoryRegion, MrState,
    ProtectionDomain, QpConfig, QpState, QueuePair, ReadOnlyRegion, ReadWr, RecvWr, SendWr, Stag,
    WcStatus, WriteWr,
};
use testkit::conformance::join;

fn block<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = pin!(f);
    for _ in 0..1000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("loopback future did not complete");
}

struct Bytes8<'a>(&'a [u8]);
impl Bytes8<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
}

/// A registration under test: owned and writable, or shared read-only bytes.
enum Handle {
    Rw(MemoryRegion),
    Ro(ReadOnlyRegion),
}

impl Handle {
    fn stag(&self) -> Stag {
        match self {
            Handle::Rw(m) => m.stag(),
            Handle::Ro(m) => m.stag(),
        }
    }
    fn base_to(&self) -> u64 {
        match self {
            Handle::Rw(m) => m.base_to(),
            Handle::Ro(m) => m.base_to(),
        }
    }
    fn len(&self) -> u64 {
        match self {
            Handle::Rw(m) => m.len(),
            Handle::Ro(m) => m.len(),
        }
    }
    fn access(&self) -> Access {
        match self {
            Handle::Rw(m) => m.access(),
            Handle::Ro(_) => Access::REMOTE_READ,
        }
    }
    fn state(&self) -> MrState {
        match self {
            Handle::Rw(m) => m.state(),
            Handle::Ro(m) => m.state(),
        }
    }
    fn invalidate(self) -> Vec<u8> {
        match self {
            Handle::Rw(m) => m.invalidate().buf.to_vec(),
            Handle::Ro(m) => m.invalidate().buf.to_vec(),
        }
    }
}

struct Region {
    mr: Handle,
    shadow: Vec<u8>,
}

struct World {
    client: LoopbackDevice,
    server: LoopbackDevice,
    cpd: ProtectionDomain,
    spd: ProtectionDomain,
    cqp: LoopbackQp,
    sqp: LoopbackQp,
}

fn connect(
    client: &LoopbackDevice,
    server: &LoopbackDevice,
    cpd: &ProtectionDomain,
    spd: &ProtectionDomain,
) -> (LoopbackQp, LoopbackQp) {
    block(async {
        let mut l = server.listen(&String::new()).await.expect("listen");
        let addr = l.local_addr();
        let (c, s) = join(
            client.connect(cpd, &addr, QpConfig::new(CompletionQueue::new(1 << 16))),
            async {
                l.accept_request()
                    .await
                    .expect("request")
                    .accept(spd, QpConfig::new(CompletionQueue::new(1 << 16)))
                    .await
            },
        )
        .await;
        (c.expect("connect").qp, s.expect("accept"))
    })
}

/// The access-check rules restated independently of `MrTable`.
fn model_allows(regions: &[Region], stag: Stag, to: u64, len: usize, need: Access) -> bool {
    regions.iter().any(|r| {
        r.mr.stag() == stag
            && r.mr.state() == MrState::Valid
            && r.mr.access().contains(need)
            && to >= r.mr.base_to()
            && to
                .checked_add(len as u64)
                .is_some_and(|end| end <= r.mr.base_to() + r.mr.len())
    })
}

fn check(r: Region) {
    let back = r.mr.invalidate();
    assert_eq!(
        &back[..],
        &r.shadow[..],
        "region changed outside a successful access"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes8(data);
    let net = LoopbackNetwork::new(u64::from(data.first().copied().unwrap_or(0)));
    let (client, server) = (net.device(), net.device());
    let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
    let (cqp, sqp) = connect(&client, &server, &cpd, &spd);
    let mut w = World {
        client,
        server,
        cpd,
        spd,
        cqp,
        sqp,
    };
    let mut regions: Vec<Region> = Vec::new();
    let mut sink = Region {
        mr: Handle::Rw(
            w.cpd
                .register(BytesMut::zeroed(64), Access::LOCAL_WRITE)
                .expect("sink"),
        ),
        shadow: vec![0; 64],
    };
    let mut fill = 1u8;
    let mut wr_id = 0u64;

    while let Some(op) = input.byte() {
        wr_id += 1;
        fill = fill.wrapping_add(1);
        if w.cqp.state() != QpState::Rts {
            let (c, s) = connect(&w.client, &w.server, &w.cpd, &w.spd);
            w.cqp = c;
            w.sqp = s;
        }
        // A random STag: one of ours, one of ours with a bad key, or anything.
        let pick_stag =
            |input: &mut Bytes8<'_>, regions: &Vec<Region>| -> Option<(Stag, Option<usize>)> {
                let sel = input.byte()?;
                let i = usize::from(input.byte()?);
                Some(match (sel % 3, regions.is_empty()) {
                    (0, false) => (
                        regions[i % regions.len()].mr.stag(),
                        Some(i % regions.len()),
                    ),
                    (1, false) => {
                        let s = regions[i % regions.len()].mr.stag();
                        (Stag::new(s.index(), s.key() ^ (sel | 1)), None)
                    }
                    _ => (Stag(u32::from(input.u16()?) << 8 | u32::from(sel)), None),
                })
            };
        match op % 8 {
            0 => {
                let Some(len) = input.byte() else { break };
                let Some(acc) = input.byte() else { break };
                let Some(base) = input.u16() else { break };
                let len = usize::from(len % 64);
                let access = Access::from_bits_truncate(acc);
                let base_to = u64::from(base) << (acc % 48);
                let init: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(fill)).collect();
                // The top access bit (no right of its own) picks a read-only
                // registration of shared bytes.
                let handle = if acc & 0x80 != 0 {
                    w.spd
                        .register_read_only(Bytes::from(init.clone()), base_to)
                        .map(Handle::Ro)
                } else {
                    w.spd
                        .register_at(BytesMut::from(&init[..]), access, base_to)
                        .map(Handle::Rw)
                };
                if let Ok(mr) = handle {
                    regions.push(Region { mr, shadow: init });
                }
            }
            1 => {
                let Some(i) = input.byte() else { break };
                if !regions.is_empty() {
                    let r = regions.swap_remove(usize::from(i) % regions.len());
                    check(r);
                }
            }
            2 | 3 => {
                let Some((stag, idx)) = pick_stag(&mut input, &regions) else {
                    break;
                };
                let Some(off) = input.u16() else { break };
                let Some(len) = input.byte() else { break };
                let to = idx.map_or(u64::from(off), |i| {
                    regions[i].mr.base_to().wrapping_add(u64::from(off % 128))
                });
                let len = usize::from(len % 80);
                let need = if op % 8 == 2 {
                    Access::REMOTE_WRITE
                } else {
                    Access::REMOTE_READ
                };
                // A zero-length tagged operation validates no remote STag.
                let expect = len == 0 || model_allows(&regions, stag, to, len, need);
                if op % 8 == 2 {
                    let payload = vec![fill; len];
                    let wr = WriteWr {
                        wr_id,
                        data: vec![Bytes::from(payload)],
                        remote_stag: stag,
                        remote_to: to,
                    };
                    if w.cqp.post_write(wr).is_err() {
                        continue;
                    }
                    let wc = w
                        .cqp
                        .send_cq()
                        .poll()
                        .expect("cq")
                        .expect("write completion");
                    // A Write completes once transmitted; a refusal at the
                    // sink terminates the connection (at once, on loopback).
                    let placed = wc.status == WcStatus::Success && w.cqp.state() == QpState::Rts;
                    assert_eq!(placed, expect, "write verdict differs from the model");
                    if placed && len > 0 {
                        let r = regions
                            .iter_mut()
                            .find(|r| r.mr.stag() == stag)
                            .expect("success names a live region");
                        let start = usize::try_from(to - r.mr.base_to()).expect("offset");
                        r.shadow[start..start + len].fill(fill);
                    }
                } else {
                    let sink_to = u64::from(off % 80);
                    let wr = ReadWr {
                        wr_id,
                        local_stag: sink.mr.stag(),
                        local_to: sink_to,
                        len: len as u32,
                        remote_stag: stag,
                        remote_to: to,
                    };
                    if w.cqp.post_read(wr).is_err() {
                        continue;
                    }
                    let wc = w
                        .cqp
                        .send_cq()
                        .poll()
                        .expect("cq")
                        .expect("read completion");
                    let sink_fits = sink_to + len as u64 <= 64;
                    assert_eq!(
                        wc.status == WcStatus::Success,
                        expect && sink_fits,
                        "read verdict differs from the model"
                    );
                    if wc.status == WcStatus::Success && len > 0 {
                        let r = regions
                            .iter()
                            .find(|r| r.mr.stag() == stag)
                            .expect("success names a live region");
                        let start = usize::try_from(to - r.mr.base_to()).expect("offset");
                        let s = usize::try_from(sink_to).expect("offset");
                        sink.shadow[s..s + len].copy_from_slice(&r.shadow[start..start + len]);
                    }
                }
            }
            4 => {
                let Some((stag, _)) = pick_stag(&mut input, &regions) else {
                    break;
                };
                let Some(cap) = input.byte() else { break };
                let _ = w.sqp.post_recv(RecvWr {
                    wr_id,
                    buf: BytesMut::with_capacity(usize::from(cap)),
                });
                let wr = SendWr {
                    wr_id,
                    data: vec![Bytes::from_static(b"inv")],
                    solicited: cap & 1 == 1,
                    invalidate: Some(stag),
                };
                let _ = w.cqp.post_send(wr);
                while let Ok(Some(wc)) = w.sqp.recv_cq().poll() {
                    if let Some(inv) = wc.invalidated {
                        assert_eq!(wc.status, WcStatus::Success);
                        let r = regions
                            .iter()
                            .find(|r| r.mr.stag() == inv)
                            .expect("invalidated a live region");
                        assert_eq!(r.mr.state(), MrState::RemotelyInvalidated);
                    }
                }
            }
            5 => {
                let Some(cap) = input.byte() else { break };
                let _ = w.sqp.post_recv(RecvWr {
                    wr_id,
                    buf: BytesMut::with_capacity(usize::from(cap)),
                });
            }
            6 => {
                let Some(len) = input.byte() else { break };
                let _ = w.cqp.post_send(SendWr {
                    wr_id,
                    data: vec![Bytes::from(vec![fill; usize::from(len)])],
                    ..Default::default()
                });
            }
            _ => w.cqp.disconnect(),
        }
        while let Ok(Some(_)) = w.cqp.send_cq().poll() {}
        while let Ok(Some(_)) = w.sqp.recv_cq().poll() {}
        while let Ok(Some(_)) = w.cqp.recv_cq().poll() {}
    }
    for r in regions {
        check(r);
    }
    check(sink);
});
