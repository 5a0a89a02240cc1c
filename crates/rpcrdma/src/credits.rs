//! Credit accounting (RFC 8166 §3.3.1; v2 draft §8.2 keeps the model).
//!
//! A requester may have at most as many calls outstanding as the
//! responder last granted; a responder never grants more than the
//! receive buffers it has posted, because a Send that finds no posted
//! receive breaks the connection.

/// Requester-side credit state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequesterCredits {
    granted: u32,
    outstanding: u32,
    max_requests: u32,
}

/// Returned when a call cannot be sent now: every granted credit is in
/// use (RFC 8166 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no credit: {outstanding} calls outstanding, {granted} granted")]
pub struct NoCredit {
    /// Calls in flight.
    pub outstanding: u32,
    /// The current grant.
    pub granted: u32,
}

impl RequesterCredits {
    /// A new connection: the requester may send one call until the first
    /// reply carries a grant (RFC 8166 §3.3.1). `max_requests` is what it
    /// asks for in rdma_credit and the most it will ever use (bounded by
    /// the receive buffers it posts for replies).
    pub fn new(max_requests: u32) -> Self {
        Self {
            granted: 1,
            outstanding: 0,
            max_requests: max_requests.max(1),
        }
    }

    /// The rdma_credit value a call carries: the credits requested.
    pub fn requested(&self) -> u32 {
        self.max_requests
    }

    /// The grant in force, capped at `max_requests`.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Calls sent whose replies have not arrived.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Credits free now.
    pub fn available(&self) -> u32 {
        self.granted.saturating_sub(self.outstanding)
    }

    /// Takes a credit for a call about to be sent; never exceeds the
    /// grant.
    pub fn try_send(&mut self) -> Result<(), NoCredit> {
        if self.outstanding >= self.granted {
            return Err(NoCredit {
                outstanding: self.outstanding,
                granted: self.granted,
            });
        }
        self.outstanding += 1;
        Ok(())
    }

    /// A reply (or RDMA_ERROR) arrived carrying rdma_credit `grant`: the
    /// call's credit returns and the grant is updated. A grant of zero is
    /// read as one so the connection cannot stall (the responder must
    /// always allow progress, RFC 8166 §3.3.1); a grant above
    /// `max_requests` is capped because the requester has no more reply
    /// buffers than that.
    pub fn on_reply(&mut self, grant: u32) {
        self.outstanding = self.outstanding.saturating_sub(1);
        self.granted = grant.clamp(1, self.max_requests);
    }

    /// A call was abandoned without a reply (connection loss resets).
    pub fn on_abandon(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }
}

/// Responder-side credit state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderCredits {
    posted: u32,
    max_grant: u32,
}

impl ResponderCredits {
    /// `max_grant` is the responder's policy ceiling (Linux knfsd grants
    /// 64, kpeer README).
    pub fn new(max_grant: u32) -> Self {
        Self {
            posted: 0,
            max_grant,
        }
    }

    /// Receive buffers posted and not yet consumed.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// `n` more receive buffers were posted.
    pub fn on_receives_posted(&mut self, n: u32) {
        self.posted = self.posted.saturating_add(n);
    }

    /// A receive completed (a call arrived and consumed a buffer).
    pub fn on_receive(&mut self) {
        self.posted = self.posted.saturating_sub(1);
    }

    /// The rdma_credit to put in a reply to a call that asked for
    /// `requested`: never more than the posted receives or the ceiling
    /// (RFC 8166 §3.3.1); at least one when any receive is posted.
    pub fn grant(&self, requested: u32) -> u32 {
        requested.max(1).min(self.max_grant).min(self.posted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requester_starts_with_one_credit() {
        let mut c = RequesterCredits::new(128);
        assert_eq!(c.requested(), 128);
        assert_eq!(c.try_send(), Ok(()));
        assert_eq!(
            c.try_send(),
            Err(NoCredit {
                outstanding: 1,
                granted: 1
            })
        );
    }

    #[test]
    fn requester_never_exceeds_grant() {
        let mut c = RequesterCredits::new(128);
        c.try_send().unwrap();
        c.on_reply(64);
        for _ in 0..64 {
            c.try_send().unwrap();
        }
        assert!(c.try_send().is_err());
        assert_eq!(c.outstanding(), 64);
        c.on_reply(2);
        assert_eq!(c.granted(), 2);
        assert_eq!(c.available(), 0);
        assert!(c.try_send().is_err());
    }

    #[test]
    fn requester_caps_grant_and_treats_zero_as_one() {
        let mut c = RequesterCredits::new(8);
        c.try_send().unwrap();
        c.on_reply(500);
        assert_eq!(c.granted(), 8);
        c.try_send().unwrap();
        c.on_reply(0);
        assert_eq!(c.granted(), 1);
        assert_eq!(c.available(), 1);
    }

    #[test]
    fn responder_never_grants_more_than_posted_receives() {
        let mut r = ResponderCredits::new(64);
        assert_eq!(r.grant(128), 0);
        r.on_receives_posted(16);
        assert_eq!(r.grant(128), 16);
        r.on_receives_posted(100);
        assert_eq!(r.grant(128), 64);
        assert_eq!(r.grant(0), 1);
        r.on_receive();
        assert_eq!(r.posted(), 115);
    }
}
