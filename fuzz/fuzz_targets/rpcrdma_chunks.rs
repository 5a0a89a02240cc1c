//! Peer-controlled chunk lists through the responder's code: a call header
//! decoded from arbitrary bytes drives reassembly (read chunks of
//! arbitrary positions and lengths against the inline bytes) and reply
//! planning (write and reply chunks of arbitrary segments). Nothing may
//! panic; a reply plan's writes must stay inside the offered segments.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rpcrdma::plan::{plan_reply, reassemble_call, Version};
use rpcrdma::wire::v1::Header;
use rpcrdma::wire::Limits;
use xdr::{Encoder, XdrBuf};

fuzz_target!(|data: &[u8]| {
    let Ok((hdr, len)) = Header::parse(data, &Limits::default()) else {
        return;
    };
    let Some(chunks) = hdr.chunks() else {
        return;
    };
    let rest = &data[len..];
    let inline = Bytes::copy_from_slice(rest);
    // "Pulled" data: each read segment gets the inline bytes cut to its
    // length (capped, so the fuzzer cannot ask for gigabytes).
    let pulled: Vec<(u32, Bytes)> = chunks
        .reads
        .iter()
        .map(|r| {
            let n = (r.target.length as usize).min(rest.len()).min(4096);
            (r.position, inline.slice(..n))
        })
        .collect();
    if let Ok(full) = reassemble_call(inline.clone(), &pulled) {
        assert!(full.len() >= inline.len());
    }
    // A reply: the inline bytes as a DDP-eligible item between two words.
    let mut reply = XdrBuf::new();
    reply.put_u32(1);
    reply.put_bulk(inline.slice(..inline.len().min(8192)), true);
    reply.put_u32(2);
    for send in [0usize, 100, 1024, 4096] {
        if let Ok(plan) = plan_reply(&reply, chunks, send, Version::V1) {
            for w in &plan.writes {
                assert_eq!(w.data.len(), w.target.length as usize);
                let offered = chunks
                    .writes
                    .iter()
                    .chain(chunks.reply.iter())
                    .flat_map(|c| c.segments.iter())
                    .any(|s| {
                        s.handle == w.target.handle
                            && s.offset == w.target.offset
                            && s.length >= w.target.length
                    });
                assert!(offered);
            }
        }
    }
});
