#!/usr/bin/env bash
# `make vagrant-box`: a Vagrant box for the libvirt provider, made here from Debian's packages, for lab
# rooms without Vagrant Cloud (and for `make vagrant-test`, which cannot reach it either).
#
#   plain (default)   Debian trixie as a stock box has it: its kernel, systemd, DHCP on every Ethernet NIC,
#                     OpenSSH, sudo, rsync and the `vagrant` user with Vagrant's insecure key. No testbed:
#                     the Vagrantfile's own provisioning installs it, as it does on debian/trixie64.
#   offline           the plain box provisioned here, in its chroot, by the scripts the Vagrantfile runs
#                     (kernel.sh, bootstrap.sh, as `make vm-image` does): the backports kernel, every package
#                     and the venv in /vagrant/.venv, apt's lists kept. In a room without internet `vagrant up`
#                     then provisions with no download: every step finds its work done (`make vagrant-test
#                     BOX=offline` proves it on a network with no way out). The venv is the one this
#                     checkout's requirements.txt and pyproject.toml pin: a checkout that changes them needs
#                     the registries again (bootstrap.sh then installs the difference).
#
# The disk is a raw image with one MBR partition, filled with `mkfs.ext4 -d` at the partition's offset,
# and GRUB written into the gap before it (boot.img in the MBR, a core.img with the modules it needs
# behind it): this kernel has no partition support for loop devices, so grub-install cannot run. GRUB
# boots /vmlinuz and /initrd.img, the symlinks Debian moves to the newest kernel it installs, so the
# provisioning's backports kernel boots after its reboot with no update-grub.
#
# The box is cached under $HPNLAB_BOX_CACHE by a hash of its inputs. Prints the .box path on its last line.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${HPNLAB_BOX_CACHE:-/var/cache/hpnlab/vagrant}"
suite=trixie
size_gib=20
label=hpnlab-root
log() { printf '[vagrant-box] %s\n' "$*" >&2; }
. "$here/scripts/vm/common.sh"
. "$here/scripts/vm/box.sh"

kind=${1:-plain}
inputs=(scripts/vm/build-box.sh scripts/vm/box.sh scripts/vm/common.sh)
case "$kind" in
  plain) ;;
  offline) inputs+=(scripts/vm/kernel.sh scripts/bootstrap.sh requirements.txt pyproject.toml) ;;
  *) echo "vagrant-box: BOX=$kind is not a kind of box; fix: BOX=plain (the default) or BOX=offline" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "vagrant-box: must run as root (debootstrap, chroot); fix: sudo make vagrant-box" >&2; exit 2
fi
key=$(cd "$here" && { echo "$kind"; cat "${inputs[@]}"; } | sha256sum | cut -c1-16)
name=hpnlab-trixie$([ "$kind" = plain ] || echo "-$kind")
box="$cache/$key/$name.box"
if [ -s "$box" ]; then
  log "cached box $key (inputs unchanged)"
  echo "$box"; exit 0
fi

need=()
for t in debootstrap mkfs.ext4 sfdisk qemu-img; do command -v "$t" >/dev/null || need+=("$t"); done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing debootstrap, e2fsprogs, fdisk, qemu-utils (missing: ${need[*]})"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap e2fsprogs fdisk qemu-utils >/dev/null
fi
insecure=$(vagrant_insecure_key)

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
debootstrap --variant=minbase \
  --include=systemd-sysv,systemd-resolved,udev,kmod,dbus,iproute2,iputils-ping,procps,ca-certificates,openssh-server,sudo,rsync,linux-image-amd64,initramfs-tools,grub-pc-bin,zstd,less \
  "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
t1=$(date +%s)
bind_system "$root"
if [ "$kind" = offline ]; then
  # before configure_guest: the chroot still resolves names through the host's resolv.conf debootstrap copied
  provision_guest "$here" "$root"
fi
configure_guest "$root" "$insecure"
core_image "$root" "$work/core.img"
unmount_all
t2=$(date +%s)

log "disk: ${size_gib} GiB sparse, MBR, ext4 at 1 MiB, GRUB before it"
disk_image "$root" "$work/core.img" "$work/disk.raw"
kver=$(ls "$root/lib/modules" | sort -V | tail -1)
mkdir -p "$work/box"
qemu-img convert -c -O qcow2 "$work/disk.raw" "$work/box/box.img"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$size_gib" >"$work/box/metadata.json"
# A box's own Vagrantfile: the user it was made for (with Vagrant's insecure key, Vagrant's default; Vagrant
# swaps it for a new key on first boot).
printf 'Vagrant.configure("2") do |config|\n  config.ssh.username = "vagrant"\nend\n' >"$work/box/Vagrantfile"
tar -C "$work/box" -cf "$work/$name.box" metadata.json Vagrantfile box.img
t3=$(date +%s)
mkdir -p "$(dirname "$box")"
mv "$work/$name.box" "$box"
cat >"$(dirname "$box")/manifest.json" <<JSON
{"key": "$key", "kind": "$kind", "suite": "$suite", "kernel": "$kver", "box": "$box", "bytes": $(stat -c %s "$box"),
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "seconds": {"debootstrap": $((t1-t0)), "configure": $((t2-t1)), "disk": $((t3-t2)), "total": $((t3-t0))}}
JSON
log "box $key ($kind): Debian $suite, kernel $kver, $(du -h "$box" | cut -f1), built in $((t3-t0)) s"
echo "$box"
