# Sourced by the VM scripts (host and guest side).

# The Debian mirror this machine's apt already uses,
# so the image and the VM fetch from wherever the user's apt is pointed
# (HPNLAB_VM_MIRROR overrides it).
debian_mirror() {
  if [ -n "${HPNLAB_VM_MIRROR:-}" ]; then echo "$HPNLAB_VM_MIRROR"; return; fi
  local m
  m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -1)
  [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
                     | awk '{print $2}' | grep -v -- '-security' | grep -v '^\[' | head -1)
  if [ -z "$m" ]; then
    echo "vm: no Debian mirror found in /etc/apt; fix: export HPNLAB_VM_MIRROR=<your Debian mirror URL>" >&2
    return 1
  fi
  echo "$m"
}

# The project's files (tracked and new, not ignored: no .venv, no results) from
# $1 into $2. The image gets them at build time, the test VM again at boot.
copy_tree() {
  mkdir -p "$2"
  if [ -d "$1/.git" ] && command -v git >/dev/null; then
    (cd "$1" && git -c safe.directory='*' ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$2"
  else
    (cd "$1" && tar --exclude=./.venv --exclude=./.git --exclude=./results -cf - .) | tar -xf - -C "$2"
  fi
}

# site_trust ROOT: an image or box made at a site trusts what the site's machines trust (a proxy's CA in
# /usr/local/share/ca-certificates, a pip configuration): its provisioning fetches through the same path.
site_trust() {
  local r=$1
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$r/usr/local/share/ca-certificates/"
    chroot "$r" update-ca-certificates >/dev/null 2>&1
  fi
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$r/etc/pip.conf"; fi
}

# bind_system ROOT: the host's /proc, /sys, /dev and /dev/pts inside ROOT for a chroot, each noted in the
# caller's `mounted` array, so unmount_all undoes them.
bind_system() {
  local m
  for m in proc sys dev dev/pts; do mount --bind "/$m" "$1/$m"; mounted+=("$1/$m"); done
}

# unmount_all [quiet]: what `mounted` holds, last first (lazily: a process may still hold one), then forgets
# it. `quiet` (an exit trap) goes on past a failure; without it a failure ends the script.
unmount_all() {
  local i
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    if [ "${1:-}" = quiet ]; then umount -l "${mounted[$i]}" 2>/dev/null || true; else umount -l "${mounted[$i]}"; fi
  done
  mounted=()
}
