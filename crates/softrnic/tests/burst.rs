//! Posts made one after another after the receive task delivered several
//! messages at once (a client's callers answering a batch of replies) go
//! out together: the post that answers the last message of the delivery
//! writes them all itself, so the batch never waits for the transmit task,
//! whose thread may get no CPU for milliseconds on a loaded machine (issue
//! 15: a rule that left every such post to it stalled at 16k IOPS, p99
//! 17 ms, at load 10).

use std::time::Duration;

use bytes::Bytes;
use rnic::{ChainWr, QueuePair, SendWr, WcOpcode, WcStatus};
use testkit::conformance::connect_pair;

mod common;
use common::{next, Tcp};

fn send(n: u64) -> SendWr {
    SendWr {
        wr_id: n,
        data: vec![Bytes::from(format!("message {n}"))],
        ..Default::default()
    }
}

/// Lets the client's receive task, which just delivered, get back to
/// reading its socket: while it lets the consumers it woke run, posts
/// leave their FPDUs for it to write (`Locked::hold_tx`).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The test body runs on the main thread (`block_on`), the queue pairs'
/// IO tasks on the runtime's one worker thread, which a task then holds:
/// neither transmit task can run. After a delivery of two messages, the
/// first post is left for the transmit task and the second writes both
/// from the posting thread (one socket write for the two answers); the
/// third starts the next pair and is left to the transmit task, which
/// writes it once the worker is free. The peer gets all three in posting
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_last_answer_to_a_delivery_writes_the_batch_while_the_transmit_task_cannot_run() {
    let p = connect_pair(&Tcp::quick(), 4, 8).await;
    // Two Sends in one socket write: the client's receive task reads them
    // in one go and delivers both at once, which starts a burst.
    p.sqp
        .post_chain(vec![ChainWr::Send(send(100)), ChainWr::Send(send(101))])
        .unwrap();
    for _ in 0..2 {
        let got = next(p.cqp.recv_cq()).await;
        assert_eq!(
            (got.opcode, got.status),
            (WcOpcode::Recv, WcStatus::Success)
        );
    }
    for _ in 0..2 {
        assert_eq!(next(p.sqp.send_cq()).await.status, WcStatus::Success);
    }
    settle().await;

    let (free, held) = std::sync::mpsc::channel::<()>();
    let (running, started) = std::sync::mpsc::channel::<()>();
    let blocker = tokio::spawn(async move {
        running.send(()).unwrap();
        // Holds the only worker thread (a thread without CPU).
        let _ = held.recv_timeout(Duration::from_secs(20));
    });
    started.recv_timeout(Duration::from_secs(10)).unwrap();

    let before = p.client.socket_writes();
    let mut writes = Vec::new();
    for n in 0..3 {
        p.cqp.post_send(send(n)).unwrap();
        writes.push(p.client.socket_writes() - before);
    }
    free.send(()).unwrap();
    blocker.await.unwrap();

    assert_eq!(
        writes,
        vec![0, 1, 1],
        "socket writes after each post: the second wrote both, the third waits"
    );
    for n in 0..3u64 {
        let got = next(p.sqp.recv_cq()).await;
        assert_eq!(got.status, WcStatus::Success);
        let buf = got.buf.expect("a received message");
        assert_eq!(&buf[..], format!("message {n}").as_bytes(), "in order");
    }
    for n in 0..3u64 {
        let done = next(p.cqp.send_cq()).await;
        assert_eq!((done.wr_id, done.status), (n, WcStatus::Success));
    }
}

/// The burst lasts until a delivery of a single message, not only until
/// the transmit task has written what was queued: after a delivery of one
/// message every post on a quiet queue pair writes itself again.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_single_message_delivery_ends_the_burst() {
    let p = connect_pair(&Tcp::quick(), 4, 8).await;
    p.sqp
        .post_chain(vec![ChainWr::Send(send(100)), ChainWr::Send(send(101))])
        .unwrap();
    for _ in 0..2 {
        next(p.cqp.recv_cq()).await;
        next(p.sqp.send_cq()).await;
    }
    p.sqp.post_send(send(102)).unwrap();
    next(p.cqp.recv_cq()).await;
    next(p.sqp.send_cq()).await;
    settle().await;
    for n in 0..3u64 {
        let before = p.client.socket_writes();
        p.cqp.post_send(send(n)).unwrap();
        assert_eq!(
            p.client.socket_writes() - before,
            1,
            "post {n} wrote itself"
        );
        next(p.cqp.send_cq()).await;
        let got = next(p.sqp.recv_cq()).await;
        assert_eq!(
            &got.buf.expect("message")[..],
            format!("message {n}").as_bytes()
        );
    }
}
