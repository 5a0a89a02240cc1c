//! RPC-over-RDMA over one iWARP connection: transport headers of every
//! Send (RFC 8166 §4, v2 draft §5), the RPC message inside, and the RDMA
//! Writes that carried a reply's chunks (RFC 8166 §3.4.6: the responder
//! writes the data first, then Sends the reply naming the same handles).

use std::collections::HashMap;

use iwarp::wire::Opcode;
use rpcrdma::wire::{v1, v2, AnyHeader, ChunkLists, Limits, RdmaSegment, WriteChunk};

use crate::calls::{Calls, Pending};
use crate::chunks::Chunks;
use crate::report::{Dir, DirStats};
use crate::rpc::{self, Message, ReplyStatus};
use crate::sink::Out;

/// Most STags whose written bytes are tracked per direction.
const MAX_TRACKED_STAGS: usize = 4096;

/// Bytes and messages written to one STag since the last reply named it.
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    bytes: u64,
    writes: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Rdma {
    pub(crate) calls: Calls,
    written: [HashMap<u32, Written>; 2],
    /// Contents of reply chunks and Position-Zero Read chunks.
    pub(crate) chunks: Chunks,
    /// RDMA_NOMSG calls whose Position-Zero Read chunk is being pulled:
    /// direction and XID of the call, and the chunk's segments.
    pulling: Vec<(Dir, u32, Vec<RdmaSegment>)>,
}

/// Most RDMA_NOMSG calls followed at once per connection.
const MAX_PULLING: usize = 64;

impl Rdma {
    /// One whole tagged message (RDMA Write or Read Response) of `len`
    /// bytes to `stag`.
    pub(crate) fn on_write(&mut self, dir: Dir, stag: u32, len: u64) {
        let m = &mut self.written[dir.index()];
        if m.len() >= MAX_TRACKED_STAGS && !m.contains_key(&stag) {
            return;
        }
        let w = m.entry(stag).or_default();
        w.bytes += len;
        w.writes += 1;
    }

    /// One whole Send message.
    pub(crate) fn on_send(
        &mut self,
        out: &mut Out<'_>,
        stats: &mut DirStats,
        opcode: Opcode,
        inv_stag: u32,
        msg: &[u8],
    ) {
        let send = match opcode {
            Opcode::SendInvalidate | Opcode::SendSolicitedInvalidate => {
                format!("{opcode} (invalidate {inv_stag:#x})")
            }
            _ => opcode.to_string(),
        };
        if msg.is_empty() {
            out.count("rdmap zero-length Send");
            out.ok(format!("{send}, zero length (MPA ready-to-receive)"));
            return;
        }
        let (h, hlen) = match AnyHeader::parse(msg, &Limits::default()) {
            Ok(v) => v,
            Err(e) => {
                out.malformed(format!("{send} of {} bytes: RPC-over-RDMA: {e}", msg.len()));
                return;
            }
        };
        let kind = header_kind(&h);
        out.count(kind.clone());
        stats.count(kind);
        let credits = match &h {
            AnyHeader::V1(h) => h.credits,
            AnyHeader::V2(h) => h.credits,
        };
        stats.credits.note(credits);
        let mut prop_text = String::new();
        if let AnyHeader::V2(v2::Header {
            body: v2::Body::ConnProp(props),
            ..
        }) = &h
        {
            match v2::Properties::from_propset(props) {
                Ok(p) => {
                    stats.inline = Some(format!("receive buffer {}", p.receive_buffer_size));
                    prop_text = format!(
                        " (receive buffer {}, reverse requests {})",
                        p.receive_buffer_size, p.reverse_request_support
                    );
                }
                Err(e) => {
                    out.malformed(format!("RDMA2_CONNPROP property {}", e.which));
                }
            }
        }
        let chunks = lists(&h);
        if let Some(c) = chunks {
            stats.read_segments += c.reads.len() as u64;
            stats.write_chunks += c.writes.len() as u64;
            stats.reply_chunks += u64::from(c.reply.is_some());
        }
        let rpc_text = match (&h, chunks) {
            (
                AnyHeader::V1(v1::Header {
                    body: v1::Body::Msg(c),
                    ..
                }),
                _,
            )
            | (
                AnyHeader::V2(v2::Header {
                    body: v2::Body::Msg(v2::ChunkLists2 { lists: c, .. }),
                    ..
                }),
                _,
            ) => self.inline_rpc(out, &msg[hlen..], c),
            (_, Some(c)) => self.chunked_rpc(out, h.xid(), c),
            (_, None) => Ok(prop_text),
        };
        match rpc_text {
            Ok(t) => out.ok(format!("{send} {h}{t}")),
            Err(t) => out.malformed(format!("{send} {h}: RPC: {t}")),
        }
    }

