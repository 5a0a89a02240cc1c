//! The pNFS flexible-files metadata server (RFC 8881 §12, RFC 8435) with
//! two nfsrdma NFSv3 data servers, all in-process over TCP, driven by a
//! scripted NFSv4.1 client: LAYOUTGET → GETDEVICEINFO → NFSv3 WRITE to
//! the data server as the synthetic uid → LAYOUTCOMMIT → GETATTR size at
//! the metadata server; LAYOUTRETURN; REMOVE removing the data file; and
//! the bounds and refusals a hostile client meets.

mod v4_common;

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{NfsFh3, Nfsstat3, StableHow};
use nfs::v4::attr::{
    Bitmap4, FileAttrs, FATTR4_FS_LAYOUT_TYPES, FATTR4_SIZE, FATTR4_SUPPORTED_ATTRS,
};
use nfs::v4::flexfiles::*;
use nfs::v4::session::EXCHGID4_FLAG_USE_PNFS_MDS;
use nfs::v4::*;
use nfs_client::Nfs3Client;
use nfs_server::access::ExportTable;
use nfs_server::exports::Squash;
use nfs_server::nfs3::Nfs3Service;
use nfs_server::v4::pnfs::{DataServer, Mds, MdsConfig, DEFAULT_SYNTHETIC_ID};
use nfs_server::v4::{ManualClock, Nfs4Config, Nfs4Service};
use nfs_server::{LocalFs, RunningServer, ServerConfig, Storage};
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{TcpClient, TcpConfig};
use v4_common::*;
use xdr::{Bounded, FixedOpaque};

struct Cluster {
    mds: Arc<Mds>,
    /// The metadata server's export root over NFSv3.
    root3: NfsFh3,
    srv: Srv,
    ds: Vec<(RunningServer, TempDir)>,
    /// Per data server, the relay the metadata server and clients reach
    /// it through, if it has one.
    relays: Vec<Option<Relay>>,
}

/// The data server `ds` exporting `dir`, reached over TCP only.
fn tcp_only(ds: &RunningServer, dir: &TempDir) -> DataServer {
    DataServer {
        tcp: ds.nfs_addr(),
        rdma: None,
        mount_port: None,
        export: dir.path().to_str().unwrap().to_owned(),
        advertise: None,
    }
}

async fn data_server(tag: &str) -> (RunningServer, TempDir) {
    let dir = TempDir::new(tag);
    let mut cfg = ServerConfig::new(dir.path());
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    // The control path sets the data file's owner: it needs root.
    cfg.set_squash(Squash::None);
    (nfs_server::start(cfg).await.unwrap(), dir)
}

async fn cluster(tag: &str, n: usize, max_layouts: usize) -> Cluster {
    cluster_with(tag, n, |c| c.max_layouts = max_layouts, &[]).await
}

/// A metadata server over `n` data servers, its settings changed by
/// `tweak`; the data servers in `relayed` are reached through a
/// [`Relay`] (to be cut and restored).
async fn cluster_with(
    tag: &str,
    n: usize,
    tweak: impl FnOnce(&mut MdsConfig),
    relayed: &[usize],
) -> Cluster {
    let mut ds = Vec::new();
    let mut relays = Vec::new();
    for i in 0..n {
        let d = data_server(&format!("{tag}-ds{i}")).await;
        relays.push(if relayed.contains(&i) {
            Some(Relay::start(d.0.nfs_addr()).await)
        } else {
            None
        });
        ds.push(d);
    }
    let specs = ds
        .iter()
        .zip(&relays)
        .map(|((s, d), r)| DataServer {
            tcp: r.as_ref().map_or(s.nfs_addr(), |r| r.addr),
            rdma: Some(SocketAddr::from(([127, 0, 0, 1], 20049))),
            mount_port: None,
            export: d.path().to_str().unwrap().to_owned(),
            advertise: None,
        })
        .collect();
    let mut cfg = MdsConfig::new(specs);
    tweak(&mut cfg);
    let mds = Arc::new(Mds::new(cfg));
    let dir = TempDir::new(&format!("{tag}-mds"));
    let clock = Arc::new(ManualClock::new());
    let fs = Arc::new(LocalFs::new(dir.path(), false).unwrap());
    let root3 = fs.root();
    let table = Arc::new(ExportTable::open_to_all(Arc::clone(&fs), vec![]));
    let nfs3 = Nfs3Service::new(table).with_mds(Arc::clone(&mds));
    let svc = Nfs4Service::with_config(
        fs,
        Nfs4Config {
            clock: clock.clone(),
            ..Nfs4Config::default()
        },
    )
    .with_mds(Arc::clone(&mds));
    let mut server = oncrpc::Server::new();
    server.register(svc);
    server.register(nfs3);
    let (addr, _) = listen(server).await;
    let uid = std::fs::metadata(dir.path()).unwrap().uid();
    Cluster {
        mds,
        root3,
        srv: Srv {
            addr,
            uid,
            clock,
            dir,
        },
        ds,
        relays,
    }
}

fn fh_of(r: &[NfsResop4]) -> NfsFh4 {
    r.iter()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(g)) => Some(g.object.clone()),
            _ => None,
        })
        .expect("a GETFH result")
}

fn layoutget(sid: Stateid4, iomode: Layoutiomode4, maxcount: u32) -> NfsArgop4 {
    NfsArgop4::Layoutget(Layoutget4Args {
        signal_layout_avail: false,
        layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
        iomode,
        offset: 0,
        length: u64::MAX,
        minlength: 0,
        stateid: sid,
        maxcount,
    })
}

const RW: Layoutiomode4 = Layoutiomode4::LAYOUTIOMODE4_RW;

/// Creates `file` at the root, opened read-write; its handle and open
/// stateid.
async fn create(c: &C4, file: &'static str) -> (NfsFh4, Stateid4) {
    let r = c
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(c.clientid, file, OPEN4_SHARE_ACCESS_BOTH, 0),
            NfsArgop4::Getfh(()),
        ])
        .await;
    (fh_of(&r), open_stateid(&r))
}

fn getattr(fh: &NfsFh4, bits: &[u32]) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Getattr(Getattr4Args {
            attr_request: Bitmap4::from_bits(bits),
        }),
    ]
}

fn attrs_of(r: &[NfsResop4]) -> FileAttrs {
    let Some(NfsResop4::Getattr(Res4::Ok(g))) = r.last() else {
        panic!("GETATTR: {r:?}")
    };
    FileAttrs::from_fattr4(&g.obj_attributes).unwrap()
}

