//! Raw ONC RPC bytes for tests that write to a server's socket themselves
//! (what a well-behaved client library would not send, or when).

use oncrpc::msg::{CallHeader, OpaqueAuth};
use oncrpc::record::fragment_header;
use xdr::Encode;

/// The CALL message `xid` of `prog`, `vers`, `proc_` with credential
/// `cred`, a null verifier and the XDR-encoded arguments `args` (RFC 5531
/// §9), as a server's dispatch takes it.
pub fn call_message(
    xid: u32,
    (prog, vers, proc_): (u32, u32, u32),
    cred: OpaqueAuth,
    args: &[u8],
) -> Vec<u8> {
    let mut body = Vec::new();
    CallHeader {
        xid,
        prog,
        vers,
        proc_,
        cred,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut body);
    body.extend_from_slice(args);
    body
}

/// [`call_message`] as one record (RFC 5531 §11: a single, last
/// fragment), as it goes on a TCP connection.
pub fn call_record(xid: u32, call: (u32, u32, u32), cred: OpaqueAuth, args: &[u8]) -> Vec<u8> {
    let body = call_message(xid, call, cred, args);
    let mut rec = fragment_header(body.len(), true).to_vec();
    rec.extend_from_slice(&body);
    rec
}
