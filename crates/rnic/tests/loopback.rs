//! The device behaviour suite on the in-memory loopback device.

use rnic::loopback::{LoopbackDevice, LoopbackNetwork};
use testkit::conformance::Harness;

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

testkit::conformance_suite!(Loopback(LoopbackNetwork::new(42)));
