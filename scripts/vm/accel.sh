# Sourced by the scripts that boot VMs (run-tests.sh, cluster-test.sh); not an input of the image.
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
