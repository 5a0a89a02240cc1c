//! ONC RPC messages (RFC 5531 §9) and the names of the procedures inside:
//! NFSv3 (RFC 1813 §3.3), MOUNT v3 (RFC 1813 Appendix I), NFSv4.x COMPOUND
//! operations (RFC 8881 §16.2, RFC 7862), the NFSv4.1 callback program
//! (RFC 8881 §20), rpcbind, NLM and NSM.

use oncrpc::msg::{Accepted, CallHeader, MsgType, ReplyBody, ReplyHeader};
use xdr::Decoder;

/// Largest read-chunk item spliced back (as zeros) to list the operations
/// of an NFSv4 COMPOUND whose WRITE data travelled by RDMA Read.
const MAX_SPLICE: usize = 1 << 20;

/// What a call was, kept until its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallInfo {
    pub(crate) prog: u32,
    pub(crate) vers: u32,
    pub(crate) proc_: u32,
    /// The printable procedure, e.g. "NFSv3 READ" or "NFSv4.1 COMPOUND
    /// [SEQUENCE PUTFH READ]".
    pub(crate) label: String,
}

/// One decoded RPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    Call { xid: u32, info: CallInfo },
    Reply { xid: u32, status: ReplyStatus },
}

/// How a reply ended, before the procedure's own status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReplyStatus {
    /// MSG_ACCEPTED, SUCCESS: the procedure's results follow; `results`
    /// is the offset of the first result byte in the message.
    Success { results: usize },
    /// Any other accepted or denied reply.
    Failed(String),
}

/// Decodes the RPC header of `msg`. `read_items` lists, for calls whose
/// bulk data travels in read chunks, `(position, length)` of each item
/// removed from the inline stream (RFC 8166 §3.4.5), so that NFSv4
/// operations after it can still be listed.
pub(crate) fn decode(msg: &[u8], read_items: &[(u32, usize)]) -> Result<Message, String> {
    let mut dec = Decoder::new(msg);
    let (xid, ty) = oncrpc::msg::parse_prefix(msg).map_err(|e| e.to_string())?;
    match ty {
        MsgType::CALL => {
            let h = CallHeader::decode(&mut dec).map_err(|e| e.to_string())?;
            let args = &msg[dec.position()..];
            let label = label(&h, args, dec.position(), read_items);
            Ok(Message::Call {
                xid,
                info: CallInfo {
                    prog: h.prog,
                    vers: h.vers,
                    proc_: h.proc_,
                    label,
                },
            })
        }
        MsgType::REPLY => {
            let h = ReplyHeader::decode(&mut dec).map_err(|e| e.to_string())?;
            let status = match h.body {
                ReplyBody::Accepted {
                    stat: Accepted::Success,
                    ..
                } => ReplyStatus::Success {
                    results: dec.position(),
                },
                ReplyBody::Accepted { stat, .. } => ReplyStatus::Failed(format!("{}", stat.stat())),
                ReplyBody::Denied(r) => ReplyStatus::Failed(format!("denied {r:?}")),
            };
            Ok(Message::Reply { xid, status })
        }
        other => Err(format!("msg_type {other}")),
    }
}

fn label(h: &CallHeader, args: &[u8], args_at: usize, read_items: &[(u32, usize)]) -> String {
    let p = h.proc_;
    let named =
        |n: Option<&'static str>| n.map(str::to_owned).unwrap_or_else(|| format!("proc {p}"));
    match (h.prog, h.vers) {
        (nfs::v3::NFS_PROGRAM, 3) => format!("NFSv3 {}", named(nfs::v3::Nfsproc3(p).name())),
        (nfs::v4::NFS4_PROGRAM, 4) => v4_label(p, args, args_at, read_items),
        (nfs::mount::MOUNT_PROGRAM, v) => {
            format!("MOUNTv{v} {}", named(nfs::mount::Mountproc3(p).name()))
        }
        (NFS4_CALLBACK, v) => format!("NFSv4 callback v{v} {}", cb_name(p)),
        (100_000, v) => format!("rpcbind v{v} proc {p}"),
        (100_227, v) => format!("NFSACLv{v} proc {p}"),
        (100_021, v) => format!("NLMv{v} proc {p}"),
        (100_024, v) => format!("NSMv{v} proc {p}"),
        (prog, v) => format!("prog {prog} v{v} proc {p}"),
    }
}

/// The NFSv4.1 callback program (RFC 8881 §20): "1073741824" in Linux.
const NFS4_CALLBACK: u32 = 0x4000_0000;

