//! Test support shared by the codec tests of every version: literal
//! vectors from hex, and the two round trips each type must pass.

use xdr::{Decode, Encode};

/// The bytes of a hex string (test vectors cut from captures).
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Parses `wire` as a `T`, emits it into a buffer pre-filled with 0xa5
/// and checks the bytes come back unchanged, the length agrees and every
/// strict prefix is rejected (never a panic).
pub(crate) fn wire_roundtrip<T>(wire: &[u8]) -> T
where
    T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug,
{
    let v: T = xdr::from_slice(wire).unwrap();
    let mut out = vec![0xa5u8; 4];
    v.encode(&mut out);
    assert_eq!(&out[..4], &[0xa5; 4]);
    assert_eq!(&out[4..], wire);
    assert_eq!(v.encoded_len(), wire.len());
    for cut in 0..wire.len() {
        assert!(xdr::from_slice::<T>(&wire[..cut]).is_err(), "prefix {cut}");
    }
    v
}

/// Emits `v`, parses it back and checks equality and the length.
pub(crate) fn value_roundtrip<T>(v: &T)
where
    T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug,
{
    let wire = xdr::to_bytes(v);
    let back: T = xdr::from_slice(&wire).unwrap();
    assert_eq!(&back, v);
    assert_eq!(v.encoded_len(), wire.len());
}
