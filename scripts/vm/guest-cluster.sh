#!/bin/bash
# Inside a cluster-tier VM (`make cluster-test`), after guest-run.sh has set up the project and Open vSwitch:
# the cluster network (one NIC, an address from the out share), root's SSH key made for the run, sshd on the
# cluster address only. A server then waits for the host to say stop; the master (s1) waits for its peers'
# SSH and runs tests/cluster with HPNLAB_CLUSTER pointing at the run's cluster.yaml.
set -u
out=/mnt/out
role=$1
name=$(cat "$out/name")
addr=$(cat "$out/address")  # e.g. 192.168.7.2/24
dev=$(ip -o link show | awk -F': ' '$2 != "lo" {print $2; exit}')
hostname "$name"
echo "127.0.1.1 $name" >>/etc/hosts  # sudo looks its own host name up, and Mininet reads its warning as an error
ip addr add "$addr" dev "$dev" && ip link set "$dev" up
install -d -m 700 /root/.ssh
install -m 600 "$out/id_cluster" /root/.ssh/id_cluster
install -m 644 "$out/id_cluster.pub" /root/.ssh/authorized_keys
cat >/root/.ssh/config <<CONF
Host 192.168.7.*
  IdentityFile /root/.ssh/id_cluster
  StrictHostKeyChecking accept-new
  ConnectTimeout 10
  # one SSH connection per server, shared by every command and node shell: a key exchange costs 8-15 s
  # under TCG emulation
  ControlMaster auto
  ControlPath /root/.ssh/cm-%r@%h:%p
  ControlPersist 600
CONF
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
/usr/sbin/sshd -o "ListenAddress=${addr%/*}" -o UseDNS=no || { echo "[cluster] $name: sshd did not start"; exit 6; }
echo "[cluster] $name: $dev ${addr}, sshd listening"
touch "$out/ready"
if [ "$role" = server ]; then
  while [ ! -e "$out/stop" ]; do sleep 1; done
  echo "[cluster] $name: stopping"
  exit 0
fi
for peer in $(cat "$out/peers"); do
  for _ in $(seq 150); do ssh -n "root@$peer" true 2>/dev/null && break; sleep 2; done
  ssh -n "root@$peer" true || { echo "[cluster] $name: no SSH to $peer"; exit 7; }
done
if [ -e "$out/interactive" ]; then  # scripts/vm/cluster-cmd.sh hands commands in through the out share
  echo "[cluster] $name: every server answers; waiting for commands in $out/cmd"
  mkdir -p "$out/cmd"
  while [ ! -e "$out/stop" ]; do
    for f in "$out"/cmd/*.sh; do
      [ -e "$f" ] && [ ! -e "${f%.sh}.rc" ] || continue
      bash "$f" >"${f%.sh}.out" 2>&1
      echo $? >"${f%.sh}.rc"
    done
    sleep 1
  done
  exit 0
fi
echo "[cluster] $name: every server answers; running tests/cluster"
args=(tests/cluster)
[ -s "$out/pytest-args" ] && mapfile -t args <"$out/pytest-args"
HPNLAB_CLUSTER="$out/cluster.yaml" .venv/bin/python -m pytest -v -s -p no:cacheprovider --durations=0 \
  --junitxml="$out/junit.xml" "${args[@]}"
