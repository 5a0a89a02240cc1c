//! Property test: laying out a message and filling it in place
//! (`layout::plan_layout`, what the responder and requester now do with
//! RDMA) gives exactly the bytes of `plan::reassemble`, and one refuses
//! exactly what the other refuses (RFC 8166 §3.5).

use bytes::Bytes;
use proptest::prelude::*;
use rpcrdma::layout::{plan_layout, Piece};
use rpcrdma::plan::reassemble;

fn fill(base: &[u8], items: &[(u32, Bytes)]) -> Option<Vec<u8>> {
    let lens: Vec<(u32, usize)> = items.iter().map(|(p, d)| (*p, d.len())).collect();
    let l = plan_layout(base, &lens).ok()?;
    let mut buf = vec![0u8; l.len];
    assert!(l.copy_inline(base, &mut buf));
    for p in &l.pieces {
        if let Piece::Chunk { index, dst, len } = p {
            buf[*dst..*dst + *len].copy_from_slice(&items[*index].1);
        }
    }
    Some(buf)
}

/// A message: words of inline data with DDP items cut out at word
/// boundaries, their length words left in place; sometimes corrupted.
fn message() -> impl Strategy<Value = (Vec<u8>, Vec<(u32, Bytes)>)> {
    (
        prop::collection::vec((0usize..6, 0usize..40, any::<u8>()), 0..4),
        0usize..5,
        any::<bool>(),
        any::<u16>(),
    )
        .prop_map(|(parts, tail_words, corrupt, noise)| {
            let mut base = Vec::new();
            let mut full_len = 0usize;
            let mut items = Vec::new();
            for (words, len, fillb) in parts {
                for w in 0..words {
                    base.extend_from_slice(&(w as u32).to_be_bytes());
                    full_len += 4;
                }
                base.extend_from_slice(&(len as u32).to_be_bytes());
                full_len += 4;
                items.push((full_len as u32, Bytes::from(vec![fillb; len])));
                full_len += len + (4 - len % 4) % 4;
            }
            for w in 0..tail_words {
                base.extend_from_slice(&(w as u32 + 100).to_be_bytes());
            }
            if corrupt && !items.is_empty() {
                let i = noise as usize % items.len();
                items[i].0 =
                    items[i].0.wrapping_add(u32::from(noise % 9)) ^ (u32::from(noise) >> 12);
            }
            (base, items)
        })
}

proptest! {
    #[test]
    fn layout_fill_equals_reassembly((base, items) in message()) {
        let want = reassemble(Bytes::from(base.clone()), &items).map(|x| x.to_bytes());
        let got = fill(&base, &items);
        match (want, got) {
            (Ok(w), Some(g)) => prop_assert_eq!(&w[..], &g[..]),
            (Err(_), None) => {}
            (w, g) => prop_assert!(false, "reassemble {:?} vs layout {:?}", w.map(|b| b.len()), g.map(|b| b.len())),
        }
    }
}
