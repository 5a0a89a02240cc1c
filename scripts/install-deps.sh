#!/usr/bin/env bash
# Installs the Debian packages and cargo components the test suite uses (idempotent; root).
#   libnfs-utils  nfs-ls / nfs-cp / nfs-cat: an NFS client the project did not write (interop tests)
#   tshark tcpdump  Wireshark's dissectors, to check captures of our own traffic
#   fuse3         fusermount3 and /dev/fuse setup, for the `nfsrdma mount` FUSE test
#   libkrb5-dev libclang-dev  build: the gss crate binds MIT krb5's <gssapi.h> (libgssapi-sys runs bindgen)
#   krb5-kdc krb5-admin-server krb5-user  RPCSEC_GSS tests start a throw-away KDC (kdb5_util, kadmin.local, kinit)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(libnfs-utils tshark tcpdump fuse3 libkrb5-dev libclang-dev krb5-kdc krb5-admin-server krb5-user)
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
