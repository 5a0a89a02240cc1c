//! The device behaviour suite (the same one the loopback device passes), over
//! real TCP connections on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::Harness;

struct Tcp {
    crc: bool,
}

static SEED: AtomicU64 = AtomicU64::new(1);

impl Harness for Tcp {
    type Dev = SoftDevice;

    fn pair(&self) -> (SoftDevice, SoftDevice) {
        let cfg = SoftConfig {
            crc: self.crc,
            ..SoftConfig::default()
        };
        let s = SEED.fetch_add(2, Ordering::Relaxed);
        (SoftDevice::new(cfg, s), SoftDevice::new(cfg, s + 1))
    }

    fn listen_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }
}

mod without_crc {
    testkit::conformance_suite!(super::Tcp { crc: false });
}

mod with_crc {
    testkit::conformance_suite!(super::Tcp { crc: true });
}
