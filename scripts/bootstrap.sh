#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian 12/13 or Ubuntu 22.04+ machine for hpnlab.
# Run as root. Installs system packages, starts Open vSwitch (without systemd
# when there is none) and makes .venv with the project and its pinned deps.
# Every step checks first, so a second run is fast and changes nothing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/.venv"
log() { printf '[bootstrap] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: must run as root (Mininet and OVS need it); fix: sudo $0" >&2
  exit 2
fi

# Packages: the fabric (mininet, OVS), traffic (iperf3, perftest, rdma-core),
# inspection (tcpdump, ethtool, iproute2), the toolchain for the venv, and the BPF
# toolchain the kernel queue accounting is built with (testbed/qos/bpf: clang,
# libbpf's headers and library, bpftool for vmlinux.h).
pkgs=(mininet openvswitch-switch iperf3 iproute2 ethtool iputils-ping tcpdump
      rdma-core ibverbs-utils perftest python3-venv python3-pip git make procps kmod
      clang llvm libbpf-dev libbpf1 bpftool)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing: ${missing[*]}"
  apt-get update -qq
  # policy-rc.d stops the package scripts from trying to start services:
  # there may be no init system; we start OVS ourselves just below.
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  if [ "$had_policy" -eq 0 ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ "$had_policy" -eq 0 ] && rm -f /usr/sbin/policy-rc.d
else
  log "system packages present"
fi

# Userspace OVS sends on every port through ONE AF_PACKET socket, created at its
# first send with the default send buffer. Every packet waiting in any egress
# qdisc is charged to that buffer: at Linux's default (208 KB) the fabric's queues
# together hold ~90 frames and OVS silently drops the rest. 64 MB lets the
# emulated switch buffers fill as configured.
want_wmem=67108864
# It receives on each port through a packet socket of its own, made when the port
# is added, with the default receive buffer: at 208 KB (~90 frames) a port whose
# frames came while the OVS thread was away (a loaded machine: 50 ms is enough at
# a port's rate) overflowed it, and the frames were gone with no counter but the
# socket's own (`ss -0 -m`, d): a lossless UDP incast lost 34-124 frames in 1 of
# ~10 runs, with every qdisc and OVS counter at 0. 16 MB lets them wait instead.
want_rmem=16777216
printf 'net.core.wmem_default = %s\nnet.core.wmem_max = %s\nnet.core.rmem_default = %s\nnet.core.rmem_max = %s\n' \
  "$want_wmem" "$want_wmem" "$want_rmem" "$want_rmem" >/etc/sysctl.d/60-hpnlab.conf
start_services() {
  sysctl -q -w net.core.wmem_max=$want_wmem net.core.wmem_default=$want_wmem
  if [ "$(cat /proc/sys/net/core/rmem_max)" -lt "$want_rmem" ]; then sysctl -q -w net.core.rmem_max=$want_rmem; fi
  sysctl -q -w net.core.rmem_default=$want_rmem
  ovs_sndbuf() {  # the send buffer of ovs-vswitchd's packet socket, or nothing if it has none yet
    ss -0 -m -p 2>/dev/null | grep ovs-vswitchd | sed -n 's/.*tb\([0-9]*\).*/\1/p' | head -1 || true
  }

  # Open vSwitch: ovs-ctl starts ovsdb-server and ovs-vswitchd without systemd.
  # Without the kernel module ovs-vswitchd still runs; bridges use datapath_type=netdev.
  if ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    tb=$(ovs_sndbuf | head -1)
    if [ -n "$tb" ] && [ "$tb" -lt "$want_wmem" ]; then
      if [ -z "$(ovs-vsctl list-br)" ]; then
        log "restarting Open vSwitch so its packet socket gets the larger send buffer ($tb -> $want_wmem)"
        /usr/share/openvswitch/scripts/ovs-ctl --no-monitor --system-id=random restart >/dev/null 2>&1
      else
        log "WARNING: ovs-vswitchd's packet socket has a $tb-byte send buffer and bridges exist;" \
            "restart Open vSwitch when they are gone (queued packets beyond it are dropped)"
      fi
    fi
    log "Open vSwitch running"
  else
    log "starting Open vSwitch"
    /usr/share/openvswitch/scripts/ovs-ctl --no-monitor --system-id=random start >/dev/null 2>&1 \
      || /usr/share/openvswitch/scripts/ovs-ctl --system-id=random start --no-ovs-vswitchd >/dev/null 2>&1 || true
    if ! pgrep -x ovs-vswitchd >/dev/null; then
      # ovs-ctl refuses vswitchd when it cannot load the kernel module; start it ourselves.
      ovs-vswitchd --pidfile --detach --log-file >/dev/null 2>&1 || true
    fi
    ovs-vsctl --timeout=10 show >/dev/null || { echo "bootstrap: Open vSwitch did not start; see /var/log/openvswitch/" >&2; exit 1; }
  fi
}

# Building a VM image (scripts/vm/build-image.sh) runs this in a chroot: the
# packages and the venv go into the image; the services start when it boots.
if [ -n "${HPNLAB_NO_SERVICES:-}" ]; then
  log "image build: sysctl and Open vSwitch are left for boot time"
else
  start_services
fi

# The venv sees the system site-packages because Debian's Mininet lives there.
stamp="$venv/.hpnlab-installed"
want="$(cat "$here/requirements.txt" "$here/requirements-nodeps.txt" "$here/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python dependencies (pinned in requirements.txt)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  # packages whose declared dependencies we do not need (requirements-nodeps.txt says why)
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/requirements-nodeps.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$here"
  echo "$want" >"$stamp"
else
  log "venv up to date"
fi
log "ready: $venv/bin/hpnlab"
