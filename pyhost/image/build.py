"""Build the bootable pvperf guest image from Debian bookworm packages.

An image is four artifacts plus a manifest, cached under
``${XDG_CACHE_HOME:-~/.cache}/pvperf/images/<name>/``:

    vmlinux          the ELF kernel ``qemu -kernel`` boots, made from the
                     Debian kernel package's by the host's Arch
                     (pyhost/arch/: on x86, extracted from the bzImage,
                     whose own XZ decompressor is slow under TCG, and
                     booted through its PVH entry point)
    initramfs.cpio   an UNCOMPRESSED newc archive (no decompression at boot):
                     busybox, the host's Debian ``perf`` with its shared
                     libraries, the recipe's extra host tools (``objdump``
                     for ``perf annotate``, ``addr2line`` for ``perf
                     report``) with theirs, the recipe's Debian packages
                     with their dependencies (packages.py), the virtio/9p/
                     fw_cfg modules, /init, and the guest PMU driver when
                     one is given
    System.map       the core-kernel lines of /proc/kallsyms, read in a
                     test boot of the new image (Debian's package ships a
                     placeholder; the real one is in the ~860 MB -dbg deb)
    root/            the unpacked initramfs tree, kept so that host-side
                     symbolizers can read the guest's binaries
    manifest.json    kernel version, package versions, input hash, build time

Inputs and the cache key: inputs.py.

Debian packages are fetched with ``apt-get download`` into
``<cache>/debs/`` (verified against the SHA-256 that apt lists) and
unpacked with ``dpkg -x``; nothing is installed on the host.  A build runs
in a temporary directory inside ``<cache>/images/`` and is renamed into
place at the end, so an interrupted build never leaves a half image.  When
only the driver changed, the cached tree is reused and just the .ko and
the cpio are rewritten (~0.3 s instead of ~10 s).

The pure pieces (newc writer/reader, bzImage extractor, ELF note and
``.modinfo`` readers, module dependency resolution, the input hash) have
no side effects and are unit-tested in tests/unit/image/test_image.py.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..arch import UnbootableKernel
from ..arch import host as host_arch
from ..errors import ImageError
from ..paths import cache_dir
from . import apt, aptdir, maintainer, packages
from .cpio import write_initramfs
from .inputs import DEFAULT_DRIVER, Inputs, gather, stale_driver
from .kernel import kernel_banner
from .recipe import load_recipe
from .root import install_driver, populate_root, write_image_json
from .smoke import SMOKE_MEM_MB, guest_run, smoke_boot
from .store import BuildLock, GuestImage, image_dir, image_from_dir, \
    images_dir, install_image, recipe_name
from .sysmap import system_map_from_kallsyms

Progress = Callable[[int, int, str], None]
TOTAL_STEPS = 9


def stderr_progress(step: int, total: int, message: str) -> None:
    """Default progress reporter: one line per step on stderr."""
    print(f"pvperf: image: [{step}/{total}] {message}", file=sys.stderr,
          flush=True)


def image_status(name: str = "default", *, driver_ko=DEFAULT_DRIVER
                 ) -> GuestImage | None:
    """The cached image if it exists and matches the current inputs
    (apt-cache, dpkg-query, ldd and a few hashes; no network, no build)."""
    name = recipe_name(name)
    d = image_dir(name)
    img = image_from_dir(name, d)
    if img is None:
        return None
    inputs = gather(name, driver_ko)
    manifest = json.loads((d / "manifest.json").read_text())
    return img if manifest.get("input_hash") == inputs.hash else None


def _warn_stale_driver(inputs, driver_ko, say) -> None:
    """An image without the PMU driver counts nothing (perf prints <not
    supported>): say so at build time when the driver that was built is
    for another kernel release than the image's."""
    if driver_ko is not DEFAULT_DRIVER or inputs.driver_ko is not None:
        return
    release = inputs.kernel_package.removeprefix("linux-image-")
    why = stale_driver(inputs.arch, release)
    if why:
        karch = "" if inputs.arch.name == host_arch().name else \
            f" KARCH={inputs.arch.debian_arch}"
        say(f"warning: no PMU driver for kernel {release} ({why}): run "
            f"`make -C guest_kernel_patch{karch}`, then build the image "
            "again")


