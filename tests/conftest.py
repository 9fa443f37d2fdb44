"""The VM-test policy (pytest hooks only; shared helpers are in support.py).

VM tests boot a real guest with qemu-system-x86_64; they skip loudly when
the prerequisites are missing, naming the variable that overrides it.
  PVPERF_SKIP_VM=1   skip every VM test
  PVPERF_SLOW=1      run the long opt-in tests too
  PVPERF_GUEST_KERNEL=6.12
                     boot Debian's 6.12 (the linux-6.12 image) wherever a
                     test boots the default image (6.1): pvperf reads the
                     image from PVPERF_IMAGE, which this sets
  PVPERF_GUEST_ARCHES=x86_64
                     run the tests of these guest architectures only
                     (comma-separated; default: every one of
                     support.GUEST_ARCHES); a test of an architecture
                     whose cross compiler is missing skips, naming it

Under pytest-xdist (scripts/test.sh's parallel phase) the tests that
share a module-scoped fixture instance (a guest's boot) run on one
worker: parallel.py.
"""
from __future__ import annotations

import os
import shutil
import time

import pytest


def _vm_skip_reason() -> str | None:
    """Why VM tests cannot run, or None.  A missing or stale image is
    (re)built here, as `pvperf run` would: never skip for that."""
    if os.environ.get("PVPERF_SKIP_VM") == "1":
        return "PVPERF_SKIP_VM=1 is set"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 missing (run scripts/setup.sh)"
    from pyhost import image
    import support
    try:
        name = support.guest_kernel_image()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    if name != "default":
        os.environ["PVPERF_IMAGE"] = name      # every pvperf the tests run
    # The driver too: when Debian publishes a new kernel the image's next
    # build takes it, and a driver built for the old one would not load
    # (cheap when up to date)
    support.build_driver(name)
    if image.image_status(name) is None:
        image.build_image(name)
    return None


def _arch_skip_reason(item) -> str | None:
    """Why a test of a guest architecture (a support.Guest parameter)
    cannot run here, or None."""
    import support
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in params.values():
        if isinstance(value, support.Guest):
            if value.arch not in support.guest_arches_wanted():
                return (f"PVPERF_GUEST_ARCHES="
                        f"{os.environ['PVPERF_GUEST_ARCHES']} leaves "
                        f"{value.arch} out")
            return value.a.missing()
    return None


@pytest.hookimpl(optionalhook=True)   # xdist's hook: without xdist, never called
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        import parallel
        return parallel.make_scheduler(config, log)
    return None


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (pvperf,
    its QEMU): what a test costs whatever the host's load."""
    import resource
    return sum(u.ru_utime + u.ru_stime for u in
               (resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(tryfirst=True)    # before the fixtures' set-up
def pytest_runtest_setup(item):
    # which worker ran the test, when it started and the CPU time it took
    # with its fixtures (in the junit xml scripts/test.sh writes):
    # parallel.report() shows a worker's idle end and the suite's CPU time
    item.user_properties += [
        ("worker", os.environ.get("PYTEST_XDIST_WORKER", "-")),
        ("start", f"{time.time():.1f}")]
    item.stash[_CPU] = _cpu_seconds()


_CPU = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)     # after the fixtures' teardown
def pytest_runtest_teardown(item):
    try:
        return (yield)
    finally:
        if _CPU in item.stash:
            item.user_properties.append(
                ("cpu", f"{_cpu_seconds() - item.stash[_CPU]:.1f}"))


@pytest.hookimpl(tryfirst=True)    # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    # a worker sees dist "no" and xdist's own loadgroup flag
    if getattr(config.option, "loadgroup", False) or \
            config.getoption("dist", "no") == "loadgroup":
        import parallel
        parallel.mark_groups(items)
    vm_reason = None
    checked = False
    for item in items:
        if "vm" in item.keywords:
            if not checked:
                vm_reason, checked = _vm_skip_reason(), True
            if vm_reason:
                item.add_marker(pytest.mark.skip(reason=vm_reason))
            elif reason := _arch_skip_reason(item):
                item.add_marker(pytest.mark.skip(reason=reason))
        if "slow" in item.keywords and os.environ.get("PVPERF_SLOW") != "1":
            item.add_marker(pytest.mark.skip(
                reason="long opt-in test: set PVPERF_SLOW=1"))
