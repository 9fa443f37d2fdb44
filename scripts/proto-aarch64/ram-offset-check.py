#!/usr/bin/env python3
"""PROTOTYPE (groundwork for the arm64 port; may be rewritten): checks
that guest RAM in a shared memory-backend-file on `-M virt` is readable
and writable by the host at file offset = guest physical - 0x40000000
(virt's RAM base).  Runs QEMU with the given argv, waits for the guest
program gpa's "GPA <marker> ... gpa=0x..." line, checks the marker at
that offset in the RAM file and writes "ACK" 64 bytes further on; the
guest prints "HOST-WROTE ACK..." when it sees it.

    ram-offset-check.py RAMFILE qemu-system-aarch64 ARGS...
"""
import mmap
import re
import subprocess
import sys

VIRT_RAM_BASE = 0x40000000


def main():
    ram, argv = sys.argv[1], sys.argv[2:]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if not line.startswith("["):
            print(line, end="")
        m = re.search(r"GPA (\S+) .*gpa=(0x[0-9a-f]+)", line)
        if m:
            marker, gpa = m.group(1).encode(), int(m.group(2), 16)
            off = gpa - VIRT_RAM_BASE
            with open(ram, "r+b") as f, mmap.mmap(f.fileno(), 0) as mem:
                found = mem[off:off + len(marker)] == marker
                print(f"HOST: marker at file offset {off:#x} "
                      f"(gpa {gpa:#x} - {VIRT_RAM_BASE:#x}): {found}")
                mem[off + 64:off + 67] = b"ACK"
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
