#!/bin/bash
# The package install test (issue 16, docs/operability.md): installs the
# Debian package with `dpkg -i` in a clean Debian bookworm container booted
# with systemd (systemd-nspawn --boot, an ephemeral copy of a debootstrap
# root, private network), lets the package's maintainer scripts enable and
# start nfsrdma.service under that systemd, then, inside, checks the unit is
# active, lists and reads a file of the packaged export over NFSv3/TCP,
# NFSv4.1/TCP and NFSv3/RDMA with the installed binary, restarts the unit,
# reads again, and purges the package. Takes a few minutes; not in the
# default suite.
#
# Needs root, debootstrap and systemd-container (systemd-nspawn); the host's
# PID 1 need not be systemd. The root is built once (network: Debian's
# archive) and kept in $ROOT.
#
# Usage: bash scripts/deb-systemd-test.sh [DEB]
#   DEB   the package (default: the newest target/debian/nfsrdma_*.deb, built
#         with packaging/build-deb.sh when there is none)
# Environment: ROOT (default /var/tmp/nfsrdma-deb-root), MIRROR (default
# http://deb.debian.org/debian), TIMEOUT seconds for the boot (default 300),
# OUT directory for the log (default a temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/var/tmp/nfsrdma-deb-root}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
TIMEOUT=${TIMEOUT:-300}
target=${CARGO_TARGET_DIR:-target}

die() { echo "deb-systemd-test: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, systemd-nspawn)"
for t in debootstrap systemd-nspawn dpkg-deb; do
    command -v "$t" >/dev/null ||
        die "$t missing (apt-get install debootstrap systemd-container)"
done

deb=${1:-$(ls -t "$target"/debian/nfsrdma_*.deb 2>/dev/null | head -1 || true)}
if [ -z "$deb" ]; then
    bash packaging/build-deb.sh
    deb=$(ls -t "$target"/debian/nfsrdma_*.deb | head -1)
fi
deb=$(readlink -f "$deb")
echo "package: $deb"
dpkg-deb -f "$deb" Package Version Depends

if [ ! -x "$ROOT/lib/systemd/systemd" ]; then
    echo "building the container root in $ROOT (debootstrap bookworm)"
    rm -rf "$ROOT"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iproute2 \
        bookworm "$ROOT" "$MIRROR"
fi
# What the package's Depends name ($auto: the binary's libraries).
chroot "$ROOT" dpkg -s libgssapi-krb5-2 >/dev/null 2>&1 ||
    chroot "$ROOT" apt-get install -y -q libgssapi-krb5-2

OUT=${OUT:-$(mktemp -d /tmp/nfsrdma-deb-test.XXXXXX)}
mkdir -p "$OUT"
work=$(mktemp -d /var/tmp/nfsrdma-deb-work.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$deb" "$work/"
rm -f "$OUT/result"

# Run inside the container once it has booted: as a unit of its own systemd.
cat >"$work/pkgtest.sh" <<'INNER'
#!/bin/bash
set -uo pipefail
exec >/out/log 2>&1
fail() { echo "PKGTEST: FAILED: $*"; echo FAILED >/out/result; systemctl poweroff; exit 1; }
echo "== systemd $(systemctl --version | head -1), $(systemctl is-system-running)"
echo "== dpkg -i"
dpkg -i /pkg/nfsrdma_*.deb || fail "dpkg -i"
dpkg -L nfsrdma | grep -E 'bin/nfsrdma$|nfsrdma.service$|man1/nfsrdma.1'
echo "== the unit, enabled and started by the package's scripts"
systemctl is-enabled nfsrdma.service || fail "not enabled"
for _ in $(seq 100); do
    systemctl is-active -q nfsrdma.service && ss -ltn | grep -q ':2049 ' && break
    sleep 0.2
done
systemctl --no-pager status nfsrdma.service | head -12
systemctl is-active -q nfsrdma.service || fail "not active"
ss -ltnp | grep nfsrdma
echo "hello from the package under systemd" >/srv/nfs/hello
read_back() {
    local got
    for url in 'nfs://127.0.0.1/srv/nfs/hello?mountport=20048' \
               'nfs://127.0.0.1/srv/nfs/hello?version=4.1&mountport=20048' \
               'nfs+rdma://127.0.0.1/srv/nfs/hello?mountport=20048'; do
        got=$(nfsrdma cat "$url") || fail "cat $url"
        [ "$got" = "hello from the package under systemd" ] || fail "$url read '$got'"
        echo "read over $url: $got"
    done
    nfsrdma ls 'nfs://127.0.0.1/srv/nfs?mountport=20048' || fail ls
}
read_back
echo "== systemctl restart"
systemctl restart nfsrdma.service || fail restart
for _ in $(seq 100); do ss -ltn | grep -q ':2049 ' && break; sleep 0.2; done
read_back
journalctl -u nfsrdma.service --no-pager | tail -5
echo "== dpkg --purge"
dpkg --purge nfsrdma || fail purge
systemctl is-active -q nfsrdma.service && fail "still running after purge"
[ ! -e /usr/bin/nfsrdma ] || fail "binary left after purge"
echo "PKGTEST: OK"
echo OK >/out/result
systemctl poweroff
INNER
chmod +x "$work/pkgtest.sh"
cat >"$work/pkgtest.service" <<'UNIT'
[Unit]
Description=nfsrdma package install test
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/pkgtest/pkgtest.sh
[Install]
WantedBy=default.target
UNIT

echo "booting the container (systemd-nspawn --boot --ephemeral, private network)"
# systemd.wants= (systemd-debug-generator; in a container PID 1's arguments
# stand for the kernel command line) starts the test once booted.
set +e
timeout "$TIMEOUT" systemd-nspawn --quiet --boot --ephemeral --private-network \
    --register=no --keep-unit --directory="$ROOT" --machine=nfsrdma-pkgtest \
    --bind-ro="$work:/pkgtest" --bind-ro="$work:/pkg" --bind="$OUT:/out" \
    --bind-ro="$work/pkgtest.service:/etc/systemd/system/pkgtest.service" \
    systemd.wants=pkgtest.service >"$OUT/console" 2>&1 </dev/null
rc=$?
set -e
cat "$OUT/log" 2>/dev/null || true
echo "(container console: $OUT/console; nspawn exit $rc)"
[ "$(cat "$OUT/result" 2>/dev/null)" = OK ] || die "FAILED (see $OUT/log, $OUT/console)"
echo "deb-systemd-test: OK"
