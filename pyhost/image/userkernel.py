"""A kernel the user built, booted with an image's userland.

``pvperf run --kernel PATH [--kernel-build DIR]`` (virtme-ng's "boot what
you just built"): PATH is an ELF vmlinux, a bzImage, or a boot image the
guest architecture's ``boot_kernel`` takes as it is (an Image with no ELF
inside); DIR is its build tree (found automatically when PATH lies in
one).  The image's /init needs, built in (=y: the image's Debian modules
are for another kernel), the options in REQUIRED; a kernel without one
is refused in one line that names them all.  What the kernel has is
read, in this order, from DIR's
.config, the kernel's own IKCONFIG, or symbols only a built-in option
leaves (the ELF's .symtab, or a System.map next to it).

The PMU driver: built in (CONFIG_PVPERF_PMU=y, the in-tree patch) or
built here as pvperf.ko against DIR (``make -C DIR M=...``, cached by
kernel release, build-tree .config and driver source) and put where /init
loads it, in a newc archive appended to the image's initramfs.  Without
either, the run says so in one line (or goes on without the PMU with
--no-pmu).

A kernel whose release is the image's own is the image's kernel: its
modules fit, nothing is checked.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import shutil
import subprocess
import zlib
from pathlib import Path

from ..arch import Arch, UnbootableKernel, host
from ..errors import ImageError
from ..guest_contract import DRIVER_PATH, in_root
from ..paths import REPO_ROOT as REPO, cache_dir
from .cpio import CpioWriter
from .kernel import open_elf, extract_vmlinux, kernel_banner, pvh_entry, \
    read_modinfo
from .store import GuestImage
from .sysmap import parse_kallsyms

# (CONFIG_ option, a symbol only that option built in leaves, what for).
REQUIRED = (
    ("BLK_DEV_INITRD", "populate_rootfs", "the image is an initramfs"),
    ("DEVTMPFS", "devtmpfs_mount", "/init's /dev"),
    ("VIRTIO_PCI", "virtio_pci_probe", "virtio devices"),
    ("VIRTIO_CONSOLE", "virtcons_probe", "the control and output ports"),
    ("NET_9P_VIRTIO", "p9_virtio_probe", "the share"),
    ("9P_FS", "v9fs_mount", "the share"),
    ("FW_CFG_SYSFS", "fw_cfg_sysfs_probe", "the command line"),
    ("PERF_EVENTS", "perf_event_init", "perf"),
)
# qemu -kernel boots an ELF kernel through its PVH entry note only.
PVH = ("PVH", "pvh_start_xen", "qemu -kernel boots a vmlinux by PVH")
BUILTIN_DRIVER = ("PVPERF_PMU", "pvperf_init")
DRIVER_DIR = REPO / "guest_kernel_patch"
ABI_HEADER = REPO / "contracts" / "pvperf_abi.h"

_BZIMAGE_MAGIC_AT = (0x202, b"HdrS")
_ELF_MAGIC = b"\x7fELF"
_IKCONFIG_START = b"IKCFG_ST"


def _refuse(path: Path, cause: str, hint: str) -> ImageError:
    return ImageError(f"--kernel {path}", cause, hint)


@dataclasses.dataclass
class KernelFeatures:
    """What a kernel has built in, from one source (``source`` names it)."""
    source: str
    config: dict[str, str] | None = None    # CONFIG_X -> value
    symbols: frozenset[str] | None = None

    def has(self, option: str, symbol: str) -> bool | None:
        """True/False, or None when this source cannot tell."""
        if self.config is not None:
            return self.config.get(f"CONFIG_{option}") == "y"
        if self.symbols:
            return symbol in self.symbols
        return None


def parse_config(text: str) -> dict[str, str]:
    """A kernel .config's CONFIG_X=value lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"(CONFIG_\w+)=(.*)", line)
        if m:
            out[m.group(1)] = m.group(2).strip('"')
    return out


