#!/usr/bin/env bash
# The sans-IO layers must stay free of an async runtime (DESIGN.md: protocol
# logic in plain functions and state machines, IO in thin shells above).
# Fails if tokio (or another IO runtime) is among the normal dependencies of
# xdr, iwarp, nfs, rnic or dump (the capture decoder), or of oncrpc or
# rpcrdma (whose sans-IO endpoint is outside its `transport` feature)
# without their default features.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() {
    local label=$1; shift
    local found
    found=$(cargo tree "$@" -e normal --prefix none 2>/dev/null |
        grep -E '^(tokio|async-std|smol|mio) ' | sort -u || true)
    if [ -n "$found" ]; then
        echo "FAIL: $label depends on: $found"
        fail=1
    else
        echo "ok: $label has no IO runtime"
    fi
}
for c in xdr iwarp nfs rnic dump; do check "$c" -p "$c"; done
check "oncrpc (no default features)" -p oncrpc --no-default-features
check "rpcrdma (no default features: wire, plan, endpoint)" -p rpcrdma --no-default-features
exit $fail