def build_image(name: str = "default", *, driver_ko=DEFAULT_DRIVER,
                force: bool = False,
                progress: Progress | None = stderr_progress) -> GuestImage:
    """Build (or reuse) the guest image ``name``; see the module docstring.

    driver_ko: path of the guest PMU driver to put at
    /lib/modules/pvperf/pvperf.ko; by default guest_kernel_patch/pvperf.ko
    of this repository if it exists; None for an image without it.
    force: rebuild everything even if the inputs did not change.
    progress: called as progress(step, total, message) per step (default:
    a line on stderr); None for silence.
    Raises ImageError with what failed, why, and what to do.
    """
    name = recipe_name(name)
    report = (lambda step, msg: progress(step, TOTAL_STEPS, msg)) \
        if progress else (lambda step, msg: None)
    images = images_dir()
    with BuildLock(images / f".lock-{name}"):
        report(1, "resolving packages")
        aptdir.for_recipe(load_recipe(name)).ensure_lists(
            lambda m: report(1, m))
        inputs = gather(name, driver_ko)
        _warn_stale_driver(inputs, driver_ko, lambda m: report(1, m))
        final = image_dir(name)
        current = image_from_dir(name, final)
        if current and not force:
            try:
                old = json.loads(current.manifest.read_text())
            except (OSError, ValueError):
                old = {}
            if old.get("input_hash") == inputs.hash:
                report(TOTAL_STEPS, f"image {name} is up to date ({final})")
                return current
        else:
            old = {}
        for stale in images.glob(f".build-{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)   # interrupted builds
        work = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=images))
        try:
            if old.get("base_hash") == inputs.base_hash:
                img = _update_driver(work, final, inputs, old, report)
            else:
                img = _build_into(work, final, inputs, report)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return img


