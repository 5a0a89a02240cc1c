//! Hostile NFSv4.1 clients against `nfsrdma serve` in a child process:
//! many clients each asking for sessions with 64 slots caching 64 KiB
//! replies and filling every slot with a cached 60 KiB READ reply (issue
//! 12: 16 such clients took the server from 250 MB to 1.22 GB in 6 s). The
//! reply cache budget (64 MiB by default, RFC 8881 §18.36.3) must keep
//! the server's resident memory bounded, and a new client must still get
//! a session once one hostile client has gone.

use std::net::SocketAddr;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::*;
use oncrpc::client::{ClientConfig, ClientTransport, ReplyHint, RpcCall};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};
use xdr::{Bounded, FixedOpaque};

mod support;

use support::serve::ServeChild as Serve;

/// The server under test, exporting a 60 KiB file `big`.
fn serve(tag: &str) -> Serve {
    Serve::start(tag, &[], |dir| {
        std::fs::write(dir.join("big"), vec![7u8; 60 << 10]).unwrap()
    })
}

struct V4 {
    rpc: TcpClient,
    cred: OpaqueAuth,
    /// The export's path: NFSv4 reaches it from PUTROOTFH a LOOKUP per
    /// component (the pseudo file system).
    export: Vec<Component4>,
}

impl V4 {
    async fn connect(port: u16, uid: u32, export: &std::path::Path) -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let rpc = TcpClient::connect(addr, 7, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let cred = AuthSys {
            stamp: 1,
            machinename: Bytes::from_static(b"hostile"),
            uid,
            gid: uid,
            gids: vec![],
        }
        .to_opaque_auth();
        let export = std::fs::canonicalize(export)
            .unwrap()
            .iter()
            .skip(1)
            .map(|c| Component4(Bytes::from(c.to_str().unwrap().to_owned())))
            .collect();
        Self { rpc, cred, export }
    }

