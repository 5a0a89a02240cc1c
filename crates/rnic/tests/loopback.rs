//! The device behaviour suite on the in-memory loopback device.

use rnic::conformance::Harness;
use rnic::loopback::{LoopbackDevice, LoopbackNetwork};

struct Loopback(LoopbackNetwork);

impl Harness for Loopback {
    type Dev = LoopbackDevice;

    fn pair(&self) -> (LoopbackDevice, LoopbackDevice) {
        (self.0.device(), self.0.device())
    }

    fn listen_addr(&self) -> String {
        String::new()
    }
}

rnic::conformance_suite!(Loopback(LoopbackNetwork::new(42)));
