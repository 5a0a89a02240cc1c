//! Peer-chosen chunk positions and lengths against peer inline bytes
//! through `layout::plan_layout` (the responder lays a call out, and the
//! requester a reply, before RDMA places chunk data): nothing may panic,
//! every piece lies inside the layout, and filling it gives exactly what
//! `plan::reassemble` builds.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rpcrdma::layout::{plan_layout, Piece};
use rpcrdma::plan::reassemble;

fuzz_target!(|data: &[u8]| {
    // [n items][n x (position u32, length u16)][inline bytes]
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8);
    let Some(table) = rest.get(..6 * n) else {
        return;
    };
    let base = &rest[6 * n..];
    let items: Vec<(u32, usize)> = table
        .chunks_exact(6)
        .map(|c| {
            let pos = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            (pos, usize::from(u16::from_be_bytes([c[4], c[5]])))
        })
        .collect();
    let Ok(layout) = plan_layout(base, &items) else {
        return;
    };
    let mut buf = vec![0u8; layout.len];
    assert!(layout.copy_inline(base, &mut buf));
    let data: Vec<(u32, Bytes)> = items
        .iter()
        .enumerate()
        .map(|(i, (p, l))| (*p, Bytes::from(vec![i as u8 + 1; *l])))
        .collect();
    for p in &layout.pieces {
        match p {
            Piece::Chunk { index, dst, len } => {
                buf[*dst..*dst + *len].copy_from_slice(&data[*index].1);
            }
            Piece::Inline { src, dst } => {
                assert!(src.end <= base.len() && dst + src.len() <= layout.len)
            }
        }
    }
    if items.first().map(|i| i.0) != Some(0) {
        let want = reassemble(Bytes::copy_from_slice(base), &data).expect("layout accepted it");
        assert_eq!(&want.to_bytes()[..], &buf[..]);
    }
});
