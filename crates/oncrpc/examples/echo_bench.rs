//! Loopback throughput of the TCP shells with the echo program: both sides
//! in one process. Usage: `echo_bench [payload_bytes] [calls] [concurrency]`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use oncrpc::client::ClientConfig;
use oncrpc::echo::{EchoClient, EchoService};
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::Server;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let size = args.next().flatten().unwrap_or(1 << 20);
    let calls = args.next().flatten().unwrap_or(512);
    let conc = args.next().flatten().unwrap_or(8).max(1);

    let mut server = Server::new();
    server.register(EchoService::default());
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default()).await?;
    let addr = srv.local_addr()?;
    srv.spawn();
    let client = TcpClient::connect(addr, 1, ClientConfig::default(), TcpConfig::default()).await?;
    let client = Arc::new(EchoClient::new(client));

    let start = Instant::now();
    for _ in 0..2000 {
        client.null().await.map_err(std::io::Error::other)?;
    }
    let null_rate = 2000.0 / start.elapsed().as_secs_f64();

    let payload = Bytes::from(vec![0x5au8; size]);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..conc {
        let (client, payload) = (Arc::clone(&client), payload.clone());
        let n = calls / conc + usize::from(w < calls % conc);
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                let back = client
                    .echo(payload.clone())
                    .await
                    .map_err(std::io::Error::other)?;
                if back.len() != payload.len() {
                    return Err(std::io::Error::other("short echo"));
                }
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(std::io::Error::other)??;
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = 2.0 * (size * calls) as f64;
    println!(
        "null: {null_rate:.0} calls/s serial; echo {size} B x {calls} (concurrency {conc}): \
         {:.0} calls/s, {:.1} MiB/s both directions",
        calls as f64 / secs,
        bytes / secs / (1024.0 * 1024.0)
    );
    Ok(())
}
