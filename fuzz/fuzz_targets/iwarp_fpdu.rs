//! The FPDU deframer and the RDMAP engine on arbitrary stream bytes (CRC
//! checking is bypassed under cfg(fuzzing)): nothing panics, every header the
//! deframer reports re-encodes, and the engine either consumes the input or
//! ends the stream with a Terminate.
#![no_main]

use iwarp::conn::{Config, Connection, RemoteAccess};
use iwarp::deframe::{Deframer, RxEvent};
use iwarp::negotiation::Rtr;
use iwarp::wire::{DdpRepr, ReadRequest, TerminateRepr};
use libfuzzer_sys::fuzz_target;
use rnic::{Access, AccessError, Stag};

/// One region: STag 1, TO 0..4096, all rights; anything else is unknown.
struct Mem;

impl RemoteAccess for Mem {
    fn check(&self, stag: Stag, to: u64, len: u64, _need: Access) -> Result<(), AccessError> {
        if stag.0 != 1 {
            return Err(AccessError::UnknownStag(stag));
        }
        match to.checked_add(len) {
            Some(end) if end <= 4096 => Ok(()),
            _ => Err(AccessError::BoundsViolation { stag, to, len }),
        }
    }
    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError> {
        if stag.0 == 1 {
            Ok(())
        } else {
            Err(AccessError::UnknownStag(stag))
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    let crc = sel & 1 == 1;
    // Deframer alone, in chunks of a selector-chosen size.
    let mut d = Deframer::new(crc, 1 + usize::from(sel) * 64);
    let chunk = usize::from(sel >> 4) + 1;
    'outer: for part in data.chunks(chunk) {
        let mut part = part;
        while !part.is_empty() {
            match d.advance(part) {
                Ok((n, ev)) => {
                    if let Some(RxEvent::Segment { header, .. }) = ev {
                        let (again, _) = DdpRepr::parse_bytes(&header.to_vec()).expect("re-parses");
                        assert_eq!(again, header);
                    }
                    if n == 0 {
                        break;
                    }
                    part = &part[n..];
                }
                Err(_) => break 'outer,
            }
        }
    }
    // The same stream read `bytes_wanted()` at a time: every step consumes
    // exactly what was asked for (or fails), and never asks for nothing.
    let mut d = Deframer::new(crc, 1 + usize::from(sel) * 64);
    let mut rest = data;
    while !rest.is_empty() {
        let want = d.bytes_wanted();
        assert!(want > 0);
        let take = want.min(rest.len());
        match d.advance(&rest[..take]) {
            Ok((n, _)) => {
                assert_eq!(n, take);
                rest = &rest[n..];
            }
            Err(_) => break,
        }
    }
    let _ = ReadRequest::parse_bytes(data);
    if let Ok(t) = TerminateRepr::parse(data) {
        let _ = t.to_vec();
    }
    // The engine, with receives and a read outstanding so every path is live.
    let mut c = Connection::new(Config {
        crc,
        ird: 2,
        ord: 2,
        rtr: Rtr::None,
        mulpdu: 256,
        max_rx_ulpdu: 4096,
    });
    let _ = c.post_recv(1, 64);
    let _ = c.post_recv(2, 4096);
    let _ = c.post_read(3, Stag(1), 0, Stag(9), 0, 100);
    let mut mem = Mem;
    let mut input = data;
    while !input.is_empty() {
        match c.handle_bytes(input, &mut mem) {
            Ok(n) => {
                input = &input[n..];
                if let Some(p) = c.poll_placement() {
                    let k = p.len.min(input.len());
                    c.placed(&input[..k]).expect("placing what was asked");
                    input = &input[k..];
                } else if n == 0 {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    while c.poll_transmit().is_some() {}
    while c.poll_event().is_some() {}
});
