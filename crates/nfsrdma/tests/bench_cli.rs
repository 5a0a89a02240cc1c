//! `nfsrdma bench` as a user runs it: a small run of the paper's
//! experiment against the embedded server (a child `nfsrdma serve`),
//! checking the CSV holds every point with positive figures and the plots
//! are PNG files. No timing is asserted.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

mod support;

use support::TempDir;

/// The PNG signature and the IHDR chunk first (PNG spec §5.2, §5.3), with
/// a non-zero width and height.
fn assert_png(path: &std::path::Path) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() > 33, "{}: {} bytes", path.display(), b.len());
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&b[12..16], b"IHDR", "{}", path.display());
    let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
    assert!(w > 0 && h > 0, "{}: {w}x{h}", path.display());
    assert_eq!(&b[b.len() - 8..b.len() - 4], b"IEND", "{}", path.display());
}

#[test]
fn bench_writes_every_point_to_csv_and_plots() {
    let dir = TempDir::new("run");
    let csv = dir.0.join("points.csv");
    let plots = dir.0.join("plots");
    let out = Command::new(BIN)
        .args([
            "bench",
            "--size",
            "8M",
            "--read-sizes",
            "64k,1m",
            "--in-flight",
            "1,4",
            "--repeat",
            "2",
        ])
        .arg("--csv")
        .arg(&csv)
        .arg("--plot-dir")
        .arg(&plots)
        .output()
        .expect("run nfsrdma bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("sequential read of 8 MiB: 2 run(s) per point"),
        "{stdout}"
    );
    assert!(stdout.contains("sequential write of 8 MiB"), "{stdout}");
    assert!(stdout.contains("best read: rdma "), "{stdout}");
    assert!(stdout.contains("best write: rdma "), "{stdout}");

    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut seen = Vec::new();
    let mut order = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), header.len(), "{line}");
        assert_eq!(f[col("bytes")], "8388608", "{line}");
        for name in [
            "seconds",
            "mib_s",
            "client_cpu_s",
            "server_cpu_s",
            "client_cpu_s_per_gib",
            "server_cpu_s_per_gib",
        ] {
            let v: f64 = f[col(name)]
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {line}"));
            assert!(v > 0.0 && v.is_finite(), "{name} = {v}: {line}");
        }
        let load: f64 = f[col("load1")].parse().unwrap();
        assert!(load >= 0.0, "{line}");
        seen.push(format!(
            "{} {} {} {}",
            f[col("op")],
            f[col("transport")],
            f[col("io_size")],
            f[col("in_flight")]
        ));
        order.push((
            format!(
                "{} {} {}",
                f[col("op")],
                f[col("io_size")],
                f[col("in_flight")]
            ),
            f[col("transport")].to_owned(),
            f[col("rep")].to_owned(),
        ));
    }
    // Run order: each point's two runs per transport are back to back,
    // transports alternating (rdma tcp, then tcp rdma).
    for w in order.chunks(4) {
        assert!(w.iter().all(|r| r.0 == w[0].0), "{order:?}");
        let t: Vec<(&str, &str)> = w.iter().map(|r| (r.1.as_str(), r.2.as_str())).collect();
        assert_eq!(
            t,
            [("rdma", "0"), ("tcp", "0"), ("tcp", "1"), ("rdma", "1")],
            "{order:?}"
        );
    }
    seen.sort();
    let mut want = Vec::new();
    for op in ["read", "write"] {
        for t in ["rdma", "tcp"] {
            for s in ["65536", "1048576"] {
                for n in ["1", "4"] {
                    want.push(format!("{op} {t} {s} {n}"));
                    want.push(format!("{op} {t} {s} {n}"));
                }
            }
        }
    }
    want.sort();
    assert_eq!(seen, want);

    for name in [
        "read-throughput",
        "read-cpu",
        "write-throughput",
        "write-cpu",
    ] {
        assert_png(&plots.join(format!("{name}.png")));
    }
}

#[test]
fn random_reads_report_iops_and_latency_percentiles() {
    let dir = TempDir::new("rand");
    let csv = dir.0.join("points.csv");
    let out = Command::new(BIN)
        .args(["bench", "--pattern", "random", "--size", "2M"])
        .args(["--read-sizes", "4k", "--in-flight", "8"])
        .args(["--seconds", "0.3", "--repeat", "1", "--csv"])
        .arg(&csv)
        .output()
        .expect("run nfsrdma bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("random read in a 2 MiB file, 0.3 s per run"),
        "{stdout}"
    );
    assert!(stdout.contains("p99.9 us"), "{stdout}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for f in &rows {
        assert_eq!(f[col("op")], "random-read", "{f:?}");
        let num = |n: &str| {
            f[col(n)]
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{n}: {f:?}"))
        };
        let reads = num("reads");
        assert!(reads >= 8.0, "{f:?}");
        assert_eq!(num("bytes"), reads * 4096.0, "{f:?}");
        assert!(num("iops") > 0.0, "{f:?}");
        let (p50, p99, p999) = (num("p50_us"), num("p99_us"), num("p999_us"));
        assert!(p50 >= 1.0 && p50 <= p99 && p99 <= p999, "{f:?}");
    }
    let mut t: Vec<&str> = rows.iter().map(|f| f[col("transport")]).collect();
    t.sort();
    assert_eq!(t, ["rdma", "tcp"]);
}

