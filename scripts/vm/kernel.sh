#!/usr/bin/env bash
# The full-kernel step of the VM, shared by the Vagrantfile and `make vm-image`:
# Debian trixie's own 6.12 kernel cannot run soft-RoCE between network
# namespaces, the trixie-backports kernel can. Installs it and names the modules
# the testbed needs at boot (kernel OVS datapath, rxe, netem, red, prio, bonding).
# A reboot is needed afterwards unless this runs while building an image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
KERNEL_SUITE=trixie-backports
KERNEL_PACKAGE=linux-image-amd64
MODULES=(openvswitch rdma_rxe ib_uverbs rdma_ucm sch_netem sch_red sch_prio sch_mqprio sch_fq_codel bonding)

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
log() { printf '[kernel] %s\n' "$*"; }

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ "$codename" != trixie ]; then
  echo "kernel.sh: this VM step is for Debian trixie, found '${codename:-unknown}'; fix: use the trixie box the Vagrantfile names" >&2
  exit 2
fi
mirror=$(debian_mirror)
src=/etc/apt/sources.list.d/hpnlab-backports.sources
if [ ! -e "$src" ]; then
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$mirror" "$KERNEL_SUITE" >"$src"
  apt-get update -qq
fi
if ! dpkg-query -W -f='${Status}' "$KERNEL_PACKAGE" 2>/dev/null | grep -q "install ok installed" \
   || [ "$(apt-cache policy "$KERNEL_PACKAGE" | awk '/Installed:/{print $2}')" != \
        "$(apt-cache policy -t "$KERNEL_SUITE" "$KERNEL_PACKAGE" | awk '/Candidate:/{print $2}')" ]; then
  log "installing $KERNEL_PACKAGE from $KERNEL_SUITE"
  apt-get install -y -qq -t "$KERNEL_SUITE" "$KERNEL_PACKAGE" >/dev/null
fi
printf '%s\n' "${MODULES[@]}" >/etc/modules-load.d/hpnlab.conf
newest=$(ls /lib/modules | sort -V | tail -1)
log "kernel $newest installed; modules at boot: ${MODULES[*]}"
if [ "$(uname -r)" != "$newest" ] && [ -z "${HPNLAB_IN_IMAGE:-}" ]; then
  log "running $(uname -r): reboot once to use $newest"
fi
