//! The requester's receive path: replies (fenced, reassembled, matched to
//! their calls) and reverse-direction calls (RFC 8166 §3.4.3, §3.5;
//! RFC 8167).

use super::*;

/// A reverse-direction call (RFC 8167): answered by the backchannel
/// service on its own task, inline (draft-ietf-nfsv4-rpcrdma-bidirection-01
/// §2.6); without a service, or when the reply would not fit inline, no
/// reply is sent.
fn on_reverse_call<D: Device>(
    inner: &Arc<Inner<D>>,
    qp: &Arc<D::Qp>,
    xid: u32,
    version: Version,
    rpc: Bytes,
) {
    let Some((service, credits)) = inner.backchannel.clone() else {
        return;
    };
    inner.lock().stats.backchannel_calls += 1;
    let inner = Arc::clone(inner);
    let qp = Arc::clone(qp);
    tokio::spawn(async move {
        let peer = PeerInfo {
            conn_id: 0,
            addr: None,
            transport: TransportKind::Rdma,
            security: oncrpc::TransportSecurity::None,
        };
        let Some(mut reply) = service.handle_call(rpc, &peer).await else {
            return;
        };
        // A service may leave bulk data in a file (`sends_files`): read in.
        if reply.load_files().is_err() {
            return;
        }
        // Answered in the version of the call (v2 draft §3.2, §7).
        let header = super::super::v2::reverse_header(version, xid, credits, true);
        let body = reply.to_bytes();
        if header.len() + body.len() > inner.lock().thresholds.send {
            return;
        }
        let wr = SendWr {
            wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
            data: vec![header, body],
            solicited: false,
            invalidate: None,
        };
        let _ = qp.post_send(wr);
    });
}

/// Sends call `xid` again with the larger reply resources `hint` after a
/// resource error (v2 draft §5.3.3), same XID, new regions; when it cannot
/// be sent the call fails.
fn resend_larger<D: Device>(
    inner: &Inner<D>,
    st: &mut State<D::Qp>,
    qp: &D::Qp,
    xid: u32,
    msg: &XdrBuf,
    hint: oncrpc::ReplyHint,
    resizes: u8,
) {
    let sent = match st.credits.try_send() {
        Ok(()) => convey(inner, st, qp, xid, msg, hint, None),
        Err(_) => Err(RpcError::Transport(
            "no credit to resend with larger resources",
        )),
    };
    match sent {
        Ok(()) => {
            st.stats.resource_resends += 1;
            if let Some(r) = st.resources.get_mut(&xid) {
                r.resizes = resizes;
            }
        }
        // Lost connection: the completion task sends it again.
        Err(RpcError::ConnectionClosed) if inner.dialer.is_some() => st.credits.on_abandon(),
        Err(e) => {
            st.credits.on_abandon();
            if let Some(tx) = st.core.cancel(xid) {
                let _ = tx.send(Err(e));
            }
        }
    }
}

