#!/bin/bash
# Builds the Debian package of nfsrdma (docs/operability.md): the release
# binary, the manual pages and completions generated from it, then
# `cargo deb` with [package.metadata.deb] of crates/nfsrdma/Cargo.toml.
# Extra arguments go to cargo deb. Output: target/debian/nfsrdma_*.deb.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked
[ -n "${NO_BUILD:-}" ] || cargo build --release -p nfsrdma
out="${CARGO_TARGET_DIR:-target}/release"
gen="$out/packaging"
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$out/nfsrdma" man "$gen/man" >/dev/null
gzip -9n "$gen/man/"*.1
"$out/nfsrdma" completions bash >"$gen/completions/nfsrdma"
"$out/nfsrdma" completions zsh >"$gen/completions/_nfsrdma"
"$out/nfsrdma" completions fish >"$gen/completions/nfsrdma.fish"
cargo deb -p nfsrdma --no-build "$@"
