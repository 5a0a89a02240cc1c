//! The exports(5) parser (`nfs_server::exports::parse`) on arbitrary
//! text: it never panics, and whatever it accepts prints (`Display`) as
//! a file it reads back to the same table.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ex) = nfs_server::exports::parse(text) {
        let printed = ex.to_string();
        let again = nfs_server::exports::parse(&printed).expect("printed table parses");
        assert_eq!(ex, again, "round trip of {printed:?}");
    }
});
