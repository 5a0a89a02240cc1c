//! One iWARP connection: the MPA Request and Reply (RFC 5044 §7.1,
//! RFC 6581 §2), then FPDUs (RFC 5044 §4) in each direction, their DDP
//! segments (RFC 5041 §4) and RDMAP messages (RFC 5040 §4): Sends are
//! reassembled from their segments by MSN and offset, tagged messages are
//! summed per STag, Read Requests and Terminates are decoded.

use std::collections::BTreeMap;

use iwarp::wire::{
    DdpBuffer, DdpRepr, FpduError, FpduPacket, FpduRepr, FrameKind, MpaError, MpaRepr, Opcode,
    ReadRequest, TerminateRepr,
};
use rpcrdma::wire::cm::CmPrivateData;

use crate::rdma::Rdma;
use crate::report::{Dir, DirStats};
use crate::sink::Out;

/// Largest Send message reassembled (RFC 8797 caps inline at 256 KiB).
const MAX_SEND: usize = 1 << 20;
/// Most Send messages in reassembly at once per direction.
const MAX_OPEN_SENDS: usize = 16;
/// Largest MPA frame: 20-byte header plus 512 bytes of private data
/// (RFC 5044 §7.1).
const MAX_MPA_FRAME: usize = 20 + 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for this direction's MPA frame.
    Mpa,
    /// FPDUs; `None` until both MPA frames settled CRC use.
    Fpdu,
    /// Nothing more can be decoded (rejected, markers, framing lost).
    Dead,
}

#[derive(Debug, Default)]
struct DirState {
    /// Send messages being reassembled: MSN to bytes so far.
    sends: BTreeMap<u32, Vec<u8>>,
    /// The tagged message in progress: STag and bytes so far.
    tagged: Option<(Opcode, u32, u64, u64)>,
}

#[derive(Debug)]
pub(crate) struct Iwarp {
    phase: [Phase; 2],
    request_crc: bool,
    request_markers: bool,
    crc: Option<bool>,
    dirs: [DirState; 2],
    pub(crate) rdma: Rdma,
    /// "iWARP, MPA rev 1, CRC off" once the Reply is seen.
    pub(crate) describe: String,
}

impl Iwarp {
    pub(crate) fn new() -> Self {
        Self {
            phase: [Phase::Mpa, Phase::Mpa],
            request_crc: false,
            request_markers: false,
            crc: None,
            dirs: Default::default(),
            rdma: Rdma::default(),
            describe: "iWARP (no MPA Reply)".into(),
        }
    }

    /// Decodes what it can from the front of `bufs[dir]`, draining it, and
    /// then the other direction if the MPA exchange just settled.
    pub(crate) fn process(
        &mut self,
        out: &mut Out<'_>,
        bufs: &mut [Vec<u8>; 2],
        stats: &mut [DirStats; 2],
    ) {
        let dir = out.dir;
        let settled = self.crc.is_some();
        self.process_dir(out, &mut bufs[dir.index()], &mut stats[dir.index()]);
        if !settled && self.crc.is_some() {
            let other = dir.rev();
            let mut o = out.with_dir(other);
            self.process_dir(&mut o, &mut bufs[other.index()], &mut stats[other.index()]);
        }
    }

    fn process_dir(&mut self, out: &mut Out<'_>, buf: &mut Vec<u8>, stats: &mut DirStats) {
        let i = out.dir.index();
        loop {
            let used = match self.phase[i] {
                Phase::Dead => buf.len(),
                Phase::Mpa => self.mpa(out, buf, stats),
                Phase::Fpdu => match self.crc {
                    None => 0,
                    Some(crc) => self.fpdu(out, buf, crc, stats),
                },
            };
            if used == 0 {
                return;
            }
            buf.drain(..used);
        }
    }

    /// Returns the bytes consumed (0: need more).
    fn mpa(&mut self, out: &mut Out<'_>, buf: &[u8], stats: &mut DirStats) -> usize {
        let i = out.dir.index();
        let (f, len) = match MpaRepr::parse_bytes(buf) {
            Ok(v) => v,
            Err(MpaError::Truncated { .. }) if buf.len() < MAX_MPA_FRAME => return 0,
            Err(e) => {
                out.malformed(format!("MPA frame: {e}"));
                self.phase[i] = Phase::Dead;
                return buf.len();
            }
        };
        let expected = if out.dir == Dir::ToServer {
            FrameKind::Request
        } else {
            FrameKind::Reply
        };
        if f.kind != expected {
            out.malformed(format!("MPA {:?} where a {expected:?} belongs", f.kind));
            self.phase[i] = Phase::Dead;
            return buf.len();
        }
        let cm = CmPrivateData::parse(f.private_data).ok();
        if let Some(cm) = cm {
            stats.inline = Some(format!(
                "send {} / receive {}{}",
                cm.max_send_size,
                cm.max_recv_size,
                if cm.flags.0 & 1 != 0 {
                    " (remote invalidation)"
                } else {
                    ""
                }
            ));
        }
        let pd = match cm {
            Some(cm) => format!(" RPC-over-RDMA private data: {cm}"),
            None => String::new(),
        };
        out.count(format!("mpa {:?}", f.kind));
        out.ok(format!("{f}{pd}"));
        self.phase[i] = Phase::Fpdu;
        match f.kind {
            FrameKind::Request => {
                self.request_crc = f.crc;
                self.request_markers = f.markers;
            }
            FrameKind::Reply => self.settle(out, &f),
        }
        len
    }

