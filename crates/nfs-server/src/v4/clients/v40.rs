//! NFSv4.0 client records (RFC 7530 §9.1.1) in the shared
//! [`ClientTable`]: SETCLIENTID (§16.33), SETCLIENTID_CONFIRM (§16.34)
//! and lease renewal (RENEW, §16.29, and any operation naming the client
//! or one of its stateids, §9.6). A 4.0 record lives beside the 4.1 ones
//! (same bounds, leases and expiry) under its own owner key, so a 4.0 and
//! a 4.1 client with the same identity string do not replace each other.
//!
//! The principal is the caller's identity ([`Principal`]). The
//! confirmed callback address becomes the client's callback path ([`super::super::cb40`]), through which it is given
//! delegations.

use std::hash::BuildHasher;

use nfs::v4::{CbClient4, Setclientid4Args, Setclientid4Res, Setclientid4ResOk};

use super::*;

/// Prefix of a 4.0 client's key in [`ClientTable::owners`].
const V40_PREFIX: &[u8] = b"nfs4.0:";

/// The NFSv4.0 part of a client record.
#[derive(Debug, Clone)]
pub(crate) struct V40Client {
    /// The `setclientid_confirm` verifier that confirmed (or will confirm)
    /// the record.
    confirm: [u8; 8],
    /// Who set the client id.
    principal: Principal,
    /// The callback path and its `callback_ident`.
    callback: (CbClient4, u32),
    /// A callback update (RFC 7530 §16.33.5, same verifier and principal)
    /// waiting for its SETCLIENTID_CONFIRM: (verifier, callback).
    pending: Option<([u8; 8], (CbClient4, u32))>,
}

/// An unguessable `setclientid_confirm` verifier.
fn fresh_verifier(id: u64, now: Duration) -> [u8; 8] {
    std::collections::hash_map::RandomState::new()
        .hash_one((id, now))
        .to_be_bytes()
}

impl ClientTable {
    /// SETCLIENTID (RFC 7530 §16.33.5) from `principal`.
    pub(crate) fn setclientid(
        &mut self,
        a: &Setclientid4Args,
        principal: Principal,
        now: Duration,
    ) -> Setclientid4Res {
        let mut key = V40_PREFIX.to_vec();
        key.extend_from_slice(&a.client.id.0);
        let key = Bytes::from(key);
        let verf = a.client.verifier.0;
        let confirmed = self.owners.get(&(key.clone(), true)).copied();
        if let Some(c) = confirmed.and_then(|id| self.clients.get_mut(&id).map(|c| (id, c))) {
            let (id, c) = c;
            if let Some(v) = c.v40.as_mut() {
                // A live record of another principal: the identity is in
                // use (its lease has not run out, or it would be gone).
                if v.principal != principal {
                    return Setclientid4Res::ClidInuse(v.callback.0.location.clone());
                }
                // Same verifier: the client changes its callback; the
                // client id stays, the change waits for the confirmation.
                if c.verifier == verf {
                    let k = fresh_verifier(id, now);
                    v.pending = Some((k, (a.callback.clone(), a.callback_ident)));
                    return Setclientid4Res::Ok(Setclientid4ResOk {
                        clientid: id,
                        setclientid_confirm: xdr::FixedOpaque(k),
                    });
                }
            }
        }
        // A new client, or a new incarnation (another verifier) of a
        // confirmed one: a new unconfirmed record, replacing any earlier
        // unconfirmed one; the confirmed one goes when this is confirmed.
        let id = match self.new_client(&key, verf, &principal, now) {
            Ok(id) => id,
            Err(e) => return Setclientid4Res::Err(e),
        };
        let k = fresh_verifier(id, now);
        if let Some(c) = self.clients.get_mut(&id) {
            c.v40 = Some(V40Client {
                confirm: k,
                principal,
                callback: (a.callback.clone(), a.callback_ident),
                pending: None,
            });
        }
        Setclientid4Res::Ok(Setclientid4ResOk {
            clientid: id,
            setclientid_confirm: xdr::FixedOpaque(k),
        })
    }

    /// SETCLIENTID_CONFIRM (RFC 7530 §16.34.4) from `principal`: confirms
    /// an unconfirmed record (dropping the client's earlier incarnation
    /// and its state) or a pending callback update; a retry of a done
    /// confirmation is NFS4_OK again. An unknown client id or verifier is
    /// NFS4ERR_STALE_CLIENTID, another principal NFS4ERR_CLID_INUSE.
    pub(crate) fn setclientid_confirm(
        &mut self,
        clientid: u64,
        k: [u8; 8],
        principal: &Principal,
        now: Duration,
    ) -> Nfsstat4 {
        let Some(c) = self.clients.get_mut(&clientid) else {
            return Nfsstat4::NFS4ERR_STALE_CLIENTID;
        };
        let confirmed = c.confirmed;
        let Some(v) = c.v40.as_mut() else {
            return Nfsstat4::NFS4ERR_STALE_CLIENTID;
        };
        if v.principal != *principal {
            return Nfsstat4::NFS4ERR_CLID_INUSE;
        }
        if confirmed {
            match v.pending.take() {
                Some((pk, cb)) if pk == k => {
                    v.confirm = k;
                    v.callback = cb;
                }
                p => {
                    v.pending = p;
                    if v.confirm != k {
                        return Nfsstat4::NFS4ERR_STALE_CLIENTID;
                    }
                }
            }
        } else {
            if v.confirm != k {
                return Nfsstat4::NFS4ERR_STALE_CLIENTID;
            }
            self.confirm(clientid);
        }
        self.renew(clientid, now);
        Nfsstat4::NFS4_OK
    }

    /// The confirmed callback path of NFSv4.0 client `clientid` and its
    /// `callback_ident`.
    pub(crate) fn v40_callback(&self, clientid: u64) -> Option<(CbClient4, u32)> {
        let c = self.clients.get(&clientid)?;
        c.v40
            .as_ref()
            .filter(|_| c.confirmed)
            .map(|v| v.callback.clone())
    }

    /// Whether `clientid` was handed out by this server instance.
    pub(crate) fn is_this_boot(&self, clientid: u64) -> bool {
        (clientid >> 32) as u32 == self.boot
    }

    /// Renews the lease of the confirmed NFSv4.0 client `clientid` (RFC
    /// 7530 §9.6); NFS4ERR_STALE_CLIENTID for any other id.
    pub(crate) fn renew_v40(&mut self, clientid: u64, now: Duration) -> Nfsstat4 {
        match self.clients.get(&clientid) {
            Some(c) if c.confirmed && c.v40.is_some() => {
                self.renew(clientid, now);
                Nfsstat4::NFS4_OK
            }
            _ => Nfsstat4::NFS4ERR_STALE_CLIENTID,
        }
    }
}