async fn nfs3(addr: SocketAddr, uid: u32) -> Nfs3Client<TcpClient> {
    let rpc = TcpClient::connect(addr, 9, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    Nfs3Client::new(rpc, sys_cred(uid))
}

#[tokio::test]
async fn layout_write_to_the_data_server_commit_and_size_at_the_mds() {
    let cl = cluster("flow", 2, 64).await;
    let mut c = C4::connect(&cl.srv).await;
    // RFC 8881 §13.1: the server says it is a metadata server.
    let r = c
        .ops(vec![NfsArgop4::ExchangeId(C4::exchange_id_args("pnfs", 1))])
        .await;
    let Some(NfsResop4::ExchangeId(Res4::Ok(x))) = r.resarray.first() else {
        panic!("{r:?}")
    };
    assert_ne!(x.flags & EXCHGID4_FLAG_USE_PNFS_MDS, 0, "{:#x}", x.flags);
    c.establish("pnfs").await;

    let (fh, open) = create(&c, "f").await;
    let a = attrs_of(
        &c.ok(getattr(
            &fh,
            &[FATTR4_SUPPORTED_ATTRS, FATTR4_FS_LAYOUT_TYPES],
        ))
        .await,
    );
    assert!(a.supported_attrs.unwrap().contains(FATTR4_FS_LAYOUT_TYPES));
    assert_eq!(
        a.fs_layout_types.unwrap().0,
        vec![Layouttype4::LAYOUT4_FLEX_FILES]
    );

    // LAYOUTGET: one mirror, one data server, the synthetic owner, the
    // anonymous stateid.
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutget(open, RW, 4096),
        ])
        .await;
    let Some(NfsResop4::Layoutget(Layoutget4Res::Ok(lg))) = r.last() else {
        panic!("{r:?}")
    };
    assert_eq!(lg.stateid.seqid, 1);
    let [l] = &lg.layout.0[..] else {
        panic!("{lg:?}")
    };
    assert_eq!((l.offset, l.length, l.iomode), (0, u64::MAX, RW));
    let ff: FfLayout4 = decode_body(&l.content.body.0).unwrap();
    // I/O through the metadata server works: the flag is not set.
    assert_eq!(ff.flags & FF_FLAGS_NO_IO_THRU_MDS, 0);
    let [m] = &ff.mirrors.0[..] else {
        panic!("{ff:?}")
    };
    let [ds] = &m.data_servers.0[..] else {
        panic!("{m:?}")
    };
    assert_eq!(ds.stateid, Stateid4::ANONYMOUS);
    let synthetic = DEFAULT_SYNTHETIC_ID.to_string();
    assert_eq!(&ds.user.0[..], synthetic.as_bytes());
    assert_eq!(&ds.group.0[..], synthetic.as_bytes());
    let ds_fh = NfsFh3::new(ds.fh_vers.0[0].as_bytes()).unwrap();

    // GETDEVICEINFO: the data server's tcp and rdma addresses, NFSv3.
    let r = c
        .ok(vec![NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
            device_id: ds.deviceid,
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount: 4096,
            notify_types: Bitmap4::new(),
        })])
        .await;
    let Some(NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::Ok(gd))) = r.last() else {
        panic!("{r:?}")
    };
    let addr: FfDeviceAddr4 = decode_body(&gd.device_addr.addr_body.0).unwrap();
    assert_eq!(&addr.netaddrs.0[0].netid.0, "tcp");
    assert_eq!(&addr.netaddrs.0[1].netid.0, "rdma");
    let ds_addr = addr.netaddrs.0[0].to_socket().unwrap();
    let which = cl
        .ds
        .iter()
        .position(|(s, _)| s.nfs_addr() == ds_addr)
        .expect("a configured data server");
    assert_eq!(addr.versions.0[0].version, 3);
    assert!(!addr.versions.0[0].tightly_coupled);

    // The data file belongs to the synthetic owner, mode 0660: another
    // uid is refused, the synthetic one writes.
    let other = nfs3(ds_addr, 1234).await;
    let e = other
        .write(&ds_fh, 0, Bytes::from_static(b"x"), StableHow::FILE_SYNC)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_ACCES,
                ..
            }
        ),
        "{e}"
    );
    let v3 = nfs3(ds_addr, DEFAULT_SYNTHETIC_ID).await;
    let data = Bytes::from_static(b"hello over pNFS");
    v3.write(&ds_fh, 100, data.clone(), StableHow::FILE_SYNC)
        .await
        .unwrap();
    let end = 100 + data.len() as u64;
    let files: Vec<_> = std::fs::read_dir(cl.ds[which].1.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let [file] = &files[..] else {
        panic!("{files:?}")
    };
    let meta = std::fs::metadata(file).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (DEFAULT_SYNTHETIC_ID, DEFAULT_SYNTHETIC_ID)
    );
    assert_eq!(std::fs::read(file).unwrap()[100..], data[..]);
    // The other data server holds nothing.
    assert_eq!(
        std::fs::read_dir(cl.ds[1 - which].1.path())
            .unwrap()
            .count(),
        0
    );

    // While the write layout is out, GETATTR reports the data file's size.
    let a = attrs_of(&c.ok(getattr(&fh, &[FATTR4_SIZE])).await);
    assert_eq!(a.size, Some(end));

    // LAYOUTCOMMIT: the metadata server's file takes the size.
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutcommit_file(lg.stateid, false, end - 1),
        ])
        .await;
    let Some(NfsResop4::Layoutcommit(Res4::Ok(lc))) = r.last() else {
        panic!("{r:?}")
    };
    assert_eq!(lc.newsize, Some(end));
    assert_eq!(
        std::fs::metadata(cl.srv.dir.path().join("f"))
            .unwrap()
            .len(),
        end
    );

    // LAYOUTRETURN with the flex-files body frees the layout; GETATTR
    // then reads the metadata server's size.
    let body = FfLayoutreturn4 {
        ioerr_report: Bounded(vec![]),
        iostats_report: Bounded(vec![]),
    };
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutreturn_file(lg.stateid, encode_body(&body)),
        ])
        .await;
    assert!(
        matches!(r.last(), Some(NfsResop4::Layoutreturn(Res4::Ok(None)))),
        "{r:?}"
    );
    assert_eq!(cl.mds.layouts_held(), 0);
    let a = attrs_of(&c.ok(getattr(&fh, &[FATTR4_SIZE])).await);
    assert_eq!(a.size, Some(end));

    // Truncation at the metadata server reaches the data file.
    c.ok(vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Setattr(Setattr4Args {
            stateid: open,
            obj_attributes: FileAttrs {
                size: Some(10),
                ..Default::default()
            }
            .to_fattr4(&Bitmap4::from_bits(&[FATTR4_SIZE])),
        }),
    ])
    .await;
    assert_eq!(std::fs::metadata(file).unwrap().len(), 10);

    // REMOVE removes the data file too.
    c.ok(vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Remove(Remove4Args { target: name("f") }),
    ])
    .await;
    assert!(!file.exists());
}

