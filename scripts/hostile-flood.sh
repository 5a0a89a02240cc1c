#!/usr/bin/env bash
# The long hostile-client floods against `nfsrdma serve` with its default
# bounds: tens of thousands of connections to the MOUNT and NFS ports (then
# one RDMA connect), a READ(1 MiB) flood on 64 connections that never read
# their replies, 4000 record marks claiming 4 MiB, 2000 silent connections
# to the RDMA port. Prints the server's RSS after each; figures recorded in
# docs/hardening.md. About a minute.
#
#   bash scripts/hostile-flood.sh            # 10000 connections per flood
#   FLOOD_CONNS=5000 bash scripts/hostile-flood.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The test process opens the flood's sockets itself: give it the hard limit.
ulimit -n "$(ulimit -Hn)"
exec cargo test --release -p nfsrdma --test hostile_conn -- \
    --ignored --nocapture --test-threads=1 long_floods_with_default_bounds