def ikconfig(vmlinux: bytes) -> str | None:
    """The .config a CONFIG_IKCONFIG kernel carries (gzip after IKCFG_ST)."""
    at = vmlinux.find(_IKCONFIG_START)
    if at < 0:
        return None
    try:    # one gzip member; IKCFG_ED and the rest of the kernel follow
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        text = d.decompress(vmlinux[at + len(_IKCONFIG_START):])
    except zlib.error:
        return None
    return text.decode("utf-8", "replace") if d.eof else None


def _symtab(vmlinux: bytes):
    """The named symbols of a vmlinux's .symtab (none if stripped)."""
    from elftools.elf.sections import SymbolTableSection

    sec = open_elf(vmlinux).get_section_by_name(".symtab")
    if isinstance(sec, SymbolTableSection):
        yield from (s for s in sec.iter_symbols() if s.name)


def elf_symbols(vmlinux: bytes) -> frozenset[str]:
    """The .symtab's names (none for a kernel that is no ELF file)."""
    if not vmlinux.startswith(_ELF_MAGIC):
        return frozenset()
    return frozenset(s.name for s in _symtab(vmlinux))


def system_map_from_elf(vmlinux: bytes) -> str:
    """System.map lines from a vmlinux's .symtab ("" if it has none):
    functions as T, everything else with an address as D."""
    if not vmlinux.startswith(_ELF_MAGIC):
        return ""
    rows = sorted((s["st_value"], "T" if s["st_info"]["type"] == "STT_FUNC"
                   else "D", s.name) for s in _symtab(vmlinux)
                  if s["st_value"] and s["st_shndx"] != "SHN_UNDEF")
    return "".join(f"{a:016x} {t} {n}\n" for a, t, n in rows)


def own_system_map(vmlinux: bytes, release: str, path: Path
                   ) -> tuple[Path, list[str]]:
    """A System.map for a kernel that came without one (host profiles
    name guest kernel functions by it): from its symbol table, else empty
    (never the image's: it would name the wrong functions)."""
    text = system_map_from_elf(vmlinux)
    out = cache_dir() / "user-kernels" / release / \
        f"System.map-{hashlib.sha256(vmlinux).hexdigest()[:16]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out, ([] if text else [
        f"no System.map and no symbols for {path}: host profiles will not "
        "name guest kernel functions"])


def features(vmlinux: bytes, build_dir: Path | None,
             system_map: Path | None) -> KernelFeatures:
    if build_dir is not None:
        return KernelFeatures(f"{build_dir}/.config",
                              config=parse_config((build_dir / ".config")
                                                  .read_text()))
    text = ikconfig(vmlinux)
    if text is not None:
        return KernelFeatures("IKCONFIG", config=parse_config(text))
    syms = elf_symbols(vmlinux)
    if syms:
        return KernelFeatures("the vmlinux symbol table", symbols=syms)
    if system_map is not None:
        return KernelFeatures(str(system_map), symbols=frozenset(
            sym.name for sym in parse_kallsyms(system_map.read_text())))
    return KernelFeatures("nothing (no .config, IKCONFIG or symbols)")


def release_of(vmlinux: bytes, path: Path) -> str:
    banner = kernel_banner(vmlinux)
    if not banner:
        raise _refuse(path, "no `Linux version` banner in it",
                      "pass the vmlinux or bzImage your build produced")
    return banner.split()[2]


def find_build_dir(path: Path) -> Path | None:
    """The build tree PATH lies in (vmlinux at its top, bzImage in
    arch/x86/boot), recognised by its .config and Makefile."""
    for d in list(path.resolve().parents)[:4]:
        if (d / ".config").is_file() and (d / "Makefile").is_file():
            return d
    return None


def find_system_map(path: Path, build_dir: Path | None) -> Path | None:
    for d in ([build_dir] if build_dir else []) + \
            list(path.resolve().parents)[:4]:
        if (d / "System.map").is_file():
            return d / "System.map"
    return None


