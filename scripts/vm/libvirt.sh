# Sourced by vagrant-test.sh: a libvirtd of our own for one test, and the undoing of everything it made.
# Needs `log`. Every list of "what was there before" is written into the work folder WORK.

VIRSH=(virsh -q -c qemu:///system)
LIBVIRT_PACKAGES=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients dnsmasq-base iptables
                  qemu-system-x86 qemu-utils rsync openssh-client)

# Debian's packages; their install scripts start libvirtd and virtlogd through the init scripts when no
# systemd runs: those we stop again the same way (they were not running before the install, so they are ours).
ensure_libvirt_packages() {
  local missing=() p was_l was_v
  for p in "${LIBVIRT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  was_l=$(pidof libvirtd || true); was_v=$(pidof virtlogd || true)
  log "installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -z "$was_l" ] && [ -n "$(pidof libvirtd || true)" ]; then /etc/init.d/libvirtd stop >/dev/null || true; fi
  if [ -z "$was_v" ] && [ -n "$(pidof virtlogd || true)" ]; then /etc/init.d/virtlogd stop >/dev/null || true; fi
}

# libvirt_up WORK: virtlogd and libvirtd started by us (pid files in WORK), the state before noted, the
# storage pool Vagrant uses ("default") made if missing.
libvirt_up() {
  local w=$1 n
  if pidof libvirtd >/dev/null; then
    echo "vagrant-test: a libvirtd this test did not start is running (pid $(pidof libvirtd)); fix: stop it first, the test starts its own and stops it after" >&2
    exit 2
  fi
  cat /proc/sys/net/ipv4/ip_forward >"$w/ip_forward.before"
  iptables-save >"$w/iptables.before" 2>/dev/null || true
  virtlogd --daemon --pid-file "$w/virtlogd.pid"
  libvirtd --daemon --pid-file "$w/libvirtd.pid"
  for n in $(seq 1 60); do "${VIRSH[@]}" version >/dev/null 2>&1 && break; sleep 0.5; done
  "${VIRSH[@]}" version >/dev/null
  "${VIRSH[@]}" list --all --name | sort >"$w/domains.before"
  "${VIRSH[@]}" net-list --all --name | sort >"$w/nets.before"
  "${VIRSH[@]}" pool-list --all --name | sort >"$w/pools.before"
  : >"$w/volumes.before"
  for n in $(cat "$w/pools.before"); do
    "${VIRSH[@]}" vol-list "$n" 2>/dev/null | awk -v p="$n" 'NF{print p, $1}' >>"$w/volumes.before"
  done
  if ! grep -qx default "$w/pools.before"; then
    [ -d /var/lib/libvirt/images ] || { mkdir -p /var/lib/libvirt/images; touch "$w/images.made"; }
    "${VIRSH[@]}" pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
    "${VIRSH[@]}" pool-start default >/dev/null
  fi
  log "libvirtd $(cat "$w/libvirtd.pid") and virtlogd $(cat "$w/virtlogd.pid") started"
}

# libvirt_down WORK: what is not on the lists from before goes (domains, networks, volumes, pools), our
# daemons stop, IPv4 forwarding is set back, and the LIBVIRT_* iptables chains our libvirtd made go.
libvirt_down() {
  local w=$1 n pool vol
  [ -f "$w/libvirtd.pid" ] || return 0
  for n in $("${VIRSH[@]}" list --all --name | sort | comm -13 "$w/domains.before" -); do
    "${VIRSH[@]}" destroy "$n" >/dev/null 2>&1 || true
    "${VIRSH[@]}" undefine "$n" --remove-all-storage >/dev/null 2>&1 || true
  done
  for n in $("${VIRSH[@]}" net-list --all --name | sort | comm -13 "$w/nets.before" -); do
    "${VIRSH[@]}" net-destroy "$n" >/dev/null 2>&1 || true
    "${VIRSH[@]}" net-undefine "$n" >/dev/null 2>&1 || true
  done
  for pool in $("${VIRSH[@]}" pool-list --all --name); do
    "${VIRSH[@]}" vol-list "$pool" 2>/dev/null | awk 'NF{print $1}' | while read -r vol; do
      grep -qx "$pool $vol" "$w/volumes.before" || "${VIRSH[@]}" vol-delete "$vol" --pool "$pool" >/dev/null 2>&1 || true
    done
  done
  for n in $("${VIRSH[@]}" pool-list --all --name | sort | comm -13 "$w/pools.before" -); do
    "${VIRSH[@]}" pool-destroy "$n" >/dev/null 2>&1 || true
    "${VIRSH[@]}" pool-undefine "$n" >/dev/null 2>&1 || true
  done
  if [ -f "$w/images.made" ]; then rmdir /var/lib/libvirt/images 2>/dev/null || true; fi
  stop_pidfile "$w/libvirtd.pid"
  stop_pidfile "$w/virtlogd.pid"
  cat "$w/ip_forward.before" >/proc/sys/net/ipv4/ip_forward
  drop_libvirt_chains "$w/iptables.before"
  log "libvirtd stopped; what it made is gone"
}

# stop_pidfile FILE: TERM to the process the file names, KILL after 20 s.
stop_pidfile() {
  local pid i
  pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

# drop_libvirt_chains BEFORE: libvirt 9 leaves its top-level LIBVIRT_* chains (and the jumps to them)
# after its last network is gone; the ones absent from BEFORE (an iptables-save) were made by our libvirtd.
drop_libvirt_chains() {
  local before=$1 table chain rule
  command -v iptables-save >/dev/null || return 0
  for table in filter nat mangle; do
    for chain in $(iptables-save -t "$table" 2>/dev/null | sed -n 's/^:\(LIBVIRT_[A-Z_]*\) .*/\1/p'); do
      grep -q "^:$chain " "$before" 2>/dev/null && continue
      iptables-save -t "$table" | sed -n "s/^-A \([A-Z]*\) \(.*-j $chain\)\$/\1 \2/p" | while read -r rule; do
        # shellcheck disable=SC2086  # the rule's own words
        iptables -t "$table" -D $rule || true
      done
      iptables -t "$table" -F "$chain" && iptables -t "$table" -X "$chain" || true
    done
  done
}
