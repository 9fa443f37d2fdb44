"""The guest driver (guest_kernel_patch/): the module builds clean against
the Debian headers of both guest kernels (6.1, and 6.12 for the
linux-6.12 image; arm64's and riscv64's cross-built), carries the right
metadata and exactly one marker store (the hypercall's instruction),
and the in-tree patches (x86_64's, arm64's and riscv64's) are generated
from the same source, apply to
linux-source-6.1 and linux-source-6.12 and compile.

The first run downloads the headers (14 MB, 16 MB for 6.12) and the
linux-source packages (140 and 153 MB, unpacked once into
~/.cache/pvperf/linux-source); all need apt lists (`apt-get update`).
One VM test boots the guest without the TCG plugin to check the
driver's no-host path.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import REPO, run_pvperf
from pyhost.image.userkernel import driver_sources

GKP = REPO / "guest_kernel_patch"
# The architecture files behind pvperf_arch.h: pvperf_<arch>.c.
ARCH_FILE = re.compile(r"pvperf_(x86_64|aarch64|riscv64)\.c")
PATCH = GKP / "0001-x86-events-pvperf-paravirtual-PMU.patch"


@dataclass(frozen=True)
class InTree:
    """An architecture's in-tree patch (make-patch.sh ARCH): where it puts
    the driver (and the ABI header with it), and the Kbuild line of its own
    file."""
    patch: Path
    dir: str
    kbuild_line: str
    arch_file: str


IN_TREE = {
    "x86_64": InTree(PATCH, "arch/x86/events/pvperf",
                     "pvperf-$(CONFIG_X86_64)\t+= pvperf_x86_64.o",
                     "pvperf_x86_64.c"),
    "aarch64": InTree(GKP / "0001-arm64-pvperf-paravirtual-PMU.patch",
                      "arch/arm64/pvperf",
                      "pvperf-$(CONFIG_ARM64)\t+= pvperf_aarch64.o",
                      "pvperf_aarch64.c"),
    "riscv64": InTree(GKP / "0001-riscv-pvperf-paravirtual-PMU.patch",
                      "arch/riscv/pvperf",
                      "pvperf-$(CONFIG_RISCV)\t+= pvperf_riscv64.o",
                      "pvperf_riscv64.c"),
}
MARKER = "c7 00 50 56 50 46"     # x86_64's marker store
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pvperf"


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          **kw)


# The second guest kernel's image (images/linux-6.12: Debian's 6.12 from
# the release its recipe names).
IMAGE_612 = "linux-6.12"
RELEASE_612 = json.loads((REPO / "images" / IMAGE_612 / "recipe.json")
                         .read_text())["kernel"]["release"]


def fetch_kbuild(*args: str, image: str | None = None) -> str:
    """fetch-kbuild.sh's last output line (for ``image``'s kernel)."""
    env = dict(os.environ, **({"IMAGE": image} if image else {}))
    r = run([GKP / "fetch-kbuild.sh", *args], env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def kver() -> str:
    return fetch_kbuild("--kver")


@pytest.fixture(scope="module")
def kdir(kver) -> Path:
    return Path(fetch_kbuild())


@pytest.fixture(scope="module")
def kdir612() -> Path:
    return Path(fetch_kbuild(image=IMAGE_612))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """Where this module builds: a copy of guest_kernel_patch/'s tracked
    files, with contracts/ and images/ (the IMAGE= builds' recipes)
    beside it as in the repository.  A clean and
    a rebuild in guest_kernel_patch/ itself would take the driver from
    under the images and guests of the other pytest-xdist worker (and
    made this module run alone, after every other test)."""
    root = tmp_path_factory.mktemp("driver")
    files = run(["git", "-C", GKP, "ls-files"]).stdout.split()
    assert files
    for name in files:
        (root / GKP.name / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(GKP / name, root / GKP.name / name)
    for beside in ("contracts", "images"):
        (root / beside).symlink_to(REPO / beside)
    return root / GKP.name


@pytest.fixture(scope="module")
def build(kdir, tree) -> subprocess.CompletedProcess:
    """One W=1 build (warnings are errors) from clean, and the 6.12 one
    (build612); ``ko``, the 6.1 module."""
    r = run(["make", "-C", tree, "W=1"])
    assert r.returncode == 0, r.stdout + r.stderr
    r.build612 = run(["make", "-C", tree, f"IMAGE={IMAGE_612}", "W=1"])
    r.ko = tree / "pvperf.ko"
    return r


def test_module_builds_without_warnings(build):
    assert build.ko.is_file()
    assert "warning:" not in build.stdout + build.stderr


def modinfo(ko: Path) -> dict[str, str]:
    """modinfo's fields; read from the .modinfo section if kmod is absent."""
    if shutil.which("modinfo"):
        out = run(["modinfo", ko]).stdout
        return {k.strip(): v.strip() for k, _, v in
                (line.partition(":") for line in out.splitlines())}
    raw = subprocess.run(["objcopy", "-O", "binary", "--only-section=.modinfo",
                          ko, "/dev/stdout"], capture_output=True,
                         check=True).stdout
    return dict(f.decode().partition("=")[::2] for f in raw.split(b"\0") if f)


def test_kbuild_tree_works_from_any_path(kdir, tmp_path):
    """The headers tree names itself by relative paths only: one made
    through another cache's path (a helper's XDG_CACHE_HOME linking this
    kbuild/) failed a clean CI with `include /that/cache/...: No such
    file`.  A copy under another directory must still be a kernel tree
    that make can read."""
    root = kdir.parents[2]
    absolute = [p for p in root.rglob("*")
                if p.is_symlink() and os.readlink(p).startswith("/")]
    assert not absolute, absolute
    includes = re.findall(r"^include (\S+)", (kdir / "Makefile").read_text(),
                          re.M)
    assert includes and not any(i.startswith("/") for i in includes), includes
    moved = tmp_path / "elsewhere"
    shutil.copytree(root, moved, symlinks=True)
    r = run(["make", "-s", "-C", moved / kdir.relative_to(root),
             "kernelversion"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", r.stdout.strip()), r.stdout


def test_modinfo_license_and_vermagic(build, kver):
    info = modinfo(build.ko)
    assert info["license"] == "GPL"
    assert info["vermagic"].split()[0] == kver
    assert info["name"] == "pvperf"


def objdump_functions(ko: Path, objdump: str = "objdump") -> dict[str, str]:
    """Disassembly of every function in the module, by name (a riscv
    object keeps its local .L labels for the linker's relaxation: they are
    inside the function they follow)."""
    out = run([objdump, "-d", ko]).stdout
    funcs, name = {}, None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m and not m.group(1).startswith(".L"):
            name = m.group(1)
            funcs[name] = ""
        elif name:
            funcs[name] += line + "\n"
    return funcs


def assert_one_marker(ko: Path) -> None:
    """Every hypercall goes through pvperf_arch_marker(): one marker store,
    `movl $0x46505650,(%rax)`, in .text, and none anywhere else."""
    funcs = objdump_functions(ko)
    where = {f: body.count(MARKER) for f, body in funcs.items()
             if MARKER in body}
    assert where == {"pvperf_arch_marker": 1}
    line = next(l for l in funcs["pvperf_arch_marker"].splitlines()
                if MARKER in l)
    assert re.search(r"movl\s+\$0x46505650,\(%rax\)", line), line
    text = run(["objdump", "-d", "-j", ".text", ko]).stdout
    assert text.count(MARKER) == 1, "the marker store is not in .text"


def test_marker_store_once_in_the_arch_marker(build):
    assert_one_marker(build.ko)


def test_612_module_builds_clean_for_the_images_kernel(build):
    """make IMAGE=linux-6.12 builds linux-6.12/pvperf.ko against the
    headers of that image's kernel (6.12 from its recipe's release),
    without warnings, with its one marker store; the 6.1 build stays."""
    r = build.build612
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning:" not in r.stdout + r.stderr
    ko = build.ko.parent / IMAGE_612 / "pvperf.ko"
    release = modinfo(ko)["vermagic"].split()[0]
    assert release.startswith("6.12.") and \
        release == fetch_kbuild("--kver", image=IMAGE_612)
    assert_one_marker(ko)
    assert modinfo(build.ko)["vermagic"].startswith("6.1.")


@dataclass(frozen=True)
class Cross:
    """A cross-built driver (make KARCH=...): the private apt directory
    its headers come from, the toolchain prefix, and its marker store
    (pvperf_abi.h) as objdump prints it: the word and the instruction."""
    apt: str
    pvperf_arch: str
    prefix: str
    word: str
    insn: str


CROSS = {
    "arm64": Cross("arm64", "aarch64", "aarch64-linux-gnu-", "b8000230",
                   r"stur\s+w16, \[x17\]"),
    # the 32-bit form: a c.sw would be another word
    "riscv64": Cross("riscv64-trixie", "riscv64", "riscv64-linux-gnu-",
                     "00a5a023", r"sw\s+a0,0\(a1\)"),
}


@pytest.mark.parametrize("karch", CROSS)
def test_cross_module_builds_with_one_marker(build, karch):
    """make KARCH=arm64 / riscv64 cross-builds KARCH/pvperf.ko without
    warnings, for the kernel fetch-kbuild.sh resolves (vermagic), with
    its one marker store in pvperf_arch_marker."""
    c = CROSS[karch]
    cross_kdir(karch)               # or skip
    r = run(["make", "-C", build.ko.parent, f"KARCH={karch}", "W=1"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning:" not in r.stdout + r.stderr
    ko = build.ko.parent / karch / "pvperf.ko"
    r = run([GKP / "fetch-kbuild.sh", "--kver"],
            env=dict(os.environ, KARCH=karch))
    assert modinfo(ko)["vermagic"].split()[0] == r.stdout.strip()
    funcs = objdump_functions(ko, c.prefix + "objdump")
    marker = re.compile(rf"\t{c.word}\s+\t")
    where = {f: len(marker.findall(body)) for f, body in funcs.items()
             if marker.search(body)}
    assert where == {"pvperf_arch_marker": 1}
    assert re.search(c.insn, funcs["pvperf_arch_marker"]), funcs


def test_hctest_uses_the_drivers_marker_store(kdir, tree):
    """The hypercall test module links the driver's architecture file and
    issues the marker store through the same function, not a copy of its
    own."""
    r = run(["make", "-C", tree, "hctest", "W=1"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning:" not in r.stdout + r.stderr
    funcs = objdump_functions(tree / "hctest" / "pvperf_hctest.ko")
    where = {f: body.count(MARKER) for f, body in funcs.items()
             if MARKER in body}
    assert where == {"pvperf_arch_marker": 1}
    for path in (GKP / "hctest").glob("*.c"):
        if not ARCH_FILE.fullmatch(path.name) and \
                not path.name.endswith(".mod.c"):
            code = strip_c_comments(path.read_text())
            assert not re.search(r"\basm\b(?!/)|__asm__", code), path.name


def test_per_cpu_data_only_in_data_percpu(build):
    """The 6.1 module loader relocates only .data..percpu; any other per-CPU
    section (DEFINE_PER_CPU_READ_MOSTLY's ..read_mostly) is ordinary module
    memory and per_cpu() on it writes far outside (seen as an Oops)."""
    out = run(["readelf", "-SW", build.ko]).stdout
    names = re.findall(r"\]\s+(\.data\.\.percpu\S*)", out)
    assert names == [".data..percpu"], names


@pytest.mark.parametrize("arch", IN_TREE)
def test_patch_is_generated_from_module_source(arch):
    r = run([GKP / "make-patch.sh", arch])
    assert r.returncode == 0, r.stderr
    assert r.stdout == IN_TREE[arch].patch.read_text(), \
        "stale patch: run `make -C guest_kernel_patch patch`"


def test_make_patch_defaults_to_x86_64_and_refuses_other_arches():
    assert run([GKP / "make-patch.sh"]).stdout == PATCH.read_text()
    r = run([GKP / "make-patch.sh", "mips64"])
    assert r.returncode != 0 and "x86_64, aarch64 or riscv64" in r.stderr


def new_files(patch_text: str) -> dict[str, str]:
    """The content of each file the patch creates."""
    files, path, body = {}, None, None
    for line in patch_text.splitlines(keepends=True):
        if line.startswith("diff --git "):
            if path is not None and body is not None:
                files[path] = "".join(body)
            path, body = line.split()[3][2:], None
        elif line.startswith("new file mode"):
            body = []
        elif body is not None and line.startswith("+") \
                and not line.startswith("+++ "):
            body.append(line[1:])
        elif line.startswith("-- \n"):
            break
    if path is not None and body is not None:
        files[path] = "".join(body)
    return files


@pytest.mark.parametrize("arch", IN_TREE)
def test_patch_carries_the_module_source_verbatim(arch):
    """Each architecture's patch carries the generic files and its own: no
    other architecture's file (its objects' lines are not in the
    Makefile)."""
    it = IN_TREE[arch]
    files = new_files(it.patch.read_text())
    for name in driver_sources()[1:]:
        if ARCH_FILE.fullmatch(name) and name != it.arch_file:
            continue
        assert files.pop(f"{it.dir}/{name}") == (GKP / name).read_text(), name
    assert files.pop(f"{it.dir}/pvperf_abi.h") == \
        (REPO / "contracts" / "pvperf_abi.h").read_text()
    makefile = files.pop(f"{it.dir}/Makefile")
    assert "obj-$(CONFIG_PVPERF_PMU)" in makefile
    assert it.kbuild_line in makefile
    assert makefile.count("pvperf-$(CONFIG_") == 1, makefile
    assert files == {}


def test_no_two_patches_touch_a_file_in_common():
    """So one tree can take them all."""
    def touched(patch: Path) -> set[str]:
        return set(re.findall(r"^diff --git a/(\S+)", patch.read_text(),
                              re.M))
    files = [touched(it.patch) for it in IN_TREE.values()]
    assert len(files) == 3 and all(files)
    for i, a in enumerate(files):
        for b in files[i + 1:]:
            assert not a & b


def test_kbuild_names_every_driver_source():
    """Kbuild is the one list of the driver's objects (make-patch.sh and
    userkernel.py read it): every .c here is in it, and nothing else."""
    sources = set(driver_sources())
    on_disk = {p.name for p in GKP.glob("*.c")
               if not p.name.endswith(".mod.c")}
    assert {n for n in sources if n.endswith(".c")} == on_disk
    assert {n for n in sources if n.endswith(".h")} == \
        {p.name for p in GKP.glob("*.h")}
    assert "pvperf_arch.h" in sources


def test_abi_header_is_read_from_contracts():
    """The driver and hctest include "pvperf_abi.h" from contracts/
    (Kbuild's include path): no copy or link of it in guest_kernel_patch/
    (the builds' own copies, arm64/ and linux-*/, aside)."""
    tracked = run(["git", "-C", GKP, "ls-files"]).stdout.split()
    assert tracked and not [f for f in tracked
                            if f.endswith("pvperf_abi.h")], tracked
    for kbuild in (GKP / "Kbuild", GKP / "hctest" / "Kbuild"):
        assert "-I$(PVPERF_CONTRACTS)" in kbuild.read_text(), kbuild


def strip_c_comments(text: str) -> str:
    """C source without comments and string literals (messages may say
    anything)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


# What only an architecture's file may name.
ARCH_ONLY = [
    r"__x86_64__", r"__aarch64__", r"__riscv", r"\bCONFIG_(X86|ARM64|RISCV)",
    r"\bx86", r"\bX86_", r"\barm64", r"\baarch64",
    r"\basm\b(?!/)", r"__asm__",                  # instructions
    r"\bPVPERF_(X86_64|AARCH64|RISCV64)_\w+",     # the ABI's per-arch facts
    r"\bNMI_\w+", r"\w*nmi_handler", r"(?i)\bapic\w*",  # x86's NMI path
    r"\bpage_fault_(user|kernel)\b",               # x86's fault tracepoints
    r"#include\s*<asm/",                          # arch headers
]


def pt_regs_fields_used(code: str) -> list[str]:
    """`name->field` / `name.field` for every variable declared as a
    struct pt_regs (or a pointer to one) in @code."""
    names = set(re.findall(r"struct\s+pt_regs\s*\*?\s*(\w+)", code))
    return [m.group(0) for n in names
            for m in re.finditer(rf"\b{n}\s*(->|\.)\s*\w+", code)]


def test_shared_driver_source_names_no_architecture():
    """Generic driver files reach the architecture only through
    pvperf_arch.h: no arch macro, instruction, register name or NMI/APIC
    call in their code, and no struct pt_regs field (generic accessors such
    as user_mode() are fine)."""
    shared = [n for n in driver_sources()[1:] if not ARCH_FILE.fullmatch(n)]
    assert "pvperf_pmu.c" in shared and "pvperf_arch.h" in shared
    for name in shared:
        text = (GKP / name).read_text()
        assert not re.search(r"__x86_64__|aarch64", text), name
        code = strip_c_comments(text)
        for pattern in ARCH_ONLY:
            m = re.search(pattern, code)
            assert not m, f"{name}: {m.group(0)!r} is architecture code"
        assert pt_regs_fields_used(code) == [], name
    for name in driver_sources():
        assert len((GKP / name).read_text().splitlines()) <= 600, name


def test_arch_file_implements_the_seam_and_nothing_generic():
    """Each architecture file defines every function pvperf_arch.h declares
    and uses none of the generic files (so hctest can link it alone)."""
    seam = (GKP / "pvperf_arch.h").read_text()
    declared = set(re.findall(r"^\w[\w ]*\b(pvperf_arch_\w+)\(", seam, re.M))
    assert declared >= {"pvperf_arch_marker", "pvperf_arch_sample_regs",
                        "pvperf_arch_overflow_irq_register",
                        "pvperf_arch_fault_hook_register"}
    arch_files = [n for n in driver_sources() if ARCH_FILE.fullmatch(n)]
    assert arch_files == ["pvperf_aarch64.c", "pvperf_riscv64.c",
                          "pvperf_x86_64.c"]
    for name in arch_files:
        code = strip_c_comments((GKP / name).read_text())
        defined = set(re.findall(r"^\w[\w ]*\b(pvperf_arch_\w+)\(", code,
                                 re.M))
        assert defined == declared, name
        assert '#include "pvperf.h"' not in code, name


@pytest.mark.parametrize("arch", IN_TREE)
@pytest.mark.parametrize("source,release", [
    ("linux-source-6.1", ""), ("linux-source-6.12", RELEASE_612)])
def test_patch_applies_to_linux_source(source, release, arch):
    """One patch per architecture for both trees, without offsets or
    fuzz."""
    r = run([GKP / "check-patch.sh", IN_TREE[arch].patch],
            env=dict(os.environ, LINUX_SOURCE_PKG=source,
                     LINUX_SOURCE_RELEASE=release))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "offset" not in r.stdout and "fuzz" not in r.stdout, r.stdout
    assert r.stdout.strip().endswith(source), r.stdout


@pytest.fixture(scope="module")
def kdir_arm64() -> Path:
    """Debian's arm64 6.1 headers (fetch-kbuild.sh KARCH=arm64), or skip."""
    return cross_kdir("arm64")


@pytest.fixture(scope="module")
def kdir_riscv64() -> Path:
    """trixie's riscv64 6.12 headers (fetch-kbuild.sh KARCH=riscv64), or
    skip."""
    return cross_kdir("riscv64")


def cross_kdir(karch: str) -> Path:
    c = CROSS[karch]
    # the private apt directory: riscv64-trixie+sid when the recipe takes
    # packages from sid too (fetch-kbuild.sh looks the same way)
    if not shutil.which(c.prefix + "gcc") or not any(
            (CACHE / "apt").glob(f"{c.apt}*/lists/*_Packages*")):
        pytest.skip(f"no {karch} cross compiler or {karch} package lists "
                    f"(pvperf image build --arch {c.pvperf_arch} fetches them)")
    r = run([GKP / "fetch-kbuild.sh"], env=dict(os.environ, KARCH=karch))
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch,headers", [
    ("x86_64", "kdir"), ("x86_64", "kdir612"), ("aarch64", "kdir_arm64"),
    ("riscv64", "kdir_riscv64")])
def test_patched_files_compile_in_tree_layout(request, arch, headers):
    """Build the patch's files as a module with the in-tree layout (the
    ABI header beside the sources, no include path) and its own Makefile,
    against the headers of 6.1 and 6.12 (x86_64), of arm64's 6.1 and of
    riscv64's 6.12 (cross-compiled)."""
    it = IN_TREE[arch]
    kdir = request.getfixturevalue(headers)
    work = CACHE / f"test-intree-build-{headers}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        for rel, text in new_files(it.patch.read_text()).items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        src = work / it.dir
        # The in-tree Makefile, plus what the arch Makefile would provide.
        (src / "Kbuild").write_text(
            "CONFIG_PVPERF_PMU := m\n" + (src / "Makefile").read_text())
        # what the Makefile passes for KARCH=arm64 / riscv64
        cross = {"aarch64": ["ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"],
                 "riscv64": ["ARCH=riscv", "CROSS_COMPILE=riscv64-linux-gnu-",
                             "CC=riscv64-linux-gnu-gcc-12"]}.get(arch, [])
        # No module BTF (as the Makefile): 6.12's needs pahole and the
        # kernel's vmlinux, neither of which the headers bring.
        r = run(["make", "-C", kdir, f"M={src}", *cross, "KCFLAGS=-Werror",
                 "CONFIG_DEBUG_INFO_BTF_MODULES=", "modules"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert (src / "pvperf.ko").is_file()
        assert (src / it.arch_file.replace(".c", ".o")).is_file()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.vm
def test_without_host_prints_one_line_and_does_not_register(build):
    """No plugin: the marker store is a plain store, PROBE reads -ENOSYS,
    the driver says so and refuses to load; nothing WARNs, no "cpu" PMU."""
    r = run_pvperf(["run", "--no-pmu", "--", "sh", "-c",
                    "insmod /lib/modules/pvperf/pvperf.ko; echo insmod=$?; "
                    "dmesg; echo __DEVICES__; ls -1 /sys/bus/event_source/devices"])
    assert r.returncode == 0, r.stderr
    log, _, devices = r.stdout.partition("__DEVICES__\n")
    assert ("pvperf: no paravirtual PMU host interface (ret=-38), "
            "not registering") in log
    assert "insmod=0" not in log
    for bad in ("cut here", "WARNING:", "BUG:", "Oops"):
        assert bad not in log, log
    assert "software" in devices.split() and "cpu" not in devices.split()
