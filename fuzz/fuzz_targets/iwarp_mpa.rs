//! MPA Request/Reply frames and both negotiation roles on arbitrary bytes:
//! nothing panics, every accepted frame re-encodes to the same bytes, and
//! every Reply we build parses back as a well-formed Reply.
#![no_main]

use iwarp::negotiation::{
    FrameReader, Initiator, InitiatorConfig, RequestReceived, ResponderConfig, RtrKind,
};
use iwarp::wire::MpaRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // The first byte picks a key to prepend so that the fuzzer reaches the
    // frame body without having to guess the 16-byte keys.
    let Some((&sel, rest)) = input.split_first() else {
        return;
    };
    let owned: Vec<u8> = match sel % 3 {
        0 => rest.to_vec(),
        1 => [&b"MPA ID Req Frame"[..], rest].concat(),
        _ => [&b"MPA ID Rep Frame"[..], rest].concat(),
    };
    let data = &owned[..];
    if let Ok((r, len)) = MpaRepr::parse_bytes(data) {
        let again = r.to_vec().expect("a parsed frame re-encodes");
        assert_eq!(&again[..], &data[..len]);
    }
    let mut rd = FrameReader::new();
    if let Ok((_, Some(frame))) = rd.feed(data) {
        assert!(frame.len() <= 20 + 512);
        if let Ok(req) = RequestReceived::parse(&frame) {
            let cfg = ResponderConfig {
                crc: data.first().is_some_and(|b| b & 1 == 1),
                ird: 16,
                ord: 16,
                rtr_support: vec![RtrKind::Write, RtrKind::Read],
                private_data: vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3],
                large_fpdu: data.first().is_some_and(|b| b & 2 == 2),
            };
            let reply = match req.clone().accept(&cfg) {
                Ok((reply, _)) => reply,
                Err(_) => req.reject(&[]).expect("a reject always encodes"),
            };
            let (r, len) = MpaRepr::parse_bytes(&reply).expect("our Reply is well formed");
            assert_eq!(len, reply.len());
            assert!(r.private_data.len() + 4 <= 512);
        }
        let icfg = InitiatorConfig {
            crc: false,
            ird: 16,
            ord: 16,
            rtr_offer: vec![RtrKind::Write],
            private_data: vec![],
            large_fpdu: true,
        };
        let (wait, _) = Initiator::start(icfg).expect("request builds");
        let _ = wait.handle_reply(&frame);
    }
});