#[tokio::test]
async fn hostile_layout_requests_are_refused_and_layouts_are_bounded() {
    let cl = cluster("bounds", 1, 2).await;
    let mut c = C4::connect(&cl.srv).await;
    c.establish("hostile").await;
    let (fh, open) = create(&c, "a").await;
    let put = || NfsArgop4::Putfh(Putfh4Args { object: fh.clone() });
    let status = |r: &Compound4Res| r.resarray.last().unwrap().status();

    // A layout type other than flex files, a bad iomode, a special or
    // foreign stateid, a reply above maxcount.
    let mut bad = layoutget(open, RW, 4096);
    if let NfsArgop4::Layoutget(a) = &mut bad {
        a.layout_type = Layouttype4::LAYOUT4_BLOCK_VOLUME;
    }
    let r = c.seq(vec![put(), bad]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_UNKNOWN_LAYOUTTYPE);
    let r = c
        .seq(vec![
            put(),
            layoutget(open, Layoutiomode4::LAYOUTIOMODE4_ANY, 4096),
        ])
        .await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_BADIOMODE);
    let r = c
        .seq(vec![put(), layoutget(Stateid4::ANONYMOUS, RW, 4096)])
        .await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_BAD_STATEID);
    let forged = Stateid4 {
        seqid: 1,
        other: FixedOpaque(*b"LYT1\0\0\0\0\0\0\0\x63"),
    };
    let r = c.seq(vec![put(), layoutget(forged, RW, 4096)]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_BAD_STATEID);
    let r = c.seq(vec![put(), layoutget(open, RW, 64)]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_TOOSMALL);

    // GETDEVICEINFO of a device that is not ours, and with a maxcount
    // below the body: TOOSMALL names the size needed.
    let gdi = |device_id, maxcount| {
        NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
            device_id,
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount,
            notify_types: Bitmap4::new(),
        })
    };
    let r = c.seq(vec![gdi(FixedOpaque([9; 16]), 4096)]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_NOENT);
    let mut dev = [0u8; 16];
    dev[..2].copy_from_slice(b"DS");
    let r = c.seq(vec![gdi(FixedOpaque(dev), 8)]).await;
    let Some(NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::TooSmall(need))) = r.resarray.last()
    else {
        panic!("{r:?}")
    };
    let r = c.seq(vec![gdi(FixedOpaque(dev), *need)]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4_OK);

    // LAYOUTCOMMIT and LAYOUTERROR without a layout: BAD_STATEID.
    let commit = NfsArgop4::Layoutcommit(Layoutcommit4Args {
        offset: 0,
        length: 1,
        reclaim: false,
        stateid: open,
        last_write_offset: Some(1 << 40),
        time_modify: None,
        layoutupdate: Layoutupdate4 {
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            body: Bounded(Bytes::new()),
        },
    });
    let r = c.seq(vec![put(), commit]).await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_BAD_STATEID);
    // LAYOUTERROR is NFSv4.2 (RFC 7862 §15.6).
    let id = c.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let r = c
        .compound(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 2,
            argarray: vec![
                c.sequence(0, id, false),
                put(),
                NfsArgop4::Layouterror(Layouterror4Args {
                    offset: 0,
                    length: 1,
                    stateid: open,
                    errors: Bounded(vec![]),
                }),
            ],
        })
        .await;
    assert_eq!(status(&r), Nfsstat4::NFS4ERR_BAD_STATEID);

    // At most two layout stateids: the third file's LAYOUTGET is
    // LAYOUTTRYLATER until one is returned.
    c.ok(vec![put(), layoutget(open, RW, 4096)]).await;
    let (b, sb) = create(&c, "b").await;
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: b }),
            layoutget(sb, RW, 4096),
        ])
        .await;
    assert!(matches!(
        r.last(),
        Some(NfsResop4::Layoutget(Layoutget4Res::Ok(_)))
    ));
    let (x, sx) = create(&c, "c").await;
    let r = c
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: x.clone() }),
            layoutget(sx, RW, 4096),
        ])
        .await;
    assert!(
        matches!(
            r.resarray.last(),
            Some(NfsResop4::Layoutget(Layoutget4Res::TryLater(false)))
        ),
        "{r:?}"
    );
    assert_eq!(cl.mds.layouts_held(), 2);
    c.ok(vec![NfsArgop4::Layoutreturn(Layoutreturn4Args {
        reclaim: false,
        layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
        iomode: Layoutiomode4::LAYOUTIOMODE4_ANY,
        layoutreturn: Layoutreturn4::All,
    })])
    .await;
    assert_eq!(cl.mds.layouts_held(), 0);
    c.ok(vec![
        NfsArgop4::Putfh(Putfh4Args { object: x }),
        layoutget(sx, RW, 4096),
    ])
    .await;
}

#[tokio::test]
async fn without_the_mds_role_layout_operations_are_notsupp() {
    let srv = serve("nomds", Default::default()).await;
    let mut c = C4::connect(&srv).await;
    c.establish("plain").await;
    let (fh, open) = create(&c, "f").await;
    let r = c
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutget(open, RW, 4096),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NOTSUPP);
    let a = attrs_of(
        &c.ok(getattr(
            &fh,
            &[FATTR4_SUPPORTED_ATTRS, FATTR4_FS_LAYOUT_TYPES],
        ))
        .await,
    );
    assert!(!a.supported_attrs.unwrap().contains(FATTR4_FS_LAYOUT_TYPES));
    assert_eq!(a.fs_layout_types, None);
}

/// LAYOUTGET (RW) and GETDEVICEINFO for `fh`: the data file's handle,
/// its data server's address and the layout stateid.
async fn layout_ds(c: &C4, fh: &NfsFh4, open: Stateid4) -> (NfsFh3, SocketAddr, Stateid4) {
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutget(open, RW, 4096),
        ])
        .await;
    let Some(NfsResop4::Layoutget(Layoutget4Res::Ok(lg))) = r.last() else {
        panic!("{r:?}")
    };
    let ff: FfLayout4 = decode_body(&lg.layout.0[0].content.body.0).unwrap();
    let ds = &ff.mirrors.0[0].data_servers.0[0];
    let r = c
        .ok(vec![NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
            device_id: ds.deviceid,
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount: 4096,
            notify_types: Bitmap4::new(),
        })])
        .await;
    let Some(NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::Ok(gd))) = r.last() else {
        panic!("{r:?}")
    };
    let addr: FfDeviceAddr4 = decode_body(&gd.device_addr.addr_body.0).unwrap();
    (
        NfsFh3::new(ds.fh_vers.0[0].as_bytes()).unwrap(),
        addr.netaddrs.0[0].to_socket().unwrap(),
        lg.stateid,
    )
}

/// The root of the metadata server's export over NFSv3, and `name` in it.
async fn v3_lookup(v3: &Nfs3Client<TcpClient>, cl: &Cluster, name: &str) -> NfsFh3 {
    v3.lookup(&cl.root3, name).await.unwrap().object
}

