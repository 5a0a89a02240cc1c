//! `serve --data-server URL`: the NFSv3 data servers of a pNFS
//! flexible-files metadata server (docs/pnfs.md).
//!
//! A data server is named `nfs://HOST[:PORT]/EXPORT` with optional query
//! options `mountport=N` (its MOUNT port, when not PORT or the port
//! mapper's answer) and `rdmaport=N` (it also serves RPC-over-RDMA there,
//! advertised to clients with the `rdma` netid) and `advertise=IP` (clients
//! reach it at IP, same ports, while the metadata server's control path
//! uses HOST: a data server behind a port forward). HOST is resolved once,
//! at start; without `advertise` clients reach the data server at that
//! address, so it must be one they can route to.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use anyhow::{anyhow, bail, Context};
use nfs_server::v4::pnfs::DataServer;

/// Parses one `--data-server` URL.
pub(crate) fn parse(s: &str) -> anyhow::Result<DataServer> {
    let rest = s
        .strip_prefix("nfs://")
        .ok_or_else(|| anyhow!("{s:?}: expected nfs://host[:port]/export"))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, export) = rest
        .find('/')
        .map(|i| rest.split_at(i))
        .ok_or_else(|| anyhow!("{s:?}: no export path"))?;
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:{}", nfs_server::NFS_PORT)
    } else {
        authority.to_owned()
    };
    let host = with_port.trim_start_matches('[').replace("]:", ":");
    let tcp = resolve(&with_port).with_context(|| format!("{s:?}: host {host}"))?;
    let mut ds = DataServer {
        tcp,
        rdma: None,
        mount_port: None,
        export: export.to_owned(),
        advertise: None,
    };
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("{s:?}: query option {kv:?} has no value"))?;
        if k == "advertise" {
            let ip: IpAddr = v
                .parse()
                .map_err(|_| anyhow!("{s:?}: advertise={v:?}: expected an IP address"))?;
            ds.advertise = Some(ip);
            continue;
        }
        let port: u16 = match v.parse() {
            Ok(p) if p != 0 => p,
            _ => bail!("{s:?}: {k}={v:?}: expected a port 1-65535"),
        };
        match k {
            "mountport" => ds.mount_port = Some(port),
            "rdmaport" => ds.rdma = Some(SocketAddr::new(tcp.ip(), port)),
            _ => bail!("{s:?}: unknown option {k:?} (known: mountport, rdmaport, advertise)"),
        }
    }
    Ok(ds)
}

fn resolve(hostport: &str) -> anyhow::Result<SocketAddr> {
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow!("does not resolve"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_ports_and_options() {
        let d = parse("nfs://127.0.0.1:3049/srv/ds1?rdmaport=30049&mountport=3048").unwrap();
        assert_eq!(d.tcp, "127.0.0.1:3049".parse().unwrap());
        assert_eq!(d.rdma, Some("127.0.0.1:30049".parse().unwrap()));
        assert_eq!(d.mount_port, Some(3048));
        assert_eq!(d.export, "/srv/ds1");
        let d = parse("nfs://[::1]/x").unwrap();
        assert_eq!(d.tcp, "[::1]:2049".parse().unwrap());
        assert_eq!(d.rdma, None);
        let d = parse("nfs://localhost:5000/y").unwrap();
        assert_eq!(d.tcp.port(), 5000);
        let d = parse("nfs://127.0.0.1:5000/y?advertise=10.0.2.100").unwrap();
        assert_eq!(d.advertise, Some("10.0.2.100".parse().unwrap()));
        assert_eq!(d.tcp, "127.0.0.1:5000".parse().unwrap());
    }

    #[test]
    fn refuses_malformed_urls() {
        for bad in [
            "nfs+rdma://h/x",
            "nfs://127.0.0.1",
            "nfs://127.0.0.1/x?rdmaport=0",
            "nfs://127.0.0.1/x?crc=1",
            "nfs://127.0.0.1/x?rdmaport",
            "nfs://127.0.0.1:99999/x",
            "nfs://127.0.0.1/x?advertise=host",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
