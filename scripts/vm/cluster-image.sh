#!/usr/bin/env bash
# The cluster tier's VM image (`make cluster-test`, issue #18): the test VM image (build-image.sh) plus what
# Mininet's cluster edition needs on every server: an SSH server and client, and sudo. Derived from the base
# image rather than added to it, so the VM tier's image (and its cache key) stay as they are. Cached under
# $HPNLAB_VM_CACHE/cluster-<base key>-<hash of this file>. Prints the image directory on its last line.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${HPNLAB_VM_CACHE:-/var/cache/hpnlab/vm}"
log() { printf '[cluster-image] %s\n' "$*" >&2; }
. "$here/scripts/vm/common.sh"
PACKAGES=(openssh-server openssh-client sudo)

base=$(bash "$here/scripts/vm/build-image.sh" | tail -1)
key="cluster-$(basename "$base")-$(sha256sum <"$here/scripts/vm/cluster-image.sh" | cut -c1-8)"
out="$cache/$key"
if [ -s "$out/disk.img" ] && [ -s "$out/manifest.json" ]; then
  log "cached image $key"
  echo "$out"; exit 0
fi
work="$cache/build-$key"
mnt="$work/root"
mounted=()
cleanup() {  # our mounts and the half-built image, also on Ctrl-C
  unmount_all quiet
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf "$work"; mkdir -p "$work/out" "$mnt"
t0=$(date +%s)
cp --sparse=always "$base/disk.img" "$work/out/disk.img"
mount -o loop "$work/out/disk.img" "$mnt"; mounted+=("$mnt")
bind_system "$mnt"
site_trust "$mnt"
printf '#!/bin/sh\nexit 101\n' >"$mnt/usr/sbin/policy-rc.d"; chmod +x "$mnt/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$mnt/etc/resolv.conf"  # the chroot fetches from the image's own Debian sources
log "installing ${PACKAGES[*]}"
chroot "$mnt" apt-get update -qq
chroot "$mnt" apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
rm -f "$mnt/usr/sbin/policy-rc.d" "$mnt"/etc/ssh/ssh_host_*  # each VM makes its own host keys at boot
chroot "$mnt" apt-get clean
unmount_all
cp "$base/vmlinuz" "$base/initrd.img" "$work/out/"
printf '{"key": "%s", "base": "%s", "packages": "%s", "seconds": %d}\n' "$key" "$(basename "$base")" \
  "${PACKAGES[*]}" "$(( $(date +%s) - t0 ))" >"$work/out/manifest.json"
rm -rf "$out"; mv "$work/out" "$out"
log "image $key built in $(( $(date +%s) - t0 )) s"
echo "$out"
