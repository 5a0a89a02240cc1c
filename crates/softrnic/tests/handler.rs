//! A consumer's completion handler runs where softrnic produces the
//! completion (its receive task for a received message, the posting call or
//! the transmit task for a Send), may post to the queue pair from there,
//! and gives back what it does not handle to the poll interface, which sees
//! the close as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rnic::{QueuePair, RecvWr, SendWr, WcOpcode, WcStatus};
use softrnic::SoftQp;
use testkit::conformance::connect_pair;

mod common;
use common::{next, Tcp};

#[derive(Default)]
struct Seen {
    recvs: AtomicU64,
    sends: AtomicU64,
    given_back: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_answers_each_message_from_the_receive_task_and_gives_back_the_close() {
    const N: u64 = 200;
    let p = connect_pair(&Tcp::quick(), 4, 4).await;
    let sqp: Arc<SoftQp> = Arc::new(p.sqp);
    let seen = Arc::new(Seen::default());
    // The handler holds the queue pair through this slot, emptied at the
    // end (the queue pair owns the completion queue that owns the handler).
    let slot: Arc<Mutex<Option<Arc<SoftQp>>>> = Arc::new(Mutex::new(Some(Arc::clone(&sqp))));
    let (h_seen, h_slot) = (Arc::clone(&seen), Arc::clone(&slot));
    let next_id = AtomicU64::new(10_000);
    sqp.recv_cq().set_handler(move |wc| {
        match (wc.opcode, wc.status) {
            (WcOpcode::Recv, WcStatus::Success) => {
                let qp = h_slot.lock().unwrap().clone()?;
                let msg = wc.buf.clone().unwrap_or_default().freeze();
                // Re-entering the device from the handler: a receive for
                // the next message and the echo.
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                qp.post_recv(RecvWr {
                    wr_id: id,
                    buf: BytesMut::with_capacity(256),
                })
                .expect("repost");
                qp.post_send(SendWr {
                    wr_id: id,
                    data: vec![Bytes::from_static(b"echo:"), msg],
                    ..Default::default()
                })
                .expect("echo");
                h_seen.recvs.fetch_add(1, Ordering::SeqCst);
                None
            }
            (WcOpcode::Send, WcStatus::Success) => {
                h_seen.sends.fetch_add(1, Ordering::SeqCst);
                None
            }
            _ => {
                h_seen.given_back.fetch_add(1, Ordering::SeqCst);
                Some(wc)
            }
        }
    });
    assert!(sqp.send_cq().has_handler());
    for i in 0..N {
        p.cqp
            .post_send(SendWr {
                wr_id: i,
                data: vec![Bytes::from(format!("m{i}"))],
                ..Default::default()
            })
            .unwrap();
        // One message in flight at a time: the server's four receives
        // are reposted by the handler.
        loop {
            let wc = next(p.cqp.recv_cq()).await;
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.status, WcStatus::Success);
                assert_eq!(&wc.buf.unwrap()[..], format!("echo:m{i}").as_bytes());
                p.cqp
                    .post_recv(RecvWr {
                        wr_id: i,
                        buf: BytesMut::with_capacity(256),
                    })
                    .unwrap();
                break;
            }
        }
    }
    // Every message and every echo's completion went to the handler; the
    // queue was never used (nor its poller woken).
    assert_eq!(seen.recvs.load(Ordering::SeqCst), N);
    tokio::time::timeout(Duration::from_secs(10), async {
        while seen.sends.load(Ordering::SeqCst) < N {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every echo's completion handled");
    assert!(sqp.recv_cq().is_empty());
    // The close: the flushed receives are given back and polled.
    p.cqp.disconnect();
    let wc = next(sqp.recv_cq()).await;
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::Recv, WcStatus::FlushError)
    );
    assert!(seen.given_back.load(Ordering::SeqCst) >= 1);
    sqp.recv_cq().clear_handler();
    slot.lock().unwrap().take();
}
