//! Test support shared by softrnic's tests: a pair of software devices
//! connected over loopback TCP, and a bounded wait for a completion.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use rnic::{CompletionQueue, WorkCompletion};
use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::Harness;

/// Two devices with this configuration (ids 1 and 2) on 127.0.0.1.
pub struct Tcp(pub SoftConfig);

impl Tcp {
    /// Devices that send a connection's first message at once (no
    /// first-send delay), otherwise the defaults.
    pub fn quick() -> Self {
        Self(SoftConfig {
            first_send_delay: Duration::ZERO,
            ..SoftConfig::default()
        })
    }

    /// As [`Tcp::quick`], with the MPA CRC on or off.
    pub fn quick_crc(crc: bool) -> Self {
        Self(SoftConfig {
            crc,
            ..Self::quick().0
        })
    }
}

impl Harness for Tcp {
    type Dev = SoftDevice;
    fn pair(&self) -> (SoftDevice, SoftDevice) {
        (SoftDevice::new(self.0, 1), SoftDevice::new(self.0, 2))
    }
    fn listen_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }
}

/// The next completion on `cq`, failing the test after 10 s.
pub async fn next(cq: &CompletionQueue) -> WorkCompletion {
    tokio::time::timeout(Duration::from_secs(10), cq.next())
        .await
        .expect("completion in time")
        .expect("no overflow")
}
