//! The iWARP engine (`iwarp::conn::Connection`) after a real MPA exchange
//! (both roles run in the harness), fed arbitrary FPDU stream bytes, with
//! every remote access checked against an `rnic::MrTable` exactly as
//! softrnic does it: tagged payload is placed into the table's regions,
//! Read Responses are sourced from them, Send with Invalidate revokes STags
//! in it. Nothing may panic, placement never exceeds what the engine
//! allowed, and a tagged placement only lands where the table's check let it.
//!
//! Input: byte 0 picks the configuration (bit 0: we are the initiator,
//! bit 1: CRC, bits 2-3: RTR offer, bits 4-5: IRD/ORD - 1, bit 6: post a
//! Read), byte 1 the chunk size the stream arrives in; the rest is the
//! stream. Regions: STag of `rw` (4096 bytes, remote read+write), `ro`
//! (1024, remote read), `wo` (256, remote write); a fourth region is
//! registered and invalidated at once (a stale STag).
#![no_main]

use bytes::BytesMut;
use iwarp::conn::{Config, Connection, PlaceTarget, RemoteAccess};
use iwarp::negotiation::{
    Established, Initiator, InitiatorConfig, ReplyOutcome, RequestReceived, ResponderConfig,
    RtrKind,
};
use iwarp::segment::PayloadRef;
use libfuzzer_sys::fuzz_target;
use rnic::{Access, AccessError, MrTable, PdId, Stag, TaggedAccess};

/// The engine's view of the table, as in softrnic's `MemAccess`.
struct Table<'a> {
    table: &'a MrTable,
    pd: PdId,
}

impl RemoteAccess for Table<'_> {
    fn check(&self, stag: Stag, to: u64, len: u64, need: Access) -> Result<(), AccessError> {
        self.table.check(TaggedAccess {
            pd: self.pd,
            stag,
            to,
            len,
            need,
        })
    }
    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError> {
        self.table.invalidate_remote(self.pd, stag)
    }
}

/// Runs the MPA exchange between our initiator and our responder and
/// returns the side under test's parameters.
fn establish(sel: u8) -> Option<Established> {
    let offer: Vec<RtrKind> = match (sel >> 2) & 3 {
        0 => vec![],
        1 => vec![RtrKind::Write],
        2 => vec![RtrKind::Read],
        _ => vec![RtrKind::Send, RtrKind::Write, RtrKind::Read],
    };
    let depth = u16::from((sel >> 4) & 3) + 1;
    let (waiting, request) = Initiator::start(InitiatorConfig {
        crc: sel & 2 != 0,
        ird: depth,
        ord: depth,
        rtr_offer: offer,
        private_data: b"fuzz".to_vec(),
        large_fpdu: sel & 64 != 0,
    })
    .ok()?;
    let (reply, responder) = RequestReceived::parse(&request)
        .ok()?
        .accept(&ResponderConfig {
            crc: false,
            ird: 4,
            ord: 4,
            rtr_support: vec![RtrKind::Write, RtrKind::Read, RtrKind::Send],
            private_data: Vec::new(),
            large_fpdu: true,
        })
        .ok()?;
    let ReplyOutcome::Accepted(initiator) = waiting.handle_reply(&reply).ok()? else {
        return None;
    };
    Some(if sel & 1 == 1 { initiator } else { responder })
}

fuzz_target!(|data: &[u8]| {
    let [sel, chunk, stream @ ..] = data else {
        return;
    };
    let Some(est) = establish(*sel) else {
        panic!("our own MPA exchange failed for selector {sel:#x}");
    };
    let table = MrTable::new(u64::from(*sel));
    let pd = table.alloc_pd();
    let reg = |len: usize, access: Access| {
        pd.register(BytesMut::zeroed(len), access)
            .expect("room for four regions")
    };
    let rw = reg(4096, Access::REMOTE_READ | Access::REMOTE_WRITE);
    let ro = reg(1024, Access::REMOTE_READ);
    let wo = reg(256, Access::REMOTE_WRITE);
    let sink = reg(512, Access::LOCAL_WRITE);
    let _stale = reg(64, Access::REMOTE_WRITE).invalidate();
    let _keep = (&ro, &wo);

    let mut c = Connection::new(Config::from_established(&est));
    let mut recv_bufs = [vec![0u8; 64], vec![0u8; 4096]];
    let _ = c.post_recv(0, 64);
    let _ = c.post_recv(1, 4096);
    if sel & 0x40 != 0 {
        let _ = c.post_read(9, sink.stag(), sink.base_to(), rw.stag(), rw.base_to(), 300);
    }
    let mut access = Table {
        table: &table,
        pd: pd.id(),
    };
    let chunk = usize::from(*chunk) + 1;
    'stream: for part in stream.chunks(chunk) {
        let mut input = part;
        while !input.is_empty() {
            let n = match c.handle_bytes(input, &mut access) {
                Ok(n) => n,
                Err(_) => break 'stream,
            };
            input = &input[n..];
            if let Some(p) = c.poll_placement() {
                let k = p.len.min(input.len());
                let bytes = &input[..k];
                match p.target {
                    PlaceTarget::Tagged { stag, to } => {
                        let a = TaggedAccess {
                            pd: pd.id(),
                            stag,
                            to,
                            len: k as u64,
                            // The engine checked the right for the whole
                            // segment (as softrnic's placement relies on).
                            need: Access::empty(),
                        };
                        table
                            .place_copy(a, bytes)
                            .expect("placement the engine allowed");
                    }
                    PlaceTarget::Recv { wr_id, offset } => {
                        let buf = &mut recv_bufs[usize::try_from(wr_id).expect("ours")];
                        buf[offset..offset + k].copy_from_slice(bytes);
                    }
                }
                if c.placed(bytes).is_err() {
                    break 'stream;
                }
                input = &input[k..];
            } else if n == 0 {
                break;
            }
        }
    }
    while let Some(t) = c.poll_transmit() {
        if let Some(PayloadRef::Region { stag, to, len }) = t.payload {
            // Read Responses are sourced from the table; a region revoked
            // since the Request was checked fails here, never panics.
            let _ = table.fetch(
                TaggedAccess {
                    pd: pd.id(),
                    stag: Stag(stag),
                    to,
                    len: len as u64,
                    need: Access::REMOTE_READ,
                },
                |b| b.len(),
            );
        }
    }
    while c.poll_event().is_some() {}
});
