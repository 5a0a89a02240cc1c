//! The whole server program table (`nfs_server::rpc_server`: NFSv3,
//! NFSv4.1/4.2 COMPOUND, MOUNT v3, rpcbind) behind
//! `oncrpc::Server::handle_call`, on a fresh export in a temporary
//! directory for every input. Arbitrary RPC records must never panic, and
//! every reply must carry a decodable reply header.
//!
//! Input: one flag byte, then records, each `[kind][len: u16 BE][len bytes]`
//! (a short tail is taken as it is). `kind % 6`:
//! - 0: the bytes are a whole RPC record;
//! - 1: an NFSv3 call built by the harness (AUTH_SYS root): procedure
//!   `bytes[0] % 22`, arguments = a file handle (`bytes[1] % 3`: the
//!   export root, file `f` or directory `d`) followed by `bytes[2..]`;
//! - 2: an NFSv4 COMPOUND (program 100003 version 4 procedure 1) whose
//!   arguments are the bytes;
//! - 3: a MOUNT v3 call, procedure `bytes[0] % 6`, arguments `bytes[1..]`;
//! - 4: an NFSv4 COMPOUND whose arguments start with a tag-less header
//!   (minor version `bytes[0] % 3`) and op count `bytes[1] % 16`, then the
//!   ops in `bytes[2..]`.
//!
//! Flag bit 0 exports read-only.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use nfs::v3::{Filename3, NfsFh3};
use nfs::v4::session::{
    ChannelAttrs4, ClientOwner4, CreateSession4Args, ExchangeId4Args, Sequence4Args, StateProtect4A,
};
use nfs::v4::{Compound4Args, Compound4Res, NfsArgop4, NfsResop4, Res4};
use nfs_server::{LocalFs, Storage};
use oncrpc::{PeerInfo, TransportKind};
use xdr::{Bounded, FixedOpaque};

/// The export directory, one per fuzzing process.
fn export_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("nfs_server_rpc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp export");
        d
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Empties the export and puts back file `f` (100 bytes) and directory `d`.
fn reset(dir: &PathBuf) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
    }
    std::fs::write(dir.join("f"), [7u8; 100]).expect("file f");
    std::fs::create_dir(dir.join("d")).expect("dir d");
}

fn call_header(out: &mut BytesMut, xid: u32, prog: u32, vers: u32, proc_: u32) {
    out.put_u32(xid);
    out.put_u32(0); // CALL
    out.put_u32(2); // rpcvers
    out.put_u32(prog);
    out.put_u32(vers);
    out.put_u32(proc_);
    // AUTH_SYS (RFC 5531 Appendix A): stamp, machinename "fz", uid 0, gid 0, no gids.
    out.put_u32(1);
    out.put_u32(24);
    out.put_u32(0);
    out.put_u32(2);
    out.put_slice(b"fz\0\0");
    out.put_u32(0);
    out.put_u32(0);
    out.put_u32(0);
    // AUTH_NONE verifier.
    out.put_u32(0);
    out.put_u32(0);
}

/// Runs one record through the server; checks the reply header and returns
/// the reply's results (what follows the header).
fn call(
    rt: &tokio::runtime::Runtime,
    server: &oncrpc::Server,
    peer: &PeerInfo,
    rec: Bytes,
) -> Option<Bytes> {
    let reply = rt.block_on(server.handle_call(rec, peer))?;
    let flat = reply.to_bytes();
    let mut dec = xdr::Decoder::from_bytes(&flat);
    assert!(
        oncrpc::msg::ReplyHeader::decode(&mut dec).is_ok(),
        "undecodable reply header"
    );
    Some(dec.rest_bytes())
}

/// A COMPOUND call record (minor version 1) of `ops`.
fn compound(xid: u32, ops: Vec<NfsArgop4>) -> Bytes {
    let mut rec = BytesMut::new();
    call_header(&mut rec, xid, 100_003, 4, 1);
    rec.put_slice(&xdr::to_bytes(&Compound4Args {
        tag: Bytes::new(),
        minorversion: 1,
        argarray: ops,
    }));
    rec.freeze()
}

