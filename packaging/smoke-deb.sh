#!/bin/bash
# Smoke test of the built package without a container: unpacks the .deb
# into a scratch root, copies in the libraries its binary links, then runs
# the unit's own ExecStart chrooted there in a fresh network namespace, and
# lists and reads the packaged export (/srv/nfs) over NFSv3/TCP and
# NFSv3/RDMA with the packaged binary. Needs root (unshare, chroot).
# Usage: bash packaging/smoke-deb.sh [target/debian/nfsrdma_*.deb]
set -euo pipefail
cd "$(dirname "$0")/.."
deb=${1:-$(ls -t target/debian/nfsrdma_*.deb | head -1)}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
unit="$root/usr/lib/systemd/system/nfsrdma.service"
[ -e "$unit" ] || unit="$root/lib/systemd/system/nfsrdma.service"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
echo "unit: ${unit#"$root"}: $exec_start"
for lib in $(ldd "$root/usr/bin/nfsrdma" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# What the unit's StateDirectory= and the post-install script provide.
mkdir -p "$root/srv/nfs" "$root/var/lib/nfsrdma" "$root/tmp"
echo "hello from the package" >"$root/srv/nfs/hello"
chroot "$root" /usr/bin/nfsrdma --version
unshare -n bash -c '
    set -euo pipefail
    root=$1; shift
    ip link set lo up
    chroot "$root" "$@" >"$root/tmp/serve.out" 2>"$root/tmp/serve.err" &
    pid=$!
    trap "kill $pid 2>/dev/null; wait $pid 2>/dev/null || true" EXIT
    for _ in $(seq 100); do grep -q serving "$root/tmp/serve.out" && break; sleep 0.1; done
    cat "$root/tmp/serve.out"
    for scheme in nfs nfs+rdma; do
        echo "-- $scheme"
        chroot "$root" /usr/bin/nfsrdma ls "$scheme://127.0.0.1/srv/nfs?mountport=20048"
        chroot "$root" /usr/bin/nfsrdma cat "$scheme://127.0.0.1/srv/nfs/hello?mountport=20048"
    done
' smoke "$root" $exec_start
echo "smoke-deb: OK"
