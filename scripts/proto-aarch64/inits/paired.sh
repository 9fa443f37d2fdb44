#!/bin/sh
# alternate arm64 (launch-style initramfs, n1) and x86 pvperf run -- true
EXTRA="-device virtio-serial-pci,id=vser -chardev null,id=out -device virtserialport,bus=vser.0,chardev=out,name=org.pvperf.stdout -fsdev local,id=host,security_model=none,path=share -device virtio-9p-pci,fsdev=host,mount_tag=pvperf-host -fw_cfg name=opt/org.pvperf/cmd,string=true"
for i in 1 2 3 4 5 6 7; do
  /usr/bin/time -f "arm64-n1 %e" qemu-system-aarch64 -nodefaults -M virt -cpu neoverse-n1,pmu=off -m 512 -display none -serial stdio -no-reboot -kernel Image -initrd boottime.cpio -append "console=ttyAMA0 quiet panic=-1 cryptomgr.notests" $EXTRA 2>&1 >/dev/null | tail -1
  (cd /work/main && /usr/bin/time -f "x86-pvperf %e" .venv/bin/pvperf run -- true 2>&1 | tail -1)
  /usr/bin/time -f "arm64-max %e" qemu-system-aarch64 -nodefaults -M virt -cpu max,pmu=off -m 512 -display none -serial stdio -no-reboot -kernel Image -initrd boottime.cpio -append "console=ttyAMA0 quiet panic=-1 cryptomgr.notests" $EXTRA 2>&1 >/dev/null | tail -1
  uptime
done
