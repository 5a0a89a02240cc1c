//! Loopback-specific behaviour: fault injection, queue limits and connection
//! management edge cases.

use bytes::{Bytes, BytesMut};
use rnic::loopback::{FaultConfig, LoopbackConfig, LoopbackDevice, LoopbackNetwork};
use rnic::{
    Access, AccessError, CloseReason, CmError, CompletionQueue, ConnectRequest, CqOverflow, Device,
    Listener, PostError, QpConfig, QpState, QueuePair, ReadWr, RecvWr, SendWr, WcStatus, WriteWr,
};
use testkit::conformance::{connect_pair, join, Harness};

struct Net(LoopbackNetwork);

impl Harness for Net {
    type Dev = LoopbackDevice;
    fn pair(&self) -> (LoopbackDevice, LoopbackDevice) {
        (self.0.device(), self.0.device())
    }
    fn listen_addr(&self) -> String {
        String::new()
    }
}

fn send(id: u64) -> SendWr {
    SendWr {
        wr_id: id,
        data: vec![Bytes::from_static(b"ping")],
        ..Default::default()
    }
}

#[tokio::test]
async fn drop_after_n_ops_loses_connection_and_flushes() {
    let faults = FaultConfig {
        drop_after_ops: Some(2),
        drop_one_in: None,
    };
    let h = Net(LoopbackNetwork::with_faults(
        1,
        faults,
        LoopbackConfig::default(),
    ));
    let p = connect_pair(&h, 1, 4).await;
    p.cqp.post_send(send(1)).unwrap();
    p.cqp.post_send(send(2)).unwrap();
    p.cqp.post_send(send(3)).unwrap();
    let ids: Vec<_> = (0..3)
        .map(|_| p.cqp.send_cq().poll().unwrap().unwrap())
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::FlushError)
        ]
    );
    assert_eq!(p.cqp.close_reason(), Some(CloseReason::ConnectionLost));
    assert_eq!(p.sqp.close_reason(), Some(CloseReason::ConnectionLost));
    // Two receives consumed, two flushed on the server; one flushed on the client.
    let statuses: Vec<_> = std::iter::from_fn(|| p.sqp.recv_cq().poll().unwrap())
        .map(|w| w.status)
        .collect();
    assert_eq!(
        statuses,
        vec![
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::FlushError,
            WcStatus::FlushError
        ]
    );
    assert_eq!(
        p.cqp.recv_cq().poll().unwrap().map(|w| w.status),
        Some(WcStatus::FlushError)
    );
}

/// The same seed gives the same fault schedule; another seed gives another.
#[test]
fn random_faults_replay_from_the_seed() {
    async fn ops_until_drop(seed: u64) -> u64 {
        let faults = FaultConfig {
            drop_after_ops: None,
            drop_one_in: Some(8),
        };
        let h = Net(LoopbackNetwork::with_faults(
            seed,
            faults,
            LoopbackConfig::default(),
        ));
        let p = connect_pair(&h, 0, 0).await;
        let mr = p
            .server_pd
            .register(BytesMut::zeroed(8), Access::REMOTE_WRITE)
            .unwrap();
        let mut n = 0;
        while p.cqp.state() == QpState::Rts && n < 10_000 {
            n += 1;
            let wr = WriteWr {
                wr_id: n,
                data: vec![Bytes::from_static(b"ab")],
                remote_stag: mr.stag(),
                remote_to: 0,
            };
            p.cqp.post_write(wr).unwrap();
            let _ = p.cqp.send_cq().poll();
        }
        n
    }
    let a = futures_block(ops_until_drop(5));
    assert_eq!(a, futures_block(ops_until_drop(5)));
    let others: Vec<u64> = [6, 7, 8, 9]
        .iter()
        .map(|s| futures_block(ops_until_drop(*s)))
        .collect();
    assert!(
        others.iter().any(|o| *o != a),
        "schedules {a} vs {others:?}"
    );
    assert!(a < 10_000);
}

/// Loopback futures make progress on every poll once both sides have run, so
/// polling with a no-op waker drives them to completion.
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[tokio::test]
async fn receive_queue_depth_is_enforced() {
    let h = Net(LoopbackNetwork::new(1));
    let p = connect_pair(&h, 0, 0).await;
    let depth = p.cqp.attrs().max_recv_wr;
    for i in 0..depth {
        p.cqp
            .post_recv(RecvWr {
                wr_id: u64::from(i),
                buf: BytesMut::with_capacity(8),
            })
            .unwrap();
    }
    assert_eq!(
        p.cqp.post_recv(RecvWr {
            wr_id: 99,
            buf: BytesMut::new()
        }),
        Err(PostError::QueueFull)
    );
}

