"""pvperf host side: the paravirtual PMU service, the VM launcher, the
guest image builder, the system-wide profiler and the CLI.

Subsystems; imports only point down this list (checked by
tests/unit/test_layering.py), and no two modules import each other in a
circle, within a package either:

  cli/       the `pvperf` command (click): run, stat, compare, sweep,
             shell, profile, report, events, image status|build
  sweep/     experiment matrices on Ray: matrix, runner (cells are
             `pvperf stat --json` runs; the table from results)
  profile/   host profiles of QEMU + guest: record, reverse map,
             symbols, resolve, session, report
  results    machine-readable counts (--json) and the regression gate
             (compare); beside profile/, neither imports the other
  image/     the guest image builder: recipe, apt, host programs, kernel,
             System.map, modules, cpio, root tree, smoke boot, cache
  vm/        the VM launcher: QEMU process, QMP, serial console,
             private channels
  pmu/       the paravirtual PMU: the plugin protocol's mirror, guest
             RAM, event table, PMU model, sampling, the overflow
             interrupt (NMI or doorbell), hypercall backend, plugin service
  arch/      what differs per guest architecture, one module each:
             QEMU machine, console, boot kernel, disassembler; shared
             code takes an Arch and names no architecture
  abi        the Python mirror of contracts/pvperf_abi.h
  guest_contract  the names pyhost and the image's /init agree on
  elf        in-memory ELF files (pyelftools)
  ram        where guest RAM sits: guest physical addresses <-> RAM file
  paths      where pvperf's files and cache are
  errors     the exception hierarchy (one root: PvperfError)

The image builder sits above the VM launcher because its smoke boot
uses that one launcher; the launcher takes any object with ``vmlinux``
and ``initramfs`` paths (vm.boot.BootImage).  Each package's
``__init__`` lists its modules.
"""
import logging

logging.getLogger("pvperf").addHandler(logging.NullHandler())

__version__ = "0.1.0"