    fn settle(&mut self, out: &mut Out<'_>, reply: &MpaRepr<'_>) {
        let crc = self.request_crc || reply.crc;
        self.describe = format!(
            "iWARP, MPA rev {}, CRC {}",
            reply.revision,
            if crc { "on" } else { "off" }
        );
        if reply.reject {
            self.describe.push_str(", rejected");
            self.phase = [Phase::Dead; 2];
        } else if self.request_markers && reply.markers {
            out.unknown("MPA markers negotiated: FPDUs not decoded".into());
            self.describe.push_str(", markers (not decoded)");
            self.phase = [Phase::Dead; 2];
        }
        self.crc = Some(crc);
    }

    fn fpdu(&mut self, out: &mut Out<'_>, buf: &[u8], crc: bool, stats: &mut DirStats) -> usize {
        let p = match FpduPacket::new_checked(buf) {
            Ok(p) => p,
            Err(_) => return 0,
        };
        let len = p.fpdu_len();
        let f = match FpduRepr::parse(&p, crc) {
            Ok(f) => f,
            Err(e @ FpduError::BadCrc { .. }) => {
                out.malformed(format!("FPDU of {len} bytes: {e}"));
                return len;
            }
            Err(e) => {
                out.malformed(format!("FPDU: {e}"));
                self.phase[out.dir.index()] = Phase::Dead;
                return buf.len();
            }
        };
        out.count("mpa FPDU");
        match DdpRepr::parse_bytes(f.ulpdu) {
            Ok((h, hlen)) => self.segment(out, h, &f.ulpdu[hlen..], stats),
            Err(e) => out.malformed(format!("DDP segment: {e}")),
        }
        len
    }

    fn segment(&mut self, out: &mut Out<'_>, h: DdpRepr, payload: &[u8], stats: &mut DirStats) {
        let i = out.dir.index();
        match h.buffer {
            DdpBuffer::Tagged { stag, to } => self.tagged(out, h, stag, to, payload, stats),
            DdpBuffer::Untagged {
                inv_stag,
                qn,
                msn,
                mo,
            } => match h.opcode {
                Opcode::ReadRequest => {
                    out.count("rdmap RDMA Read Request");
                    stats.count("RDMA Read Request");
                    match ReadRequest::parse_bytes(payload) {
                        Ok(r) => {
                            self.rdma.chunks.read_request(r.sink_stag, r.source_stag);
                            out.ok(r.to_string())
                        }
                        Err(e) => out.malformed(format!("RDMA Read Request: {e}")),
                    }
                }
                Opcode::Terminate => {
                    out.count("rdmap Terminate");
                    stats.count("Terminate");
                    match TerminateRepr::parse(payload) {
                        Ok(t) => out.ok(format!("Terminate {t}")),
                        Err(e) => out.malformed(format!("Terminate: {e}")),
                    }
                }
                _ => {
                    let d = &mut self.dirs[i];
                    if let Some(msg) = reassemble(out, d, qn, msn, mo, h.last, payload) {
                        out.count(format!("rdmap {}", h.opcode));
                        stats.count(h.opcode.to_string());
                        stats.largest_send = stats.largest_send.max(msg.len());
                        self.rdma.on_send(out, stats, h.opcode, inv_stag, &msg);
                    }
                }
            },
        }
    }

    fn tagged(
        &mut self,
        out: &mut Out<'_>,
        h: DdpRepr,
        stag: u32,
        to: u64,
        payload: &[u8],
        stats: &mut DirStats,
    ) {
        let i = out.dir.index();
        let len = payload.len() as u64;
        self.rdma.chunks.data(stag, payload);
        match h.opcode {
            Opcode::ReadResponse => stats.read_response_bytes += len,
            _ => stats.write_bytes += len,
        }
        let d = &mut self.dirs[i];
        let cur = match d.tagged.take() {
            Some((op, s, first, n))
                if op == h.opcode && s == stag && first.checked_add(n) == Some(to) =>
            {
                (op, s, first, n + len)
            }
            Some((op, s, first, n)) => {
                out.ok(format!(
                    "{op} stag={s:#x} to={first:#x} len={n} (no last segment)"
                ));
                (h.opcode, stag, to, len)
            }
            None => (h.opcode, stag, to, len),
        };
        if !h.last {
            d.tagged = Some(cur);
            return;
        }
        let (op, s, first, n) = cur;
        out.count(format!("rdmap {op}"));
        stats.count(op.to_string());
        self.rdma.on_write(out.dir, s, n);
        out.ok(format!("{op} stag={s:#x} to={first:#x} len={n}"));
        if op == Opcode::ReadResponse {
            self.rdma.pulled(out);
        }
    }
}

/// Adds one untagged segment to its message (RFC 5041 §5.3: MSN names the
/// message, MO the offset); returns the whole message at its last segment.
fn reassemble(
    out: &mut Out<'_>,
    d: &mut DirState,
    qn: u32,
    msn: u32,
    mo: u32,
    last: bool,
    payload: &[u8],
) -> Option<Vec<u8>> {
    if qn != 0 {
        out.malformed(format!("Send on queue {qn}"));
        return None;
    }
    if !d.sends.contains_key(&msn) && d.sends.len() >= MAX_OPEN_SENDS {
        out.malformed(format!(
            "more than {MAX_OPEN_SENDS} Send messages open at once"
        ));
        return None;
    }
    let buf = d.sends.entry(msn).or_default();
    if mo as usize != buf.len() || buf.len() + payload.len() > MAX_SEND {
        out.malformed(format!(
            "Send MSN {msn}: segment at offset {mo} after {} bytes (largest {MAX_SEND})",
            buf.len()
        ));
        d.sends.remove(&msn);
        return None;
    }
    buf.extend_from_slice(payload);
    if last {
        d.sends.remove(&msn)
    } else {
        None
    }
}