#[tokio::test]
async fn clients_without_layouts_read_and_write_the_data_files_through_the_mds() {
    let cl = cluster("thru", 2, 64).await;
    let mut c = C4::connect(&cl.srv).await;
    c.establish("thru").await;
    let (fh, open) = create(&c, "f").await;
    let (ds_fh, ds_addr, _) = layout_ds(&c, &fh, open).await;
    let ds = nfs3(ds_addr, DEFAULT_SYNTHETIC_ID).await;
    let mds3 = nfs3(cl.srv.addr, cl.srv.uid).await;
    let f3 = v3_lookup(&mds3, &cl, "f").await;

    // A pNFS client writes to the data server (no LAYOUTCOMMIT yet): an
    // NFSv3 client reads the same bytes through the metadata server.
    let by_layout = Bytes::from_static(b"written through the layout");
    ds.write(&ds_fh, 0, by_layout.clone(), StableHow::FILE_SYNC)
        .await
        .unwrap();
    let r = mds3.read(&f3, 0, 4096).await.unwrap();
    assert_eq!(r.data.0, by_layout);
    assert!(r.eof);

    // The reverse: an NFSv3 WRITE through the metadata server, UNSTABLE
    // then COMMIT, lands in the data file, which the pNFS client reads
    // from the data server; the metadata server's file takes the size
    // but holds none of the bytes.
    let by_v3 = Bytes::from_static(b"written through the MDS over NFSv3");
    let w = mds3
        .write(&f3, 8192, by_v3.clone(), StableHow::UNSTABLE)
        .await
        .unwrap();
    let cm = mds3.commit(&f3, 0, 0).await.unwrap();
    assert_eq!(w.verf, cm.verf, "one verifier for WRITE and COMMIT");
    let r = ds.read(&ds_fh, 8192, 4096).await.unwrap();
    assert_eq!(r.data.0, by_v3);
    let end = 8192 + by_v3.len() as u64;
    assert_eq!(mds3.getattr(&f3).await.unwrap().size, end);
    let local = std::fs::read(cl.srv.dir.path().join("f")).unwrap();
    assert_eq!(local.len() as u64, end);
    assert!(local.iter().all(|&b| b == 0), "no data at the MDS");

    // NFSv4.1 READ and WRITE without a layout go the same way.
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Read(Read4Args {
                stateid: open,
                offset: 8192,
                count: 4096,
            }),
        ])
        .await;
    let Some(NfsResop4::Read(Res4::Ok(rd))) = r.last() else {
        panic!("{r:?}")
    };
    assert_eq!(rd.data.0, by_v3);
    c.ok(vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        NfsArgop4::Write(Write4Args {
            stateid: open,
            offset: 0,
            stable: StableHow4(2),
            data: xdr::DdpOpaque(Bytes::from_static(b"WRITTEN")),
        }),
    ])
    .await;
    let r = ds.read(&ds_fh, 0, 7).await.unwrap();
    assert_eq!(&r.data.0[..], b"WRITTEN");

    // NFSv3 SETATTR of the size truncates the data file; REMOVE removes it.
    let s = nfs::v3::Sattr3 {
        size: Some(5),
        ..Default::default()
    };
    mds3.setattr(&f3, s, None).await.unwrap();
    assert_eq!(ds.getattr(&ds_fh).await.unwrap().size, 5);
    let root = cl.root3.clone();
    mds3.remove(&root, "f").await.unwrap();
    let gone = ds.getattr(&ds_fh).await.unwrap_err();
    assert!(
        matches!(
            gone,
            nfs_client::Error::Nfs {
                status: Nfsstat3::NFS3ERR_STALE,
                ..
            }
        ),
        "{gone}"
    );
}

#[tokio::test]
async fn a_file_written_only_through_the_mds_gets_its_data_file_there() {
    let cl = cluster("v3only", 2, 64).await;
    let mds3 = nfs3(cl.srv.addr, cl.srv.uid).await;
    let root = cl.root3.clone();
    let made = mds3
        .create(
            &root,
            "g",
            nfs::v3::Createhow3::Unchecked(nfs::v3::Sattr3::default()),
        )
        .await
        .unwrap();
    let g = made.obj.unwrap();
    // Before any write it reads empty; after one, the bytes.
    let r = mds3.read(&g, 0, 100).await.unwrap();
    assert!(r.data.0.is_empty() && r.eof);
    let data = Bytes::from(vec![7u8; 70_000]);
    mds3.write(&g, 0, data.clone(), StableHow::FILE_SYNC)
        .await
        .unwrap();
    let r = mds3.read(&g, 0, 100_000).await.unwrap();
    assert_eq!(r.data.0, data);
    // The data file is on exactly one data server, owned by the
    // synthetic uid and gid.
    let files: Vec<_> = cl
        .ds
        .iter()
        .flat_map(|(_, d)| std::fs::read_dir(d.path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    let [file] = &files[..] else {
        panic!("{files:?}")
    };
    let meta = std::fs::metadata(file).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.len()),
        (DEFAULT_SYNTHETIC_ID, DEFAULT_SYNTHETIC_ID, 70_000)
    );
}

