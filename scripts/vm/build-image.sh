#!/usr/bin/env bash
# `make vm-image`: the testbed's full-kernel VM as a disk image, built from
# Debian's packages with debootstrap and provisioned inside a chroot by the same
# scripts the Vagrantfile runs (scripts/bootstrap.sh, scripts/vm/kernel.sh).
# The image is cached under $HPNLAB_VM_CACHE by a hash of its inputs and rebuilt
# only when one of them changes. Prints the image directory on its last line.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${HPNLAB_VM_CACHE:-/var/cache/hpnlab/vm}"
suite=trixie
size=6G
log() { printf '[vm-image] %s\n' "$*" >&2; }
. "$here/scripts/vm/common.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "vm-image: must run as root (debootstrap, chroot); fix: sudo make vm-image" >&2; exit 2
fi
inputs=(scripts/bootstrap.sh scripts/vm/kernel.sh scripts/vm/common.sh scripts/vm/build-image.sh
        scripts/vm/guest-init.sh requirements.txt requirements-nodeps.txt pyproject.toml)
key=$(cd "$here" && cat "${inputs[@]}" | sha256sum | cut -c1-16)
out="$cache/$key"
if [ -s "$out/disk.img" ] && [ -s "$out/vmlinuz" ] && [ -s "$out/initrd.img" ] && [ -s "$out/manifest.json" ]; then
  log "cached image $key (inputs unchanged)"
  echo "$out"; exit 0
fi

need=()
for t in debootstrap mkfs.ext4 qemu-system-x86_64; do command -v "$t" >/dev/null || need+=("$t"); done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing debootstrap, qemu (missing: ${need[*]})"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap e2fsprogs qemu-system-x86 qemu-utils >/dev/null
fi

mirror=$(debian_mirror)
work="$cache/build-$key"
root="$work/rootfs"
mounted=()
cleanup() {  # the chroot's mounts and the half-built tree are ours to undo, also on Ctrl-C
  unmount_all quiet
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf "$work"; mkdir -p "$work" "$cache"
t0=$(date +%s)

log "debootstrap $suite from $mirror"
debootstrap --variant=minbase --include=ca-certificates,zstd,initramfs-tools,udev,kmod,procps,iproute2 \
  "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
t1=$(date +%s)

bind_system "$root"
site_trust "$root"
# Services must not start inside the chroot (the packages' scripts would try).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"

log "copying the project into /opt/hpnlab"
mkdir -p "$root/opt/hpnlab"
copy_tree "$here" "$root/opt/hpnlab"

log "provisioning: scripts/vm/kernel.sh, then scripts/bootstrap.sh (as in the Vagrantfile)"
chroot "$root" env HPNLAB_IN_IMAGE=1 bash /opt/hpnlab/scripts/vm/kernel.sh >&2
chroot "$root" env HPNLAB_NO_SERVICES=1 bash /opt/hpnlab/scripts/bootstrap.sh >&2
install -m 0755 "$here/scripts/vm/guest-init.sh" "$root/sbin/hpnlab-vm-init"
# The guest boots straight into the test runner: no getty, no network.
printf 'hpnlab-vm\n' >"$root/etc/hostname"
rm -f "$root/usr/sbin/policy-rc.d"
chroot "$root" apt-get clean
t2=$(date +%s)

kver=$(ls "$root/lib/modules" | sort -V | tail -1)
unmount_all
mkdir -p "$work/out"
cp "$root/boot/vmlinuz-$kver" "$work/out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/out/initrd.img"
log "mkfs.ext4 -d ($size sparse)"
truncate -s "$size" "$work/out/disk.img"
mkfs.ext4 -q -F -L hpnlab-root -d "$root" "$work/out/disk.img"
t3=$(date +%s)
pkgs=$(chroot "$root" dpkg-query -W -f='${Package}=${Version}\n' 2>/dev/null \
       | grep -E '^(linux-image-[0-9]|openvswitch-switch|mininet|rdma-core|perftest|iproute2|python3)=' | tr '\n' ' ')
cat >"$work/out/manifest.json" <<JSON
{"key": "$key", "suite": "$suite", "kernel": "$kver", "packages": "$pkgs",
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "seconds": {"debootstrap": $((t1-t0)), "provision": $((t2-t1)), "mkfs": $((t3-t2)), "total": $((t3-t0))}}
JSON
rm -rf "$out"; mv "$work/out" "$out"
log "image $key: kernel $kver, built in $((t3-t0)) s (debootstrap $((t1-t0)) s, provision $((t2-t1)) s, mkfs $((t3-t2)) s)"
echo "$out"
