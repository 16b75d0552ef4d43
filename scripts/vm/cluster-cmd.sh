#!/usr/bin/env bash
# Runs a command on s1 of an interactive cluster run (HPNLAB_CLUSTER_INTERACTIVE=1 make cluster-test) and
# prints its output: scripts/vm/cluster-cmd.sh results/cluster-<date> 'cd /opt/hpnlab && ...'
# The project is copied in again first (on s1 and, over SSH, on s2), so each command sees the current tree.
set -euo pipefail
run=$1; shift
n=$(date +%s%N)
f="$run/s1/cmd/$n.sh"
mkdir -p "$run/s1/cmd"
cat >"$f.tmp" <<SH
. /mnt/src/scripts/vm/common.sh
copy_tree /mnt/src /opt/hpnlab
for peer in \$(cat /mnt/out/peers); do ssh -n root@\$peer '. /mnt/src/scripts/vm/common.sh && copy_tree /mnt/src /opt/hpnlab'; done
cd /opt/hpnlab
$*
SH
mv "$f.tmp" "$f"
while [ ! -e "${f%.sh}.rc" ]; do sleep 1; done
cat "${f%.sh}.out"
exit "$(cat "${f%.sh}.rc")"
