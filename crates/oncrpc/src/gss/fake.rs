//! A stand-in GSS-API mechanism for tests: NOT security. Both sides share
//! a 64-bit key; the initiator's first token names its principal; MICs are
//! a keyed 64-bit hash and "encryption" XORs a keystream. It exists so
//! the RFC 2203 context table, sequence window and the three services are
//! tested round trip, under replay and under tampering, without a KDC.

use super::mech::{
    Acceptor, GssError, Initiator, SecContext, Step, GSS_S_BAD_SIG, GSS_S_DEFECTIVE_TOKEN,
};

const INIT1: &[u8] = b"FAKE1";
const INIT2: &[u8] = b"FAKE2";
const MORE: &[u8] = b"FAKE-MORE";
const DONE: &[u8] = b"FAKE-OK";

/// The acceptor: contexts for initiators that hold the same key.
#[derive(Debug, Clone, Copy)]
pub struct FakeAcceptor {
    /// The shared key.
    pub key: u64,
    /// Establishment round trips (1, or 2 to exercise CONTINUE_INIT).
    pub rounds: u32,
}

/// The initiator: a principal and its key.
#[derive(Debug, Clone)]
pub struct FakeInitiator {
    /// The principal the acceptor will see.
    pub principal: String,
    /// The shared key.
    pub key: u64,
}

impl Acceptor for FakeAcceptor {
    fn new_context(&self) -> Result<Box<dyn SecContext>, GssError> {
        Ok(Box::new(FakeCtx {
            key: self.key,
            rounds_left: self.rounds.max(1),
            principal: None,
            initiator: false,
            complete: false,
        }))
    }
}

impl Initiator for FakeInitiator {
    fn new_context(&self, _target: &str) -> Result<Box<dyn SecContext>, GssError> {
        Ok(Box::new(FakeCtx {
            key: self.key,
            rounds_left: 0,
            principal: Some(self.principal.clone()),
            initiator: true,
            complete: false,
        }))
    }
}

struct FakeCtx {
    key: u64,
    rounds_left: u32,
    principal: Option<String>,
    initiator: bool,
    complete: bool,
}

fn defective(what: &str) -> GssError {
    GssError::new(GSS_S_DEFECTIVE_TOKEN, what)
}

/// FNV-1a over the key's bytes then the message.
fn keyed_hash(key: u64, msg: &[u8]) -> [u8; 8] {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in key.to_be_bytes().iter().chain(msg) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.to_be_bytes()
}

fn keystream_xor(key: u64, data: &mut [u8]) {
    let mut x = key | 1;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (b, k) in chunk.iter_mut().zip(x.to_be_bytes()) {
            *b ^= k;
        }
    }
}

impl FakeCtx {
    fn initiator_step(&mut self, token: &[u8]) -> Result<Step, GssError> {
        if token.is_empty() {
            let mut t = INIT1.to_vec();
            t.extend_from_slice(&self.key.to_be_bytes());
            t.extend_from_slice(self.principal.as_deref().unwrap_or("").as_bytes());
            return Ok(Step {
                token: t,
                complete: false,
            });
        }
        if token == MORE {
            return Ok(Step {
                token: INIT2.to_vec(),
                complete: false,
            });
        }
        if token == DONE {
            self.complete = true;
            return Ok(Step {
                token: Vec::new(),
                complete: true,
            });
        }
        Err(defective("unexpected acceptor token"))
    }

    fn acceptor_step(&mut self, token: &[u8]) -> Result<Step, GssError> {
        if self.principal.is_none() {
            let rest = token
                .strip_prefix(INIT1)
                .ok_or_else(|| defective("not a fake initiator token"))?;
            let (key, name) = rest.split_at_checked(8).ok_or_else(|| defective("short"))?;
            if key != self.key.to_be_bytes() {
                return Err(GssError::new(GSS_S_BAD_SIG, "token for another key"));
            }
            self.principal = Some(String::from_utf8_lossy(name).into_owned());
        } else if token != INIT2 {
            return Err(defective("unexpected continuation token"));
        }
        self.rounds_left = self.rounds_left.saturating_sub(1);
        if self.rounds_left > 0 {
            return Ok(Step {
                token: MORE.to_vec(),
                complete: false,
            });
        }
        self.complete = true;
        Ok(Step {
            token: DONE.to_vec(),
            complete: true,
        })
    }
}

impl SecContext for FakeCtx {
    fn step(&mut self, token: &[u8]) -> Result<Step, GssError> {
        if self.initiator {
            self.initiator_step(token)
        } else {
            self.acceptor_step(token)
        }
    }

    fn peer_name(&self) -> Result<String, GssError> {
        match (&self.principal, self.initiator, self.complete) {
            (Some(p), false, true) => Ok(p.clone()),
            (_, true, true) => Ok("fake-acceptor".into()),
            _ => Err(defective("context not established")),
        }
    }

    /// The principal's name before `@`.
    fn local_name(&self) -> Option<String> {
        let p = self.peer_name().ok()?;
        p.split('@').next().map(str::to_owned)
    }

    fn get_mic(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        Ok(keyed_hash(self.key, msg).to_vec())
    }

    fn verify_mic(&mut self, msg: &[u8], mic: &[u8]) -> Result<(), GssError> {
        if mic == keyed_hash(self.key, msg) {
            Ok(())
        } else {
            Err(GssError::new(GSS_S_BAD_SIG, "bad MIC"))
        }
    }

    fn wrap(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        let mut out = keyed_hash(self.key, msg).to_vec();
        let at = out.len();
        out.extend_from_slice(msg);
        keystream_xor(self.key, &mut out[at..]);
        Ok(out)
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, GssError> {
        let (mic, body) = token
            .split_at_checked(8)
            .ok_or_else(|| defective("short"))?;
        let mut msg = body.to_vec();
        keystream_xor(self.key, &mut msg);
        self.verify_mic(&msg, mic)?;
        Ok(msg)
    }
}