#[test]
fn metadata_mode_reports_lookup_getattr_rate() {
    let dir = TempDir::new("meta");
    let csv = dir.0.join("points.csv");
    let out = Command::new(BIN)
        .args(["bench", "--pattern", "meta", "--in-flight", "4"])
        .args(["--seconds", "0.3", "--repeat", "1", "--csv"])
        .arg(&csv)
        .output()
        .expect("run nfsrdma bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("LOOKUP + GETATTR of random names, 0.3 s per run"),
        "{stdout}"
    );
    assert!(stdout.contains("client us/call"), "{stdout}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for f in &rows {
        assert_eq!(f[col("op")], "lookup-getattr", "{f:?}");
        // Calls come in LOOKUP + GETATTR pairs.
        let calls: u64 = f[col("reads")].parse().unwrap();
        assert!(calls >= 8 && calls % 2 == 0, "{f:?}");
        assert!(
            f[col("server_cpu_s")].parse::<f64>().unwrap() > 0.0,
            "{f:?}"
        );
    }
}

#[test]
fn bench_rejects_zero_reads_in_flight() {
    let out = Command::new(BIN)
        .args(["bench", "--size", "1M", "--in-flight", "0"])
        .output()
        .expect("run nfsrdma bench");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--in-flight"));
}

/// `nfsrdma serve` on ephemeral ports, killed on drop.
struct Serve {
    child: std::process::Child,
    line: String,
    state: std::path::PathBuf,
}

impl Serve {
    fn start(dir: &std::path::Path) -> Self {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg(dir)
            .arg("--state-dir")
            .arg(dir.with_extension("state"))
            .args(["--addr", "127.0.0.1", "--port", "0", "--rdma-port", "0"])
            .args(["--mount-port", "0", "--no-root-squash"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nfsrdma serve");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        Self {
            child,
            line,
            state: dir.with_extension("state"),
        }
    }

    fn port(&self, label: &str) -> u16 {
        let rest = self
            .line
            .split(label)
            .nth(1)
            .unwrap_or_else(|| panic!("{}", self.line));
        let addr = rest.split(',').next().unwrap().trim();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

#[test]
fn bench_against_an_external_server_leaves_its_cpu_unknown_and_reuses_the_file() {
    let dir = TempDir::new("url");
    let export = std::fs::canonicalize(&dir.0).unwrap();
    let srv = Serve::start(&export);
    let mount = srv.port("mount over tcp ");
    let rdma = format!(
        "nfs+rdma://127.0.0.1:{}{}/?mountport={mount}",
        srv.port("nfs over rdma "),
        export.display()
    );
    let tcp = format!(
        "nfs://127.0.0.1:{}{}/?mountport={mount}",
        srv.port("nfs over tcp "),
        export.display()
    );
    let csv = export.join("points.csv");
    let args = [
        "--size",
        "1M",
        "--read-sizes",
        "64k",
        "--in-flight",
        "2",
        "--repeat",
        "1",
        "--ops",
        "read",
        "--url",
        &rdma,
        "--url",
        &tcp,
    ];
    let stdout = bench(&args, &csv);
    assert!(stdout.contains("external server"), "{stdout}");
    let file = export.join("nfsrdma-bench-read.bin");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
    let written = std::fs::metadata(&file).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        let f: Vec<&str> = row.split(',').collect();
        assert!(f[1] == "rdma" || f[1] == "tcp", "{row}");
        assert_eq!(f[9], "", "server CPU must be unknown: {row}");
        assert_eq!(f[11], "", "server CPU must be unknown: {row}");
        assert!(f[7].parse::<f64>().unwrap() > 0.0, "{row}");
    }
    // A second run reads the same file without writing it again.
    bench(&args, &csv);
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        written
    );
}

/// The rows of a bench CSV, each as (column name → field).
fn csv_rows(path: &std::path::Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), header.len(), "{l}");
            header
                .iter()
                .cloned()
                .zip(f.into_iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

fn bench(args: &[&str], csv: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .arg("bench")
        .args(args)
        .arg("--csv")
        .arg(csv)
        .output()
        .expect("run nfsrdma bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn bench_interleaves_nfsv3_and_nfsv4_sessions_over_both_transports() {
    let dir = TempDir::new("v4");
    let csv = dir.0.join("points.csv");
    let stdout = bench(
        &[
            "--versions",
            "3,4.1",
            "--size",
            "4M",
            "--read-sizes",
            "64k",
            "--in-flight",
            "1,4",
            "--repeat",
            "1",
        ],
        &csv,
    );
    // v4 rows carry the v4/v3 ratio beside the RDMA/TCP one.
    assert!(stdout.contains("rdma-v4.1"), "{stdout}");
    assert!(stdout.contains("tcp-v4.1"), "{stdout}");
    assert!(stdout.contains("v4.1/v3 "), "{stdout}");
    assert!(stdout.contains("best read: rdma "), "{stdout}");
    assert!(stdout.contains("best read (v4.1): rdma "), "{stdout}");
    assert!(stdout.contains("best write over tcp: v4.1 "), "{stdout}");
    assert!(stdout.contains("best read over rdma: v4.1 "), "{stdout}");
    let rows = csv_rows(&csv);
    let mut seen: Vec<String> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["bytes"], "4194304", "{r:?}");
            for name in ["mib_s", "client_cpu_s", "server_cpu_s"] {
                let v: f64 = r[name].parse().unwrap();
                assert!(v > 0.0 && v.is_finite(), "{name}: {r:?}");
            }
            format!(
                "{} {} {} {}",
                r["op"], r["transport"], r["nfs_version"], r["in_flight"]
            )
        })
        .collect();
    seen.sort();
    let mut want = Vec::new();
    for op in ["read", "write"] {
        for t in ["rdma", "tcp"] {
            for v in ["3", "4.1"] {
                for n in ["1", "4"] {
                    want.push(format!("{op} {t} {v} {n}"));
                }
            }
        }
    }
    want.sort();
    assert_eq!(seen, want);
    // Sides alternate run by run: v3 rdma, v3 tcp, v4.1 rdma, v4.1 tcp.
    let first: Vec<String> = rows
        .iter()
        .take(4)
        .map(|r| format!("{} {}", r["transport"], r["nfs_version"]))
        .collect();
    assert_eq!(first, ["rdma 3", "tcp 3", "rdma 4.1", "tcp 4.1"]);
}

