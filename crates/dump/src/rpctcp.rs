//! ONC RPC over TCP: record marking (RFC 5531 §11) in each direction, and
//! the call or reply in each record.

use oncrpc::record::RecordDecoder;

use crate::calls::{Calls, Pending};
use crate::rdma::short;
use crate::report::DirStats;
use crate::rpc::{self, Message, ReplyStatus};
use crate::sink::Out;

/// Largest record accepted: a 1 MiB NFS WRITE or READ plus headers, with
/// room to spare.
const MAX_RECORD: usize = 4 << 20;

#[derive(Debug)]
pub(crate) struct RpcTcp {
    dec: [RecordDecoder; 2],
    dead: [bool; 2],
    pub(crate) calls: Calls,
}

impl RpcTcp {
    pub(crate) fn new() -> Self {
        Self {
            dec: [
                RecordDecoder::new(MAX_RECORD),
                RecordDecoder::new(MAX_RECORD),
            ],
            dead: [false; 2],
            calls: Calls::default(),
        }
    }

    /// Bytes of a record still incomplete in direction `d`.
    pub(crate) fn buffered(&self, d: crate::report::Dir) -> usize {
        self.dec[d.index()].buffered()
    }

    /// Feeds stream bytes of `out.dir` and decodes every complete record.
    pub(crate) fn process(&mut self, out: &mut Out<'_>, data: &[u8], stats: &mut DirStats) {
        let i = out.dir.index();
        if self.dead[i] {
            return;
        }
        self.dec[i].feed(data);
        loop {
            match self.dec[i].next_record() {
                Ok(Some(rec)) => self.record(out, &rec, stats),
                Ok(None) => return,
                Err(e) => {
                    out.malformed(format!("RPC record marking: {e}"));
                    self.dead[i] = true;
                    return;
                }
            }
        }
    }

    fn record(&mut self, out: &mut Out<'_>, rec: &[u8], stats: &mut DirStats) {
        match rpc::decode(rec, &[]) {
            Ok(Message::Call { xid, info }) => {
                out.count(format!("rpc call {}", short(&info.label)));
                stats.count("call");
                out.ok(format!(
                    "RPC record {} bytes | call xid={xid:#010x} {}",
                    rec.len(),
                    info.label
                ));
                let frame = out.sink.frame;
                self.calls.insert(
                    out.dir,
                    xid,
                    Pending {
                        frame,
                        info,
                        handles: vec![],
                    },
                );
            }
            Ok(Message::Reply { xid, status }) => {
                out.count("rpc reply");
                stats.count("reply");
                let text = match (self.calls.answer(out.dir, xid), status) {
                    (None, _) => "reply (call not in capture)".to_string(),
                    (Some(c), ReplyStatus::Success { results }) => {
                        let st = rpc::result_status(&c.info, rec.get(results..).unwrap_or(&[]))
                            .unwrap_or_else(|| "SUCCESS".into());
                        format!("reply {} {st} (call frame {})", c.info.label, c.frame)
                    }
                    (Some(c), ReplyStatus::Failed(s)) => {
                        format!("reply {} {s} (call frame {})", c.info.label, c.frame)
                    }
                };
                out.ok(format!(
                    "RPC record {} bytes | xid={xid:#010x} {text}",
                    rec.len()
                ));
            }
            Err(e) => out.malformed(format!("RPC record of {} bytes: {e}", rec.len())),
        }
    }
}
