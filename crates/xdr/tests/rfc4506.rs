//! Round trips for every RFC 4506 type, literal vectors and error cases.

use bytes::Bytes;
use xdr::{
    from_slice, to_bytes, Bounded, Decode, Decoder, Encode, Encoder, ErrorKind, FixedOpaque,
    ResultExt,
};

/// Encodes `v`, checks the bytes against `wire`, decodes them back (both
/// from a slice and from shared `Bytes`) and checks `encoded_len`.
fn quartet<T>(v: T, wire: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    // emit into a buffer pre-filled with 0xa5 so unwritten bytes show.
    let mut buf = vec![0xa5u8; wire.len()];
    let mut out = Vec::new();
    v.encode(&mut out);
    buf[..out.len().min(wire.len())].copy_from_slice(&out[..out.len().min(wire.len())]);
    assert_eq!(out.len(), wire.len(), "emitted length");
    assert_eq!(&buf[..], wire, "emitted bytes");
    assert_eq!(v.encoded_len(), wire.len(), "encoded_len");
    let parsed: T = from_slice(wire).expect("parse");
    assert_eq!(parsed, v);
    let shared = Bytes::copy_from_slice(wire);
    let mut dec = Decoder::from_bytes(&shared);
    assert_eq!(T::decode(&mut dec).expect("parse shared"), v);
    dec.finish().expect("no trailing bytes");
}

#[test]
fn integer_round_trips() {
    quartet(-2i32, &[0xff, 0xff, 0xff, 0xfe]);
    quartet(0x0102_0304u32, &[1, 2, 3, 4]);
}

