#!/usr/bin/env bash
# `make vagrant-test`: the Vagrantfile run by Vagrant itself, end to end, as a teacher runs it, on the box
# `make vagrant-box` makes here (Vagrant Cloud is not reachable from our machines): tests/vagrant brings the
# VM up with the libvirt provider (the three provisioners install the testbed), runs a lab's check and a
# small experiment in it and copies the results out, opens the web view through `vagrant ssh -- -L` in
# Chromium, provisions a second time (nothing may change) and destroys the VM. Every step's time goes to
# results/vagrant-<time>/times.json.
#
# Owned here and undone on exit, also on Ctrl-C: the libvirtd and virtlogd this script starts (it refuses
# to run beside a libvirtd it did not start), Vagrant's state (VAGRANT_HOME and the project copy, in a
# temporary folder), the libvirt network, pool and volumes that did not exist before, and the kernel's
# IPv4 forwarding switch libvirt turns on for the VM's NAT. The guest reaches the package registries
# through that NAT; its test traffic stays inside it.
#   HPNLAB_BOX_KIND=plain|offline (`make vagrant-test BOX=offline`): the offline box (build-box.sh) comes
#   up on a network with no way out (HPNLAB_VM_NETWORK=isolated), so its provisioning must need none.
#   HPNLAB_VM_DRIVER=kvm|qemu (default: kvm where it really boots, qemu (TCG) otherwise),
#   HPNLAB_VM_CPUS (2), HPNLAB_VM_MEM (4096 MiB); arguments go to pytest.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[vagrant-test] %s\n' "$*" >&2; }
. "$here/scripts/vm/common.sh"
. "$here/scripts/vm/qemu.sh"
. "$here/scripts/vm/libvirt.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "vagrant-test: must run as root (libvirtd); fix: sudo make vagrant-test" >&2; exit 2
fi
kind=${HPNLAB_BOX_KIND:-plain}
t0=$(date +%s)
box=$(bash "$here/scripts/vm/build-box.sh" "$kind" | tail -1)
t_box=$(( $(date +%s) - t0 ))
ensure_libvirt_packages
vm_accel vagrant-test
[ "$accel" = kvm ] && driver=kvm || driver=qemu
export HPNLAB_VM_DRIVER=${HPNLAB_VM_DRIVER:-$driver}

out="$here/results/vagrant-$([ "$kind" = plain ] || echo "$kind-")$(date -u +%Y%m%d-%H%M%S)"
work=$(mktemp -d /var/tmp/hpnlab-vagrant.XXXXXX)
mkdir -p "$out"
cleanup() {
  local rc=$?
  if [ -d "$work/project/.vagrant" ]; then
    (cd "$work/project" && timeout 300 vagrant destroy -f >>"$out/destroy.log" 2>&1) || log "vagrant destroy failed (destroy.log)"
  fi
  libvirt_down "$work"
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

libvirt_up "$work"
export VAGRANT_HOME="$work/vagrant.d" VAGRANT_DEFAULT_PROVIDER=libvirt VAGRANT_CHECKPOINT_DISABLE=1
export HPNLAB_BOX=hpnlab/trixie-test HPNLAB_VAGRANT_PROJECT="$work/project" HPNLAB_VAGRANT_OUT="$out"
if [ "$kind" = offline ]; then network=isolated; else network=nat; fi
export HPNLAB_BOX_KIND="$kind" HPNLAB_VM_NETWORK="$network"
t1=$(date +%s)
# from the work folder: any vagrant command reads the Vagrantfile where it runs and makes .vagrant/ beside it
(cd "$work" && vagrant box add --name "$HPNLAB_BOX" "$box") >"$out/box-add.log" 2>&1 \
  || { tail -5 "$out/box-add.log" >&2; exit 1; }
copy_tree "$here" "$work/project"
printf '{"box_kind": "%s", "box_s": %d, "box_add_s": %d}\n' "$kind" "$t_box" "$(( $(date +%s) - t1 ))" \
  >"$out/times-setup.json"
log "$kind box ready in ${t_box} s; libvirt driver $HPNLAB_VM_DRIVER, network $HPNLAB_VM_NETWORK;" \
    "Vagrant state in $work; results in $out"
rc=0
"$here/.venv/bin/python" -m pytest -q -rs -p no:cacheprovider "${@:-$here/tests/vagrant}" || rc=$?
log "total $(( $(date +%s) - t0 )) s (rc=$rc)"
exit "$rc"