/// A version 2 reverse-direction call with chunks (v2 draft §4.2.2
/// GENL): pulled by RDMA Read, answered by the backchannel service, the
/// reply inline or in the call's reply chunk, by Send With Invalidate of
/// its rdma_inv_handle (§8.4.1). A client that did not advertise GENL
/// ignores it, as it does any call without a service.
fn on_chunked_reverse_call<D: Device>(
    inner: &Arc<Inner<D>>,
    qp: &Arc<D::Qp>,
    xid: u32,
    len: usize,
    call: Rpc,
    msg: Bytes,
) {
    let Some((service, credits)) = inner.backchannel.clone() else {
        return;
    };
    if !inner.config.backchannel_chunks {
        return;
    }
    inner.lock().stats.backchannel_calls += 1;
    let inner = Arc::clone(inner);
    let qp = Arc::clone(qp);
    tokio::spawn(async move {
        use super::super::v2_reverse::{pull, send_reply, PULL_MAX};
        let wr_id = || inner.wr_id();
        let inline = msg.slice(len..);
        let pulled = pull(
            &*qp,
            &inner.pd,
            &inner.reads,
            wr_id,
            inline,
            &call.lists,
            PULL_MAX,
        );
        let Some(rpc) = pulled.await else {
            let h = hdr::encode_bad(Version::V2, xid, credits);
            let _ = qp.post_send(SendWr {
                wr_id: wr_id(),
                data: vec![h],
                solicited: false,
                invalidate: None,
            });
            return;
        };
        let peer = PeerInfo {
            conn_id: 0,
            addr: None,
            transport: TransportKind::Rdma,
            security: oncrpc::TransportSecurity::None,
        };
        let Some(mut reply) = service.handle_call(rpc, &peer).await else {
            return;
        };
        // A service may leave bulk data in a file (`sends_files`): read in.
        if reply.load_files().is_err() {
            return;
        }
        let send = inner.lock().thresholds.send;
        let _ = send_reply(&*qp, wr_id, xid, &call, credits, &reply, send);
    });
}

