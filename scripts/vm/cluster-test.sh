#!/usr/bin/env bash
# `make cluster-test` (issue #18): two VMs from the cluster image, s1 and s2, joined by one virtual cable
# that is a TCP connection on 127.0.0.1 (qemu's socket netdev), so no test traffic touches this machine's
# interfaces. The run makes an SSH key of its own; s2 serves, s1 runs tests/cluster against both.
#   HPNLAB_VM_ACCEL=kvm|tcg, HPNLAB_VM_MEM (2048 MiB per VM), HPNLAB_CLUSTER_TIMEOUT (2400 s);
#   arguments go to pytest on s1 (default tests/cluster).
#   HPNLAB_CLUSTER_INTERACTIVE=1: no tests; s1 runs what scripts/vm/cluster-cmd.sh hands it, until
#   `touch <run>/s1/stop` (for developing against the two servers without booting them each time).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[cluster-test] %s\n' "$*"; }
t0=$(date +%s)
if ! command -v ssh-keygen >/dev/null; then  # the run's key is made here
  log "installing openssh-client (ssh-keygen)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-client
fi
img=$(bash "$here/scripts/vm/cluster-image.sh" | tail -1)
. "$here/scripts/vm/qemu.sh"
vm_accel cluster-test
out="$here/results/cluster-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out/s1" "$out/s2"
ssh-keygen -q -t ed25519 -N "" -C "hpnlab cluster test $(basename "$out")" -f "$out/id_cluster"
for s in s1 s2; do
  cp "$out/id_cluster" "$out/id_cluster.pub" "$out/$s/"
  echo "$s" >"$out/$s/name"
  echo "192.168.7.${s#s}/24" >"$out/$s/address"
done
echo server >"$out/s2/role"
echo master >"$out/s1/role"
echo 192.168.7.2 >"$out/s1/peers"
cat >"$out/s1/cluster.yaml" <<YAML
# made by scripts/vm/cluster-test.sh for this run
servers:
  - {name: s1, ssh: 192.168.7.1, key: id_cluster, tunnel_ip: 192.168.7.1}
  - {name: s2, ssh: 192.168.7.2, key: id_cluster, tunnel_ip: 192.168.7.2}
tunnel: gre
link_gbps: 1
YAML
[ -n "${HPNLAB_CLUSTER_INTERACTIVE:-}" ] && touch "$out/s1/interactive"
[ "$#" -gt 0 ] && printf '%s\n' "$@" >"$out/s1/pytest-args"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

pids=()
cleanup() {  # our qemu processes and overlays, also on Ctrl-C
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -f "$out"/s?/overlay.qcow2 "$out"/id_cluster "$out"/s?/id_cluster  # the logs stay, the run's private key not
  bpf_cache_out "$out/s1" "$out/s2"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bpf_cache_in "$out/s1" "$out/s2"
boot() {  # NAME, then the cluster NIC's socket option
  local s=$1 sock=$2
  vm_start "$img" "$out/$s" 1 "${HPNLAB_VM_MEM:-2048}" \
    -netdev "socket,id=cl,$sock" -device "virtio-net-pci,netdev=cl,mac=52:54:00:07:00:0${s#s}"
  pids+=("$vm_pid")
}
log "booting s2 (server) and s1 (master) with $accel; cable: 127.0.0.1:$port"
boot s2 "listen=127.0.0.1:$port"
# s1 boots as soon as s2's end of the cable listens: the two boots overlap (a CPU each), and s1's tests start
# once every server answers over SSH (guest-cluster.sh waits up to 300 s; s2's sshd starts when it is ready)
for _ in $(seq 100); do
  ss -Hltn "sport = :$port" | grep -q . && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
ss -Hltn "sport = :$port" | grep -q . || { log "s2's qemu does not listen on $port (see $out/s2/console.log)"; exit 5; }
boot s1 "connect=127.0.0.1:$port"
( for _ in $(seq 300); do [ -e "$out/s2/ready" ] && { log "s2 up in $(( $(date +%s) - t0 )) s"; exit 0; }; sleep 1; done
  log "s2 did not come up in 300 s (see $out/s2/console.log)" ) &
pids+=("$!")  # the watcher above: ended with the VMs
tail -n +1 -f --pid="${pids[1]}" "$out/s1/console.log" &
# waited on in the background: bash runs the TERM trap (and so the cleanup) only between commands
timeout "${HPNLAB_CLUSTER_TIMEOUT:-2400}" tail --pid="${pids[1]}" -f /dev/null &
wait $! || log "timed out after ${HPNLAB_CLUSTER_TIMEOUT:-2400} s"
touch "$out/s2/stop"
for _ in $(seq 30); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 1; done
rc=$(cat "$out/s1/rc" 2>/dev/null || echo 5)
log "total $(( $(date +%s) - t0 )) s; results in $out (rc=$rc)"
printf '{"accel": "%s", "total_s": %d, "rc": %s}\n' "$accel" "$(( $(date +%s) - t0 ))" "$rc" >"$out/times.json"
exit "$rc"
