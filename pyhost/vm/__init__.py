"""The VM launcher: QEMU under TCG, its QMP client and its serial console.

  qemu      the QEMU system emulator: lookup, version, option escaping
  qmp       QMP client helpers (qemu.qmp)
  console   the serial console (pexpect): panic detection, last lines
  channels  private channels to QEMU: socketpairs for QMP and the ports,
            the 0700 run directory for the service's socket, its sweep
  boot      what the launcher boots: BootImage, BootFiles
  launcher  VM, VMConfig, run_command, run_shell: one guest run, cleaned up
"""