fn cb_name(p: u32) -> String {
    match p {
        0 => "CB_NULL".into(),
        1 => "CB_COMPOUND".into(),
        other => format!("proc {other}"),
    }
}

fn v4_label(p: u32, args: &[u8], args_at: usize, read_items: &[(u32, usize)]) -> String {
    match p {
        nfs::v4::NFSPROC4_NULL => "NFSv4 NULL".into(),
        nfs::v4::NFSPROC4_COMPOUND => match compound_ops(args, args_at, read_items) {
            Ok((minor, ops)) => format!("NFSv4.{minor} COMPOUND [{}]", ops.join(" ")),
            Err(why) => format!("NFSv4 COMPOUND (operations not listed: {why})"),
        },
        other => format!("NFSv4 proc {other}"),
    }
}

/// Lists the operations of a COMPOUND (RFC 8881 §16.2.3).
fn compound_ops(
    args: &[u8],
    args_at: usize,
    read_items: &[(u32, usize)],
) -> Result<(u32, Vec<String>), String> {
    let spliced;
    let args = if read_items.is_empty() {
        args
    } else {
        spliced = splice_zeros(args, args_at, read_items)?;
        &spliced[..]
    };
    let mut dec = Decoder::new(args);
    let c: nfs::v4::Compound4Args = dec.decode().map_err(|e| e.to_string())?;
    let ops = c
        .argarray
        .iter()
        .map(|op| {
            let n = op.opnum();
            n.name()
                .map(|s| s.trim_start_matches("OP_").to_owned())
                .unwrap_or_else(|| format!("op{}", n.0))
        })
        .collect();
    Ok((c.minorversion, ops))
}

/// Puts zero bytes (plus XDR padding) where read-chunk items were removed:
/// `items` are `(position, length)` in full-stream coordinates, where the
/// stream began `args_at` bytes before `args`.
fn splice_zeros(args: &[u8], args_at: usize, items: &[(u32, usize)]) -> Result<Vec<u8>, String> {
    let total: usize = items.iter().map(|(_, l)| l + 3).sum();
    if total > MAX_SPLICE {
        return Err(format!("{total} bytes in read chunks"));
    }
    let mut sorted = items.to_vec();
    sorted.sort_unstable();
    let mut out = Vec::with_capacity(args.len() + total);
    let mut from = 0usize;
    for (pos, len) in sorted {
        let full = (pos as usize)
            .checked_sub(args_at)
            .ok_or("read chunk inside the RPC header")?;
        let inline_at = full
            .checked_sub(out.len() - from)
            .ok_or("overlapping read chunks")?;
        let head = args
            .get(from..inline_at)
            .ok_or("read chunk position past the message")?;
        out.extend_from_slice(head);
        out.resize(out.len() + len.next_multiple_of(4), 0);
        from = inline_at;
    }
    out.extend_from_slice(args.get(from..).unwrap_or(&[]));
    Ok(out)
}

/// The first word of the results: the procedure's status for NFS, MOUNT
/// and COMPOUND replies (nfsstat3, mountstat3, nfsstat4).
pub(crate) fn result_status(call: &CallInfo, results: &[u8]) -> Option<String> {
    let w = results.get(..4)?;
    let v = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
    match (call.prog, call.vers, call.proc_) {
        (_, _, 0) => None,
        (nfs::v3::NFS_PROGRAM, 3, _) => Some(nfs::v3::Nfsstat3(v).to_string()),
        (nfs::v4::NFS4_PROGRAM, 4, _) | (NFS4_CALLBACK, _, 1) => {
            Some(nfs::v4::Nfsstat4(v).to_string())
        }
        (nfs::mount::MOUNT_PROGRAM, _, 1) => Some(nfs::mount::Mountstat3(v).to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_zeros_for_a_removed_item() {
        // args start at stream offset 40; an item of 5 bytes at 48: the
        // inline stream keeps 8 bytes (the last one the length word).
        let args = [1, 2, 3, 4, 0, 0, 0, 5, 9, 9, 9, 9];
        let out = splice_zeros(&args, 40, &[(48, 5)]).unwrap();
        assert_eq!(
            out,
            [1, 2, 3, 4, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9]
        );
    }

    #[test]
    fn refuses_hostile_splices() {
        assert!(splice_zeros(&[0; 8], 40, &[(48, 1 << 30)]).is_err());
        assert!(splice_zeros(&[0; 8], 40, &[(8, 4)]).is_err());
        assert!(splice_zeros(&[0; 8], 40, &[(400, 4)]).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
            let _ = decode(&junk, &[(3, 7)]);
        }
    }
}
