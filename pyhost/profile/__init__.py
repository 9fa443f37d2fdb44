"""``pvperf profile``: one profile of QEMU, the guest kernel and guest user.

  record         boot with the reverse-map recorders, sample QEMU (Recording)
  hostperf       the host's perf: record, script, lost samples, report
  kernel_layout  guest task_struct offsets from BTF (pvperf-rmap.so task=)
  rmap           the reverse map: code-cache address -> guest code, address spaces
  procmaps       /proc/PID/maps lines, parsed once
  symbols        guest kernel, guest user and emulator symbolizers
  resolve        Recording -> session: every sample's space and function
                 (resolve(); Resolver.guest_symbol names a translation)
  session        session.json: write, read back, render every output
  report         renderers of a session (text, folded, flame graph, ...)
  flamegraph_html  the interactive flame graph (one HTML file)
  diff           `pvperf report --diff A B`: two sessions compared
  pipeline       the command in one call: record -> resolve -> write ->
                 render (what the CLI calls)
"""
