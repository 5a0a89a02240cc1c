//! Property tests: `encoded_len` equals the bytes written and decoding
//! inverts encoding, for arbitrary values.

use bytes::Bytes;
use proptest::prelude::*;
use xdr::{from_slice, Bounded, DdpOpaque, Decode, Decoder, Encode, Encoder, FixedOpaque, XdrBuf};

#[derive(Debug, Clone, PartialEq)]
struct Mixed {
    a: u32,
    b: i64,
    flag: bool,
    name: String,
    blob: Bytes,
    bulk: DdpOpaque<4096>,
    list: Vec<u64>,
    opt: Option<i32>,
    fixed: FixedOpaque<7>,
    nested: Vec<Option<Bounded<Bytes, 9>>>,
}

impl Encode for Mixed {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.a.encode(enc);
        self.b.encode(enc);
        self.flag.encode(enc);
        self.name.encode(enc);
        self.blob.encode(enc);
        self.bulk.encode(enc);
        self.list.encode(enc);
        self.opt.encode(enc);
        self.fixed.encode(enc);
        self.nested.encode(enc);
    }
}

impl<'a> Decode<'a> for Mixed {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, xdr::Error> {
        Ok(Mixed {
            a: dec.decode()?,
            b: dec.decode()?,
            flag: dec.decode()?,
            name: dec.decode()?,
            blob: dec.decode()?,
            bulk: dec.decode()?,
            list: dec.decode()?,
            opt: dec.decode()?,
            fixed: dec.decode()?,
            nested: dec.decode()?,
        })
    }
}

fn mixed() -> impl Strategy<Value = Mixed> {
    (
        any::<u32>(),
        any::<i64>(),
        any::<bool>(),
        ".{0,20}",
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(any::<u8>(), 0..100),
        prop::collection::vec(any::<u64>(), 0..10),
        any::<Option<i32>>(),
        any::<[u8; 7]>(),
        prop::collection::vec(
            prop::option::of(prop::collection::vec(any::<u8>(), 0..10)),
            0..5,
        ),
    )
        .prop_map(
            |(a, b, flag, name, blob, bulk, list, opt, fixed, nested)| Mixed {
                a,
                b,
                flag,
                name,
                blob: Bytes::from(blob),
                bulk: DdpOpaque(Bytes::from(bulk)),
                list,
                opt,
                fixed: FixedOpaque(fixed),
                nested: nested
                    .into_iter()
                    .map(|o| o.map(|v| Bounded(Bytes::from(v))))
                    .collect(),
            },
        )
}

proptest! {
    #[test]
    fn encoded_len_matches_bytes_and_decode_inverts_encode(m in mixed()) {
        let mut flat = Vec::new();
        m.encode(&mut flat);
        prop_assert_eq!(m.encoded_len(), flat.len());
        prop_assert_eq!(flat.len() % 4, 0);
        let back: Mixed = from_slice(&flat).unwrap();
        prop_assert_eq!(&back, &m);

        // The gather buffer produces the same stream.
        let mut gather = XdrBuf::new();
        m.encode(&mut gather);
        prop_assert_eq!(gather.len(), flat.len());
        let gathered = gather.to_bytes();
        prop_assert_eq!(gathered.as_ref(), flat.as_slice());
        let reduced = gather.reduced_bytes();
        let bulk_span = xdr::padded_len(m.bulk.0.len());
        prop_assert_eq!(reduced.len(), flat.len() - bulk_span);
        let items: Vec<(usize, Bytes)> =
            gather.ddp_items().map(|(p, d)| (p, d.clone())).collect();
        let rebuilt = XdrBuf::from_reduced(reduced, items).unwrap().to_bytes();
        prop_assert_eq!(rebuilt.as_ref(), flat.as_slice());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic(m in mixed(), cut in 0usize..400) {
        let flat = xdr::to_bytes(&m);
        let cut = cut.min(flat.len().saturating_sub(1));
        prop_assert!(from_slice::<Mixed>(&flat[..cut]).is_err());
    }
}
