#!/usr/bin/env python3
"""PROTOTYPE (groundwork for the arm64 port; may be rewritten): boot an
arm64 kernel + initramfs N times and print medians of the guest uptime at
/init ("INIT-AT s" on the console), at power-off ("POWEROFF-AT s") and the
host wall time of the whole qemu-system-aarch64 process.

    boot-time.py [-n 5] [--cpu neoverse-n1,pmu=off] Image initrd [-- extra qemu args]
"""
import argparse
import re
import statistics
import subprocess
import time


def boot_once(args, extra):
    cmd = ["qemu-system-aarch64", "-M", "virt", "-cpu", args.cpu, "-m", "512",
           "-nographic", "-no-reboot", "-kernel", args.image,
           "-initrd", args.initrd, "-append", "console=ttyAMA0 quiet",
           *extra]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    wall = time.monotonic() - t0
    init = re.search(r"INIT-AT ([\d.]+)", out)
    off = re.search(r"POWEROFF-AT ([\d.]+)", out)
    return (float(init.group(1)) if init else None,
            float(off.group(1)) if off else None, wall, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--cpu", default="neoverse-n1,pmu=off")
    ap.add_argument("--show", action="store_true", help="print the last console")
    ap.add_argument("image")
    ap.add_argument("initrd")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    runs = [boot_once(args, args.extra) for _ in range(args.n)]
    for name, i in (("init", 0), ("poweroff", 1), ("wall", 2)):
        vals = [r[i] for r in runs if r[i] is not None]
        print(f"{args.cpu} {name}: median {statistics.median(vals):.2f} s "
              f"of {[round(v, 2) for v in vals]}" if vals else f"{name}: none")
    if args.show:
        print(runs[-1][3])


if __name__ == "__main__":
    main()
