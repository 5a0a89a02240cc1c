use super::*;
use bytes::Bytes;

/// NULL call to NFS (100003) v3, xid 0x12345678, AUTH_NONE/AUTH_NONE.
const NULL_CALL: [u8; 40] = [
    0x12, 0x34, 0x56, 0x78, // xid
    0, 0, 0, 0, // CALL
    0, 0, 0, 2, // rpcvers
    0, 1, 0x86, 0xa3, // prog 100003
    0, 0, 0, 3, // vers
    0, 0, 0, 0, // proc
    0, 0, 0, 0, 0, 0, 0, 0, // cred AUTH_NONE
    0, 0, 0, 0, 0, 0, 0, 0, // verf AUTH_NONE
];

fn null_call() -> CallHeader {
    CallHeader {
        xid: 0x1234_5678,
        prog: 100_003,
        vers: 3,
        proc_: 0,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
}

fn emit<T: Encode>(v: &T, len: usize) -> Vec<u8> {
    let mut out = vec![0xa5u8; len];
    let mut enc = Vec::new();
    v.encode(&mut enc);
    assert_eq!(enc.len(), len);
    assert_eq!(v.encoded_len(), len);
    out.copy_from_slice(&enc);
    out
}

#[test]
fn deconstructs_call_prefix() {
    assert_eq!(
        parse_prefix(&NULL_CALL).unwrap(),
        (0x1234_5678, MsgType::CALL)
    );
    assert!(parse_prefix(&NULL_CALL[..7]).is_err());
}

#[test]
fn parses_null_call() {
    let mut dec = Decoder::new(&NULL_CALL);
    assert_eq!(CallHeader::decode(&mut dec).unwrap(), null_call());
    dec.finish().unwrap();
}

#[test]
fn emits_null_call() {
    assert_eq!(emit(&null_call(), 40), NULL_CALL);
}

#[test]
fn auth_sys_round_trips() {
    let wire: [u8; 32] = [
        1, 2, 3, 4, // stamp
        0, 0, 0, 4, b'h', b'o', b's', b't', // machinename
        0, 0, 3, 0xe8, // uid 1000
        0, 0, 0, 100, // gid
        0, 0, 0, 2, 0, 0, 0, 100, 0, 0, 0, 200, // gids
    ];
    let sys = AuthSys {
        stamp: 0x0102_0304,
        machinename: Bytes::from_static(b"host"),
        uid: 1000,
        gid: 100,
        gids: vec![100, 200],
    };
    assert_eq!(emit(&sys, 32), wire);
    let body = Bytes::copy_from_slice(&wire);
    assert_eq!(AuthSys::decode_body(&body).unwrap(), sys);
    let auth = sys.to_opaque_auth();
    assert_eq!(auth.flavor, AuthFlavor::AUTH_SYS);
    assert_eq!(
        Credential::from_opaque(&auth).unwrap(),
        Credential::Sys(sys)
    );
}

#[test]
fn rejects_auth_sys_with_too_many_gids() {
    let sys = AuthSys {
        gids: (0..17).collect(),
        ..AuthSys::default()
    };
    let body = xdr::to_bytes(&sys);
    let err = AuthSys::decode_body(&body).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LengthExceeded { len: 17, max: 16 });
}

#[test]
fn rejects_auth_body_over_400_bytes() {
    let mut wire = NULL_CALL.to_vec();
    // Replace the AUTH_NONE cred by AUTH_SYS with a 404-byte body.
    wire.truncate(24);
    wire.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0x01, 0x94]);
    wire.extend_from_slice(&[0u8; 404]);
    wire.extend_from_slice(&[0u8; 8]);
    let err = CallHeader::decode(&mut Decoder::new(&wire)).unwrap_err();
    assert!(matches!(
        err,
        CallHeaderError::BadCred {
            xid: 0x1234_5678,
            ..
        }
    ));
}

