//! What an installation uses: manual pages, shell completions, the config
//! file of `serve` and the example files of packaging/.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");
const SUBCOMMANDS: [&str; 10] = [
    "serve",
    "echo-server",
    "rpc-ping",
    "ls",
    "cat",
    "cp",
    "bench",
    "mount",
    "man",
    "completions",
];

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run nfsrdma")
}

/// The long options `nfsrdma serve --help` lists.
fn serve_options() -> BTreeSet<String> {
    let help = String::from_utf8(run(&["serve", "--help"]).stdout).unwrap();
    let options: BTreeSet<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.to_string())
        .collect();
    assert!(options.len() > 20, "{help}");
    options
}

#[test]
fn man_pages_cover_every_subcommand_and_serve_option() {
    let dir = TempDir::new("man");
    let out = dir.0.join("man1");
    let r = run(&["man", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // roff escapes '-' as '\-'.
    let main = std::fs::read_to_string(out.join("nfsrdma.1"))
        .unwrap()
        .replace("\\-", "-");
    assert!(
        main.starts_with(".ie") && main.contains(".TH nfsrdma 1"),
        "{main}"
    );
    for sub in SUBCOMMANDS {
        let page = out.join(format!("nfsrdma-{sub}.1"));
        assert!(page.exists(), "no page {}", page.display());
        assert!(main.contains(sub), "nfsrdma.1 lacks {sub}");
    }
    let serve = std::fs::read_to_string(out.join("nfsrdma-serve.1"))
        .unwrap()
        .replace("\\-", "-");
    for option in serve_options() {
        assert!(serve.contains(&option), "nfsrdma-serve.1 lacks {option}");
    }
    assert!(serve.contains("TOML"), "the --config text is in the page");
}

#[test]
fn completions_name_the_subcommands_and_serve_options() {
    for shell in ["bash", "zsh", "fish"] {
        let r = run(&["completions", shell]);
        assert!(r.status.success(), "{shell}");
        let script = String::from_utf8(r.stdout).unwrap();
        assert!(script.len() > 1000, "{shell}: {script}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completions lack {sub}");
        }
        for option in ["rdma-port", "max-connections", "config"] {
            assert!(script.contains(option), "{shell} completions lack {option}");
        }
    }
    let r = run(&["completions", "tcsh"]);
    assert!(!r.status.success());
}

/// Starts `serve` with `args`, returns its first line of standard output
/// (what it listens on) and stops it.
fn serving_line(args: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    line.expect("serve printed what it serves")
}

fn free_port() -> u16 {
    support::serve::free_port()
}

#[test]
fn config_file_sets_options_and_a_flag_overrides_one() {
    let dir = TempDir::new("config");
    let export = dir.0.join("export");
    std::fs::create_dir(&export).unwrap();
    let (file_port, flag_port, mount_port) = (free_port(), free_port(), free_port());
    let config = dir.0.join("nfsrdma.toml");
    std::fs::write(
        &config,
        format!(
            "dir = {:?}\naddr = \"127.0.0.1\"\nport = {file_port}\nmount-port = {mount_port}\n\
             transports = [\"tcp\"]\nstate-dir = {:?}\nread-only = true\n",
            export.display().to_string(),
            dir.0.join("state").display().to_string(),
        ),
    )
    .unwrap();
    let port = flag_port.to_string();
    let line = serving_line(&["--config", config.to_str().unwrap(), "--port", &port]);
    assert_eq!(
        line.trim(),
        format!(
            "serving {}: nfs over tcp 127.0.0.1:{flag_port}, mount over tcp 127.0.0.1:{mount_port}",
            export.display()
        ),
        "dir, addr, mount-port and transports from the file, --port from the flag"
    );
    assert!(dir.0.join("state").is_dir(), "state-dir from the file");
}

#[test]
fn config_file_errors_name_the_key() {
    let dir = TempDir::new("config-bad");
    let config = dir.0.join("bad.toml");
    let cases = [
        (
            "dir = \"/tmp\"\nmax-conections = 5\n",
            "unknown key `max-conections`",
        ),
        ("port = \"many\"\n", "--port"),
        ("read-only = \"yes\"\n", "`read-only` takes true or false"),
        ("port = [1\n", "bad.toml"),
    ];
    for (text, want) in cases {
        std::fs::write(&config, text).unwrap();
        let r = run(&["serve", "--config", config.to_str().unwrap(), "/tmp"]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{text} accepted");
        assert!(err.contains(want), "{text}: wanted {want} in {err}");
    }
    let r = run(&["serve", "--config", "/nonexistent/nfsrdma.toml"]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("reading config /nonexistent"));
}

/// The example config the package installs is accepted key by key: with
/// its listeners moved to loopback ephemeral ports, the server starts.
#[test]
fn packaged_example_config_and_exports_start_a_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging");
    let dir = TempDir::new("packaged");
    let export = dir.0.join("export");
    std::fs::create_dir(&export).unwrap();
    let example = std::fs::read_to_string(root.join("exports")).unwrap();
    let exports = dir.0.join("exports");
    std::fs::write(
        &exports,
        example.replace("/srv/nfs", export.to_str().unwrap()),
    )
    .unwrap();
    let (p, m, r) = (free_port(), free_port(), free_port());
    let (p, m, r) = (p.to_string(), m.to_string(), r.to_string());
    let state = dir.0.join("state");
    let line = serving_line(&[
        "--config",
        root.join("nfsrdma.toml").to_str().unwrap(),
        "--exports",
        exports.to_str().unwrap(),
        "--addr",
        "127.0.0.1",
        "--port",
        &p,
        "--mount-port",
        &m,
        "--rdma-port",
        &r,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(
        line.starts_with(&format!("serving {}:", export.display())),
        "{line}"
    );
    assert!(
        line.contains(&format!("nfs over rdma 127.0.0.1:{r}")),
        "{line}"
    );
    let unit = std::fs::read_to_string(root.join("nfsrdma.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/nfsrdma serve --config /etc/nfsrdma/nfsrdma.toml"));
}