#[test]
fn bench_random_and_metadata_modes_over_nfsv4_2() {
    let dir = TempDir::new("v4timed");
    let csv = dir.0.join("points.csv");
    let timed = ["--seconds", "0.3", "--repeat", "1", "--versions", "4.2"];
    let stdout = bench(
        &[
            &["--pattern", "random", "--size", "2M", "--read-sizes", "4k"][..],
            &["--in-flight", "8"],
            &timed,
        ]
        .concat(),
        &csv,
    );
    assert!(stdout.contains("rdma-v4.2"), "{stdout}");
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["nfs_version"], "4.2", "{r:?}");
        assert_eq!(r["op"], "random-read", "{r:?}");
        let reads: f64 = r["reads"].parse().unwrap();
        assert!(reads >= 8.0, "{r:?}");
        assert_eq!(r["bytes"].parse::<f64>().unwrap(), reads * 4096.0, "{r:?}");
    }
    bench(
        &[&["--pattern", "meta", "--in-flight", "4"][..], &timed].concat(),
        &csv,
    );
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["op"], "lookup-getattr", "{r:?}");
        let calls: u64 = r["reads"].parse().unwrap();
        assert!(calls >= 8 && calls % 2 == 0, "{r:?}");
    }
}

#[test]
fn bench_over_nfsv4_urls_writes_the_file_byte_exact() {
    let dir = TempDir::new("v4url");
    let export = std::fs::canonicalize(&dir.0).unwrap();
    let srv = Serve::start(&export);
    let mount = srv.port("mount over tcp ");
    let url = |scheme: &str, label: &str| {
        format!(
            "{scheme}://127.0.0.1:{}{}/?mountport={mount}&version=4.1",
            srv.port(label),
            export.display()
        )
    };
    let csv = export.join("points.csv");
    let stdout = bench(
        &[
            "--size",
            "1M",
            "--read-sizes",
            "64k",
            "--in-flight",
            "2",
            "--repeat",
            "1",
            "--url",
            &url("nfs+rdma", "nfs over rdma "),
            "--url",
            &url("nfs", "nfs over tcp "),
        ],
        &csv,
    );
    assert!(stdout.contains("external server"), "{stdout}");
    // The file read was written over NFSv4 first: the bench's pattern.
    let data = std::fs::read(export.join("nfsrdma-bench-read.bin")).unwrap();
    let want: Vec<u8> = (0..1usize << 20)
        .map(|i| (i.wrapping_mul(31) % 251) as u8)
        .collect();
    assert!(data == want, "the file differs from the pattern");
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|r| r["nfs_version"] == "4.1"), "{rows:?}");
    // The written file is removed at the end.
    assert!(!export.join("nfsrdma-bench-write-tcp-v4.1.bin").exists());
}