/// The data files on every data server of `cl`.
fn data_files(cl: &Cluster) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = cl
        .ds
        .iter()
        .flat_map(|(_, d)| std::fs::read_dir(d.path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Creates `name` at the metadata server's root over NFSv3 and writes
/// `data` through the metadata server (so it gets a data file).
async fn v3_file(v3: &Nfs3Client<TcpClient>, cl: &Cluster, name: &str, data: &[u8]) -> NfsFh3 {
    let how = nfs::v3::Createhow3::Unchecked(nfs::v3::Sattr3::default());
    let fh = v3.create(&cl.root3, name, how).await.unwrap().obj.unwrap();
    v3.write(&fh, 0, Bytes::copy_from_slice(data), StableHow::FILE_SYNC)
        .await
        .unwrap();
    fh
}

#[tokio::test]
async fn renaming_over_a_file_removes_its_data_file() {
    let cl = cluster("rename", 2, 64).await;
    let v3 = nfs3(cl.srv.addr, cl.srv.uid).await;
    let root = cl.root3.clone();
    v3_file(&v3, &cl, "old", b"replaced by NFSv3").await;
    v3_file(&v3, &cl, "new", b"the survivor").await;
    assert_eq!(data_files(&cl).len(), 2);

    // NFSv3 RENAME over "old": its data file goes, "new"'s stays.
    v3.rename(&root, "new", &root, "old").await.unwrap();
    let left = data_files(&cl);
    let [kept] = &left[..] else {
        panic!("{left:?}")
    };
    assert_eq!(std::fs::read(kept).unwrap(), b"the survivor");

    // NFSv4 RENAME over a file likewise.
    v3_file(&v3, &cl, "v4old", b"replaced by NFSv4").await;
    assert_eq!(data_files(&cl).len(), 2);
    let mut c = C4::connect(&cl.srv).await;
    c.establish("rename").await;
    c.ok(vec![
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putrootfh(()),
        NfsArgop4::Rename(Rename4Args {
            oldname: name("old"),
            newname: name("v4old"),
        }),
    ])
    .await;
    assert_eq!(data_files(&cl), left);

    // A file with another link keeps its data file when one name is
    // renamed over.
    let shared = v3_file(&v3, &cl, "shared", b"two links").await;
    v3.link(&shared, &root, "alias").await.unwrap();
    v3_file(&v3, &cl, "third", b"x").await;
    assert_eq!(data_files(&cl).len(), 3);
    v3.rename(&root, "third", &root, "alias").await.unwrap();
    assert_eq!(data_files(&cl).len(), 3);
    // (The storage's handle index recorded the newest name, "alias": the
    // file is looked up again by its remaining one.)
    let shared = v3_lookup(&v3, &cl, "shared").await;
    let r = v3.read(&shared, 0, 100).await.unwrap();
    assert_eq!(&r.data.0[..], b"two links");
}

/// A TCP relay in front of a data server that can be cut (its
/// connections dropped, new ones closed at once) and restored: a data
/// server lost and back, as the metadata server and clients see it.
struct Relay {
    addr: SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let conns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (u, c) = (Arc::clone(&up), Arc::clone(&conns));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                if !u.load(SeqCst) {
                    continue;
                }
                let t = tokio::spawn(async move {
                    if let Ok(mut d) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut s, &mut d).await;
                    }
                });
                c.lock().unwrap().push(t.abort_handle());
            }
        });
        Self { addr, up, conns }
    }

    fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// LAYOUTGET of the whole of `fh` for `iomode` under `sid`: the layout
/// stateid and the flex-files body, or the status.
async fn ff_layout(
    c: &C4,
    fh: &NfsFh4,
    sid: Stateid4,
    iomode: Layoutiomode4,
) -> Result<(Stateid4, FfLayout4), Nfsstat4> {
    let r = c
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            layoutget(sid, iomode, 8192),
        ])
        .await;
    match r.resarray.last() {
        Some(NfsResop4::Layoutget(Layoutget4Res::Ok(lg))) => {
            let ff = decode_body(&lg.layout.0[0].content.body.0).unwrap();
            Ok((lg.stateid, ff))
        }
        Some(NfsResop4::Layoutget(Layoutget4Res::TryLater(_))) => {
            Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER)
        }
        other => Err(other.map_or(r.status, |o| o.status())),
    }
}

/// Per mirror of `ff`: the data server's index (from its device id),
/// the data file's handle and the uid to write it as.
/// Creates `file`, takes an RW layout of it (one mirror) and writes `len`
/// bytes of `byte` at offset 0 of its data file, FILE_SYNC, as the
/// layout's user: the file's handle, the layout stateid and the data
/// file's handle. Nothing is committed to the metadata server.
async fn written_through_layout(
    c: &C4,
    ds: SocketAddr,
    file: &'static str,
    byte: u8,
    len: usize,
) -> (NfsFh4, Stateid4, NfsFh3) {
    let (fh, open) = create(c, file).await;
    let (sid, ff) = ff_layout(c, &fh, open, RW).await.unwrap();
    let [(_, ds_fh, uid)] = &mirrors_of(&ff)[..] else {
        panic!("{ff:?}")
    };
    let v3 = nfs3(ds, *uid).await;
    v3.write(ds_fh, 0, Bytes::from(vec![byte; len]), StableHow::FILE_SYNC)
        .await
        .unwrap();
    (fh, sid, ds_fh.clone())
}

fn mirrors_of(ff: &FfLayout4) -> Vec<(usize, NfsFh3, u32)> {
    ff.mirrors
        .0
        .iter()
        .map(|m| {
            let [d] = &m.data_servers.0[..] else {
                panic!("one data server per mirror: {m:?}")
            };
            let i = u32::from_be_bytes(d.deviceid.0[12..].try_into().unwrap()) as usize;
            let uid = std::str::from_utf8(&d.user.0).unwrap().parse().unwrap();
            (i, NfsFh3::new(d.fh_vers.0[0].as_bytes()).unwrap(), uid)
        })
        .collect()
}

/// LAYOUTRETURN of the whole of `fh` under `sid`, reporting `errors`
/// (data server index, status) in the flex-files body (RFC 8435 §9.3).
async fn layoutreturn(c: &C4, fh: &NfsFh4, sid: Stateid4, errors: &[(usize, Nfsstat4)]) {
    let dev = |i: usize| {
        let mut d = [0u8; 16];
        d[..2].copy_from_slice(b"DS");
        d[12..].copy_from_slice(&(i as u32).to_be_bytes());
        FixedOpaque(d)
    };
    let body = FfLayoutreturn4 {
        ioerr_report: Bounded(
            errors
                .iter()
                .map(|&(i, status)| FfIoerr4 {
                    offset: 0,
                    length: u64::MAX,
                    stateid: Stateid4::ANONYMOUS,
                    errors: Bounded(vec![DeviceError4 {
                        deviceid: dev(i),
                        status,
                        opnum: 38,
                    }]),
                })
                .collect(),
        ),
        iostats_report: Bounded(vec![]),
    };
    c.ok(vec![
        NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
        layoutreturn_file(sid, encode_body(&body)),
    ])
    .await;
}

/// The bytes of the data file `name` on each data server that has it.
fn copies(cl: &Cluster, name: &str) -> Vec<(usize, Vec<u8>)> {
    cl.ds
        .iter()
        .enumerate()
        .filter_map(|(i, (_, d))| std::fs::read(d.path().join(name)).ok().map(|b| (i, b)))
        .collect()
}

