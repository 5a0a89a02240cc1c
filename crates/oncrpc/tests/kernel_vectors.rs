//! Records captured from a Linux kernel peer, decoded and re-encoded.
//!
//! Provenance: /work/shared/kpeer/pcaps/nfsrdma-v3.pcap, frames 6 and 8
//! (the guest's rpcbind GETPORT for MOUNT v3/TCP over TCP, and the reply),
//! extracted with `tshark -T fields -e tcp.payload`.

use bytes::Bytes;
use oncrpc::client::decode_reply;
use oncrpc::msg::{Accepted, AuthFlavor, AuthSys, CallHeader, Credential, OpaqueAuth, ReplyHeader};
use oncrpc::record::RecordDecoder;
use testkit::hex;
use xdr::{Decoder, Encode, Encoder, XdrBuf};

const GETPORT_CALL: &str = "80000054dc78a9f00000000000000002000186a00000000200000003\
000000010000001c00000000000000056b706565720000000000000000000000000000000000000000\
000000000186a5000000030000000600000000";

const GETPORT_REPLY: &str = "8000001cdc78a9f0000000010000000000000000000000000000000000004e50";

fn deframe(wire: &[u8]) -> Bytes {
    let mut d = RecordDecoder::new(1024);
    d.feed(wire);
    let rec = d.next_record().unwrap().unwrap();
    assert!(d.is_idle());
    rec
}

#[test]
fn decodes_linux_rpcbind_getport_call_with_auth_sys() {
    let wire = hex(GETPORT_CALL);
    let rec = deframe(&wire);
    assert_eq!(rec.len(), 0x54);
    let mut dec = Decoder::from_bytes(&rec);
    let h = CallHeader::decode(&mut dec).unwrap();
    assert_eq!(h.xid, 0xdc78_a9f0);
    assert_eq!((h.prog, h.vers, h.proc_), (100_000, 2, 3));
    assert_eq!(h.cred.flavor, AuthFlavor::AUTH_SYS);
    assert_eq!(h.verf, OpaqueAuth::NONE);
    let sys = AuthSys {
        stamp: 0,
        machinename: Bytes::from_static(b"kpeer"),
        uid: 0,
        gid: 0,
        gids: vec![],
    };
    assert_eq!(
        Credential::from_opaque(&h.cred).unwrap(),
        Credential::Sys(sys.clone())
    );
    // mapping: prog 100005, vers 3, prot 6 (TCP), port 0.
    let args: Vec<u32> = (0..4).map(|_| dec.u32().unwrap()).collect();
    assert_eq!(args, [100_005, 3, 6, 0]);
    dec.finish().unwrap();

    // Re-encoding the parsed header and arguments gives the kernel's bytes.
    let mut out = XdrBuf::new();
    CallHeader {
        cred: sys.to_opaque_auth(),
        ..h
    }
    .encode(&mut out);
    for a in args {
        out.put_u32(a);
    }
    assert_eq!(
        oncrpc::record::encode_record(&out).as_ref(),
        wire.as_slice()
    );
}

#[test]
fn decodes_linux_rpcbind_getport_reply() {
    let wire = hex(GETPORT_REPLY);
    let rec = deframe(&wire);
    let (xid, results) = decode_reply(&rec).unwrap();
    assert_eq!(xid, 0xdc78_a9f0);
    assert_eq!(results.unwrap().as_ref(), &[0, 0, 0x4e, 0x50]); // port 20048
    let mut out = XdrBuf::new();
    ReplyHeader::accepted(xid, Accepted::Success).encode(&mut out);
    out.put_u32(20048);
    assert_eq!(
        oncrpc::record::encode_record(&out).as_ref(),
        wire.as_slice()
    );
}
