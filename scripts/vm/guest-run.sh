#!/bin/bash
# Inside the test VM (started by guest-init, full kernel, no network): the
# project from the host's src share, its tests/vm, results into the out share.
set -u
t0=$(date +%s)
out=/mnt/out
echo "[vm] kernel $(uname -r), $(nproc) CPU(s), $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB"
ip link set lo up
sysctl -q --system >/dev/null 2>&1
missing=()
while read -r m; do modprobe "$m" 2>/dev/null || missing+=("$m"); done </etc/modules-load.d/hpnlab.conf
[ "${#missing[@]}" -eq 0 ] || echo "[vm] modules that did not load: ${missing[*]}"
. /mnt/src/scripts/vm/common.sh
# The code under test over the snapshot the image was built with; the project's own folders go first,
# so a module moved or deleted since the snapshot is not still importable from it.
for d in topos controllers traffic testbed tests examples bench experiments; do rm -rf "/opt/hpnlab/$d"; done
copy_tree /mnt/src /opt/hpnlab
cd /opt/hpnlab
/usr/share/openvswitch/scripts/ovs-ctl --no-monitor --system-id=random start >/dev/null 2>&1 \
  || { echo "[vm] Open vSwitch did not start"; exit 4; }
echo "[vm] ready after $(( $(date +%s) - t0 )) s"
# The BPF programs (the PFC agent's queue watch, ECN marking, DCTCP) are built for the running kernel on first
# use; under TCG that takes tens of seconds, which must not fall inside a timed start or a server's reply:
# doctor builds and tries them now (cached in /var/cache/hpnlab/bpf for this boot). The objects earlier boots
# built are handed in by run-tests.sh (bpf-cache in the out share; keyed by source, defines and kernel, as on
# the host), and what this boot builds goes back out, so a boot builds only what changed (83 s of clang here).
bpf=/var/cache/hpnlab/bpf
keep_bpf() {  # the objects only: vmlinux.h is for building and 3 MB a key
  [ -d "$out/bpf-cache" ] || return 0
  for o in "$bpf"/*/*.o; do
    [ -e "$o" ] || continue
    k=$(basename "$(dirname "$o")")
    [ -e "$out/bpf-cache/$k/$(basename "$o")" ] || { mkdir -p "$out/bpf-cache/$k" && cp "$o" "$out/bpf-cache/$k/"; }
  done
}
[ -d "$out/bpf-cache" ] && mkdir -p "$bpf" && cp -a "$out/bpf-cache/." "$bpf/"
kept=$(find "$bpf" -name '*.o' 2>/dev/null | wc -l)
t1=$(date +%s)
.venv/bin/hpnlab doctor >"$out/doctor-before.txt" 2>&1 || echo "[vm] doctor failed (see doctor-before.txt)"
echo "[vm] BPF programs built and tried in $(( $(date +%s) - t1 )) s ($kept object(s) kept from earlier boots):" \
  "$(grep -c 'BPF.*yes' "$out/doctor-before.txt") of 2 available"
keep_bpf
role=$(cat "$out/role" 2>/dev/null || echo test)  # the cluster tier boots the same image as a server or master
if [ "$role" != test ]; then
  # The kernel took its clock from qemu's RTC in whole seconds, so two VMs can be up to a second apart (0.7 s
  # once: the doctor refused it). Like NTP against the host: a file made on the out share gets the host's
  # time as its mtime; this clock takes it, plus half of the round trip. No network, no extra package.
  python3 - "$out/.clock" <<'PY' || echo "[vm] clock not set from the host"
import os, sys, time
path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
a = time.time()
os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
host = os.stat(path).st_mtime_ns / 1e9
b = time.time()
os.unlink(path)
time.clock_settime(time.CLOCK_REALTIME, host + (time.time() - a) - (b - a) / 2)
print(f"[vm] clock set from the host: it was {((a + b) / 2 - host) * 1e3:+.0f} ms off (round trip {(b - a) * 1e3:.0f} ms)")
PY
  bash /mnt/src/scripts/vm/guest-cluster.sh "$role"
  exit $?
fi
args=(tests/vm)
[ -s "$out/pytest-args" ] && mapfile -t args <"$out/pytest-args"
# Each test's outcome as it ends (tests/vm/conftest.py). After a kernel panic the next boot (run-tests.sh) runs
# only what the panicked boot had not finished: a panic costs a boot, not the tests again. A failure before the
# panic still fails the run.
progress="$out/progress"
done_before=() failed_before=0
if [ -s "$progress" ]; then
  while read -r outcome node; do
    done_before+=(--deselect "$node")
    [ "$outcome" = failed ] && failed_before=1
  done <"$progress"
  echo "[vm] resuming after a panic: $(wc -l <"$progress") outcome(s) of the earlier boot kept, those tests not run again"
fi
HPNLAB_VM_PROGRESS="$progress" .venv/bin/python -m pytest -v -s -p no:cacheprovider --durations=0 \
  --junitxml="$out/junit${done_before[*]:+-resumed}.xml" "${args[@]}" "${done_before[@]}"
rc=$?
if [ "${#done_before[@]}" -gt 0 ]; then
  [ "$rc" = 5 ] && rc=0  # no test left to collect: the earlier boot had run them all
  [ "$failed_before" = 1 ] && [ "$rc" = 0 ] && rc=1
fi
keep_bpf
.venv/bin/hpnlab doctor >"$out/doctor.txt" 2>&1
echo "[vm] tests finished in $(( $(date +%s) - t0 )) s (rc=$rc)"
exit $rc
