//! `nfsrdma dump`'s decoder (`dump::decode_capture`) on arbitrary bytes as
//! a pcap file: captures are untrusted input (a capture may be cut short,
//! corrupted or made by hand), so it never panics, and every line it
//! prints and its report are produced without allocating on lengths the
//! file claims beyond the file itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut lines = 0usize;
    if let Ok(report) = dump::decode_capture(data, |_| lines += 1) {
        let _ = report.to_string();
    }
});
