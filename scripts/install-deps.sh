#!/usr/bin/env bash
# Installs the Debian packages and cargo components the test suite uses (idempotent; root).
#   libnfs-utils  nfs-ls / nfs-cp / nfs-cat: an NFS client the project did not write (interop tests)
#   tshark tcpdump  Wireshark's dissectors, to check captures of our own traffic
#   fuse3         fusermount3 and /dev/fuse setup, for the `nfsrdma mount` FUSE test
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(libnfs-utils tshark tcpdump fuse3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
echo "deps ok: ${pkgs[*]}"
