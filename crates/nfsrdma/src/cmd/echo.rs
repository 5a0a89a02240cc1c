//! `echo-server` and `rpc-ping`: the echo test program over TCP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use oncrpc::client::ClientConfig;
use oncrpc::echo::{EchoClient, EchoService, DEFAULT_MAX_ECHO};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::Server;

/// Arguments of `nfsrdma echo-server`.
#[derive(clap::Args, Debug)]
pub(crate) struct ServerArgs {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:20050")]
    listen: SocketAddr,
    /// Largest ECHO payload accepted, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_ECHO)]
    max_payload: usize,
}

/// Arguments of `nfsrdma rpc-ping`.
#[derive(clap::Args, Debug)]
pub(crate) struct PingArgs {
    /// Server address and port.
    #[arg(default_value = "127.0.0.1:20050")]
    server: SocketAddr,
    /// Number of NULL round trips (one at a time) for the latency figure.
    #[arg(long, default_value_t = 1000)]
    nulls: usize,
    /// ECHO payload size in bytes (0 skips the ECHO phase).
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Number of ECHO calls.
    #[arg(long, default_value_t = 64)]
    count: usize,
    /// ECHO calls kept in flight at once on the one connection.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
}

pub(crate) async fn serve(args: ServerArgs) -> anyhow::Result<()> {
    let mut server = Server::new();
    server.register(EchoService::new(args.max_payload));
    let tcp = TcpConfig {
        max_record: args.max_payload + 64 * 1024,
        ..TcpConfig::default()
    };
    let srv = TcpServer::bind(args.listen, Arc::new(server), tcp)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(addr = %srv.local_addr()?, "echo program 0x20004E52 v1 serving over TCP");
    tokio::select! {
        r = srv.serve() => r.context("accept loop failed"),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted, stopping");
            Ok(())
        }
    }
}

pub(crate) async fn ping(args: PingArgs) -> anyhow::Result<()> {
    let in_flight = args.in_flight.max(1);
    let config = ClientConfig {
        max_in_flight: in_flight,
        ..ClientConfig::default()
    };
    let tcp = TcpConfig {
        max_record: args.size + 64 * 1024,
        ..TcpConfig::default()
    };
    let transport = TcpClient::connect(args.server, rand_xid(), config, tcp)
        .await
        .with_context(|| format!("connecting to {}", args.server))?;
    let client = Arc::new(EchoClient::new(transport));

    if args.nulls > 0 {
        let mut samples = Vec::with_capacity(args.nulls);
        for _ in 0..args.nulls {
            let t = Instant::now();
            client.null().await.context("NULL call")?;
            samples.push(t.elapsed());
        }
        samples.sort();
        let pct = |p: usize| samples[(samples.len() - 1) * p / 100];
        println!(
            "NULL x{}: median {} us, p99 {} us",
            args.nulls,
            pct(50).as_micros(),
            pct(99).as_micros()
        );
    }

    if args.size > 0 && args.count > 0 {
        let payload = Bytes::from(
            (0..args.size)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
                .collect::<Vec<u8>>(),
        );
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(in_flight);
        for w in 0..in_flight {
            let n = args.count / in_flight + usize::from(w < args.count % in_flight);
            let (client, payload) = (Arc::clone(&client), payload.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..n {
                    let back = client.echo(payload.clone()).await?;
                    if back != payload {
                        bail!("ECHO reply differs from the payload sent");
                    }
                }
                Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let secs = start.elapsed().as_secs_f64().max(f64::EPSILON);
        let moved = 2.0 * (args.size * args.count) as f64;
        println!(
            "ECHO {} B x{} ({} in flight): {:.0} calls/s, {:.1} MiB/s both ways, all byte-exact",
            args.size,
            args.count,
            in_flight,
            args.count as f64 / secs,
            moved / secs / (1024.0 * 1024.0)
        );
    }
    Ok(())
}

/// An XID seed that differs between runs (RFC 5531 §9: XIDs only need to
/// be unique per client over time).
fn rand_xid() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    (nanos.as_nanos() as u32) ^ std::process::id().rotate_left(16)
}
