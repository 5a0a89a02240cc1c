//! Property tests: for random messages with DDP-eligible items and random
//! inline thresholds, plan → encode header → (simulated) RDMA transfer →
//! decode header → reassemble gives the original bytes exactly, and every
//! planned Send fits its threshold (RFC 8166 §3.5).

use std::collections::HashMap;

use bytes::Bytes;
use proptest::prelude::*;
use rpcrdma::plan::{
    chunk_contents, header_len, plan_call, plan_reply, reassemble, reassemble_call,
    InlineThresholds, PlanError, Version,
};
use rpcrdma::ulb::ReplyHint;
use rpcrdma::wire::v1::{Body, Header, Proc};
use rpcrdma::wire::{ChunkLists, Limits, RdmaSegment, WriteChunk};
use xdr::{Encoder, XdrBuf};

#[derive(Debug, Clone)]
enum Piece {
    Words(Vec<u32>),
    Bulk(usize, bool, u8),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        prop::collection::vec(any::<u32>(), 0..200).prop_map(Piece::Words),
        (0usize..20_000, any::<bool>(), any::<u8>()).prop_map(|(n, d, b)| Piece::Bulk(n, d, b)),
    ]
}

fn build(pieces: &[Piece]) -> XdrBuf {
    let mut b = XdrBuf::new();
    for p in pieces {
        match p {
            Piece::Words(w) => w.iter().for_each(|&x| b.put_u32(x)),
            Piece::Bulk(n, ddp, byte) => {
                let data: Vec<u8> = (0..*n).map(|i| byte.wrapping_add(i as u8)).collect();
                b.put_bulk(Bytes::from(data), *ddp);
            }
        }
    }
    b
}

fn seg(handle: u32, length: u32) -> RdmaSegment {
    RdmaSegment {
        handle,
        length,
        offset: u64::from(handle) * 0x1_0000_0000,
    }
}