    fn inline_rpc(
        &mut self,
        out: &mut Out<'_>,
        rpc_msg: &[u8],
        c: &ChunkLists,
    ) -> Result<String, String> {
        let items: Vec<(u32, usize)> = read_items(c);
        match rpc::decode(rpc_msg, &items)? {
            Message::Call { xid, info } => {
                out.count(format!("rpc call {}", short(&info.label)));
                let text = format!(" | call {}", info.label);
                let frame = out.sink.frame;
                let handles = self.watch_reply_chunk(c);
                self.calls.insert(
                    out.dir,
                    xid,
                    Pending {
                        frame,
                        info,
                        handles,
                    },
                );
                Ok(text)
            }
            Message::Reply { xid, status } => {
                out.count("rpc reply");
                let call = self.calls.answer(out.dir, xid);
                if let Some(call) = &call {
                    self.chunks.forget(&call.handles);
                }
                let mut text = reply_text(call.as_ref(), &status, rpc_msg);
                text.push_str(&self.pair_writes(out.dir, &c.writes));
                Ok(text)
            }
        }
    }

    /// RDMA_NOMSG: the RPC message itself is in a chunk (RFC 8166 §3.5.3).
    fn chunked_rpc(
        &mut self,
        out: &mut Out<'_>,
        xid: u32,
        c: &ChunkLists,
    ) -> Result<String, String> {
        if c.has_position_zero() {
            out.count("rpc call (in read chunk)");
            let segs: Vec<RdmaSegment> = c
                .reads
                .iter()
                .filter(|r| r.position == 0)
                .map(|r| r.target)
                .collect();
            let len: u64 = segs.iter().map(|s| u64::from(s.length)).sum();
            let mut handles = self.watch_reply_chunk(c);
            if self.pulling.len() < MAX_PULLING {
                self.chunks.watch(&segs);
                handles.extend(segs.iter().map(|s| s.handle));
                self.pulling.push((out.dir, xid, segs));
            }
            let info = rpc::CallInfo {
                prog: 0,
                vers: 0,
                proc_: 0,
                label: "(call in a position-zero read chunk)".into(),
            };
            let frame = out.sink.frame;
            self.calls.insert(
                out.dir,
                xid,
                Pending {
                    frame,
                    info,
                    handles,
                },
            );
            return Ok(format!(
                " | call of {len} bytes in a position-zero read chunk"
            ));
        }
        let Some(call) = self.calls.answer(out.dir, xid) else {
            return Ok(String::new());
        };
        out.count("rpc reply (in reply chunk)");
        let mut t = match c.reply.as_ref().and_then(|r| self.chunks.take(&r.segments)) {
            Some(body) => match rpc::decode(&body, &[]) {
                Ok(Message::Reply { status, .. }) => reply_text(Some(&call), &status, &body),
                Ok(Message::Call { .. }) => return Err("a call in the reply chunk".into()),
                Err(e) => return Err(format!("reply chunk: {e}")),
            },
            None => format!(
                " | reply to {} (frame {}) in the reply chunk",
                call.info.label, call.frame
            ),
        };
        self.chunks.forget(&call.handles);
        if let Some(r) = &c.reply {
            t.push_str(&self.pair_writes(out.dir, std::slice::from_ref(r)));
        }
        Ok(t)
    }

    /// Watches the reply chunk a call offers; returns its STags.
    fn watch_reply_chunk(&mut self, c: &ChunkLists) -> Vec<u32> {
        match &c.reply {
            Some(r) => {
                self.chunks.watch(&r.segments);
                r.segments.iter().map(|s| s.handle).collect()
            }
            None => vec![],
        }
    }

