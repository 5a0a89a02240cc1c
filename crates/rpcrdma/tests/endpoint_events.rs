//! The sans-IO responder under arbitrary event sequences (the same driver
//! as the `rpcrdma_endpoint` fuzz target): proptest inputs, plus
//! sequences that fill the credits and answer in every order.

#[path = "support/responder_events.rs"]
mod events;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn responder_holds_its_invariants(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        events::drive(&data);
    }
}

/// Eight template calls on a connection of eight credits, then a ninth
/// (over credit), then answers.
#[test]
fn a_full_window_then_answers() {
    let mut data = vec![7u8, 20, 100];
    for i in 0..9u8 {
        // template: xid, credits, no inline, flags, kind v1 MSG, no chunks
        data.extend_from_slice(&[1, 0, 0, 0, i, 8, 0, 1, 0, 0, 0, 1]);
    }
    for k in 0..8u8 {
        // answer held call k: no words, no bulk item, no trailing words
        data.extend_from_slice(&[3, k, 0, 0, 0]);
    }
    events::drive(&data);
}