#[tokio::test]
async fn mirrored_files_are_written_to_both_data_servers_and_read_from_either() {
    let cl = cluster_with("mirror", 3, |c| c.mirrors = 2, &[]).await;
    let mut c = C4::connect(&cl.srv).await;
    c.establish("mirror").await;
    let (fh, open) = create(&c, "f").await;

    // RFC 8435 §8.2: an RW layout lists both mirrors, on two different
    // data servers; the client writes each.
    let (sid, ff) = ff_layout(&c, &fh, open, RW).await.unwrap();
    let ms = mirrors_of(&ff);
    assert_eq!(ms.len(), 2, "{ff:?}");
    assert_ne!(ms[0].0, ms[1].0);
    let data = Bytes::from(vec![0x5a; 100_000]);
    for (i, dfh, uid) in &ms {
        let v3 = nfs3(cl.ds[*i].0.nfs_addr(), *uid).await;
        v3.write(dfh, 0, data.clone(), StableHow::FILE_SYNC)
            .await
            .unwrap();
    }
    let on_disk = |cl: &Cluster| -> Vec<(usize, Vec<u8>)> {
        cl.ds
            .iter()
            .enumerate()
            .flat_map(|(i, (_, d))| {
                std::fs::read_dir(d.path())
                    .unwrap()
                    .map(move |e| (i, std::fs::read(e.unwrap().path()).unwrap()))
            })
            .collect()
    };
    let copies = on_disk(&cl);
    assert_eq!(copies.len(), 2, "one data file on each of two servers");
    assert!(copies.iter().all(|(_, b)| b[..] == data[..]));

    // §8.1: a READ layout lists both too, and either serves the bytes.
    let (_, rd) = ff_layout(&c, &fh, sid, Layoutiomode4::LAYOUTIOMODE4_READ)
        .await
        .unwrap();
    let rms = mirrors_of(&rd);
    assert_eq!(
        rms.iter().map(|m| m.0).collect::<Vec<_>>(),
        ms.iter().map(|m| m.0).collect::<Vec<_>>()
    );
    for (i, dfh, uid) in &rms {
        let v3 = nfs3(cl.ds[*i].0.nfs_addr(), *uid).await;
        let r = v3.read(dfh, 99_990, 100).await.unwrap();
        assert_eq!(&r.data.0[..], &data[99_990..]);
    }

    // I/O through the metadata server writes both copies, reads one.
    let mds3 = nfs3(cl.srv.addr, cl.srv.uid).await;
    let f3 = v3_lookup(&mds3, &cl, "f").await;
    let tail = Bytes::from_static(b"through the MDS to both mirrors");
    let w = mds3
        .write(&f3, 100_000, tail.clone(), StableHow::UNSTABLE)
        .await
        .unwrap();
    let cm = mds3.commit(&f3, 0, 0).await.unwrap();
    assert_eq!(w.verf, cm.verf);
    let copies = on_disk(&cl);
    assert_eq!(copies.len(), 2);
    for (_, b) in &copies {
        assert_eq!(b.len(), 100_000 + tail.len());
        assert_eq!(&b[100_000..], &tail[..]);
    }
    let r = mds3.read(&f3, 100_000, 100).await.unwrap();
    assert_eq!(r.data.0, tail);

    // LAYOUTERROR (RFC 7862 §15.6) naming the second mirror's DS marks
    // that copy stale (RFC 8435 §8.2.3); while the client holds its RW
    // layout (being recalled) the copy is not rebuilt and RW layouts are
    // refused.
    let id = c.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let mut dev = [0u8; 16];
    dev[..2].copy_from_slice(b"DS");
    dev[12..].copy_from_slice(&(ms[1].0 as u32).to_be_bytes());
    let r = c
        .compound(&Compound4Args {
            tag: Bytes::new(),
            minorversion: 2,
            argarray: vec![
                c.sequence(0, id, false),
                NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
                NfsArgop4::Layouterror(Layouterror4Args {
                    offset: 0,
                    length: u64::MAX,
                    stateid: sid,
                    errors: Bounded(vec![DeviceError4 {
                        deviceid: FixedOpaque(dev),
                        status: Nfsstat4::NFS4ERR_NXIO,
                        opnum: 38,
                    }]),
                }),
            ],
        })
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert_eq!(cl.mds.stale_mirrors(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(cl.mds.stale_mirrors(), 1, "not rebuilt under an RW layout");
    assert_eq!(cl.mds.rebuilds().1, 0);

    // A hostile client that reports every mirror failed (and a device
    // that is none of ours) cannot take the file's last good copy: one
    // is marked stale, and rebuilt at once since its server answers.
    layoutreturn(
        &c,
        &fh,
        sid,
        &[
            (ms[0].0, Nfsstat4::NFS4ERR_NXIO),
            (ms[1].0, Nfsstat4::NFS4ERR_NXIO),
            (99, Nfsstat4::NFS4ERR_NXIO),
        ],
    )
    .await;
    assert!(cl.mds.stale_mirrors() <= 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cl.mds.stale_mirrors() > 0 || cl.mds.rebuilds().0 > 0 {
        assert!(std::time::Instant::now() < deadline, "not rebuilt");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(cl.mds.rebuilds().1, 1, "one copy was rebuilt");
    let copies = on_disk(&cl);
    assert_eq!(copies.len(), 2);
    assert_eq!(copies[0].1, copies[1].1);

    // Truncation and removal reach both copies.
    let s = nfs::v3::Sattr3 {
        size: Some(5),
        ..Default::default()
    };
    mds3.setattr(&f3, s, None).await.unwrap();
    assert!(on_disk(&cl).iter().all(|(_, b)| b[..] == data[..5]));
    let root = cl.root3.clone();
    mds3.remove(&root, "f").await.unwrap();
    assert!(on_disk(&cl).is_empty());
}

#[tokio::test]
async fn a_lost_mirror_is_left_out_then_rebuilt_byte_exact_with_bounded_rebuilds() {
    let cl = cluster_with(
        "rebuild",
        2,
        |c| {
            c.mirrors = 2;
            c.max_rebuilds = 1;
            c.rebuild_poll = std::time::Duration::from_millis(50);
        },
        &[1],
    )
    .await;
    let relay = cl.relays[1].as_ref().unwrap();
    let mds3 = nfs3(cl.srv.addr, cl.srv.uid).await;
    let names = ["f0", "f1", "f2"];
    let mut fhs = Vec::new();
    for n in names {
        fhs.push(v3_file(&mds3, &cl, n, format!("{n} before the loss").as_bytes()).await);
    }
    let files: Vec<String> = {
        let mut v: Vec<String> = cl.ds[0]
            .1
            .path()
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(files.len(), 3);
    for f in &files {
        let c = copies(&cl, f);
        assert_eq!(c.len(), 2, "both mirrors written through the MDS");
        assert_eq!(c[0].1, c[1].1);
    }

    let mut c = C4::connect(&cl.srv).await;
    c.establish("rebuild").await;
    let r = c
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(c.clientid, "f0", OPEN4_SHARE_ACCESS_BOTH, 0),
            NfsArgop4::Getfh(()),
        ])
        .await;
    let (fh0, open0) = (fh_of(&r), open_stateid(&r));
    let (sid, ff) = ff_layout(&c, &fh0, open0, RW).await.unwrap();
    assert_eq!(mirrors_of(&ff).len(), 2);

    // Data server 1 is lost. The client's writes to it fail and it says
    // so returning its layout (RFC 8435 §8.2.3); WRITEs through the
    // metadata server find it unreachable themselves. Every copy there
    // is now stale and the writes went on to the good mirror.
    relay.cut();
    layoutreturn(&c, &fh0, sid, &[(1, Nfsstat4::NFS4ERR_NXIO)]).await;
    for (n, fh) in names.iter().zip(&fhs).skip(1) {
        mds3.write(
            fh,
            0,
            Bytes::from(format!("{n} AFTER")),
            StableHow::FILE_SYNC,
        )
        .await
        .unwrap();
    }
    assert_eq!(cl.mds.stale_mirrors(), 3);

    // Layouts leave the stale mirror out.
    let (sid, ff) = ff_layout(&c, &fh0, open0, RW).await.unwrap();
    let ms = mirrors_of(&ff);
    assert_eq!(ms.iter().map(|m| m.0).collect::<Vec<_>>(), [0], "{ff:?}");
    let v3 = nfs3(cl.ds[0].0.nfs_addr(), ms[0].2).await;
    v3.write(
        &ms[0].1,
        0,
        Bytes::from_static(b"f0 AFTER"),
        StableHow::FILE_SYNC,
    )
    .await
    .unwrap();

    // The data server comes back. f1 and f2 are rebuilt, one at a time;
    // f0 waits while the client holds its RW layout (§8.3), which is
    // recalled; meanwhile RW LAYOUTGET of it is refused, and a WRITE
    // through the metadata server still reaches its good copy (the copy
    // has not begun), so the rebuilt one has it too.
    let limit = || oncrpc::limits::trips("pnfs.rebuilds");
    let tripped = limit();
    relay.restore();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while cl.mds.stale_mirrors() > 1 {
        assert!(std::time::Instant::now() < deadline, "rebuilds stalled");
        assert!(cl.mds.rebuilds().0 <= 1);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(cl.mds.stale_mirrors(), 1, "f0 waits for its RW layout");
    assert_eq!(
        ff_layout(&c, &fh0, sid, RW).await.err(),
        Some(Nfsstat4::NFS4ERR_LAYOUTTRYLATER)
    );
    mds3.write(
        &fhs[0],
        100,
        Bytes::from_static(b"DURING"),
        StableHow::FILE_SYNC,
    )
    .await
    .unwrap();
    layoutreturn(&c, &fh0, sid, &[]).await;
    while cl.mds.stale_mirrors() > 0 {
        assert!(std::time::Instant::now() < deadline, "f0 not rebuilt");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Bounded: never more than one rebuild at once, the waiting counted.
    assert_eq!(cl.mds.rebuilds().1, 1);
    assert!(limit() > tripped, "rebuilds that waited are counted");

    // Each rebuilt copy is byte-exact, with what was written during the
    // loss; and layouts list both mirrors again.
    for (f, n) in files.iter().zip(names) {
        let c = copies(&cl, f);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].1, c[1].1, "{f}");
        let _ = n;
    }
    let all: Vec<Vec<u8>> = files.iter().map(|f| copies(&cl, f)[1].1.clone()).collect();
    assert!(all.iter().any(|b| b.get(100..106) == Some(&b"DURING"[..])));
    for n in names {
        let want = format!("{n} AFTER");
        assert!(
            all.iter().any(|b| b.starts_with(want.as_bytes())),
            "{want} in {all:?}"
        );
    }
    let (_, ff) = ff_layout(&c, &fh0, open0, RW).await.unwrap();
    assert_eq!(mirrors_of(&ff).len(), 2);
}

/// One metadata server instance over the data servers `ds`: its files in
/// `export`, its client records, grace period and placements in `state`;
/// its listener stops when dropped (a crash, for its clients).
struct MdsInst {
    srv: Srv,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for MdsInst {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn mds_instance(
    tag: &str,
    export: &std::path::Path,
    state: &std::path::Path,
    ds: Vec<DataServer>,
) -> MdsInst {
    let clock = Arc::new(ManualClock::new());
    let mds = Arc::new(Mds::open(MdsConfig::new(ds), state).unwrap());
    // Handles that survive the restart (the handle key and index in the
    // state directory), as `serve` has them.
    // The previous instance's tasks may hold its index a moment longer.
    let handles = nfs_server::StateDir::open(state.join("handles")).unwrap();
    let mut tries = 0;
    let fs = loop {
        match LocalFs::with_state_dir(export, false, &handles) {
            Ok(fs) => break Arc::new(fs),
            Err(e) if tries < 100 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let rec = nfs_server::v4::Recovery {
        grace: std::time::Duration::from_secs(60),
        ..nfs_server::v4::Recovery::new(state)
    };
    let svc = Nfs4Service::with_config(
        fs,
        Nfs4Config {
            clock: clock.clone(),
            ..Nfs4Config::default()
        },
    )
    .with_recovery(&rec)
    .unwrap()
    .with_mds(mds);
    let mut server = oncrpc::Server::new();
    server.register(svc);
    let (addr, task) = listen(server).await;
    let uid = std::fs::metadata(export).unwrap().uid();
    MdsInst {
        srv: Srv {
            addr,
            uid,
            clock,
            dir: TempDir::new(tag),
        },
        task,
    }
}

#[tokio::test]
async fn after_a_restart_layoutget_waits_for_grace_and_writes_are_committed_by_reclaim() {
    let (ds, ds_dir) = data_server("restart-ds").await;
    let spec = vec![tcp_only(&ds, &ds_dir)];
    let export = TempDir::new("restart-export");
    let state = TempDir::new("restart-state");

    // A client writes 5000 bytes through its RW layout; the metadata
    // server goes down before the LAYOUTCOMMIT.
    let one = mds_instance("restart-1", export.path(), state.path(), spec.clone()).await;
    let mut c = C4::connect(&one.srv).await;
    c.establish("restart").await;
    let (_, old_sid, ds_fh) = written_through_layout(&c, ds.nfs_addr(), "f", 9, 5000).await;
    drop(c);
    drop(one);

    // The new instance: in its grace period LAYOUTGET is NFS4ERR_GRACE
    // (RFC 8881 §18.43.3: layouts are not kept across a restart).
    let two = mds_instance("restart-2", export.path(), state.path(), spec).await;
    let mut c = C4::connect(&two.srv).await;
    c.session_only("restart").await;
    let r = c
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            NfsArgop4::Lookup(Lookup4Args { objname: name("f") }),
            NfsArgop4::Getfh(()),
        ])
        .await;
    let fh = fh_of(&r);
    assert_eq!(
        ff_layout(&c, &fh, Stateid4::ANONYMOUS, RW).await.err(),
        Some(Nfsstat4::NFS4ERR_GRACE)
    );

    // §18.42.3: the client commits what it wrote by a reclaiming
    // LAYOUTCOMMIT; the size is the metadata server's from then on.
    let commit = |reclaim: bool, sid: Stateid4| layoutcommit_file(sid, reclaim, 4999);
    let put = || NfsArgop4::Putfh(Putfh4Args { object: fh.clone() });
    // The old layout stateid means nothing to this instance.
    let r = c.seq(vec![put(), commit(false, old_sid)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_BAD_STATEID);
    let r = c.ok(vec![put(), commit(true, old_sid)]).await;
    let Some(NfsResop4::Layoutcommit(Res4::Ok(lc))) = r.last() else {
        panic!("{r:?}")
    };
    // The new instance may have learnt the size from the data server
    // already (the written marks, `a_size_written_through_a_layout_...`):
    // then the commit changes nothing.
    assert!(matches!(lc.newsize, Some(5000) | None), "{lc:?}");
    assert_eq!(
        std::fs::metadata(export.path().join("f")).unwrap().len(),
        5000
    );

    // A client the previous instance did not know cannot reclaim.
    let mut other = C4::connect(&two.srv).await;
    other.establish("stranger").await;
    let r = other.seq(vec![put(), commit(true, old_sid)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NO_GRACE);

    // RECLAIM_COMPLETE ends the grace period (the only client of the
    // previous instance is done): layouts again, the same data file,
    // under a layout stateid the old one is not.
    c.reclaim_complete().await;
    let r = c
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(c.clientid, "f", OPEN4_SHARE_ACCESS_BOTH, 0),
        ])
        .await;
    let (sid, ff) = ff_layout(&c, &fh, open_stateid(&r), RW).await.unwrap();
    assert_ne!(sid.other, old_sid.other);
    let [(_, new_fh, _)] = &mirrors_of(&ff)[..] else {
        panic!("{ff:?}")
    };
    assert_eq!(*new_fh, ds_fh);
    // Reclaims are over.
    let r = c.seq(vec![put(), commit(true, sid)]).await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_NO_GRACE);
}

/// RFC 8881 §12.7.4: data written through a layout and never committed
/// (no LAYOUTCOMMIT, reclaiming or not) is not lost with a restart of the
/// metadata server: the files that had read-write layouts out are marked
/// in the state directory and their sizes taken from the data servers
/// at start. A layout returned without a commit has its file's size
/// compared too.
#[tokio::test]
async fn a_size_written_through_a_layout_but_never_committed_is_recovered_after_a_restart() {
    let (ds, ds_dir) = data_server("recover-ds").await;
    let spec = vec![tcp_only(&ds, &ds_dir)];
    let export = TempDir::new("recover-export");
    let state = TempDir::new("recover-state");
    let size_of = |f: &str| std::fs::metadata(export.path().join(f)).unwrap().len();
    async fn grows_to(f: impl Fn() -> u64, want: u64) -> bool {
        for _ in 0..50 {
            if f() == want {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    }

    let one = mds_instance("recover-1", export.path(), state.path(), spec.clone()).await;
    let mut c = C4::connect(&one.srv).await;
    c.establish("writer").await;
    // "kept": written through its layout, neither committed nor
    // returned when the server stops.
    written_through_layout(&c, ds.nfs_addr(), "kept", 7, 7000).await;
    // "returned": written, then its layout returned without a commit.
    let (rfh, rsid, _) = written_through_layout(&c, ds.nfs_addr(), "returned", 5, 3000).await;
    assert_eq!(size_of("returned"), 0);
    c.ok(vec![
        NfsArgop4::Putfh(Putfh4Args {
            object: rfh.clone(),
        }),
        layoutreturn_file(rsid, Bounded(Bytes::new())),
    ])
    .await;
    assert!(
        grows_to(|| size_of("returned"), 3000).await,
        "the returned layout's size was not taken from the data server"
    );
    assert_eq!(size_of("kept"), 0);
    drop(c);
    drop(one);

    // The new instance learns "kept"'s size from the data server without
    // any client's help.
    let two = mds_instance("recover-2", export.path(), state.path(), spec.clone()).await;
    let spec2 = spec;
    assert!(
        grows_to(|| size_of("kept"), 7000).await,
        "the size written through the layout was lost with the restart"
    );
    assert_eq!(size_of("returned"), 3000);
    // Both settled: a third start finds no marks (its rewritten log is
    // empty; nothing to ask the data server).
    drop(two);
    let _three = mds_instance("recover-3", export.path(), state.path(), spec2).await;
    let log = std::fs::metadata(state.path().join("pnfs-written")).unwrap();
    assert_eq!(log.len(), 0);
}

/// RFC 8435 §9.1.2: a client that reports a data server unreachable
/// (NFS4ERR_NXIO) gets NFS4ERR_LAYOUTUNAVAILABLE for files there for
/// `ds_error_hold`, so it does its I/O through the metadata server (which
/// still reaches the data server); other clients, and other errors
/// (NFS4ERR_ACCESS after fencing), are not held.
#[tokio::test]
async fn a_client_reporting_a_data_server_unreachable_is_sent_through_the_mds_for_a_while() {
    let cl = cluster_with(
        "hold",
        1,
        |m| m.ds_error_hold = std::time::Duration::from_secs(60),
        &[],
    )
    .await;
    let mut c = C4::connect(&cl.srv).await;
    c.establish("cut-off").await;
    let (fh, open) = create(&c, "f").await;
    let (sid, _) = ff_layout(&c, &fh, open, RW).await.unwrap();
    // An ACCESS error (a fenced layout) holds nothing.
    layoutreturn(&c, &fh, sid, &[(0, Nfsstat4::NFS4ERR_ACCESS)]).await;
    let (sid, _) = ff_layout(&c, &fh, open, RW).await.unwrap();
    layoutreturn(&c, &fh, sid, &[(0, Nfsstat4::NFS4ERR_NXIO)]).await;
    assert_eq!(
        ff_layout(&c, &fh, open, RW).await.err(),
        Some(Nfsstat4::NFS4ERR_LAYOUTUNAVAILABLE)
    );
    // Its WRITE through the metadata server reaches the data file.
    let r = c
        .ok(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            NfsArgop4::Write(Write4Args {
                stateid: open,
                offset: 0,
                stable: StableHow4(2),
                data: xdr::DdpOpaque(Bytes::from_static(b"through the mds")),
            }),
        ])
        .await;
    assert!(
        matches!(r.last(), Some(NfsResop4::Write(Res4::Ok(_)))),
        "{r:?}"
    );
    // Another client is not held.
    let mut other = C4::connect(&cl.srv).await;
    other.establish("fine").await;
    let r = other
        .ok(vec![
            NfsArgop4::Putrootfh(()),
            open_create(other.clientid, "f", OPEN4_SHARE_ACCESS_READ, 0),
        ])
        .await;
    assert!(ff_layout(
        &other,
        &fh,
        open_stateid(&r),
        Layoutiomode4::LAYOUTIOMODE4_READ
    )
    .await
    .is_ok());
    // Past the hold the first client gets layouts again.
    cl.srv.clock.advance(std::time::Duration::from_secs(61));
    assert!(ff_layout(&c, &fh, open, RW).await.is_ok());
}
