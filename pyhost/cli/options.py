"""The options every command that boots a guest shares (run, stat,
shell, profile), their checks, and the VMConfig they make.

Every value is checked before any slow step (the image check or build,
the boot): a bad one is a click usage error naming the option.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import click

from .. import arch as arches
from ..arch.base import MAX_SMP
from ..errors import PvperfError
from ..guest_contract import SHARE_MOUNT
from ..image import build as image_build
from ..image import recipe as image_recipe
from ..image import stage
from ..image import userkernel
from ..pmu import events, geometry
from ..vm import determinism, hostmem
from ..vm.boot import boot_timeout, check_smp
from ..vm.hostmem import MIN_MEM_MB, check_mem
from ..vm.launcher import VMConfig, preflight
from ..vm.qemu import QEMU_MIN_VERSION, parse_tcg_options, qemu_version, \
    tcg_slowdown

SIZE_RE = re.compile(r"^(\d+)([MmGg]?)$")


def parse_mem(text: str) -> int:
    """'1G' / '512M' / '768' (MiB) -> MiB, within the ABI's RAM limit and
    what the host can give (vm.hostmem.check_mem)."""
    m = SIZE_RE.match(text.strip())
    if not m:
        raise click.BadParameter(f"{text!r} is not a size like 512M or 1G")
    value, unit = int(m.group(1)), m.group(2).upper()
    mib = value * 1024 if unit == "G" else value
    try:
        check_mem(mib)
    except PvperfError as e:
        raise click.BadParameter(f"{text}: {e.cause}; {e.hint}")
    return mib


def _mem_callback(ctx, param, value: str) -> int:
    return parse_mem(value)


def _checked_by(parse, as_text: bool = True):
    """A click callback: the option's value as ``parse`` normalises it
    (``str()`` of it with ``as_text``), or a usage error saying what is
    wrong (geometry.parse_*)."""
    def callback(ctx, param, value: str):
        try:
            parsed = parse(value)
        except ValueError as e:
            raise click.BadParameter(f"{value}: {e}")
        return str(parsed) if as_text else parsed
    return callback


FIRMWARE_DIR = "/usr/share/qemu"     # qemu-system-data's firmware


@functools.lru_cache(maxsize=None)
def firmware_dirs(arch) -> tuple[str, ...]:
    """The -L directories of a --qemu build: those the installed
    qemu-system-ARCH searches (`-L help`), since a build tree has no
    firmware of its own (Debian's +ds source drops the blobs) and what a
    machine loads is spread over packages: a default -bios linked from
    /usr/share/qemu into its own package's directory, NIC option ROMs in
    ipxe-qemu's /usr/lib/ipxe/qemu (docs/guide.md, "A QEMU with
    symbols").  /usr/share/qemu alone when that QEMU is not installed."""
    installed = shutil.which(arch.qemu)
    listed: list[str] = []
    if installed:
        r = subprocess.run([installed, "-L", "help"], capture_output=True,
                           text=True, timeout=60)
        listed = [d for d in r.stdout.split() if os.path.isdir(d)]
    if not listed and os.path.isdir(FIRMWARE_DIR):
        listed = [FIRMWARE_DIR]
    return tuple(listed)


def _tcg_callback(ctx, param, value: str | None) -> tuple[str, ...]:
    try:
        return parse_tcg_options(value or "")
    except ValueError as e:
        raise click.BadParameter(str(e))


def qemu_in(directory: Path, arch) -> str:
    """qemu-system-ARCH of a --qemu directory (a build tree or an install
    prefix's bin/), refused in one line if missing or older than 10.0."""
    for p in (directory / arch.qemu, directory / "bin" / arch.qemu):
        if p.is_file() and os.access(p, os.X_OK):
            have = qemu_version(str(p))
            if have < QEMU_MIN_VERSION:
                raise click.BadParameter(
                    f"{p} is QEMU {have[0]}.{have[1]}, pvperf needs >= "
                    f"{QEMU_MIN_VERSION[0]}.{QEMU_MIN_VERSION[1]}",
                    param_hint="'--qemu'")
            return str(p.resolve())
    raise click.BadParameter(f"no {arch.qemu} in {directory} (or its bin/)",
                             param_hint="'--qemu'")


def _image_callback(ctx, param, value: str) -> str:
    if not image_recipe.image_exists(value):
        raise click.BadParameter(
            f"no image {value!r}: build it with `pvperf image build --name "
            f"{value} --add PKG[,PKG...]`")
    return value


def _arch_callback(ctx, param, value: str | None):
    if value is None:
        return None
    try:
        return arches.get(value)
    except PvperfError as e:
        raise click.BadParameter(f"{value}: {e.cause} ({e.hint})")


def arch_option(fn):
    return click.option(
        "--arch", "arch", default=None, callback=_arch_callback,
        metavar="|".join(sorted(arches.ARCHES)),
        help="guest architecture [default: the image's; the host's, "
        f"{arches.host().name}, for the default image]")(fn)


def resolve_image(name: str, arch) -> tuple[str, "arches.Arch"]:
    """(image name, guest Arch) for --image NAME and --arch: the image
    "default" is the architecture's own recipe (store.recipe_name); any
    other image has the architecture its recipe names, which --arch, if
    given, must be."""
    recipe = image_recipe.recipe_name(name, arch)
    if not image_recipe.image_exists(recipe):
        raise click.BadParameter(
            f"no image {recipe!r}: build it with `pvperf image build "
            f"--name {recipe} --add PKG[,PKG...]`", param_hint="'--image'")
    try:
        own = arches.get(image_recipe.load_recipe(recipe).arch)
    except PvperfError as e:
        raise click.BadParameter(e.one_line(), param_hint="'--image'")
    if arch is not None and arch.name != own.name:
        raise click.BadParameter(f"image {recipe!r} is an {own.name} image, "
                                 f"not {arch.name}", param_hint="'--arch'")
    return recipe, own


def _device_callback(ctx, param, value):
    """--device: QEMU -device specs, each one word of QEMU's syntax (QEMU
    itself says whether it knows the device)."""
    for spec in value:
        if not re.fullmatch(r"[A-Za-z0-9][\w.,=:-]*", spec):
            raise click.BadParameter(f"{spec!r} is not a QEMU device spec "
                                     "(NAME[,PROP=VALUE...])")
    return tuple(value)


def vm_options(pmu_switch: bool = True):
    """Options shared by run, shell and profile (decorator factory)."""
    opts = [
        arch_option,
        click.option("--smp", type=click.IntRange(1, MAX_SMP), default=1,
                     show_default=True, help=f"number of vCPUs, 1..{MAX_SMP} "
                     "(fewer where the guest's machine serves fewer)"),
        click.option("--mem", "mem", default="1G", show_default=True,
                     callback=_mem_callback,
                     help=f"guest RAM, {MIN_MEM_MB}M up to what the host "
                     f"can give (MemAvailable less {hostmem.RESERVE_MB}M, "
                     "/dev/shm's free space) (e.g. 512M, 6G)"),
        click.option("--share", type=click.Path(exists=True, file_okay=False,
                                                path_type=Path),
                     default=None, help="host directory mounted read-write "
                     f"at {SHARE_MOUNT} [default: current directory]"),
        click.option("--timeout", type=click.FloatRange(min=0.1),
                     default=None, help="stop the guest after S seconds"),
        click.option("--device", "devices", multiple=True,
                     callback=_device_callback, metavar="DEV[,PROPS]",
                     help="add a QEMU device to the VM (as -device; "
                     "repeatable), e.g. edu"),
        click.option("--tcg", "tcg", default=None, metavar="OPT=V,..",
                     callback=_tcg_callback,
                     help="TCG translator options, as -accel tcg,OPTS: "
                     "tb-size=MiB, one-insn-per-tb=on, split-wx=on, "
                     "thread=single|multi"),
        click.option("--qemu", "qemu_dir", default=None,
                     type=click.Path(exists=True, file_okay=False,
                                     path_type=Path),
                     help="use qemu-system-ARCH from this directory (a "
                     "scripts/build-qemu.sh build, or any QEMU >= 10.0)"),
        click.option("--console", "echo_console", is_flag=True,
                     help="show the guest's serial console on stderr"),
        click.option("--image", "image_name", default="default",
                     show_default=True, callback=_image_callback,
                     envvar="PVPERF_IMAGE", show_envvar=True,
                     help="guest image: a recipe in images/ (linux-6.12: "
                     "Debian's 6.12 kernel and perf) or one built with "
                     "`pvperf image build --name NAME --add PKG`"),
        click.option("--kernel", type=click.Path(exists=True, dir_okay=False,
                                                 path_type=Path),
                     default=None, help="boot this kernel (a vmlinux or "
                     "bzImage you built) with the image's userland"),
        click.option("--kernel-build", type=click.Path(
            exists=True, file_okay=False, path_type=Path), default=None,
            help="--kernel's build tree, to build the PMU driver against "
            "[default: the tree the kernel lies in, if any]"),
    ]
    if pmu_switch:
        opts.append(click.option("--no-pmu", is_flag=True,
                                 help="plain TCG: no plugin, no guest PMU "
                                 "driver"))
        for name, default in (("I1", geometry.DEFAULT_I1),
                              ("D1", geometry.DEFAULT_D1),
                              ("LL", geometry.DEFAULT_LL)):
            opts.append(click.option(
                f"--{name}", name, callback=_checked_by(geometry.parse_geometry),
                default=default, show_default=True, metavar="S,A,L",
                help=f"{name} cache model: size, ways, line (bytes), as "
                "cachegrind spells it"))
        for name, default in (("iTLB", geometry.DEFAULT_ITLB),
                              ("dTLB", geometry.DEFAULT_DTLB)):
            opts.append(click.option(
                f"--{name}", name, callback=_checked_by(geometry.parse_tlb),
                default=default,
                show_default=True, metavar="E,A,P",
                help=f"{name} model: entries, ways, page size (bytes)"))
        opts.append(click.option(
            "--timing", is_flag=True,
            help="cycles from the timing model: 1 per instruction plus "
            "miss and misprediction penalties (docs/events.md)"))
        opts.append(click.option(
            "--accounting", type=click.Choice(events.ACCOUNTING_MODES),
            default=events.ACCOUNTING_CPU, show_default=True,
            help="what cycles count: guest instructions (cpu: the cost "
            "model) or the vCPU thread's host CPU time at 1 GHz (domain: "
            "translation and device emulation included; "
            "docs/accounting.md)"))
        opts.append(click.option(
            "--penalties", metavar="N=C,..",
            callback=_checked_by(geometry.parse_penalties, as_text=False),
            help="timing-model penalties in cycles, N one of L1, LL, TLB, "
            "BR  [default: " + ",".join(
                f"{k}={v}" for k, v in geometry.DEFAULT_PENALTIES.items()) +
            "]"))
        opts.append(click.option(
            "--cachegrind-compat", "compat", is_flag=True,
            help="models see user code only, as under cachegrind "
            "(docs/events.md)"))
        opts.append(click.option(
            "--deterministic", is_flag=True,
            help="replayable run: the same counts and samples every time "
            "(QEMU icount, fixed seeds, --smp 1; docs/determinism.md)"))
        opts.append(click.option(
            "--overflow-irq", type=click.Choice(["doorbell", "qmp"]),
            default="doorbell", show_default=True,
            help="how the sample interrupt reaches the guest: an "
            "ivshmem-doorbell MSI-X vector, or an NMI over QMP (the old "
            "path; --deterministic always uses it)"))

    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return deco


def ensure_image(name: str = "default"):
    img = image_build.image_status(name)
    if img is not None:
        return img
    click.echo(f"pvperf: building the {name} guest image (first use or "
               "out of date)...", err=True)
    return image_build.build_image(name)


def make_config(guest_action: str, command: str, smp: int, mem: int,
                share: Path | None, timeout: float | None,
                echo_console: bool, image_name: str = "default",
                devices: tuple[str, ...] = (),
                arch=None,
                no_pmu: bool = False,
                I1: str | None = None, D1: str | None = None,
                LL: str | None = None, compat: bool = False,
                iTLB: str | None = None, dTLB: str | None = None,
                timing: bool = False,
                accounting: str = events.ACCOUNTING_CPU,
                penalties: dict[str, int] | None = None,
                deterministic: bool = False, kernel: Path | None = None,
                kernel_build: Path | None = None,
                staged: bool = False,
                overflow_irq: str = "doorbell",
                tcg: tuple[str, ...] = (),
                qemu_dir: Path | None = None) -> VMConfig:
    """The VMConfig of a run: checked (preflight), then the image.
    ``staged``: the share goes into guest RAM and 9p is mounted only after
    the command, as for --deterministic (checkpoints need it)."""
    models = {k: v for k, v in (("I1", I1), ("D1", D1), ("LL", LL),
                                ("iTLB", iTLB), ("dTLB", dTLB)) if v}
    models.update({f"penalty_{k.lower()}": str(v)
                   for k, v in (penalties or {}).items()})
    if compat:
        models["compat"] = "on"
    share = (share or Path.cwd()).resolve()
    image_name, arch = resolve_image(image_name, arch)
    if accounting != events.ACCOUNTING_CPU and (timing or penalties):
        raise click.BadParameter("domain accounting counts host time: "
                                 "no timing model with it",
                                 param_hint="'--accounting'")
    try:
        check_smp(smp, arch)
    except PvperfError as e:
        raise click.BadParameter(e.cause, param_hint="'--smp'")
    if deterministic:
        try:
            determinism.check(smp)
        except PvperfError as e:
            raise click.BadParameter(e.cause, param_hint="'--smp'")
    config = VMConfig(image=None, guest_action=guest_action, command=command, smp=smp,
                      mem_mb=mem, share=share,
                      pmu=not no_pmu, timeout=timeout,
                      echo_console=echo_console, plugin_options=models,
                      timing=timing or bool(penalties),
                      accounting=accounting, devices=tuple(devices),
                      deterministic=deterministic,
                      overflow_irq=overflow_irq,
                      staged=deterministic or staged, arch=arch,
                      tcg=tuple(tcg),
                      boot_timeout=boot_timeout(smp) * tcg_slowdown(tcg),
                      qemu=qemu_in(qemu_dir, arch) if qemu_dir else None,
                      data_dirs=firmware_dirs(arch) if qemu_dir else ())
    preflight(config)
    if config.staged:
        # In guest RAM: at most a quarter of it (image/stage.py).
        config.initrd_overlay = stage.stage_share(share, (mem << 20) // 4)
        if deterministic:
            click.echo(determinism.start_note(share, config.initrd_overlay),
                       err=True)
    if kernel_build is not None and kernel is None:
        raise click.BadParameter("needs --kernel", param_hint="'--kernel-build'")
    config.image = ensure_image(image_name)
    if kernel is not None:
        config.image, overlay = boot_user_kernel(kernel, kernel_build,
                                                 config.image, not no_pmu,
                                                 arch)
        config.initrd_overlay += overlay
    return config


def boot_user_kernel(kernel: Path, build_dir: Path | None, base, pmu: bool,
                     arch=None):
    """(image with the user's kernel, initramfs overlay); a kernel that
    cannot work is a usage error naming what it lacks."""
    if pmu and build_dir is not None:
        click.echo(f"pvperf: checking {kernel} (the PMU driver is built "
                   f"against {build_dir} if it needs to be)...", err=True)
    try:
        uk = userkernel.user_kernel(kernel, build_dir, base, pmu, arch)
    except PvperfError as e:
        if not e.what.startswith("--kernel"):
            raise               # building the driver failed: not usage
        raise click.BadParameter(f"{e.cause} \u2014 {e.hint}" if e.hint
                                 else e.cause, param_hint="'--kernel'")
    for warning in uk.warnings:
        click.echo(f"pvperf: warning: {warning}", err=True)
    return uk.image, uk.overlay


# -- report --diff -------------------------------------------------------------

PROFILE_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


def diff_options(fn):
    """`pvperf report`'s options that compare two saved profiles
    (profile/diff.py)."""
    for option in reversed((
            click.option("--diff", "diff", type=PROFILE_DIR, nargs=2,
                         default=None, metavar="A B",
                         help="compare two saved profiles: per-function "
                         "and per-space deltas (text) and a differential "
                         "flame graph"),
            click.option("--sort", "sort", type=click.Choice(
                ["time", "share", "per-insn"]), default="time",
                show_default=True, help="--diff: rank functions by the "
                "change of host time, of share, or of host time per guest "
                "instruction"),
            click.option("--view", type=click.Choice(["self", "behalf"]),
                         default="self", show_default=True,
                         help="--diff: a function's own samples, or a guest "
                         "function's with the emulator's work on its "
                         "behalf"),
            click.option("--output", "-o", type=click.Path(
                file_okay=False, path_type=Path), default=Path("pvperf-diff"),
                show_default=True, help="--diff: directory for diff.txt and "
                "diff-flamegraph.html"))):
        fn = option(fn)
    return fn
