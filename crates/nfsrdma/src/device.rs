//! Which RDMA device a command runs on: the software iWARP device
//! (softrnic) or an RDMA NIC through rdma-core (the `verbs` crate), chosen
//! by `--rdma-device auto|soft|NAME` (serve, bench) and `?device=` (client
//! URLs); and `nfsrdma devices`, which lists what rdma-core sees.

use std::net::IpAddr;

use anyhow::bail;

/// A device choice as given on the command line or in a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeviceChoice {
    /// The verbs device that owns the address, else the software device.
    Auto,
    /// The software iWARP device.
    Soft,
    /// The rdma-core device of this name (`siw0`, `rxe0`, `mlx5_0`).
    Named(String),
}

impl std::str::FromStr for DeviceChoice {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "soft" | "softrnic" => Ok(DeviceChoice::Soft),
            "" => bail!("empty device name (auto, soft or an rdma-core device name)"),
            n if n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') =>
            {
                Ok(DeviceChoice::Named(n.to_string()))
            }
            n => bail!("{n:?} is not a device name (auto, soft or an rdma-core device name)"),
        }
    }
}

impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Soft => f.write_str("soft"),
            DeviceChoice::Named(n) => f.write_str(n),
        }
    }
}

/// The device a command runs on.
pub(crate) enum Chosen {
    /// softrnic.
    Soft,
    /// A NIC through rdma-core.
    Verbs(verbs::VerbsDevice),
}

/// Resolves `choice` for a server listening on `addr`: `Auto` takes the
/// verbs device whose network interface owns `addr` (rdma_cm's binding
/// rule), else the software device, and logs which and why in one line.
pub(crate) fn choose(
    choice: &DeviceChoice,
    addr: Option<IpAddr>,
    seed: u64,
) -> anyhow::Result<Chosen> {
    choose_by(choice, addr, seed, verbs::device_for_addr)
}

/// Resolves `choice` for a client of a server at `peer`: `Auto` takes the
/// verbs device rdma_cm routes `peer` through, else the software device.
pub(crate) fn choose_for_peer(
    choice: &DeviceChoice,
    peer: Option<IpAddr>,
    seed: u64,
) -> anyhow::Result<Chosen> {
    choose_by(choice, peer, seed, verbs::device_for_peer)
}

fn choose_by(
    choice: &DeviceChoice,
    addr: Option<IpAddr>,
    seed: u64,
    find: fn(IpAddr) -> Option<String>,
) -> anyhow::Result<Chosen> {
    match choice {
        DeviceChoice::Soft => Ok(Chosen::Soft),
        DeviceChoice::Named(name) => Ok(Chosen::Verbs(open(name, seed)?)),
        DeviceChoice::Auto => match addr.and_then(find) {
            Some(name) => {
                let dev = open(&name, seed)?;
                tracing::info!(
                    device = %name,
                    transport = %dev.info().transport,
                    "RDMA device: {name} (rdma-core), for {}",
                    addr.map(|a| a.to_string()).unwrap_or_default()
                );
                Ok(Chosen::Verbs(dev))
            }
            None => {
                let why = match addr {
                    Some(a) if a.is_unspecified() => format!(
                        "listening on the wildcard {a} (give --addr of an RDMA interface, or --rdma-device NAME)"
                    ),
                    Some(a) => format!("no rdma-core device serves {a}"),
                    None => "no address to match".to_string(),
                };
                tracing::info!("RDMA device: the software iWARP device (softrnic): {why}");
                Ok(Chosen::Soft)
            }
        },
    }
}

/// Opens a verbs device, first raising the locked-memory limit: every
/// registered region is pinned and counted against RLIMIT_MEMLOCK, whose
/// usual 8 MiB would refuse the second 1 MiB READ or WRITE chunk buffer.
fn open(name: &str, seed: u64) -> anyhow::Result<verbs::VerbsDevice> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let dev = verbs::VerbsDevice::open(name, seed)?;
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_MEMLOCK) {
        // Unlimited where allowed (root), else up to the hard limit.
        if setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY).is_err() && soft < hard
        {
            let _ = setrlimit(Resource::RLIMIT_MEMLOCK, hard, hard);
        }
        let now = getrlimit(Resource::RLIMIT_MEMLOCK)
            .map(|l| l.0)
            .unwrap_or(soft);
        if now != RLIM_INFINITY && now < 256 << 20 {
            tracing::warn!(
                bytes = now,
                "locked-memory limit (ulimit -l) is low for RDMA registrations; raise it"
            );
        }
    }
    Ok(dev)
}

/// Arguments of `nfsrdma devices`.
#[derive(clap::Args, Debug)]
pub(crate) struct DevicesArgs {}

/// `nfsrdma devices`: one line per device rdma-core sees.
pub(crate) fn list(_args: DevicesArgs) -> anyhow::Result<()> {
    let devs = match verbs::devices() {
        Ok(d) => d,
        Err(e) => {
            println!("no RDMA devices: {e}");
            return Ok(());
        }
    };
    if devs.is_empty() {
        println!(
            "no RDMA devices: rdma-core is installed but sees none ({})",
            verbs::USE_SOFT
        );
        return Ok(());
    }
    println!(
        "{:<16} {:<11} {:<12} {:>14} {:>7} {:>7}",
        "device", "transport", "port 1", "max MR bytes", "max SGE", "IRD/ORD"
    );
    for d in devs {
        println!(
            "{:<16} {:<11} {:<12} {:>14} {:>7} {:>7}",
            d.name, d.transport, d.port_state, d.max_mr_size, d.max_sge, d.max_qp_rd_atom
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_choices_parse_and_bad_names_are_refused() {
        assert_eq!("auto".parse::<DeviceChoice>().unwrap(), DeviceChoice::Auto);
        assert_eq!("soft".parse::<DeviceChoice>().unwrap(), DeviceChoice::Soft);
        assert_eq!(
            "rxe0".parse::<DeviceChoice>().unwrap(),
            DeviceChoice::Named("rxe0".into())
        );
        assert!("".parse::<DeviceChoice>().is_err());
        assert!("a/b".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn auto_on_a_wildcard_or_loopback_address_falls_back_to_softrnic() {
        for a in ["0.0.0.0", "127.0.0.1"] {
            let got = choose(&DeviceChoice::Auto, Some(a.parse().unwrap()), 1).unwrap();
            assert!(matches!(got, Chosen::Soft), "{a}");
        }
    }

    #[test]
    fn a_named_device_that_is_not_there_says_how_to_use_softrnic() {
        let e = choose(&DeviceChoice::Named("nonesuch7".into()), None, 1)
            .err()
            .unwrap();
        let msg = format!("{e:#}");
        assert!(msg.contains("--rdma-device soft"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }
}
