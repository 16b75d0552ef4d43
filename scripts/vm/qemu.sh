# Sourced by the scripts that boot the testbed's VMs (run-tests.sh, cluster-test.sh); not an image input.

# vm_accel NAME: sets `accel` and the qemu arguments `cpu` for it: KVM where it really boots (a CPU with
# vmx/svm and a writable /dev/kvm), TCG emulation otherwise; HPNLAB_VM_ACCEL=kvm|tcg overrides.
vm_accel() {
  accel=${HPNLAB_VM_ACCEL:-auto}
  if [ "$accel" = auto ]; then
    accel=tcg
    if [ -w /dev/kvm ] && grep -qE '\b(vmx|svm)\b' /proc/cpuinfo; then accel=kvm; fi
  fi
  case "$accel" in
    kvm) cpu=(-accel kvm -cpu host) ;;
    tcg) cpu=(-accel tcg -cpu max) ;;
    *) echo "$1: HPNLAB_VM_ACCEL='$accel' is not kvm, tcg or auto; fix: unset it" >&2; exit 2 ;;
  esac
}

# vm_start IMAGE_DIR OUT_DIR CPUS MEM_MIB [qemu args...]: boots the image in the background on a fresh
# overlay in OUT_DIR (the cached image stays pristine), console in OUT_DIR/console.log, this checkout as
# the read-only 9p share "src" and OUT_DIR as "out"; no network unless the extra arguments add one.
# Sets vm_pid. Needs `cpu` (vm_accel) and `here` (the checkout).
vm_start() {
  local img=$1 dir=$2 cpus=$3 mem=$4
  shift 4
  # oops=panic: under TCG the guest kernel now and then oopses patching its own text (run-tests.sh); an oops
  # in a process's context leaves the guest up and whatever waits on that process hanging until the tier's
  # timeout, a panic ends the boot at once and run-tests.sh boots it again
  qemu-img create -q -f qcow2 -b "$img/disk.img" -F raw "$dir/overlay.qcow2"
  : >"$dir/console.log"
  qemu-system-x86_64 -machine q35 "${cpu[@]}" -smp "$cpus" -m "$mem" \
    -display none -monitor none -serial "file:$dir/console.log" -no-reboot -nic none "$@" \
    -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 init=/sbin/hpnlab-vm-init panic=-1 oops=panic quiet loglevel=3" \
    -drive "file=$dir/overlay.qcow2,if=virtio,format=qcow2" \
    -virtfs "local,path=$here,mount_tag=src,security_model=none,readonly=on" \
    -virtfs "local,path=$dir,mount_tag=out,security_model=none" &
  vm_pid=$!
}

# The guest's BPF objects, kept between boots beside the image (guest-run.sh takes them from OUT_DIR/bpf-cache
# and puts what it built there): a boot builds only what changed (60-80 s of clang under TCG). A key not
# rebuilt for 30 days is dropped (a cache: at worst it is built again).
bpf_keep="${HPNLAB_VM_CACHE:-/var/cache/hpnlab/vm}/guest-bpf"
bpf_cache_in() {  # OUT_DIR...: hand the kept objects to the guests booted with these out shares
  mkdir -p "$bpf_keep"
  find "$bpf_keep" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} +
  local d
  for d in "$@"; do mkdir -p "$d/bpf-cache" && cp -a "$bpf_keep/." "$d/bpf-cache/"; done
}
bpf_cache_out() {  # OUT_DIR...: keep what the guests built, and leave their out shares without it
  local d
  for d in "$@"; do
    [ -d "$d/bpf-cache" ] || continue
    cp -a "$d/bpf-cache/." "$bpf_keep/" 2>/dev/null || true
    rm -rf "$d/bpf-cache"
  done
}