#[tokio::test]
async fn message_longer_than_maximum_is_refused_at_post() {
    let cfg = LoopbackConfig {
        max_message_size: 16,
        max_rd_atomic: 4,
    };
    let h = Net(LoopbackNetwork::with_faults(1, FaultConfig::default(), cfg));
    let p = connect_pair(&h, 0, 1).await;
    let wr = SendWr {
        wr_id: 1,
        data: vec![Bytes::from(vec![0u8; 17])],
        ..Default::default()
    };
    assert_eq!(
        p.cqp.post_send(wr),
        Err(PostError::TooLong { len: 17, max: 16 })
    );
    assert_eq!(p.cqp.state(), QpState::Rts);
}

#[tokio::test]
async fn read_into_sink_without_local_write_is_a_local_protection_error() {
    let h = Net(LoopbackNetwork::new(1));
    let p = connect_pair(&h, 0, 1).await;
    let src = p
        .server_pd
        .register(BytesMut::zeroed(8), Access::REMOTE_READ)
        .unwrap();
    let sink = p
        .client_pd
        .register(BytesMut::zeroed(8), Access::REMOTE_READ)
        .unwrap();
    let wr = ReadWr {
        wr_id: 1,
        local_stag: sink.stag(),
        local_to: 0,
        len: 8,
        remote_stag: src.stag(),
        remote_to: 0,
    };
    p.cqp.post_read(wr).unwrap();
    assert_eq!(
        p.cqp.send_cq().poll().unwrap().map(|w| w.status),
        Some(WcStatus::LocalProtectionError)
    );
    assert_eq!(
        p.cqp.close_reason(),
        Some(CloseReason::LocalAccessError(AccessError::AccessRights(
            sink.stag()
        )))
    );
    assert_eq!(p.sqp.close_reason(), Some(CloseReason::PeerDisconnect));
    assert_eq!(
        p.sqp.recv_cq().poll().unwrap().map(|w| w.status),
        Some(WcStatus::FlushError)
    );
}

#[tokio::test]
async fn completion_queue_overflow_is_reported() {
    let net = LoopbackNetwork::new(3);
    let (client, server) = (net.device(), net.device());
    let (cpd, spd) = (client.alloc_pd(), server.alloc_pd());
    let mut l = server.listen(&String::new()).await.unwrap();
    let addr = l.local_addr();
    let small = CompletionQueue::new(1);
    let mut scfg = QpConfig::new(CompletionQueue::new(8));
    scfg.initial_recvs = (0..4)
        .map(|i| RecvWr {
            wr_id: i,
            buf: BytesMut::with_capacity(8),
        })
        .collect();
    let (c, s) = join(
        client.connect(&cpd, &addr, QpConfig::new(small.clone())),
        async { l.accept_request().await.unwrap().accept(&spd, scfg).await },
    )
    .await;
    let (cqp, _sqp) = (c.unwrap().qp, s.unwrap());
    cqp.post_send(send(1)).unwrap();
    cqp.post_send(send(2)).unwrap();
    assert_eq!(small.poll().err(), Some(CqOverflow));
}

#[tokio::test]
async fn dropped_request_rejects_and_dropped_listener_refuses() {
    let net = LoopbackNetwork::new(1);
    let (client, server) = (net.device(), net.device());
    let pd = client.alloc_pd();
    let mut l = server.listen(&"svc".to_string()).await.unwrap();
    assert_eq!(
        server.listen(&"svc".to_string()).await.err(),
        Some(CmError::AddrInUse)
    );
    let (c, ()) = join(
        client.connect(
            &pd,
            &"svc".to_string(),
            QpConfig::new(CompletionQueue::new(4)),
        ),
        async {
            drop(l.accept_request().await.unwrap());
        },
    )
    .await;
    assert_eq!(
        c.err(),
        Some(CmError::Rejected {
            private_data: vec![]
        })
    );
    drop(l);
    let c = client
        .connect(
            &pd,
            &"svc".to_string(),
            QpConfig::new(CompletionQueue::new(4)),
        )
        .await;
    assert_eq!(c.err(), Some(CmError::Refused));
}

#[tokio::test]
async fn protection_domain_of_another_device_is_refused() {
    let net = LoopbackNetwork::new(1);
    let (client, server) = (net.device(), net.device());
    let foreign = server.alloc_pd();
    let _l = server.listen(&"x".to_string()).await.unwrap();
    let r = client
        .connect(
            &foreign,
            &"x".to_string(),
            QpConfig::new(CompletionQueue::new(4)),
        )
        .await;
    assert!(matches!(r, Err(CmError::Setup(_))));
}

#[tokio::test]
async fn dropping_a_queue_pair_disconnects_its_peer() {
    let h = Net(LoopbackNetwork::new(1));
    let p = connect_pair(&h, 0, 1).await;
    drop(p.cqp);
    assert_eq!(
        p.sqp.recv_cq().poll().unwrap().map(|w| w.status),
        Some(WcStatus::FlushError)
    );
    assert_eq!(p.sqp.close_reason(), Some(CloseReason::PeerDisconnect));
}
