#!/bin/bash
# PID 1 of the test VM (`make vm-test`): brings up the bare minimum, mounts the
# host's project folder (9p tag "src", read-only) and the results folder (tag
# "out"), then runs scripts/vm/guest-run.sh from the project folder, so the
# cached image runs the code under test, not the code it was built with.
# Powers the VM off whatever happens; the exit status is left in out/rc.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
on() { mountpoint -q "$2" || mount -t "$1" "$1" "$2" ${3:+-o "$3"}; }
on proc /proc; on sysfs /sys; on devtmpfs /dev; on tmpfs /run mode=755; on tmpfs /tmp
mkdir -p /dev/pts /dev/shm; on devpts /dev/pts; on tmpfs /dev/shm
mount -o remount,rw / 2>/dev/null
mkdir -p /mnt/src /mnt/out
mount -t 9p -o trans=virtio,version=9p2000.L,ro src /mnt/src
mount -t 9p -o trans=virtio,version=9p2000.L out /mnt/out
if [ -x /mnt/src/scripts/vm/guest-run.sh ]; then
  bash /mnt/src/scripts/vm/guest-run.sh >/dev/console 2>&1
  echo $? >/mnt/out/rc
else
  echo "hpnlab-vm: /mnt/src/scripts/vm/guest-run.sh not found (is the src share mounted?)" >/dev/console
  echo 3 >/mnt/out/rc
fi
sync
echo o >/proc/sysrq-trigger
sleep 60
