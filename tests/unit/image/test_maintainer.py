"""pyhost/image/maintainer.py: the maintainer scripts' effects on a tree,
without VM.  References: the running interpreter's own py_compile (a
.pyc of a source whose mtime is the archive's), and Debian's tar
postinst text."""
from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
from pathlib import Path

import pytest

from pyhost.errors import ImageError
from pyhost.image import maintainer
from pyhost.image.cpio import ARCHIVE_MTIME

V = f"{sys.version_info.major}.{sys.version_info.minor}"
MAGIC = int.from_bytes(importlib.util.MAGIC_NUMBER[:2], "little")

TAR_POSTINST = """#!/bin/sh
set -e
case "$1" in
    configure|abort-deconfigure|abort-remove)
\tupdate-alternatives --install /usr/sbin/rmt rmt /usr/sbin/rmt-tar 50 \\
\t\t--slave /usr/share/man/man8/rmt.8.gz rmt.8.gz \\
\t\t\t/usr/share/man/man8/rmt-tar.8.gz
    ;;
esac
update-alternatives --install /usr/bin/awk awk /usr/bin/$awk 5
update-alternatives --remove rename /usr/bin/prename
"""


def test_parse_alternatives_literal_installs_only():
    alts = maintainer.parse_alternatives(TAR_POSTINST)
    assert alts == [maintainer.Alternative(
        "/usr/sbin/rmt", "rmt", "/usr/sbin/rmt-tar", 50,
        (("/usr/share/man/man8/rmt.8.gz", "rmt.8.gz",
          "/usr/share/man/man8/rmt-tar.8.gz"),))]


