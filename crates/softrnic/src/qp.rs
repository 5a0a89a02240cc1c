//! Queue pairs of the software device: the consumer's handle, which posts
//! work into the socket-free [`core`](crate::core) and transmits from the
//! posting task when the queue pair is idle, and the start of the IO tasks
//! ([`rx`](crate::rx), [`tx`](crate::tx)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use iwarp::conn::{Config, Connection};
use iwarp::negotiation::Established;
use rnic::{
    ChainWr, CloseReason, CompletionQueue, PdId, PostError, ProtectionDomain, QpAttrs, QpConfig,
    QpEvent, QpNum, QpState, QueuePair, ReadWr, RecvWr, SendWr, WriteWr,
};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::core::{Core, QpCtx, ReadPosted};
use crate::shared::{Guard, Locked, Shared, BURST_BATCH};
use crate::tx::flush;
use crate::SoftDevice;

/// A queue pair ready to be connected to its socket.
pub(crate) struct Prepared {
    shared: Arc<Shared>,
}

/// Builds the engine from the MPA result and posts the initial receives.
pub(crate) fn prepare(
    dev: &SoftDevice,
    pd: &ProtectionDomain,
    est: &Established,
    config: QpConfig,
) -> Prepared {
    let cfg = dev.inner.cfg;
    let mut ecfg = Config::from_established(est);
    // Our receive side takes any ULPDU up to 65535 bytes, so every MPA
    // frame of ours says so; a peer whose frame said so gets larger FPDUs.
    ecfg.mulpdu = if est.peer_large_fpdu {
        cfg.large_mulpdu.max(cfg.mulpdu)
    } else {
        cfg.mulpdu
    };
    let attrs = QpAttrs {
        ird: u32::from(est.ird),
        ord: u32::from(est.ord),
        max_message_size: cfg.max_message_size,
        max_send_wr: config.max_send_wr,
        max_recv_wr: config.max_recv_wr,
    };
    let ctx = QpCtx {
        table: Arc::clone(&dev.inner.table),
        pd: pd.id(),
        qpn: QpNum(dev.inner.next_qp.fetch_add(1, Ordering::Relaxed)),
        attrs,
        crc: est.crc,
        rx_stage: cfg.rx_stage.max(crate::MIN_RX_STAGE),
        send_cq: config.send_cq,
        recv_cq: config.recv_cq,
    };
    let shared = Arc::new(Shared::new(
        Core::new(Connection::new(ecfg)),
        ctx,
        Arc::clone(&dev.inner.io),
    ));
    {
        let mut st = shared.lock();
        for wr in config.initial_recvs {
            // Idle accepts receives; the engine is open: this cannot fail
            // except for a buffer over 4 GiB, which is dropped with a flush.
            if let Err(e) = st.core.post_recv(&shared.ctx, wr) {
                tracing::debug!(error = %e, "initial receive refused");
            }
        }
        st.core.transition(&[QpEvent::Established]);
    }
    Prepared { shared }
}

/// Connects a prepared queue pair to its socket and starts its IO tasks.
pub(crate) fn launch(p: Prepared, stream: TcpStream) -> SoftQp {
    let (rd, wr) = stream.into_split();
    let wr = Arc::new(wr);
    p.shared.lock().wr = Some(Arc::clone(&wr));
    let rx = tokio::spawn(crate::rx::rx_task(Arc::clone(&p.shared), rd));
    tokio::spawn(crate::tx::tx_task(Arc::clone(&p.shared), wr));
    p.shared.tx_wake.notify_one();
    SoftQp {
        shared: p.shared,
        rx: rx.abort_handle(),
    }
}

/// [`prepare`] then [`launch`], for the connecting side.
pub(crate) fn start(
    dev: &SoftDevice,
    pd: &ProtectionDomain,
    stream: TcpStream,
    est: &Established,
    config: QpConfig,
) -> SoftQp {
    launch(prepare(dev, pd, est, config), stream)
}

/// Whether a request just posted is written at once, from the posting
/// task. Outside a burst: when it is the only work in flight (the consumer
/// has reaped every send completion, at most this one Read is
/// outstanding), for latency; otherwise the transmit task writes it with
/// the requests posted meanwhile. In a burst of posts after the receive
/// task delivered several messages ([`Locked::in_burst`]): every `batch`-th
/// post since the delivery (at most every [`BURST_BATCH`]-th) writes all
/// that is queued, the others leave theirs to the transmit task (or to
/// that post); none writes while bytes wait for room in the socket (the
/// transmit task writes after them).
fn idle(st: &mut Locked, send_cq: &CompletionQueue) -> bool {
    if !st.in_burst() {
        return send_cq.is_empty() && st.core.reads.len() <= 1 && st.out.is_empty();
    }
    st.since += 1;
    st.since % st.batch.clamp(1, BURST_BATCH) == 0 && st.out.is_empty()
}