def read_kernel(path: Path, arch: Arch) -> tuple[bytes, bytes]:
    """(the file, its kernel for banner and symbols): a vmlinux is both,
    a bzImage's ELF is extracted, and a boot image ``arch`` boots as it is
    (an Image with no ELF inside) is both too."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _refuse(path, e.strerror or str(e), "check the path") from e
    if data.startswith(_ELF_MAGIC):
        return data, data
    off, magic = _BZIMAGE_MAGIC_AT
    if data[off:off + len(magic)] == magic:
        try:
            return data, extract_vmlinux(data)
        except ValueError as e:
            raise _refuse(path, f"bzImage without a readable kernel: {e}",
                          "pass the build's vmlinux instead") from e
        except UnbootableKernel as e:
            raise _refuse(path, f"bzImage that {e.cause}", e.hint) from e
    try:
        if arch.boot_kernel(data).image == data:
            return data, data
    except ValueError:
        pass
    except UnbootableKernel as e:
        raise _refuse(path, f"kernel that {e.cause}", e.hint) from e
    raise _refuse(path, "neither an ELF vmlinux, a bzImage nor a boot "
                  f"image for {arch.name}",
                  "pass vmlinux (top of the build tree) or the boot image "
                  "your build wrote under arch/*/boot")


def check_options(path: Path, feats: KernelFeatures, elf_boot: bool,
                  release: str) -> list[str]:
    """Refuse a kernel without what /init needs; the warnings (a check
    that could not be made) are returned."""
    wanted = REQUIRED + ((PVH,) if elf_boot else ())
    missing, unknown = [], []
    for option, symbol, why in wanted:
        has = feats.has(option, symbol)
        if has is False:
            missing.append((option, why))
        elif has is None:
            unknown.append(option)
    if missing:
        names = ", ".join(f"CONFIG_{o}" for o, _ in missing)
        whys = "; ".join(sorted({w for _, w in missing}))
        raise _refuse(path, f"kernel {release} lacks {names} built in "
                      f"(per {feats.source}; needed for: {whys})",
                      "rebuild it with " + " ".join(
                          f"CONFIG_{o}=y" for o, _ in missing))
    return ([f"cannot check CONFIG_ options of {path} ({feats.source}); "
             "booting it anyway"] if unknown else [])


def driver_sources() -> list[str]:
    """The driver's files, as make-patch.sh takes them: Kbuild, the .c of
    each object its pvperf- lines name (Kbuild is the one list), and every
    header beside them."""
    kbuild = (DRIVER_DIR / "Kbuild").read_text().replace("\\\n", " ")
    objects = [word for line in kbuild.splitlines()
               if line.startswith("pvperf-")
               for word in re.findall(r"\b(\w+)\.o\b", line)]
    headers = [p.name for p in DRIVER_DIR.glob("*.h")]
    return ["Kbuild", *sorted({f"{o}.c" for o in objects} | set(headers))]


def driver_cache_key(build_dir: Path, release: str) -> str:
    h = hashlib.sha256(release.encode())
    h.update((build_dir / ".config").read_bytes())
    for name in driver_sources():
        h.update(name.encode())
        h.update((DRIVER_DIR / name).read_bytes())
    h.update(ABI_HEADER.read_bytes())
    return h.hexdigest()[:16]


def build_driver(build_dir: Path, release: str) -> Path:
    """pvperf.ko for this build tree (cached); ImageError if it fails."""
    out = cache_dir() / "user-kernels" / release / driver_cache_key(
        build_dir, release)
    ko = out / "pvperf.ko"
    if ko.is_file():
        return ko
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in driver_sources():
        shutil.copy(DRIVER_DIR / name, src / name)
    # modules_prepare: a tree built with `make vmlinux` lacks what
    # external modules link with (scripts/module.lds); quick when done.
    # Such a tree of 6.2 or later has no Module.symvers either (only
    # `make modules` writes it), but vmlinux.symvers: the kernel's exports
    # for modpost, without which every symbol is undefined.
    exports = ([f"KBUILD_EXTRA_SYMBOLS={build_dir / 'vmlinux.symvers'}"]
               if not (build_dir / "Module.symvers").is_file()
               and (build_dir / "vmlinux.symvers").is_file() else [])
    for target in (["modules_prepare"],
                   [f"M={src}", f"PVPERF_CONTRACTS={ABI_HEADER.parent}",
                    "CONFIG_DEBUG_INFO_BTF_MODULES=", *exports, "modules"]):
        r = subprocess.run(["make", "-C", str(build_dir), *target],
                           capture_output=True, text=True)
        if r.returncode != 0:
            break
    if r.returncode != 0 or not (src / "pvperf.ko").is_file():
        lines = (r.stdout + r.stderr).strip().splitlines() or [""]
        first = next((l for l in lines if re.search(
            r"error|cannot|no rule", l, re.I)), lines[-1])
        raise ImageError(f"building pvperf.ko against {build_dir}",
                         first.strip(), "the tree must be built (make) with "
                         "CONFIG_MODULES=y and CONFIG_KPROBES=y")
    vermagic = read_modinfo((src / "pvperf.ko").read_bytes()).get(
        "vermagic", [""])[0]
    if vermagic.split()[:1] != [release]:
        raise ImageError(f"building pvperf.ko against {build_dir}",
                         f"the module is for {vermagic.split()[:1]}, the "
                         f"kernel is {release}",
                         "pass the build tree of this kernel")
    shutil.copy(src / "pvperf.ko", ko)
    shutil.rmtree(src, ignore_errors=True)
    return ko


def driver_overlay(ko: Path) -> bytes:
    """A newc archive that puts ``ko`` where /init loads the driver."""
    buf = io.BytesIO()
    w = CpioWriter(buf)
    path = in_root(DRIVER_PATH)
    parts = path.split("/")
    for i in range(1, len(parts)):
        w.add_dir("/".join(parts[:i]))
    w.add_file(path, ko.read_bytes(), mode=0o644)
    w.close()
    return buf.getvalue()


@dataclasses.dataclass
class UserKernel:
    image: GuestImage           # the base image with this kernel
    overlay: bytes              # for the initramfs (the driver), or b""
    warnings: list[str]


def user_kernel(path: Path, build_dir: Path | None, base: GuestImage,
                pmu: bool, arch: Arch | None = None) -> UserKernel:
    """Check the kernel at ``path`` (for ``arch``'s guests, by default the
    host's) and describe how to boot it."""
    data, vmlinux = read_kernel(path, arch or host())
    release = release_of(vmlinux, path)
    build_dir = build_dir or find_build_dir(path)
    if build_dir is not None and not (build_dir / ".config").is_file():
        raise _refuse(path, f"{build_dir} has no .config",
                      "--kernel-build takes the kernel's build tree")
    system_map = find_system_map(path, build_dir)
    if release == base.kernel_version:
        return UserKernel(dataclasses.replace(
            base, vmlinux=path.resolve(),
            system_map=system_map or base.system_map), b"", [])
    # A bzImage with a PVH note still boots as a bzImage (QEMU picks the
    # boot protocol by the file); only an ELF needs the note.
    elf_boot = data is vmlinux and data.startswith(_ELF_MAGIC)
    feats = features(vmlinux, build_dir, system_map)
    warnings = check_options(path, feats, elf_boot, release)
    if elf_boot and feats.has(*PVH[:2]) is None and pvh_entry(vmlinux) is None:
        raise _refuse(path, "no PVH entry note (CONFIG_PVH)",
                      "rebuild with CONFIG_PVH=y or pass the bzImage")
    map_path = system_map
    if map_path is None:
        map_path, more = own_system_map(vmlinux, release, path)
        warnings += more
    image = dataclasses.replace(base, vmlinux=path.resolve(),
                                kernel_version=release, system_map=map_path)
    overlay = b""
    if pmu and not feats.has(*BUILTIN_DRIVER):
        if build_dir is None:
            raise _refuse(path, f"kernel {release} has no pvperf driver "
                          "built in and no build tree was given",
                          "pass --kernel-build DIR (the module is built "
                          "there), apply guest_kernel_patch/0001-*.patch, "
                          "or run with --no-pmu")
        overlay = driver_overlay(build_driver(build_dir, release))
    return UserKernel(image, overlay, warnings)