/// EXCHANGE_ID then CREATE_SESSION with four slots; the session id.
fn open_session(
    rt: &tokio::runtime::Runtime,
    server: &oncrpc::Server,
    peer: &PeerInfo,
) -> [u8; 16] {
    let ex = ExchangeId4Args {
        clientowner: ClientOwner4 {
            verifier: FixedOpaque([1; 8]),
            ownerid: Bounded(Bytes::from_static(b"fuzz client")),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: Bounded(Vec::new()),
    };
    let res = call(
        rt,
        server,
        peer,
        compound(0xe1, vec![NfsArgop4::ExchangeId(ex)]),
    )
    .and_then(|b| xdr::from_slice::<Compound4Res>(&b).ok())
    .expect("EXCHANGE_ID answered");
    let Some(NfsResop4::ExchangeId(Res4::Ok(id))) = res.resarray.first() else {
        panic!("EXCHANGE_ID refused: {res:?}");
    };
    let attrs = ChannelAttrs4 {
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 64 << 10,
        maxoperations: 32,
        maxrequests: 4,
        ..ChannelAttrs4::default()
    };
    let cs = CreateSession4Args {
        clientid: id.clientid,
        sequence: id.sequenceid,
        flags: 0,
        fore_chan_attrs: attrs.clone(),
        back_chan_attrs: attrs,
        cb_program: 0,
        sec_parms: Bounded(Vec::new()),
    };
    let res = call(
        rt,
        server,
        peer,
        compound(0xe2, vec![NfsArgop4::CreateSession(cs)]),
    )
    .and_then(|b| xdr::from_slice::<Compound4Res>(&b).ok())
    .expect("CREATE_SESSION answered");
    let Some(NfsResop4::CreateSession(Res4::Ok(s))) = res.resarray.first() else {
        panic!("CREATE_SESSION refused: {res:?}");
    };
    s.sessionid.0
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let dir = export_dir();
    reset(dir);
    let Ok(fs) = LocalFs::new(dir, flags & 1 == 1) else {
        return;
    };
    let fs = Arc::new(fs);
    let rt = runtime();
    let root = fs.root();
    let lookup = |name: &'static str| -> NfsFh3 {
        rt.block_on(fs.lookup(&root, &Filename3::from_static(name)))
            .expect("fixture present")
    };
    let handles = [root.clone(), lookup("f"), lookup("d")];
    let server = nfs_server::rpc_server(
        Arc::clone(&fs),
        vec![Bytes::from(dir.to_string_lossy().into_owned())],
        Default::default(),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
    let peer = PeerInfo {
        conn_id: 1,
        addr: Some(SocketAddr::from(([127, 0, 0, 1], 700))),
        transport: TransportKind::Tcp,
        security: oncrpc::TransportSecurity::None,
    };
    let mut xid = 1u32;
    let mut session: Option<[u8; 16]> = None;
    let mut slot_seq = [0u32; 4];
    while let Some((&kind, tail)) = rest.split_first() {
        let (body, next) = match tail {
            [a, b, more @ ..] => {
                let n = usize::from(u16::from_be_bytes([*a, *b])).min(more.len());
                more.split_at(n)
            }
            _ => (tail, &[][..]),
        };
        rest = next;
        xid = xid.wrapping_add(1);
        let mut rec = BytesMut::new();
        match kind % 6 {
            0 => rec.put_slice(body),
            1 => {
                let (p, h, args) = match body {
                    [p, h, args @ ..] => (*p, *h, args),
                    [p] => (*p, 0, &[][..]),
                    [] => (0, 0, &[][..]),
                };
                call_header(&mut rec, xid, 100_003, 3, u32::from(p % 22));
                let fh = &handles[usize::from(h % 3)];
                rec.put_slice(&xdr::to_bytes(fh));
                rec.put_slice(args);
            }
            2 => {
                call_header(&mut rec, xid, 100_003, 4, 1);
                rec.put_slice(body);
            }
            3 => {
                let (p, args) = body.split_first().map_or((0, &[][..]), |(p, a)| (*p, a));
                call_header(&mut rec, xid, 100_005, 3, u32::from(p % 6));
                rec.put_slice(args);
            }
            5 => {
                let (sel, nops, ops) = match body {
                    [s, n, ops @ ..] => (*s, *n, ops),
                    _ => (0, 0, &[][..]),
                };
                let sid = *session.get_or_insert_with(|| open_session(rt, &server, &peer));
                let slot = usize::from(sel % 4);
                if sel & 0x80 == 0 || slot_seq[slot] == 0 {
                    slot_seq[slot] = slot_seq[slot].wrapping_add(1);
                }
                let seq = NfsArgop4::Sequence(Sequence4Args {
                    sessionid: FixedOpaque(sid),
                    sequenceid: slot_seq[slot],
                    slotid: slot as u32,
                    highest_slotid: 3,
                    cachethis: sel & 0x40 != 0,
                });
                call_header(&mut rec, xid, 100_003, 4, 1);
                rec.put_u32(0); // empty tag
                rec.put_u32(1);
                rec.put_u32(1 + u32::from(nops % 16));
                rec.put_slice(&xdr::to_bytes(&seq));
                rec.put_slice(ops);
            }
            _ => {
                let (minor, nops, ops) = match body {
                    [m, n, ops @ ..] => (*m, *n, ops),
                    _ => (0, 0, &[][..]),
                };
                call_header(&mut rec, xid, 100_003, 4, 1);
                rec.put_u32(0); // empty tag
                rec.put_u32(u32::from(minor % 3));
                rec.put_u32(u32::from(nops % 16));
                rec.put_slice(ops);
            }
        }
        let _ = call(rt, &server, &peer, rec.freeze());
    }
});
