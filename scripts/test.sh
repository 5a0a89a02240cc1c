#!/usr/bin/env bash
# Runs every test of the default suite: unit, integration and doc tests of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
