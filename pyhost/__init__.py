"""pvperf host side: VM launcher, paravirtual PMU service, reverse map, CLI.

Module map (one responsibility each):

  errors           the exception hierarchy (one root: PvperfError)
  abi              Python mirror of guest_kernel_patch/pvperf_abi.h
  plugin_protocol  Python mirror of qemu_plugin/pvperf_proto.h
  guestmem         bounds-checked access to guest RAM (the shared file)
  pmu              the PMU programming model: events, modes, counters
  hypercall        the paravirtual perf backend (validates guest input)
  service          the unix-socket server the TCG plugin talks to
  image            builds the default guest image from Debian packages
  qmp              QMP client (qemu.qmp) helpers
  console          the serial console (pexpect)
  vm               the VM launcher (QEMU process, ports, clean-up)
  cli              the `pvperf` command
"""
import logging

logging.getLogger("pvperf").addHandler(logging.NullHandler())

__version__ = "0.1.0"