/// A queue pair of the software device. Dropping it disconnects.
pub struct SoftQp {
    shared: Arc<Shared>,
    rx: AbortHandle,
}

impl std::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.shared.ctx.qpn)
            .field("state", &self.state())
            .finish()
    }
}

impl SoftQp {
    /// Transmits what was queued: from this task when the queue pair is
    /// idle, else by waking the transmit task.
    fn kick(&self, mut st: Guard<'_>) {
        let sh = &self.shared;
        if st.holds_tx() {
            // Written with the others the receive task's completions
            // brought about, once they are all posted.
            return;
        }
        let wake = !idle(&mut st, &sh.ctx.send_cq) || flush(&mut st, sh);
        drop(st);
        if wake {
            sh.tx_wake.notify_one();
        }
    }

    /// Closes the connection from this side with `reason`.
    fn close_local(&self, reason: CloseReason) {
        {
            let mut st = self.shared.lock();
            if st.core.finished {
                return;
            }
            st.core.local_closed = true;
            st.core
                .finish(&self.shared.ctx, reason, &[QpEvent::LocalClose]);
        }
        self.rx.abort();
        self.shared.tx_wake.notify_one();
    }
}

impl QueuePair for SoftQp {
    fn qp_num(&self) -> QpNum {
        self.shared.ctx.qpn
    }

    fn pd(&self) -> PdId {
        self.shared.ctx.pd
    }

    fn state(&self) -> QpState {
        self.shared.lock().core.state
    }

    fn close_reason(&self) -> Option<CloseReason> {
        self.shared.lock().core.reason
    }

    fn attrs(&self) -> QpAttrs {
        self.shared.ctx.attrs
    }

    /// RFC 5040 §5.3: Send, Send with Solicited Event, with Invalidate.
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        let mut st = self.shared.lock();
        st.core.queue_send(&self.shared.ctx, wr)?;
        self.kick(st);
        Ok(())
    }

    /// RFC 5040 §5.1: RDMA Write.
    fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        let mut st = self.shared.lock();
        st.core.queue_write(&self.shared.ctx, wr)?;
        self.kick(st);
        Ok(())
    }

    /// RDMA Writes from a file go from the page cache to the socket
    /// (`sendfile` between the FPDU headers and trailers) when CRC is off
    /// and the socket takes them; else their bytes are read in as they are
    /// framed ([`crate::tx`]).
    fn sends_files(&self) -> bool {
        true
    }

    /// The whole chain is queued under one lock and transmitted together:
    /// one vectored socket write when it fits the socket and the gather
    /// limit, so the Writes and the Send of one reply never depend on the
    /// peer's ACK timing between them.
    fn post_chain(&self, wrs: Vec<ChainWr>) -> Result<(), PostError> {
        let ctx = &self.shared.ctx;
        let mut st = self.shared.lock();
        let mut result = Ok(());
        for wr in wrs {
            result = match wr {
                ChainWr::Write(w) => st.core.queue_write(ctx, w),
                ChainWr::WriteFile(w) => st.core.queue_write_file(ctx, w),
                ChainWr::Send(s) => st.core.queue_send(ctx, s),
            };
            if result.is_err() {
                break;
            }
        }
        self.kick(st);
        result
    }

    /// RFC 5040 §5.2: RDMA Read. The local sink is checked here (local write
    /// right, domain, bounds); a failure completes the request with
    /// `LocalProtectionError` and closes the connection.
    fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        let sh = &self.shared;
        let mut st = sh.lock();
        match st.core.queue_read(&sh.ctx, wr)? {
            ReadPosted::Queued => {
                if st.holds_tx() || (idle(&mut st, &sh.ctx.send_cq) && !flush(&mut st, sh)) {
                    return Ok(());
                }
                drop(st);
                sh.tx_wake.notify_one();
            }
            ReadPosted::SinkRefused(e) => {
                drop(st);
                self.close_local(CloseReason::LocalAccessError(e));
            }
        }
        Ok(())
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.shared.lock().core.post_recv(&self.shared.ctx, wr)
    }

    fn send_cq(&self) -> &CompletionQueue {
        &self.shared.ctx.send_cq
    }

    fn recv_cq(&self) -> &CompletionQueue {
        &self.shared.ctx.recv_cq
    }

    fn disconnect(&self) {
        self.close_local(CloseReason::LocalDisconnect);
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.disconnect();
    }
}