/// Splits `len` bytes of capacity into `parts` segments with handles from
/// `first`.
fn split(first: u32, len: usize, parts: usize) -> WriteChunk {
    let parts = parts.max(1);
    let each = len / parts;
    let mut segments: Vec<RdmaSegment> = (0..parts)
        .map(|i| seg(first + i as u32, each as u32))
        .collect();
    if let Some(last) = segments.last_mut() {
        last.length += (len - each * parts) as u32;
    }
    WriteChunk { segments }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn call_plan_transfer_reassemble_is_identity(
        pieces in prop::collection::vec(piece(), 0..6),
        send in 256usize..8192,
        recv in 256usize..8192,
        max_inline in 0usize..20_000,
        ddp_max in prop::option::of(0usize..200_000),
    ) {
        let msg = build(&pieces);
        let t = InlineThresholds { send, recv };
        let hint = ReplyHint { max_inline, ddp_max };
        let plan = plan_call(&msg, t, hint, Version::V1).unwrap();

        // Register one segment per chunk (handles: reads 1.., writes 100..,
        // reply 200) and build the header.
        let mut memory: HashMap<u32, Bytes> = HashMap::new();
        let reads: Vec<RdmaSegment> = plan.read_chunks.iter().enumerate().map(|(i, c)| {
            let s = seg(1 + i as u32, c.data.len() as u32);
            memory.insert(s.handle, c.data.clone());
            s
        }).collect();
        let writes: Vec<RdmaSegment> = plan.write_chunk_lens.iter().enumerate()
            .map(|(i, &n)| seg(100 + i as u32, n)).collect();
        let reply = plan.reply_chunk_len.map(|n| seg(200, n));
        let lists = plan.chunk_lists(&reads, &writes, reply).unwrap();
        let body = if plan.proc_ == Proc::RDMA_MSG { Body::Msg(lists) } else { Body::NoMsg(lists) };
        let header = Header { xid: 7, credits: 128, body };
        prop_assert_eq!(header.buffer_len(), plan.header_len);
        let mut wire = vec![0u8; header.buffer_len()];
        header.emit(&mut wire).unwrap();
        wire.extend_from_slice(&plan.inline);
        prop_assert!(wire.len() <= send, "Send of {} > {}", wire.len(), send);

        // Responder: decode, pull every read chunk, reassemble.
        let (got, hlen) = Header::parse(&wire, &Limits::default()).unwrap();
        let inline = Bytes::copy_from_slice(&wire[hlen..]);
        let chunks = got.chunks().unwrap();
        let pulled: Vec<(u32, Bytes)> = chunks.reads.iter().map(|r| {
            let m = &memory[&r.target.handle];
            (r.position, Bytes::copy_from_slice(&m[..r.target.length as usize]))
        }).collect();
        let full = reassemble_call(inline, &pulled).unwrap();
        prop_assert_eq!(full.to_bytes(), msg.to_bytes());
        prop_assert_eq!(full.len(), msg.len());
    }

    #[test]
    fn reply_plan_transfer_reassemble_is_identity(
        head in prop::collection::vec(any::<u32>(), 0..300),
        item in prop::option::of((0usize..50_000, any::<u8>())),
        tail in prop::collection::vec(any::<u32>(), 0..300),
        offer_write in any::<bool>(),
        offer_reply in any::<bool>(),
        write_parts in 1usize..4,
        reply_parts in 1usize..4,
        send in 256usize..8192,
    ) {
        let mut reply = XdrBuf::new();
        head.iter().for_each(|&w| reply.put_u32(w));
        if let Some((n, b)) = item {
            reply.put_bulk(Bytes::from(vec![b; n]), true);
        }
        tail.iter().for_each(|&w| reply.put_u32(w));
        let ddp = reply.ddp_items().next().map(|(p, d)| (p, d.len()));

        let mut call = ChunkLists::default();
        if offer_write {
            call.writes.push(split(100, ddp.map_or(4096, |(_, n)| n), write_parts));
        }
        if offer_reply {
            call.reply = Some(split(200, reply.len(), reply_parts));
        }
        let plan = match plan_reply(&reply, &call, send, Version::V1) {
            Ok(p) => p,
            Err(PlanError::ReplyResource { length_needed }) => {
                prop_assert!(!offer_reply);
                let echo: Vec<usize> = call.writes.iter().map(|c| c.segments.len()).collect();
                let hdr = header_len(Version::V1, 0, &echo, None);
                prop_assert!(length_needed as usize + hdr > send);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };

        // The responder's RDMA Writes land in the requester's segments.
        let mut memory: HashMap<u32, Vec<u8>> = HashMap::new();
        for c in call.writes.iter().chain(call.reply.iter()) {
            for s in &c.segments {
                memory.insert(s.handle, vec![0xa5; s.length as usize]);
            }
        }
        for w in &plan.writes {
            let m = memory.get_mut(&w.target.handle).unwrap();
            let data = w.data.bytes().expect("no file in these replies");
            prop_assert!(data.len() <= m.len());
            m[..data.len()].copy_from_slice(data);
        }
        let body = if plan.proc_ == Proc::RDMA_MSG {
            Body::Msg(plan.chunks.clone())
        } else {
            Body::NoMsg(plan.chunks.clone())
        };
        let header = Header { xid: 7, credits: 64, body };
        let mut wire = vec![0u8; header.buffer_len()];
        header.emit(&mut wire).unwrap();
        wire.extend_from_slice(&plan.inline.to_bytes());
        prop_assert!(wire.len() <= send, "Send of {} > {}", wire.len(), send);

        // Requester: decode, collect chunk contents, splice.
        let (got, hlen) = Header::parse(&wire, &Limits::default()).unwrap();
        let lists = got.chunks().unwrap();
        let read = |s: &RdmaSegment| memory.get(&s.handle).map(|m| Bytes::copy_from_slice(m));
        let base = match &lists.reply {
            Some(rc) => chunk_contents(rc, read).unwrap(),
            None => Bytes::copy_from_slice(&wire[hlen..]),
        };
        let mut inserts = Vec::new();
        if let (Some(wc), Some((pos, _))) = (lists.writes.first(), ddp) {
            inserts.push((pos as u32, chunk_contents(wc, read).unwrap()));
        }
        let full = reassemble(base, &inserts).unwrap();
        prop_assert_eq!(full.to_bytes(), reply.to_bytes());
    }
}