#[test]
fn hyper_round_trips() {
    quartet(-1i64, &[0xff; 8]);
    quartet(0x0102_0304_0506_0708u64, &[1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn float_round_trips() {
    quartet(1.0f32, &[0x3f, 0x80, 0, 0]);
    quartet(-2.0f64, &[0xc0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn bool_round_trips() {
    quartet(true, &[0, 0, 0, 1]);
    quartet(false, &[0, 0, 0, 0]);
}

#[test]
fn rejects_bool_other_than_zero_or_one() {
    let err = from_slice::<bool>(&[0, 0, 0, 2]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidBool(2));
    assert_eq!(err.position(), 0);
}

#[test]
fn enum_validation_rejects_unknown_value() {
    let wire = [0, 0, 0, 2, 0, 0, 0, 7];
    let mut dec = Decoder::new(&wire);
    assert_eq!(dec.enum_checked(|v| v <= 2).unwrap(), 2);
    let err = dec.enum_checked(|v| v <= 2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEnum(7));
    assert_eq!(err.position(), 4);
}

xdr::open_code! {
    /// A test code space.
    pub struct Color {
        /// red
        RED = 0,
        /// green
        GREEN = 1,
    }
}

#[test]
fn open_code_keeps_unknown_values() {
    quartet(Color::GREEN, &[0, 0, 0, 1]);
    quartet(Color(77), &[0, 0, 0, 77]);
    assert_eq!(Color(77).to_string(), "Color(77)");
    assert_eq!(Color::RED.name(), Some("RED"));
}

#[test]
fn fixed_opaque_round_trips_with_zero_padding() {
    quartet(FixedOpaque([1u8, 2, 3, 4, 5]), &[1, 2, 3, 4, 5, 0, 0, 0]);
    quartet(FixedOpaque([9u8; 4]), &[9, 9, 9, 9]);
}

#[test]
fn variable_opaque_round_trips() {
    quartet(
        Bytes::from_static(b"abcde"),
        &[0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0],
    );
    quartet(Bytes::new(), &[0, 0, 0, 0]);
    quartet(
        Bounded::<Bytes, 8>(Bytes::from_static(b"xy")),
        &[0, 0, 0, 2, b'x', b'y', 0, 0],
    );
}

#[test]
fn string_round_trips() {
    quartet(String::from("lisp"), &[0, 0, 0, 4, b'l', b'i', b's', b'p']);
    quartet(
        Bounded::<String, 3>(String::from("abc")),
        &[0, 0, 0, 3, b'a', b'b', b'c', 0],
    );
    let borrowed: &str = from_slice(&[0, 0, 0, 1, b'z', 0, 0, 0]).unwrap();
    assert_eq!(borrowed, "z");
}

#[test]
fn rejects_invalid_utf8_string() {
    let err = from_slice::<String>(&[0, 0, 0, 1, 0xff, 0, 0, 0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidUtf8);
    let mut dec = Decoder::new(&[0, 0, 0, 1, 0xff, 0, 0, 0]);
    assert_eq!(dec.string(4).unwrap(), &[0xff]);
}

#[test]
fn fixed_array_round_trips() {
    quartet([1u32, 2, 3], &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
}

#[test]
fn variable_array_round_trips() {
    quartet(vec![7u32, 8], &[0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 8]);
    quartet(Vec::<u64>::new(), &[0, 0, 0, 0]);
    quartet(
        Bounded::<Vec<bool>, 2>(vec![true, false]),
        &[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    );
}

#[test]
fn optional_data_round_trips() {
    quartet(Some(5u32), &[0, 0, 0, 1, 0, 0, 0, 5]);
    quartet(None::<u32>, &[0, 0, 0, 0]);
}

#[test]
fn void_is_empty() {
    quartet((), &[]);
}

#[test]
fn rejects_truncated_integer() {
    let err = from_slice::<u64>(&[0, 0, 0, 1, 0]).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::UnexpectedEof {
            needed: 8,
            available: 5
        }
    );
}

#[test]
fn rejects_truncated_opaque_body() {
    let err = from_slice::<Bytes>(&[0, 0, 0, 5, 1, 2, 3, 4, 5]).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::UnexpectedEof {
            needed: 8,
            available: 5
        }
    );
    assert_eq!(err.position(), 4);
}

#[test]
fn rejects_opaque_over_limit() {
    let err = from_slice::<Bounded<Bytes, 4>>(&[0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LengthExceeded { len: 5, max: 4 });
}

#[test]
fn rejects_non_zero_padding() {
    let err = from_slice::<Bytes>(&[0, 0, 0, 1, 1, 0, 1, 0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NonZeroPadding);
    let err = from_slice::<FixedOpaque<3>>(&[1, 2, 3, 4]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NonZeroPadding);
}

#[test]
fn rejects_array_count_larger_than_input_before_allocating() {
    // A count of 2^32-1 u64 elements with 8 bytes of input.
    let wire = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
    let err = from_slice::<Vec<u64>>(&wire).unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::CountExceedsInput {
            count: u32::MAX,
            available: 8,
            ..
        }
    ));
    let err =
        from_slice::<Bounded<Vec<u32>, 1>>(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LengthExceeded { len: 2, max: 1 });
}

#[test]
fn rejects_trailing_bytes() {
    let err = from_slice::<u32>(&[0, 0, 0, 1, 0, 0, 0, 0]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TrailingBytes { remaining: 4 });
}

#[test]
fn context_is_replaceable() {
    let mut dec = Decoder::new(&[0, 0]);
    let err = dec.u32().context("nfs3 count").unwrap_err();
    assert_eq!(err.context(), "nfs3 count");
    assert!(err.to_string().contains("nfs3 count"));
}

#[test]
fn sub_decoder_is_bounded_and_keeps_positions() {
    let wire = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
    let mut dec = Decoder::new(&wire);
    dec.u32().unwrap();
    let mut sub = dec.sub(4).unwrap();
    assert_eq!(sub.position(), 4);
    assert_eq!(sub.u32().unwrap(), 2);
    assert!(sub.u32().is_err());
    assert_eq!(dec.u32().unwrap(), 3);
    assert!(dec.sub(1).is_err());
}

#[test]
fn opaque_bytes_is_zero_copy_from_shared_input() {
    let wire = Bytes::from_static(&[0, 0, 0, 3, 7, 8, 9, 0]);
    let mut dec = Decoder::from_bytes(&wire);
    let data = dec.opaque_bytes(16).unwrap();
    assert_eq!(&data[..], &[7, 8, 9]);
    assert_eq!(data.as_ptr(), wire[4..].as_ptr());
    let rest = Decoder::from_bytes(&wire).rest_bytes();
    assert_eq!(rest.as_ptr(), wire.as_ptr());
}

// RFC 4506 §7: the example `file` structure and its encoding.
#[derive(Debug, PartialEq)]
enum FileType {
    Text,
    Data(String),
    Exec(String),
}

#[derive(Debug, PartialEq)]
struct File {
    filename: String,
    kind: FileType,
    owner: String,
    data: Bytes,
}

impl Encode for File {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.filename.encode(enc);
        match &self.kind {
            FileType::Text => enc.put_u32(0),
            FileType::Data(c) => {
                enc.put_u32(1);
                c.encode(enc);
            }
            FileType::Exec(i) => {
                enc.put_u32(2);
                i.encode(enc);
            }
        }
        self.owner.encode(enc);
        enc.put_opaque(&self.data);
    }
}

impl<'a> Decode<'a> for File {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, xdr::Error> {
        let filename = dec.str_utf8(255)?.to_owned();
        let kind = match dec.enum_checked(|k| k <= 2)? {
            0 => FileType::Text,
            1 => FileType::Data(dec.str_utf8(255)?.to_owned()),
            _ => FileType::Exec(dec.str_utf8(255)?.to_owned()),
        };
        let owner = dec.str_utf8(32)?.to_owned();
        let data = dec.opaque_bytes(65535)?;
        Ok(File {
            filename,
            kind,
            owner,
            data,
        })
    }
}

#[test]
fn rfc4506_section7_file_example() {
    const WIRE: [u8; 48] = [
        0x00, 0x00, 0x00, 0x09, 0x73, 0x69, 0x6c, 0x6c, 0x79, 0x70, 0x72, 0x6f, 0x67, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x6c, 0x69, 0x73, 0x70, 0x00, 0x00,
        0x00, 0x04, 0x6a, 0x6f, 0x68, 0x6e, 0x00, 0x00, 0x00, 0x06, 0x28, 0x71, 0x75, 0x69, 0x74,
        0x29, 0x00, 0x00,
    ];
    let file = File {
        filename: "sillyprog".into(),
        kind: FileType::Exec("lisp".into()),
        owner: "john".into(),
        data: Bytes::from_static(b"(quit)"),
    };
    quartet(file, &WIRE);
    assert_eq!(to_bytes(&7u32).as_ref(), &[0, 0, 0, 7]);
}
