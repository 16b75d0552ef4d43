# Sourced by build-box.sh: the pieces of a Vagrant box's guest and disk (host side, as root).

# vagrant_insecure_key: the path of Vagrant's published insecure public key, from the installed vagrant
# (installed if missing: the box is for it). A box is made with it; Vagrant replaces it on first boot.
vagrant_insecure_key() {
  if ! command -v vagrant >/dev/null; then
    log "installing vagrant (its insecure key goes into the box)"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends vagrant >/dev/null
  fi
  local k
  k=$(find /usr/share /usr/lib -path '*vagrant*/keys/vagrant.pub' 2>/dev/null | head -1)
  if [ -z "$k" ]; then
    echo "vagrant-box: Vagrant's keys/vagrant.pub not found under /usr; fix: apt-get install --reinstall vagrant" >&2
    return 2
  fi
  echo "$k"
}

# configure_guest ROOT PUBKEY: what a stock box has beyond the packages: a `vagrant` user with sudo and
# the key, DHCP on every Ethernet NIC (systemd-networkd), SSH host keys made at first boot (every VM its
# own), an empty machine-id (every VM its own DHCP identity), the root file system by label, GRUB's menu.
configure_guest() {
  local r=$1 pub=$2
  printf 'hpnlab\n' >"$r/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\thpnlab\n' >"$r/etc/hosts"
  printf 'LABEL=%s\t/\text4\terrors=remount-ro\t0\t1\n' "$label" >"$r/etc/fstab"
  printf '[Match]\nType=ether\n\n[Network]\nDHCP=yes\n' >"$r/etc/systemd/network/80-hpnlab-dhcp.network"
  chroot "$r" useradd -m -s /bin/bash -G sudo vagrant
  echo 'vagrant:vagrant' | chroot "$r" chpasswd
  printf 'vagrant ALL=(ALL) NOPASSWD: ALL\nDefaults:vagrant !requiretty\n' >"$r/etc/sudoers.d/vagrant"
  chmod 0440 "$r/etc/sudoers.d/vagrant"
  install -d -m 0700 "$r/home/vagrant/.ssh"
  install -m 0600 "$pub" "$r/home/vagrant/.ssh/authorized_keys"
  chroot "$r" chown -R vagrant:vagrant /home/vagrant/.ssh
  printf 'UseDNS no\n' >"$r/etc/ssh/sshd_config.d/hpnlab-vagrant.conf"
  rm -f "$r"/etc/ssh/ssh_host_*
  cat >"$r/etc/systemd/system/hpnlab-ssh-hostkeys.service" <<'UNIT'
[Unit]
Description=SSH host keys of this VM (the box ships none)
Before=ssh.service ssh.socket
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
UNIT
  chroot "$r" systemctl enable systemd-networkd systemd-resolved ssh hpnlab-ssh-hostkeys >/dev/null 2>&1
  ln -sf /run/systemd/resolve/stub-resolv.conf "$r/etc/resolv.conf"
  : >"$r/etc/machine-id"; rm -f "$r/var/lib/dbus/machine-id"
  mkdir -p "$r/boot/grub"
  cat >"$r/boot/grub/grub.cfg" <<CFG
# The box's boot menu (read by the GRUB in the disk's first MiB): the newest kernel Debian installed.
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=1
menuentry 'Debian GNU/Linux (hpnlab box)' {
  linux /vmlinuz root=LABEL=$label ro console=tty0 console=ttyS0,115200n8
  initrd /initrd.img
}
menuentry 'Debian GNU/Linux, the kernel before' {
  linux /vmlinuz.old root=LABEL=$label ro console=tty0 console=ttyS0,115200n8
  initrd /initrd.img.old
}
CFG
  site_trust "$r"
  chroot "$r" apt-get clean
  rm -rf "$r"/tmp/*
  # a stock box ships no package lists; the offline box keeps them: kernel.sh compares the installed kernel
  # with the candidate they name, and without them would try to install one with no network
  [ "${kind:-plain}" = offline ] || rm -rf "$r"/var/lib/apt/lists/*
}

# provision_guest HERE ROOT: the offline box's testbed. This checkout's files go to /vagrant (at `vagrant up`
# the synced folder's rsync replaces them, all but .venv/, which it excludes and so leaves in place), then
# the Vagrantfile's kernel and bootstrap provisioners run in the chroot as `make vm-image` runs them: the
# kernel for an image (no reboot), no services (a chroot has no init; they start at boot).
provision_guest() {
  local src=$1 r=$2
  site_trust "$r"
  mkdir -p "$r/vagrant"
  copy_tree "$src" "$r/vagrant"
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"; chmod +x "$r/usr/sbin/policy-rc.d"
  log "provisioning in the chroot: scripts/vm/kernel.sh, then scripts/bootstrap.sh (the Vagrantfile's)"
  chroot "$r" env HPNLAB_IN_IMAGE=1 bash /vagrant/scripts/vm/kernel.sh >&2
  chroot "$r" env HPNLAB_NO_SERVICES=1 bash /vagrant/scripts/bootstrap.sh >&2
  rm -f "$r/usr/sbin/policy-rc.d"
}

# core_image ROOT OUT: GRUB's i386-pc core image from the guest's own GRUB (trixie's reads its ext4),
# with everything it needs to find the menu on the first partition.
core_image() {
  local r=$1 out=$2
  chroot "$r" grub-mkimage -O i386-pc -o /tmp/core.img -p '(hd0,msdos1)/boot/grub' \
    biosdisk part_msdos ext2 normal linux echo serial terminal
  mv "$r/tmp/core.img" "$out"
  cp "$r/usr/lib/grub/i386-pc/boot.img" "$(dirname "$out")/boot.img"
  if [ "$(stat -c %s "$out")" -gt $((2047 * 512)) ]; then
    echo "vagrant-box: GRUB's core image is $(stat -c %s "$out") bytes, over the 1 MiB gap before the partition" >&2
    return 1
  fi
}

# disk_image ROOT CORE OUT: a sparse raw disk: MBR with one bootable Linux partition from 1 MiB, the root
# tree as ext4 in it, GRUB's boot.img in the MBR's code area (the partition table stays) and core.img
# right behind the MBR, where boot.img looks for it.
disk_image() {
  local r=$1 core=$2 out=$3
  rm -f "$out"
  truncate -s "${size_gib}G" "$out"
  printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$out"
  mkfs.ext4 -q -F -L "$label" -E offset=$((2048 * 512)) -d "$r" "$out" "$((size_gib * 1024 * 1024 - 1024))k"
  dd if="$(dirname "$core")/boot.img" of="$out" bs=440 count=1 conv=notrunc status=none
  dd if="$core" of="$out" bs=512 seek=1 conv=notrunc status=none
}
