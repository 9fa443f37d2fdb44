"""Where the guest kernel keeps the running task: offsets for pvperf-rmap.so.

The reverse-map plugin names the task behind every write of the user
page-table base (see qemu_plugin/rmap/rmap.c, option ``task=``) by reading
guest kernel memory:

  REG, PATH             the task the CPU switches to, from the register
                        the plugin's arch file names along the
                        architecture's path (pyhost/arch/: this CPU's
                        ``rq->curr``, reached from a per-cpu base or
                        from ``current``)
  task + TGID, + COMM   the process id and name
  task + MM, mm + PGD   its address space, accepted only if ``mm->pgd``
                        minus the linear map's base is the table written

Nothing here is hard-coded per kernel version: the struct offsets come
from the guest kernel's own BTF (CONFIG_DEBUG_INFO_BTF, which Debian
enables: the ``.BTF`` section of an ELF vmlinux, or the blob inside a
flat kernel image, found by its header) and symbols from its System.map.
A kernel without them gets no ``task=`` option; the profile then names
processes by code bytes only (resolve.py).

BTF format: linux/include/uapi/linux/btf.h and
Documentation/bpf/btf.rst: a header, a type section (``struct btf_type``
records, each followed by kind-specific data) and a string section.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from ..arch import Arch
from ..elf import ELF_MAGIC
from ..image import sysmap

BTF_MAGIC = 0xEB9F
BTF_HEADER = struct.Struct("<HBBIIIII")   # magic version flags hdr_len
#                                           type_off type_len str_off str_len
BTF_TYPE = struct.Struct("<III")          # name_off info size_or_type
BTF_MEMBER = struct.Struct("<III")        # name_off type offset
KIND_STRUCT, KIND_UNION = 4, 5
# Bytes after a btf_type, per kind: (fixed, per vlen entry).
KIND_EXTRA = {1: (4, 0), 2: (0, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12),
              6: (0, 8), 7: (0, 0), 8: (0, 0), 9: (0, 0), 10: (0, 0),
              11: (0, 0), 12: (0, 0), 13: (0, 8), 14: (4, 0), 15: (0, 12),
              16: (0, 0), 17: (4, 0), 18: (0, 0), 19: (0, 12)}


class LayoutError(ValueError):
    """The kernel lacks BTF or a symbol the task layout needs."""


@dataclass(frozen=True)
class Composite:
    """A BTF struct or union: where its members are in the type data."""
    name: str
    members_at: int
    vlen: int
    bitfield_offsets: bool      # kind_flag: offset is bitfield size << 24


class Btf:
    """The structs and unions of one BTF blob, by type id and by name."""

    def __init__(self, data: bytes):
        magic, _, _, hdr_len, type_off, type_len, str_off, str_len = \
            BTF_HEADER.unpack_from(data)
        if magic != BTF_MAGIC:
            raise LayoutError(f"not BTF (magic {magic:#x})")
        self.data = data
        self._types_at = hdr_len + type_off
        self._types_end = self._types_at + type_len
        self._strings = data[hdr_len + str_off:hdr_len + str_off + str_len]
        self.composites: dict[int, Composite] = {}
        self.by_name: dict[str, int] = {}
        self._scan()

    def string(self, off: int) -> str:
        end = self._strings.index(b"\0", off)
        return self._strings[off:end].decode()

    def _scan(self) -> None:
        off, type_id = self._types_at, 1
        while off < self._types_end:
            name_off, info, _ = BTF_TYPE.unpack_from(self.data, off)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            fixed, per = KIND_EXTRA.get(kind, (None, None))
            if fixed is None:
                raise LayoutError(f"unknown BTF kind {kind}")
            if kind in (KIND_STRUCT, KIND_UNION):
                c = Composite(self.string(name_off), off + BTF_TYPE.size,
                              vlen, bool(info >> 31))
                self.composites[type_id] = c
                if c.name and vlen:
                    self.by_name.setdefault(c.name, type_id)
            off += BTF_TYPE.size + fixed + per * vlen
            type_id += 1

    def member_offset(self, struct_name: str, member: str) -> int:
        """Byte offset of ``member`` in ``struct struct_name``, looking
        through anonymous struct/union members."""
        type_id = self.by_name.get(struct_name)
        found = None if type_id is None else self._find(type_id, member)
        if found is None:
            raise LayoutError(f"no member {member} in struct {struct_name}")
        return found

    def _find(self, type_id: int, member: str) -> int | None:
        c = self.composites[type_id]
        for i in range(c.vlen):
            name_off, mtype, moff = BTF_MEMBER.unpack_from(
                self.data, c.members_at + i * BTF_MEMBER.size)
            bits = moff & 0xFFFFFF if c.bitfield_offsets else moff
            name = self.string(name_off)
            if name == member:
                return bits // 8
            if not name and mtype in self.composites:
                inner = self._find(mtype, member)
                if inner is not None:
                    return bits // 8 + inner
        return None


@dataclass(frozen=True)
class TaskLayout:
    path: tuple[int, ...]   # from the arch's task register to the task
    tgid: int
    comm: int
    mm: int
    pgd: int
    linear: str             # the linear map's base, or @ADDR of it

    def plugin_option(self) -> str:
        """The value of pvperf-rmap.so's task= option."""
        return ":".join(["/".join(f"{o:#x}" for o in self.path),
                         *(f"{v:#x}" for v in (self.tgid, self.comm,
                                               self.mm, self.pgd)),
                         self.linear])


BTF_HEADER_START = struct.pack("<HBBI", BTF_MAGIC, 1, 0, BTF_HEADER.size)


def flat_image_btf(image: bytes) -> bytes:
    """The BTF blob inside a kernel image that is not ELF (a flat Image
    is the kernel's memory image, .BTF included): the one place where a
    version-1 header is followed by a type and a string section that
    fit the image."""
    at = image.find(BTF_HEADER_START)
    while at >= 0:
        _, _, _, hdr_len, type_off, type_len, str_off, str_len = \
            BTF_HEADER.unpack_from(image, at)
        end = at + hdr_len + max(type_off + type_len, str_off + str_len)
        if type_off == 0 and str_off == type_len and end <= len(image):
            return image[at:end]
        at = image.find(BTF_HEADER_START, at + 1)
    raise LayoutError("no BTF in the kernel image")


def vmlinux_btf(vmlinux: Path) -> Btf:
    """The BTF of the kernel the image boots (ELF or flat)."""
    data = Path(vmlinux).read_bytes()
    if not data.startswith(ELF_MAGIC):
        return Btf(flat_image_btf(data))
    sec = ELFFile(io.BytesIO(data)).get_section_by_name(".BTF")
    if sec is None:
        raise LayoutError(f"{vmlinux} has no .BTF section")
    return Btf(sec.data())


def required_symbol(system_map: str, name: str) -> int:
    """The address of ``name`` in a System.map text; LayoutError if the
    kernel has no such symbol."""
    address = sysmap.system_map_symbol(system_map, name)
    if address is None:
        raise LayoutError(f"no {name} in System.map")
    return address


def task_layout(vmlinux: Path, system_map: str, arch: Arch) -> TaskLayout:
    btf = vmlinux_btf(vmlinux)
    way = arch.task_path(btf.member_offset,
                         lambda name: required_symbol(system_map, name))
    return TaskLayout(
        path=way.path, tgid=btf.member_offset("task_struct", "tgid"),
        comm=btf.member_offset("task_struct", "comm"),
        mm=btf.member_offset("task_struct", "mm"),
        pgd=btf.member_offset("mm_struct", "pgd"), linear=way.linear)