    /// After a Read Response: decodes each RDMA_NOMSG call whose
    /// Position-Zero Read chunk has fully arrived.
    pub(crate) fn pulled(&mut self, out: &mut Out<'_>) {
        let mut i = 0;
        while i < self.pulling.len() {
            if !self.chunks.complete(&self.pulling[i].2) {
                i += 1;
                continue;
            }
            let (dir, xid, segs) = self.pulling.swap_remove(i);
            let Some(body) = self.chunks.take(&segs) else {
                continue;
            };
            let mut o = out.with_dir(dir);
            match rpc::decode(&body, &[]) {
                Ok(Message::Call { info, .. }) => {
                    o.count(format!("rpc call {}", short(&info.label)));
                    o.ok(format!(
                        "xid={xid:#010x} | call {} (pulled from the position-zero read chunk)",
                        info.label
                    ));
                    if let Some(p) = self.calls.get_mut(dir, xid) {
                        p.info = info;
                    }
                }
                Ok(Message::Reply { .. }) => {
                    o.malformed(format!("xid={xid:#010x}: a reply in a read chunk"))
                }
                Err(e) => o.malformed(format!("xid={xid:#010x}: position-zero read chunk: {e}")),
            }
        }
    }

    /// Names the RDMA Writes that carried the chunks a reply reports, by
    /// STag, and checks their byte count against the header's lengths.
    fn pair_writes(&mut self, dir: Dir, chunks: &[WriteChunk]) -> String {
        let mut text = String::new();
        for (i, w) in chunks.iter().enumerate() {
            let mut bytes = 0u64;
            let mut writes = 0u64;
            for s in &w.segments {
                if let Some(x) = self.written[dir.index()].remove(&s.handle) {
                    bytes += x.bytes;
                    writes += x.writes;
                }
            }
            let want = w.total_len();
            let verdict = if bytes == want { "" } else { " MISMATCH" };
            text.push_str(&format!(
                "; chunk {i}: {want} bytes, {bytes} carried by {writes} RDMA Writes{verdict}"
            ));
        }
        text
    }
}

fn reply_text(call: Option<&Pending>, status: &ReplyStatus, msg: &[u8]) -> String {
    let Some(call) = call else {
        return " | reply (call not in capture)".into();
    };
    let st = match status {
        ReplyStatus::Success { results } => {
            rpc::result_status(&call.info, msg.get(*results..).unwrap_or(&[]))
                .unwrap_or_else(|| "SUCCESS".into())
        }
        ReplyStatus::Failed(s) => s.clone(),
    };
    format!(
        " | reply {} {st} (call frame {})",
        call.info.label, call.frame
    )
}

/// `(position, length)` of each non-zero-position read chunk.
fn read_items(c: &ChunkLists) -> Vec<(u32, usize)> {
    let mut items: Vec<(u32, usize)> = vec![];
    for r in c.reads.iter().filter(|r| r.position != 0) {
        match items.iter_mut().find(|(p, _)| *p == r.position) {
            Some(it) => it.1 = it.1.saturating_add(r.target.length as usize),
            None => items.push((r.position, r.target.length as usize)),
        }
    }
    items
}

fn lists(h: &AnyHeader) -> Option<&ChunkLists> {
    match h {
        AnyHeader::V1(h) => h.chunks(),
        AnyHeader::V2(v2::Header {
            body: v2::Body::Msg(c) | v2::Body::NoMsg(c),
            ..
        }) => Some(&c.lists),
        AnyHeader::V2(_) => None,
    }
}

/// "rpcrdma1 RDMA_MSG", "rpcrdma2 RDMA2_CONNPROP", ...
fn header_kind(h: &AnyHeader) -> String {
    match h {
        AnyHeader::V1(h) => format!("rpcrdma1 {}", h.proc_()),
        AnyHeader::V2(h) => format!("rpcrdma2 {}", h.htype()),
    }
}

/// The procedure part of a label, without NFSv4 operation lists (counts
/// would otherwise be split by every COMPOUND shape).
pub(crate) fn short(label: &str) -> &str {
    label.split(" [").next().unwrap_or(label)
}