def _build_into(work: Path, final: Path, inputs: Inputs,
                report: Callable[[int, str], None]) -> GuestImage:
    recipe, ctx = inputs.recipe, inputs.apt
    debs = ctx.debs_dir() if ctx is not None else cache_dir() / "debs"
    kpkg, bbpkg = inputs.kernel_package, recipe.busybox_package
    report(2, f"fetching {kpkg} {inputs.versions[kpkg]} and {bbpkg} "
              f"{inputs.versions[bbpkg]}")
    kdeb = apt.fetch_deb(kpkg, inputs.versions[kpkg], debs, ctx)
    bbdeb = apt.fetch_deb(bbpkg, inputs.versions[bbpkg], debs, ctx)
    added = []
    if inputs.debs:
        report(2, f"fetching {', '.join(recipe.packages)} and their "
                  f"dependencies: {len(inputs.debs)} packages")
        added = packages.fetch(inputs.debs, debs, lambda m: report(2, m), ctx)
    userland = None
    if inputs.userland:
        report(2, f"fetching {recipe.perf_package} and the tools' packages "
                  f"with their dependencies: {len(inputs.userland)} packages")
        userland = work / "userland"
        packages.unpack(packages.fetch(inputs.userland, debs,
                                       lambda m: report(2, m), ctx), userland)

    report(3, f"unpacking {kpkg}")
    kdir, bbdir = work / "kernel-deb", work / "busybox-deb"
    apt.dpkg_x(kdeb, kdir)
    apt.dpkg_x(bbdeb, bbdir)
    # a /usr-merged release's kernel package (trixie) ships its modules
    # in /usr/lib/modules: the image keeps them where /init looks
    merged = kdir / "usr" / "lib" / "modules"
    if merged.is_dir() and not (kdir / "lib" / "modules").exists():
        (kdir / "lib").mkdir(exist_ok=True)
        merged.rename(kdir / "lib" / "modules")
    vers = sorted(p.name for p in (kdir / "lib" / "modules").iterdir())
    if len(vers) != 1:
        raise ImageError(f"unexpected layout of {kdeb.name}",
                         f"expected one /lib/modules/<version>, found {vers}",
                         "check the recipe's kernel package")
    kver = vers[0]

    out = work / "image"
    out.mkdir()
    vmlinuz = kdir / "boot" / f"{inputs.arch.kernel_file}-{kver}"
    report(4, f"extracting vmlinux from {vmlinuz.name}")
    try:
        boot = inputs.arch.boot_kernel(vmlinuz.read_bytes())
    except UnbootableKernel as e:
        raise ImageError("cannot use this kernel",
                         f"{vmlinuz.name} {e.cause}", e.hint) from e
    except (OSError, ValueError) as e:
        raise ImageError("cannot extract vmlinux", str(e),
                         f"delete {kdeb} and retry; report a bug if it "
                         "persists") from e
    kernel_manifest, anchor = boot.manifest, boot.anchor
    (out / "vmlinux").write_bytes(boot.image)
    banner = kernel_banner(boot.image)
    del boot

    root = out / "root"
    root.mkdir()
    order = populate_root(root, inputs, kdir, kver, bbdir, report, added,
                          userland)
    write_image_json(root, inputs, kver)
    shutil.rmtree(kdir)
    shutil.rmtree(bbdir)

    configured = _configure(out, root, inputs, report)
    size = (out / "initramfs.cpio").stat().st_size

    report(8, "test-booting the image (System.map from /proc/kallsyms)")
    t0 = time.monotonic()
    kallsyms, perf_version = smoke_boot(
        out / "vmlinux", out / "initramfs.cpio",
        tools=[t.spec.guest for t in inputs.tools
               if t.libs or inputs.userland], arch=inputs.arch)
    smoke_seconds = round(time.monotonic() - t0, 2)
    system_map = system_map_from_kallsyms(kallsyms)
    _check_link_address(system_map, anchor)
    (out / "System.map").write_text(system_map)

    manifest = {
        "name": recipe.name,
        "kernel_version": kver,
        "kernel_banner": banner,
        "kernel_package": kpkg,
        "arch": inputs.arch.name,
        **kernel_manifest,
        "packages": inputs.data["packages"],
        "added": inputs.recipe.packages,
        "debs": inputs.data["debs"],
        "modules": order,
        "driver_ko": str(inputs.driver_ko) if inputs.driver_ko else None,
        "input_hash": inputs.hash,
        "base_hash": inputs.base_hash,
        "inputs": inputs.data,
        "initramfs_size": size,
        "perf_version": perf_version,
        "driver_only_update": False,
        "system_map": "from /proc/kallsyms of a test boot (nokaslr); "
                      "Debian's package ships a placeholder",
        "test_boot_seconds": smoke_seconds,
        "maintainer_scripts": configured,
        "build_time": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

    report(9, f"installing image into {final} "
              f"(initramfs {size / 1e6:.1f} MB, kernel {kver})")
    return install_image(out, final, recipe.name)


# The guest compiles the standard library under TCG: up to minutes, not
# the test boot's seconds (the manifest's pyc_guest_seconds says; about
# 20 s for a python3-minimal, 2026-11-29).
GUEST_PYC_TIMEOUT = 900.0


def _configure(out: Path, root: Path, inputs: Inputs,
               report: Callable[[int, str], None]) -> dict:
    """The packages' maintainer scripts' effects (maintainer.py) and
    initramfs.cpio: .pyc files on the host; then, when the image has
    ldconfig, the cpio is booted once to run it and written again with
    its ld.so.cache.  Returns what was done and what it took, for the
    manifest."""
    t0 = time.monotonic()
    compiled = maintainer.byte_compile(root)
    done: dict = {"pyc": [c.as_json() for c in compiled],
                  "pyc_seconds": round(time.monotonic() - t0, 2)}
    for c in compiled:
        report(6, f"byte-compiled {c.files} modules of python{c.version} "
                  f"with {c.python}" if c.python else
                  f"python{c.version}'s modules not byte-compiled: "
                  f"{c.why_not}")
    report(7, "writing initramfs.cpio")
    cpio = out / "initramfs.cpio"
    compile_in_guest = maintainer.guest_compile_job(root, compiled)
    write_initramfs(root, cpio, inputs.arch)
    if compile_in_guest:
        report(7, "byte-compiling python's modules with the guest's own "
                  "interpreter (a build-time boot)")
        t0 = time.monotonic()
        status, stream, err = guest_run(
            out / "vmlinux", cpio, compile_in_guest, inputs.arch,
            timeout=GUEST_PYC_TIMEOUT,
            mem_mb=SMOKE_MEM_MB + 3 * (cpio.stat().st_size >> 20))
        if status != 0:
            raise ImageError("cannot byte-compile the guest's python",
                             f"its compile exited with {status}",
                             "report a bug", details=err[-3000:])
        n = maintainer.install_guest_pyc(root, stream, compiled)
        done["pyc"] = [c.as_json() for c in compiled]
        done["pyc_guest_seconds"] = round(time.monotonic() - t0, 2)
        write_initramfs(root, cpio, inputs.arch)
        report(7, f"byte-compiled {n} modules in the guest "
                  f"({done['pyc_guest_seconds']} s)")
    if maintainer.has_ldconfig(root):
        report(7, "running the guest's ldconfig (a build-time boot)")
        t0 = time.monotonic()
        # The root file system is a tmpfs of half the RAM, already about
        # as full as the cpio is big: room for ldconfig to write.
        mem_mb = SMOKE_MEM_MB + 2 * (cpio.stat().st_size >> 20)
        status, cache, err = guest_run(out / "vmlinux", cpio,
                                       maintainer.ldconfig_command(root),
                                       inputs.arch, mem_mb=mem_mb)
        if status != 0:
            raise ImageError("cannot make the dynamic linker's cache",
                             f"the guest's ldconfig exited with {status}",
                             "report a bug", details=err[-3000:])
        maintainer.install_ld_cache(root, cache)
        write_initramfs(root, cpio, inputs.arch)
        done["ldconfig_seconds"] = round(time.monotonic() - t0, 2)
        report(7, f"ld.so.cache: {len(cache)} bytes "
                  f"({done['ldconfig_seconds']} s)")
    return done


def _check_link_address(system_map: str,
                        anchor: tuple[str, int] | None) -> None:
    """The test boot's kernel must sit where it is linked (no KASLR), or
    System.map would not describe later boots."""
    if anchor is None:
        return
    name, want = anchor
    m = re.search(rf"^([0-9a-f]{{16}}) T {re.escape(name)}$", system_map,
                  re.M)
    if not m or int(m.group(1), 16) != want:
        raise ImageError("cannot make System.map",
                         "the kernel's /proc/kallsyms does not match its "
                         f"link address ({name} {m and m.group(1)}, "
                         f"linked at {want:#x})",
                         "report a bug: the kernel was relocated (KASLR?)")


def _update_driver(work: Path, final: Path, inputs: Inputs, old: dict,
                   report: Callable[[int, str], None]) -> GuestImage:
    """Only the driver changed: reuse the current image's kernel, System.map
    and tree (no unpacking, no test boot), swap the driver, rewrite the cpio."""
    report(2, "only the PMU driver changed: reusing kernel and tree")
    out = work / "image"
    out.mkdir()
    for f in ("vmlinux", "System.map"):
        try:
            os.link(final / f, out / f)
        except OSError:
            shutil.copyfile(final / f, out / f)
    shutil.copytree(final / "root", out / "root", symlinks=True)
    install_driver(out / "root", inputs)
    write_image_json(out / "root", inputs, old["kernel_version"])
    report(7, "writing initramfs.cpio")
    write_initramfs(out / "root", out / "initramfs.cpio", inputs.arch)
    size = (out / "initramfs.cpio").stat().st_size
    manifest = dict(old)
    manifest.update({
        "driver_ko": str(inputs.driver_ko) if inputs.driver_ko else None,
        "input_hash": inputs.hash,
        "inputs": inputs.data,
        "initramfs_size": size,
        "build_time": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"),
        "driver_only_update": True,
    })
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    report(9, f"installing image into {final} (initramfs {size / 1e6:.1f} MB)")
    return install_image(out, final, inputs.recipe.name)