pub(super) fn on_reply<D: Device>(inner: &Arc<Inner<D>>, qp: &Arc<D::Qp>, wc: WorkCompletion) {
    let invalidated = wc.invalidated;
    let mut buf = wc.buf.unwrap_or_default();
    buf.truncate(wc.byte_len as usize);
    let msg = buf.freeze();
    // Reposted at once, in the buffer of a reply its caller dropped when
    // there is one ([`RecvPool`](super::super::recv_pool::RecvPool)).
    let _ = qp.post_recv(RecvWr {
        wr_id: inner.wr_id(),
        buf: inner.recv_pool.recycle(&msg),
    });
    // The one decode of the message (RFC 8166 §4; v2 draft §3).
    let Ok(rx) = classify(&msg, &Limits::default(), 2, Role::Requester) else {
        return;
    };
    let rpc = match rx.kind {
        // A version 2 reverse-direction call with chunks (GENL).
        Kind::ReverseCall(call) if !call.is_inline() => {
            on_chunked_reverse_call(inner, qp, rx.xid, rx.len, call, msg);
            return;
        }
        // msg_type CALL: the server calls us (RFC 8167).
        Kind::ReverseCall(_) => {
            on_reverse_call(inner, qp, rx.xid, rx.version, msg.slice(rx.len..));
            return;
        }
        Kind::Reply(rpc) => Ok(rpc),
        Kind::Error(e) => Err(Some(e)),
        Kind::ConnProp(Ok(p)) => {
            // v2 draft §4.2.1: never send more than the peer's receive
            // buffers.
            let mut st = inner.lock();
            st.thresholds.send = st.thresholds.send.min(p.receive_buffer_size as usize);
            return;
        }
        // No use as a reply: the call with that XID fails.
        Kind::ConnProp(Err(_)) | Kind::Obsolete | Kind::Call(_) | Kind::ReverseReply(_) => {
            Err(None)
        }
    };
    let mut st = inner.lock();
    let refused = matches!(&rpc, Err(Some(e)) if e.refuses_v2());
    if refused && st.version == Version::V2 {
        st.version = Version::V1;
    }
    let Some(mut res) = st.resources.remove(&rx.xid) else {
        return;
    };
    st.credits.on_reply(rx.credits);
    drain_backlog(inner, &mut st, qp);
    inner.credit_wait.notify_waiters();
    let sent = Sent {
        version: res.sent,
        resources: super::super::v2::resources(res.hint),
        resizes: res.resizes,
        kept: res.msg.is_some(),
    };
    match requester::on_reply(&rpc, &sent) {
        // v2 draft §7.2: the server speaks only version 1; send the call
        // again as version 1 with the same XID and chunks. When it cannot
        // be sent, the call completes with the error.
        Step::FallBack => {
            if st.credits.try_send().is_ok() {
                let header = hdr::encode_rpc(
                    Version::V1,
                    rx.xid,
                    st.credits.requested(),
                    false,
                    res.resend.nomsg,
                    res.resend.lists.clone(),
                    0,
                );
                let wr = SendWr {
                    wr_id: inner.next_wr.fetch_add(1, Ordering::Relaxed),
                    data: vec![header, res.resend.inline.clone()],
                    solicited: false,
                    invalidate: None,
                };
                if qp.post_send(wr).is_ok() {
                    res.sent = Version::V1;
                    st.stats.version_fallbacks += 1;
                    st.resources.insert(rx.xid, res);
                    return;
                }
                st.credits.on_abandon();
            }
        }
        // v2 draft §5.3.3: after WRITE_RESOURCE / REPLY_RESOURCE the call
        // is sent again with the resources the responder said it needs.
        Step::Enlarge(bigger) => {
            if let Some(msg) = res.msg.take() {
                let resizes = res.resizes + 1;
                res.fence();
                let hint = super::super::v2::reply_hint(bigger);
                resend_larger(inner, &mut st, qp, rx.xid, &msg, hint, resizes);
                return;
            }
        }
        Step::Complete => {}
    }
    // Remote invalidation (draft-cel-nfsv4-reminv-design §4.2): the STag
    // must be one of this call's; every region is still invalidated
    // locally below, which for the remotely invalidated one only hands
    // the buffer back.
    let mut foreign = false;
    if let Some(stag) = invalidated {
        let ours = res.reads.iter().any(|mr| mr.stag() == stag)
            || res
                .write
                .iter()
                .map(|w| &w.0)
                .chain(res.reply.iter())
                .any(|mr| mr.stag() == stag);
        if ours {
            st.stats.remote_invalidations += 1;
        } else {
            st.stats.foreign_invalidations += 1;
            foreign = true;
        }
    }
    // Fence: every region goes back to its owner before the call completes
    // (RFC 8166 §3.4.3).
    for mr in res.reads {
        drop(mr.invalidate());
    }
    let result = match &rpc {
        Ok(Rpc { nomsg, lists, .. }) => {
            let base = if *nomsg {
                lists
                    .reply
                    .as_ref()
                    .and_then(|echo| chunk_bytes(echo, res.reply))
            } else {
                fence(res.reply);
                msg.get(rx.len..).map(|_| msg.slice(rx.len..))
            };
            if *nomsg {
                st.stats.reply_chunk_replies += 1;
            }
            match (base, lists.writes.first(), res.write, res.ddp_position) {
                (Some(base), Some(echo), Some((mr, room)), Some(off)) => {
                    let (full, placed) = place_reply(&base, echo, mr, room, off, &inner.pool);
                    if placed != Placed::Nothing {
                        st.stats.write_chunk_replies += 1;
                    }
                    if placed == Placed::InPlace {
                        st.stats.in_place_replies += 1;
                    }
                    full
                }
                (base, _, write, _) => {
                    fence(write.map(|w| w.0));
                    base
                }
            }
        }
        Err(_) => {
            st.stats.error_replies += 1;
            fence(res.write.map(|w| w.0));
            fence(res.reply);
            None
        }
    };
    let result = result.filter(|_| !foreign);
    let reason = match &rpc {
        Err(Some(e)) => e.name(),
        _ if foreign => "Send With Invalidate of a foreign STag",
        _ => "reply could not be reassembled",
    };
    let done = match result.and_then(|full| st.core.handle_reply(&full)) {
        Some((_, tx, r)) => Some((tx, r)),
        None => st
            .core
            .cancel(rx.xid)
            .map(|tx| (tx, Err(RpcError::Transport(reason)))),
    };
    // The caller is woken once the lock is free: it takes it at once to
    // send its next call, and would otherwise sleep again on it.
    drop(st);
    if let Some((tx, r)) = done {
        let _ = tx.send(r);
    }
}
