//! `SoftConfig::first_send_delay`: the initiator holds its first FPDU back
//! after the MPA Reply (Linux siw's responder race, shared/kpeer/README.md
//! bug B) unless the responder sends first.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softrnic::{SoftConfig, SoftDevice};
use testkit::conformance::{connect_pair, Harness};

struct Tcp(Duration);

impl Harness for Tcp {
    type Dev = SoftDevice;
    fn pair(&self) -> (SoftDevice, SoftDevice) {
        let cfg = SoftConfig {
            first_send_delay: self.0,
            ..SoftConfig::default()
        };
        (SoftDevice::new(cfg, 21), SoftDevice::new(cfg, 22))
    }
    fn listen_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }
}

#[test]
fn default_delay_is_200_ms() {
    assert_eq!(
        SoftConfig::default().first_send_delay,
        Duration::from_millis(200)
    );
}

#[tokio::test]
async fn connect_waits_the_first_send_delay_for_a_silent_responder() {
    let start = Instant::now();
    let _pair = connect_pair(&Tcp(Duration::from_millis(600)), 4, 4).await;
    assert!(
        start.elapsed() >= Duration::from_millis(600),
        "connected after {:?}",
        start.elapsed()
    );
}
