"""The new image's test boot: does it boot, and what is its System.map?

Debian's linux-image packages ship a placeholder System.map (the real one
is in the ~860 MB -dbg package), so the builder boots the new image once
with the one VM launcher (vm/launcher.py; run mode, no share, no PMU,
``nokaslr``) and reads /proc/kallsyms.  The same boot is the image's
smoke test: READY and ``EXIT 0`` on the control port, every dynamically
linked recipe tool loads, perf's report helper runs, and perf prints its
version.

perf report and perf script (perf 6.1, without libbfd) start
``addr2line`` from PATH for source lines and inlined frames of sampled
user code and write addresses into its stdin; when addr2line is missing
the child has exited, and perf dies of SIGPIPE (exit 141) after lines like
``addr2line /lib/<triplet>/libc.so.6: could not read first record``.
So an image without a working addr2line is refused here, whatever its
recipe.
"""
from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Iterable

from ..arch import Arch, host
from ..errors import ImageError, PvperfError
from ..guest_contract import RUN
from ..vm.boot import BootFiles
from ..vm.launcher import VMConfig, run_command

#: Marks the test command's own complaints on stderr.
SMOKE_TAG = "pvperf-smoke:"
HELPER_CHECK = (f"{{ addr2line -f -e /usr/bin/perf 0 >/dev/null || {{ echo "
                f"'{SMOKE_TAG} addr2line does not run: perf report and perf "
                "script would die of SIGPIPE (exit 141) on --call-graph "
                "records' >&2; exit 3; }; }")
HELPER_HINT = ("keep binutils' addr2line in the recipe's tools "
               "(images/README.md)")
SMOKE_TIMEOUT = 180.0
SMOKE_MEM_MB = 512
HINT = ("run `pvperf image build --force`; if it fails again, boot the "
        "image by hand (images/README.md) and read the console")


def smoke_command(tools: Iterable[str] = (), arch: Arch | None = None
                  ) -> str:
    """The test boot's command: every dynamically linked tool (guest path)
    must load (the dynamic loader's --list exits non-zero when a library
    is missing), addr2line must run, then /proc/kallsyms, then perf's
    version on stderr."""
    loader = (arch or host()).dynamic_loader
    checks = "".join(f"{loader} --list {t} >&2 && " for t in tools)
    return (checks + HELPER_CHECK
            + " && cat /proc/kallsyms && perf --version >&2")


def guest_run(vmlinux: Path, initramfs: Path, command: str,
              arch: Arch | None = None, timeout: float = SMOKE_TIMEOUT,
              mem_mb: int = SMOKE_MEM_MB) -> tuple[int, bytes, str]:
    """Boot the image once (run mode, no share, no PMU, ``nokaslr``) to
    run ``command``; (exit status, stdout bytes, stderr text)."""
    arch = arch or host()
    config = VMConfig(image=BootFiles(vmlinux, initramfs), guest_action=RUN,
                      command=command, mem_mb=mem_mb,
                      pmu=False, timeout=timeout, boot_timeout=timeout,
                      kernel_args=("nokaslr",), arch=arch)
    out, err = io.BytesIO(), io.BytesIO()
    try:
        status = asyncio.run(run_command(config, stdout=out, stderr=err))
    except PvperfError as e:
        raise ImageError("the new image did not boot", e.one_line(), HINT,
                         exc=e, details=e.details) from e
    return status, out.getvalue(), err.getvalue().decode(errors="replace")


def smoke_boot(vmlinux: Path, initramfs: Path,
               timeout: float = SMOKE_TIMEOUT,
               tools: Iterable[str] = (),
               arch: Arch | None = None) -> tuple[str, str]:
    """Boot the image once; returns (kallsyms text, perf version line).
    ``tools``: guest paths of dynamically linked recipe tools whose
    libraries must all load.  Raises ImageError."""
    arch = arch or host()
    status, out, stderr = guest_run(vmlinux, initramfs,
                                    smoke_command(tools, arch), arch, timeout)
    tagged = [l for l in stderr.splitlines() if l.startswith(SMOKE_TAG)]
    if status != 0 and tagged:
        raise ImageError("the new image fails its test boot",
                         tagged[0][len(SMOKE_TAG):].strip(), HELPER_HINT,
                         details="\n".join(stderr.splitlines()[-30:]))
    if status != 0:
        raise ImageError("the new image did not boot",
                         f"the test command exited with {status}", HINT,
                         details="\n".join(stderr.splitlines()[-30:]))
    version = stderr.strip().splitlines()
    return out.decode(errors="replace"), (version[-1] if version else "")