def test_install_alternatives_auto_mode(tmp_path):
    """Highest priority whose path exists wins; a slave without its file
    (man pages are dropped) gets no link; a real file stays."""
    for f in ("usr/bin/mawk", "usr/bin/gawk", "usr/sbin/rmt-tar", "usr/bin/vi"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(f)
    alts = [maintainer.Alternative("/usr/bin/awk", "awk", "/usr/bin/mawk", 5),
            maintainer.Alternative("/usr/bin/awk", "awk", "/usr/bin/gawk", 10),
            maintainer.Alternative("/usr/bin/awk", "awk", "/usr/bin/nawk", 99),
            maintainer.Alternative("/usr/bin/vi", "vi", "/usr/bin/mawk", 1)]
    alts += maintainer.parse_alternatives(TAR_POSTINST)
    done = maintainer.install_alternatives(tmp_path, alts)
    assert done == ["awk -> /usr/bin/gawk", "rmt -> /usr/sbin/rmt-tar",
                    "vi -> /usr/bin/mawk"]
    assert os.readlink(tmp_path / "usr/bin/awk") == "/etc/alternatives/awk"
    assert os.readlink(tmp_path / "etc/alternatives/awk") == "/usr/bin/gawk"
    assert os.readlink(tmp_path / "usr/sbin/rmt") == "/etc/alternatives/rmt"
    assert not os.path.lexists(tmp_path / "usr/share/man/man8/rmt.8.gz")
    assert (tmp_path / "usr/bin/vi").read_text() == "usr/bin/vi"


def python_tree(root: Path) -> None:
    """A guest python of this interpreter's version: its importlib states
    this interpreter's magic number the way CPython's source does."""
    lib = root / f"usr/lib/python{V}"
    (lib / "importlib").mkdir(parents=True)
    (lib / "importlib/_bootstrap_external.py").write_text(
        f"MAGIC_NUMBER = ({MAGIC}).to_bytes(2, 'little') + b'\\r\\n'\n")
    (root / "usr/bin").mkdir(parents=True)
    (root / f"usr/bin/python{V}").write_text("elf")
    (lib / "enc").mkdir()
    (lib / "enc/mod.py").write_text("# -*- coding: latin-1 -*-\nX = 'é'\n",
                                    encoding="latin-1")
    (lib / "bad.py").write_text("print 'python 2'\n")
    (root / "etc/py").mkdir(parents=True)
    (root / "etc/py/site.py").write_text("Y = 1\n" * 10)
    os.symlink("/etc/py/site.py", lib / "sitecustomize.py")   # in the tree
    os.symlink("/etc/py/none.py", lib / "dangling.py")


def test_byte_compile_writes_what_python_would(tmp_path):
    """Each .pyc is byte for byte what py_compile writes for the source
    with the archive's mtime under its guest path; the symlinked module's
    header has the size of its target inside the tree; what does not
    compile and dangling links get none."""
    root = tmp_path / "root"
    python_tree(root)
    assert maintainer.python_versions(root) == [V]
    assert maintainer.guest_magic(root, V) == importlib.util.MAGIC_NUMBER
    [c] = maintainer.byte_compile(root)
    assert (c.version, c.files) == (V, 3) and c.python, c
    tag = sys.implementation.cache_tag
    lib = root / f"usr/lib/python{V}"
    for rel, src in (("enc/mod", lib / "enc/mod.py"),
                     ("sitecustomize", root / "etc/py/site.py"),
                     ("importlib/_bootstrap_external",
                      lib / "importlib/_bootstrap_external.py")):
        ref = tmp_path / "ref.py"
        ref.write_bytes(src.read_bytes())
        os.utime(ref, (ARCHIVE_MTIME, ARCHIVE_MTIME))
        py_compile.compile(str(ref), cfile=str(tmp_path / "ref.pyc"),
                           dfile=f"/usr/lib/python{V}/{rel}.py", doraise=True)
        d, name = os.path.split(rel)
        got = lib / d / "__pycache__" / f"{name}.{tag}.pyc"
        assert got.read_bytes() == (tmp_path / "ref.pyc").read_bytes(), rel
    assert not list(lib.glob(f"__pycache__/bad.*"))
    assert not list(lib.glob(f"__pycache__/dangling.*"))


def test_byte_compile_without_a_matching_interpreter(tmp_path):
    root = tmp_path / "root"
    python_tree(root)
    f = root / f"usr/lib/python{V}/importlib/_bootstrap_external.py"
    f.write_text("MAGIC_NUMBER = (1).to_bytes(2, 'little') + b'\\r\\n'\n")
    [c] = maintainer.byte_compile(root)
    assert c.python is None and c.files == 0 and "magic number 0100" in \
        c.why_not
    assert not list(root.rglob("*.pyc"))


def test_ld_cache_is_checked():
    assert maintainer.check_ld_cache(b"glibc-ld.so.cache1.1xyz")
    with pytest.raises(ImageError, match="ldconfig wrote 4 bytes"):
        maintainer.check_ld_cache(b"oops")


def test_the_guests_own_interpreter_compiles_what_no_host_python_can(
        tmp_path):
    """Where no host python has the guest's magic number, the build-time
    boot runs the job guest_compile_job put into the tree with the
    guest's python; here the host's python plays the guest's, reading
    the tree as its root.  The .pyc files that come back are py_compile's
    bytes for the same source, mtime and guest path, and the job's files
    leave the tree."""
    import subprocess
    root = tmp_path / "root"
    python_tree(root)
    c = maintainer.Compiled(V, None, 0, "no host python")
    command = maintainer.guest_compile_job(root, [c])
    assert command.startswith(f"/usr/bin/python{V} -I -S /.pvperf-pyc-")
    argv = command.split()
    stream = subprocess.run(
        [sys.executable, "-I", "-S", str(root / argv[3][1:]),
         str(root / argv[4][1:]), str(root)],
        capture_output=True, check=True).stdout
    # 2 of byte_compile's 3: sitecustomize.py is an absolute symlink,
    # which only the guest resolves inside the tree
    assert maintainer.install_guest_pyc(root, stream, [c]) == 2
    assert c.python == f"the guest's python{V}" and c.files == 2
    assert not list(root.glob(".pvperf-pyc-*"))
    lib = root / f"usr/lib/python{V}"
    ref = tmp_path / "ref.py"
    ref.write_bytes((lib / "enc/mod.py").read_bytes())
    os.utime(ref, (ARCHIVE_MTIME, ARCHIVE_MTIME))
    py_compile.compile(str(ref), cfile=str(tmp_path / "ref.pyc"),
                       dfile=f"/usr/lib/python{V}/enc/mod.py", doraise=True)
    got = lib / "enc/__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    assert got.read_bytes() == (tmp_path / "ref.pyc").read_bytes()
    with pytest.raises(ImageError, match="cut short"):
        maintainer.install_guest_pyc(root, stream[:-1], [c])
