//! Test support: a classic-pcap reader (Ethernet/IPv4/TCP) with per-direction
//! TCP reassembly by sequence number. The kpeer captures are clean, so
//! retransmitted bytes are dropped by offset and a gap is an error.

use std::collections::BTreeMap;

/// One TCP connection's two byte streams.
#[derive(Debug, Default)]
pub(crate) struct Conn {
    /// (address, port) of the side that sent the SYN (or the non-server side).
    pub(crate) client: ([u8; 4], u16),
    /// (address, port) of the server side.
    pub(crate) server: ([u8; 4], u16),
    /// Bytes client to server.
    pub(crate) c2s: Vec<u8>,
    /// Bytes server to client.
    pub(crate) s2c: Vec<u8>,
}

type Flow = ([u8; 4], u16, [u8; 4], u16);

#[derive(Default)]
struct Dir {
    isn: Option<u32>,
    segs: Vec<(u32, Vec<u8>)>,
}

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn rd32be(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn rd32le(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Reads the TCP connections touching `port` from a classic pcap file.
pub(crate) fn tcp_conns(pcap: &[u8], port: u16) -> Vec<Conn> {
    assert_eq!(
        rd32le(pcap, 0),
        0xa1b2_c3d4,
        "little-endian microsecond pcap"
    );
    assert_eq!(rd32le(pcap, 20), 1, "Ethernet link type");
    let mut dirs: BTreeMap<Flow, Dir> = BTreeMap::new();
    let mut order: Vec<Flow> = vec![];
    let mut off = 24;
    while off + 16 <= pcap.len() {
        let incl = rd32le(pcap, off + 8) as usize;
        let frame = &pcap[off + 16..off + 16 + incl];
        off += 16 + incl;
        if frame.len() < 14 || rd16(frame, 12) != 0x0800 {
            continue;
        }
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(rd16(ip, 2));
        if ip[9] != 6 {
            continue;
        }
        let ip = &ip[..total];
        let src: [u8; 4] = ip[12..16].try_into().unwrap();
        let dst: [u8; 4] = ip[16..20].try_into().unwrap();
        let tcp = &ip[ihl..];
        let (sp, dp) = (rd16(tcp, 0), rd16(tcp, 2));
        if sp != port && dp != port {
            continue;
        }
        let seq = rd32be(tcp, 4);
        let doff = usize::from(tcp[12] >> 4) * 4;
        let flags = tcp[13];
        let flow = (src, sp, dst, dp);
        if !dirs.contains_key(&flow) {
            order.push(flow);
        }
        let d = dirs.entry(flow).or_default();
        if flags & 0x02 != 0 {
            d.isn = Some(seq.wrapping_add(1));
        }
        let payload = &tcp[doff..];
        if !payload.is_empty() {
            d.segs.push((seq, payload.to_vec()));
        }
    }
    let mut conns = vec![];
    let mut seen: Vec<Flow> = vec![];
    for flow in order {
        let rev = (flow.2, flow.3, flow.0, flow.1);
        if seen.contains(&flow) || seen.contains(&rev) {
            continue;
        }
        seen.push(flow);
        let (client, server) = if flow.3 == port {
            ((flow.0, flow.1), (flow.2, flow.3))
        } else {
            ((flow.2, flow.3), (flow.0, flow.1))
        };
        let c2s_flow = (client.0, client.1, server.0, server.1);
        let s2c_flow = (server.0, server.1, client.0, client.1);
        conns.push(Conn {
            client,
            server,
            c2s: dirs.remove(&c2s_flow).map(reassemble).unwrap_or_default(),
            s2c: dirs.remove(&s2c_flow).map(reassemble).unwrap_or_default(),
        });
    }
    conns
}

fn reassemble(mut d: Dir) -> Vec<u8> {
    let base = d
        .isn
        .unwrap_or_else(|| d.segs.first().map(|s| s.0).unwrap_or(0));
    d.segs.sort_by_key(|(s, _)| s.wrapping_sub(base));
    let mut out: Vec<u8> = vec![];
    for (seq, data) in d.segs {
        let start = seq.wrapping_sub(base) as usize;
        let end = start + data.len();
        assert!(
            start <= out.len(),
            "gap in TCP stream at offset {}",
            out.len()
        );
        if end > out.len() {
            out.extend_from_slice(&data[out.len() - start..]);
        }
    }
    out
}