    async fn ops(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let args = Compound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        };
        let r = self
            .rpc
            .call(RpcCall {
                prog: NFS4_PROGRAM,
                vers: NFS_V4,
                proc_: NFSPROC4_COMPOUND,
                cred: self.cred.clone(),
                args: xdr::to_xdr_buf(&args),
                reply_hint: ReplyHint::default(),
            })
            .await
            .unwrap();
        xdr::from_slice(&r).unwrap()
    }

    /// EXCHANGE_ID for `owner`: (client id, CREATE_SESSION sequence).
    async fn exchange_id(&self, owner: &str) -> (u64, u32) {
        let r = self
            .ops(vec![NfsArgop4::ExchangeId(ExchangeId4Args {
                clientowner: ClientOwner4 {
                    verifier: FixedOpaque([1; 8]),
                    ownerid: Bounded(Bytes::from(owner.to_string())),
                },
                flags: 0,
                state_protect: StateProtect4A::None,
                client_impl_id: Bounded(vec![]),
            })])
            .await;
        match r.resarray.first() {
            Some(NfsResop4::ExchangeId(Res4::Ok(x))) => (x.clientid, x.sequenceid),
            other => panic!("EXCHANGE_ID: {other:?}"),
        }
    }

    /// CREATE_SESSION asking for 64 slots caching 64 KiB each.
    async fn create_session(&self, clientid: u64, sequence: u32) -> Res4<CreateSession4ResOk> {
        let ch = |cached| ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: 1 << 20,
            maxresponsesize: 1 << 20,
            maxresponsesize_cached: cached,
            maxoperations: 16,
            maxrequests: 64,
            rdma_ird: Bounded(vec![]),
        };
        let r = self
            .ops(vec![NfsArgop4::CreateSession(CreateSession4Args {
                clientid,
                sequence,
                flags: 0,
                fore_chan_attrs: ch(64 << 10),
                back_chan_attrs: ch(4096),
                cb_program: 0x4000_0000,
                sec_parms: Bounded(vec![CallbackSecParms4::None]),
            })])
            .await;
        match r.resarray.into_iter().next() {
            Some(NfsResop4::CreateSession(res)) => res,
            other => panic!("CREATE_SESSION: {other:?}"),
        }
    }

    /// A 60 KiB READ on `slot`, asking the server to cache the reply.
    async fn cached_read(&self, session: [u8; 16], slot: u32) -> Nfsstat4 {
        let mut ops = vec![
            NfsArgop4::Sequence(Sequence4Args {
                sessionid: FixedOpaque(session),
                sequenceid: 1,
                slotid: slot,
                highest_slotid: 0,
                cachethis: true,
            }),
            NfsArgop4::Putrootfh(()),
        ];
        ops.extend(
            self.export
                .iter()
                .map(|c| NfsArgop4::Lookup(Lookup4Args { objname: c.clone() })),
        );
        ops.extend([
            NfsArgop4::Lookup(Lookup4Args {
                objname: Component4::from_static("big"),
            }),
            NfsArgop4::Read(Read4Args {
                stateid: Stateid4::ANONYMOUS,
                offset: 0,
                count: 60 << 10,
            }),
        ]);
        self.ops(ops).await.status
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_caching_big_replies_keep_the_server_rss_bounded() {
    let s = serve("v4cache");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&s.export.0).unwrap());
    let before = s.rss_kib();
    let mut granted_slots = 0u64;
    let mut delayed = 0;
    let mut first = None;
    // 8 clients × 16 sessions × 64 slots × 64 KiB would be 512 MiB.
    for c in 0..8 {
        let v4 = V4::connect(s.nfs, uid, &s.export.0).await;
        let (id, mut seq) = v4.exchange_id(&format!("hostile-{c}")).await;
        for _ in 0..16 {
            match v4.create_session(id, seq).await {
                Res4::Ok(ok) => {
                    seq = seq.wrapping_add(1);
                    let slots = ok.fore_chan_attrs.maxrequests;
                    for slot in 0..slots {
                        assert_eq!(
                            v4.cached_read(ok.sessionid.0, slot).await,
                            Nfsstat4::NFS4_OK
                        );
                    }
                    granted_slots += u64::from(slots);
                    first.get_or_insert(ok.sessionid.0);
                }
                Res4::Err(e) => {
                    assert!(
                        e == Nfsstat4::NFS4ERR_DELAY || e == Nfsstat4::NFS4ERR_NOSPC,
                        "{e:?}"
                    );
                    delayed += 1;
                }
            }
        }
    }
    let grown = s.rss_kib().saturating_sub(before);
    eprintln!(
        "reply cache flood: {granted_slots} slots granted, {delayed} sessions refused, RSS +{} MiB",
        grown >> 10
    );
    assert!(
        granted_slots * 64 <= 64 << 10,
        "at most the 64 MiB budget reserved"
    );
    assert!(delayed > 0, "the budget ran out");
    assert!(grown < 110 << 10, "RSS grew {grown} KiB");
    // One hostile session gone, a newcomer gets a session and reads.
    // DESTROY_SESSION needs a connection bound to the session (RFC 8881
    // §18.37.3): this one binds first.
    let v4 = V4::connect(s.nfs, uid, &s.export.0).await;
    let first = FixedOpaque(first.expect("a session was granted"));
    let r = v4
        .ops(vec![NfsArgop4::BindConnToSession(BindConnToSession4Args {
            sessid: first,
            dir: ChannelDir4::CDFC4_FORE,
            use_conn_in_rdma_mode: false,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let r = v4
        .ops(vec![NfsArgop4::DestroySession(DestroySession4Args {
            sessionid: first,
        })])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let (id, seq) = v4.exchange_id("newcomer").await;
    let Res4::Ok(ok) = v4.create_session(id, seq).await else {
        panic!("no session for a newcomer")
    };
    assert_eq!(v4.cached_read(ok.sessionid.0, 0).await, Nfsstat4::NFS4_OK);
}
