//! Property: any message, cut into segments within any MULPDU and framed
//! with or without CRC, deframes in any chunking back into the same bytes
//! at the same TO/MO, with L only on the last segment.

use iwarp::deframe::{Deframer, RxEvent};
use iwarp::segment::{PayloadRef, Segmenter, Target};
use iwarp::wire::{DdpBuffer, DdpRepr, Opcode};
use proptest::prelude::*;

fn frame_all(msg: &[u8], opcode: Opcode, target: Target, mulpdu: usize, crc: bool) -> Vec<u8> {
    let mut wire = vec![];
    for seg in Segmenter::new(opcode, target, msg.len(), mulpdu).unwrap() {
        let p = &msg[seg.payload.clone()];
        let t = iwarp::segment::Transmit::for_segment(
            &seg.header,
            PayloadRef::Wr {
                wr_id: 1,
                offset: seg.payload.start,
                len: p.len(),
            },
            crc,
        );
        wire.extend_from_slice(&t.to_vec(p));
    }
    wire
}

proptest! {
    #[test]
    fn segments_reassemble_to_the_message(
        msg in proptest::collection::vec(any::<u8>(), 0..3000),
        mulpdu in 19usize..600,
        tagged in any::<bool>(),
        crc in any::<bool>(),
        chunk in 1usize..200,
    ) {
        let (opcode, target) = if tagged {
            (Opcode::Write, Target::Tagged { stag: 0x1234, to: 1 << 40 })
        } else {
            (Opcode::Send, Target::Untagged { qn: 0, msn: 9, inv_stag: 0 })
        };
        let wire = frame_all(&msg, opcode, target, mulpdu, crc);
        let mut d = Deframer::new(crc, mulpdu);
        let mut out = vec![0u8; msg.len()];
        let mut headers: Vec<DdpRepr> = vec![];
        let mut pos = 0usize;
        for part in wire.chunks(chunk) {
            let mut part = part;
            while !part.is_empty() {
                let (n, ev) = d.advance(part).unwrap();
                match ev {
                    Some(RxEvent::Segment { header, .. }) => {
                        pos = match header.buffer {
                            DdpBuffer::Tagged { to, .. } => (to - (1 << 40)) as usize,
                            DdpBuffer::Untagged { mo, .. } => mo as usize,
                        };
                        headers.push(header);
                    }
                    Some(RxEvent::Payload { len }) => {
                        out[pos..pos + len].copy_from_slice(&part[..len]);
                        pos += len;
                    }
                    _ => {}
                }
                part = &part[n..];
            }
        }
        prop_assert!(d.at_boundary());
        prop_assert_eq!(&out, &msg);
        prop_assert!(!headers.is_empty());
        let lasts: Vec<bool> = headers.iter().map(|h| h.last).collect();
        prop_assert!(lasts[..lasts.len() - 1].iter().all(|l| !l));
        prop_assert!(lasts[lasts.len() - 1]);
    }
}