#[test]
fn rejects_rpc_version_3_before_reading_the_rest() {
    let mut wire = NULL_CALL[..12].to_vec();
    wire[11] = 3;
    let err = CallHeader::decode(&mut Decoder::new(&wire)).unwrap_err();
    assert_eq!(
        err,
        CallHeaderError::RpcVersion {
            xid: 0x1234_5678,
            rpcvers: 3
        }
    );
}

#[test]
fn classifies_truncated_and_non_call_headers() {
    let err = CallHeader::decode(&mut Decoder::new(&NULL_CALL[..20])).unwrap_err();
    assert!(matches!(err, CallHeaderError::Truncated { .. }));
    assert_eq!(err.xid(), Some(0x1234_5678));
    let mut wire = NULL_CALL;
    wire[7] = 9;
    let err = CallHeader::decode(&mut Decoder::new(&wire)).unwrap_err();
    assert_eq!(
        err,
        CallHeaderError::NotACall {
            xid: 0x1234_5678,
            msg_type: MsgType(9)
        }
    );
    let err = CallHeader::decode(&mut Decoder::new(&NULL_CALL[..6])).unwrap_err();
    assert!(matches!(err, CallHeaderError::NoPrefix(_)));
    assert_eq!(err.xid(), None);
}

fn reply_round_trip(h: ReplyHeader, tail: &[u8]) {
    let mut want = vec![0, 0, 0, 9, 0, 0, 0, 1];
    want.extend_from_slice(tail);
    assert_eq!(emit(&h, want.len()), want);
    let mut dec = Decoder::new(&want);
    assert_eq!(ReplyHeader::decode(&mut dec).unwrap(), h);
    dec.finish().unwrap();
}

#[test]
fn accepted_replies_round_trip_for_every_accept_stat() {
    let verf_none = [0u8, 0, 0, 0, 0, 0, 0, 0];
    for stat in [
        AcceptStat::SUCCESS,
        AcceptStat::PROG_UNAVAIL,
        AcceptStat::PROC_UNAVAIL,
        AcceptStat::GARBAGE_ARGS,
        AcceptStat::SYSTEM_ERR,
        AcceptStat(77),
    ] {
        let arm = if stat == AcceptStat::SUCCESS {
            Accepted::Success
        } else {
            Accepted::Other(stat)
        };
        let mut tail = vec![0, 0, 0, 0];
        tail.extend_from_slice(&verf_none);
        tail.extend_from_slice(&stat.0.to_be_bytes());
        reply_round_trip(ReplyHeader::accepted(9, arm), &tail);
    }
    let mut tail = vec![0, 0, 0, 0];
    tail.extend_from_slice(&verf_none);
    tail.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 4]);
    reply_round_trip(
        ReplyHeader::accepted(9, Accepted::ProgMismatch { low: 2, high: 4 }),
        &tail,
    );
}

#[test]
fn denied_replies_round_trip_for_every_reject_and_auth_stat() {
    reply_round_trip(
        ReplyHeader::denied(9, Rejected::RpcMismatch { low: 2, high: 2 }),
        &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2],
    );
    for s in 0..=14u32 {
        let stat = AuthStat(s);
        assert!(stat.is_known());
        let mut tail = vec![0, 0, 0, 1, 0, 0, 0, 1];
        tail.extend_from_slice(&s.to_be_bytes());
        reply_round_trip(ReplyHeader::denied(9, Rejected::AuthError(stat)), &tail);
    }
}

#[test]
fn rejects_unknown_reply_and_reject_stat() {
    let wire = [0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 2];
    let err = ReplyHeader::decode(&mut Decoder::new(&wire)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEnum(2));
    let wire = [0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5];
    let err = ReplyHeader::decode(&mut Decoder::new(&wire)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEnum(5));
    let err = ReplyHeader::decode(&mut Decoder::new(&NULL_CALL)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEnum(0));
}
