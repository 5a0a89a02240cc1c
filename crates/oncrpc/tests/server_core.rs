//! The sans-IO server core driven directly, without a transport.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::drc::DrcConfig;
use oncrpc::echo::{EchoService, ECHO_PROGRAM, PROC_ECHO};
use oncrpc::msg::{
    AcceptStat, Accepted, AuthStat, AuthSys, Credential, OpaqueAuth, Rejected, ReplyHeader,
};
use oncrpc::{CallContext, PeerInfo, RpcService, Server, ServiceError, TransportKind};
use tokio::sync::Notify;
use xdr::{Decoder, Encoder, XdrBuf};

fn peer(port: u16) -> PeerInfo {
    PeerInfo {
        conn_id: u64::from(port),
        addr: Some(([192, 0, 2, 1], port).into()),
        transport: TransportKind::Rdma,
        security: oncrpc::TransportSecurity::None,
    }
}

fn call(xid: u32, prog: u32, vers: u32, proc_: u32, cred: OpaqueAuth, args: &[u8]) -> Bytes {
    testkit::rpc::call_message(xid, (prog, vers, proc_), cred, args).into()
}

fn header(reply: &XdrBuf) -> ReplyHeader {
    ReplyHeader::decode(&mut Decoder::new(&reply.to_bytes())).unwrap()
}

/// Version-split program: v2..=3 here, v5 in [`Other`]; procedure 1
/// waits for a notification and is cached; the others report errors.
struct Slow {
    gate: Arc<Notify>,
    runs: Arc<AtomicU32>,
}

const PROG: u32 = 0x2000_0100;

impl RpcService for Slow {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        2..=3
    }
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            1 => {
                self.runs.fetch_add(1, Ordering::SeqCst);
                self.gate.notified().await;
                let mut out = XdrBuf::new();
                out.put_opaque(&args);
                Ok(out)
            }
            2 => match ctx.credential {
                Credential::Sys(s) => {
                    let mut out = XdrBuf::new();
                    out.put_u32(s.uid);
                    Ok(out)
                }
                _ => Err(ServiceError::Auth(AuthStat::AUTH_TOOWEAK)),
            },
            3 => Err(ServiceError::SystemErr("disk on fire")),
            4 => Err(ServiceError::Drop),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        proc_ == 1
    }
}

struct Other;

impl RpcService for Other {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        5..=5
    }
    async fn call(&self, _ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        Ok(XdrBuf::new())
    }
}

fn server() -> (Arc<Server>, Arc<Notify>, Arc<AtomicU32>) {
    let gate = Arc::new(Notify::new());
    let runs = Arc::new(AtomicU32::new(0));
    let mut s = Server::new().with_drc(DrcConfig::default());
    s.register(Slow {
        gate: Arc::clone(&gate),
        runs: Arc::clone(&runs),
    });
    s.register(Other);
    s.register(EchoService::default());
    (Arc::new(s), gate, runs)
}

#[tokio::test]
async fn drops_retransmission_while_original_runs_then_replays() {
    let (s, gate, runs) = server();
    let rec = call(1, PROG, 2, 1, OpaqueAuth::NONE, &[0, 0, 0, 0]);
    let first = tokio::spawn({
        let (s, rec) = (Arc::clone(&s), rec.clone());
        async move { s.handle_call(rec, &peer(700)).await }
    });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Retransmission from another port while in progress: no reply.
    assert!(s.handle_call(rec.clone(), &peer(701)).await.is_none());
    gate.notify_one();
    let original = first.await.unwrap().unwrap();
    let replay = s.handle_call(rec, &peer(702)).await.unwrap();
    assert_eq!(replay.to_bytes(), original.to_bytes());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(s.drc().unwrap().hits(), 2);
}

#[tokio::test]
async fn cancelled_call_leaves_no_in_progress_entry() {
    let (s, gate, runs) = server();
    let rec = call(2, PROG, 2, 1, OpaqueAuth::NONE, &[]);
    let first = tokio::spawn({
        let (s, rec) = (Arc::clone(&s), rec.clone());
        async move { s.handle_call(rec, &peer(700)).await }
    });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    first.abort();
    let _ = first.await;
    // The retransmission executes instead of being dropped.
    let again = tokio::spawn({
        let (s, rec) = (Arc::clone(&s), rec.clone());
        async move { s.handle_call(rec, &peer(700)).await }
    });
    while runs.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    assert!(again.await.unwrap().is_some());
}

#[tokio::test]
async fn reports_mismatch_range_across_services_of_one_program() {
    let (s, _, _) = server();
    let r = s
        .handle_call(call(3, PROG, 4, 0, OpaqueAuth::NONE, &[]), &peer(1))
        .await
        .unwrap();
    assert_eq!(
        header(&r),
        ReplyHeader::accepted(3, Accepted::ProgMismatch { low: 2, high: 5 })
    );
    let r = s
        .handle_call(call(4, PROG, 5, 0, OpaqueAuth::NONE, &[]), &peer(1))
        .await
        .unwrap();
    assert_eq!(header(&r), ReplyHeader::accepted(4, Accepted::Success));
}

#[tokio::test]
async fn maps_service_errors_to_replies() {
    let (s, _, _) = server();
    let sys = AuthSys {
        uid: 4242,
        machinename: Bytes::from_static(b"c"),
        ..AuthSys::default()
    }
    .to_opaque_auth();
    let r = s
        .handle_call(call(5, PROG, 2, 2, sys, &[]), &peer(1))
        .await
        .unwrap();
    let flat = r.to_bytes();
    assert_eq!(&flat[flat.len() - 4..], &4242u32.to_be_bytes());
    let r = s
        .handle_call(call(6, PROG, 2, 2, OpaqueAuth::NONE, &[]), &peer(1))
        .await
        .unwrap();
    assert_eq!(
        header(&r),
        ReplyHeader::denied(6, Rejected::AuthError(AuthStat::AUTH_TOOWEAK))
    );
    let r = s
        .handle_call(call(7, PROG, 2, 3, OpaqueAuth::NONE, &[]), &peer(1))
        .await
        .unwrap();
    assert_eq!(
        header(&r),
        ReplyHeader::accepted(7, Accepted::Other(AcceptStat::SYSTEM_ERR))
    );
    assert!(s
        .handle_call(call(8, PROG, 2, 4, OpaqueAuth::NONE, &[]), &peer(1))
        .await
        .is_none());
}

#[tokio::test]
async fn echo_reply_marks_data_ddp_eligible_at_its_xdr_position() {
    let (s, _, _) = server();
    let data = Bytes::from(vec![0x5a; 9000]);
    let mut args = Vec::new();
    args.put_opaque(&data);
    let rec = call(9, ECHO_PROGRAM, 1, PROC_ECHO, OpaqueAuth::NONE, &args);
    let reply = s.handle_call(rec.clone(), &peer(1)).await.unwrap();
    // 24-byte accepted reply header, then the length word.
    let items: Vec<_> = reply.ddp_items().collect();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].0, 28);
    assert_eq!(items[0].1, &data);
    // The echoed data is a slice of the received record, not a copy.
    let rec_data = &rec[rec.len() - data.len()..];
    assert_eq!(items[0].1.as_ptr(), rec_data.as_ptr());
    assert_eq!(reply.reduced_bytes().len(), 28);
}
