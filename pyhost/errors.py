"""One exception root for pvperf.

    PvperfError                 anything pvperf reports to a user
     +-- SetupError             a missing tool or artifact (QEMU, plugin, image)
     +-- ImageError             building the guest image failed
     |    +-- PackageNotFound   apt knows no such package (image/packages.py)
     +-- VMError                the VM could not be started or driven
     |    +-- GuestPanicError   the guest kernel panicked
     |    +-- GuestTimeoutError the guest did not answer in time
     |    +-- GuestStatusError  the guest finished without reporting a status
     |    +-- CheckpointError   a checkpoint cannot be taken or restored
     |                          (vm/checkpoint.py)
     +-- ServiceError           the paravirtual PMU service failed
     +-- ProfileError           reading back a host profile's data failed
     +-- ResultError            a --json result or perf stat's output is
     |                          unusable (results.py)
     +-- MatrixError            a sweep matrix cannot be run (sweep/matrix.py)
     +-- SweepError             a sweep cannot start: no Ray (sweep/runner.py)

A class with a module beside it is defined there, where it is raised;
the others here.  tests/unit/test_errors.py checks that this tree draws
every subclass of PvperfError in pyhost, under its base.

Every error carries three parts so the CLI can print one line,
"pvperf: <what failed>: <cause> — <what to do>", and an optional wrapped
exception in ``.exc`` (shown only with --debug).
"""
from __future__ import annotations


class PvperfError(Exception):
    """Root of every error pvperf reports."""

    def __init__(self, what: str, cause: str = "", hint: str = "",
                 exc: BaseException | None = None, details: str = ""):
        self.what = what
        self.cause = cause
        self.hint = hint
        self.exc = exc
        # Extra lines shown under the one-line message (e.g. console tail).
        self.details = details
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.what
        if self.cause:
            text += f": {self.cause}"
        if self.hint:
            text += f" \u2014 {self.hint}"
        return text


class SetupError(PvperfError):
    """A required tool or built artifact is missing."""


class ImageError(PvperfError):
    """Building or finding the guest image failed."""


class VMError(PvperfError):
    """Starting or driving the VM failed."""


class GuestPanicError(VMError):
    """The guest kernel panicked."""


class GuestTimeoutError(VMError):
    """The guest did not reach a state in time."""


class GuestStatusError(VMError):
    """The guest stopped without reporting an exit status."""


class ServiceError(PvperfError):
    """The paravirtual PMU service failed."""


class ProfileError(PvperfError):
    """A recorded profile's data (perf.data, reverse map, jitdump) could
    not be read back."""
