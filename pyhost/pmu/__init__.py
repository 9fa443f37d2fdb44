"""The paravirtual PMU, host side: PMU model, hypercall service.  The ABI
mirror it reads is pyhost/abi.py, at the bottom layer, where the
architectures, the launcher and the CLI read it too.

  plugin_protocol  Python mirror of contracts/pvperf_proto.h
  guestmem         bounds-checked access to guest RAM (the shared file)
  events           the event table: every event the host counts, once
                   (retirement, cache and branch-predictor models)
  geometry         cache geometries as cachegrind spells them, checked
  model            the PMU programming model: events, modes, counters
  sampling         the host half of sampling: sample rings, interrupt requests
  doorbell         the overflow interrupt: pvperf as ivshmem-doorbell's server
  nmi              thread-safe QMP inject-nmi for the service threads
  hypercall        the paravirtual perf backend (validates guest input)
  service          the unix-socket server the TCG plugin talks to
"""
