"""Symbolizers for the three spaces of a system-wide profile.

  guest kernel  the image's System.map (core kernel, from /proc/kallsyms of
                a test boot; the PVH-booted vmlinux is not relocated, so
                its addresses hold in every boot) plus module symbols
                (``[module]`` lines of /proc/kallsyms captured in the
                profiled run itself, because module load addresses vary)
  guest user    ELF files (pyelftools .symtab, else .dynsym) found in the
                image's root/ tree or in the host directory shared at
                /mnt/host, placed by the guest's /proc/PID/maps of each
                guest process (the running process's own mappings first),
                or, for static executables without a maps snapshot, by
                their own load addresses; a candidate is accepted only if
                its bytes at that address equal the code bytes the plugin
                recorded for the TB, so two processes using one user vaddr
                for different code are told apart.  ``relocate`` moves a
                TB translated in one process to where another process has
                the same code (same file offset, or the same bytes at the
                same page offset)
  emulator      the QEMU system emulator and its libraries: .symtab if present,
                else .dynsym.  Debian strips QEMU and ships no dbgsym in
                the default archive: .dynsym names ~10k exported functions;
                static functions get ``<dso>!fn@0xADDR``, their start taken
                from the .eh_frame_hdr search table (one entry per
                function), so samples still group per function.

Addresses: "guestpc" is a guest virtual address, "elf_vaddr" an address
in an ELF file's own link-time space, "dso_offset" what perf prints for a
sample in a mapped file (the ELF vaddr for PIE and shared objects).
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..image.sysmap import parse_kallsyms
from ..guest_contract import SHARE_MOUNT
from .procmaps import parse_maps

PAGE = 4096


@dataclass(frozen=True)
class Symbol:
    name: str
    start: int
    size: int          # 0: unknown (extends to the next symbol)
    dso: str = ""


class SymbolTable:
    """Address-sorted symbols; lookup finds the one containing an address."""

    def __init__(self, symbols: list[Symbol], limit: int = 1 << 20):
        self._syms = sorted(symbols, key=lambda s: (s.start, -s.size))
        self._starts = [s.start for s in self._syms]
        self._limit = limit     # max extent of a size-0 symbol

    def __len__(self) -> int:
        return len(self._syms)

    def lookup(self, address: int) -> Symbol | None:
        i = bisect.bisect_right(self._starts, address) - 1
        while i >= 0:
            sym = self._syms[i]
            if sym.size and address < sym.start + sym.size:
                return sym
            if not sym.size:
                nxt = self._starts[i + 1] if i + 1 < len(self._starts) \
                    else sym.start + self._limit
                return sym if address < min(nxt, sym.start + self._limit) \
                    else None
            # a sized symbol that ends before address: maybe an enclosing
            # one starts earlier at the same place; stop at the first miss
            return None
        return None


# -- guest kernel ----------------------------------------------------------------

KERNEL_TEXT_TYPES = set("tTwW")


def kernel_text_symbols(text: str, dso: str = "[kernel]") -> list[Symbol]:
    """The text symbols of System.map or /proc/kallsyms lines (parsed by
    image.sysmap); module symbols get the dso "[module]"."""
    return [Symbol(s.name, s.address, 0,
                   f"[{s.module}]" if s.module else dso)
            for s in parse_kallsyms(text)
            if s.type in KERNEL_TEXT_TYPES and s.address]


def kernel_symbols(system_map: str, module_kallsyms: str = "") -> SymbolTable:
    syms = kernel_text_symbols(system_map)
    syms += [s for s in kernel_text_symbols(module_kallsyms)
             if s.dso != "[kernel]"]
    return SymbolTable(syms, limit=64 * 1024)


# -- ELF files -------------------------------------------------------------------

class ElfImage:
    """One ELF file: its function symbols and its loadable bytes; with
    ``plt_entry`` (the architecture's lazy PLT stub size) also a
    ``NAME@plt`` symbol per PLT stub, as objdump and perf name them."""

    def __init__(self, path: Path, function_starts: bool = False,
                 plt_entry: int = 0):
        self.path = Path(path)
        self.name = self.path.name
        with open(self.path, "rb") as f:
            self.data = f.read()
        elf = ELFFile(_BytesFile(self.data))
        self.is_static_exec = elf.header.e_type == "ET_EXEC"
        self.loads = [(s.header.p_vaddr, s.header.p_offset, s.header.p_filesz)
                      for s in elf.iter_segments()
                      if s.header.p_type == "PT_LOAD"]
        # Which symbol table named its functions (".symtab", ".dynsym" or
        # None), and whether its debug symbols live in another file.
        self.symbol_section: str | None = None
        self.debuglink = elf.get_section_by_name(".gnu_debuglink") is not None
        syms = self._function_symbols(elf) + self._plt_symbols(elf,
                                                                plt_entry)
        if function_starts:
            named = {s.start for s in syms}
            syms += [Symbol(f"{self.name}!fn@{a:#x}", a, 0, self.name)
                     for a in _eh_frame_function_starts(elf) if a not in named]
        self.symbols = SymbolTable(syms, limit=256 * 1024)

    def _function_symbols(self, elf) -> list[Symbol]:
        for section in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(section)
            if sec is None:
                continue
            syms = [Symbol(s.name, s["st_value"], s["st_size"], self.name)
                    for s in sec.iter_symbols()
                    if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC")
                    and s["st_value"] and s.name]
            if syms:
                self.symbol_section = section
                return syms
        return []

    def _plt_symbols(self, elf, entry: int) -> list[Symbol]:
        """One stub per .rela.plt relocation, in its order, ``entry``
        bytes each, ending the .plt section; before them the section's
        header (lazy binding's jump to the dynamic linker), ".plt" as
        objdump names it: the symbol before it, _init, has no size, and
        a sample there would otherwise take its name."""
        plt, rela = (elf.get_section_by_name(n) for n in (".plt",
                                                         ".rela.plt"))
        if not entry or plt is None or rela is None or \
                not hasattr(rela, "iter_relocations"):
            return []
        rels = list(rela.iter_relocations())
        first = plt["sh_addr"] + plt["sh_size"] - len(rels) * entry
        if not rels or first < plt["sh_addr"]:
            return []
        names = elf.get_section(rela["sh_link"])
        out = []
        if first > plt["sh_addr"]:
            out.append(Symbol(".plt", plt["sh_addr"],
                              first - plt["sh_addr"], self.name))
        for i, rel in enumerate(rels):
            sym = names.get_symbol(rel["r_info_sym"]) if rel["r_info_sym"] \
                else None
            if sym is not None and sym.name:
                out.append(Symbol(f"{sym.name}@plt", first + i * entry,
                                  entry, self.name))
        return out

    def why_unnamed(self) -> str:
        """Why an address of this file may have no function name."""
        where = ("; its debug symbols are in a separate file "
                 "(.gnu_debuglink: Debian's -dbgsym package)"
                 if self.debuglink else "")
        if self.symbol_section == ".symtab":
            return "not inside any function symbol" + where
        if self.symbol_section == ".dynsym":
            return "stripped: only exported functions (.dynsym) are named" \
                + where
        return "stripped: no function symbols" + where

    def elf_vaddr_to_offset(self, elf_vaddr: int) -> int | None:
        for vaddr, offset, filesz in self.loads:
            if vaddr <= elf_vaddr < vaddr + filesz:
                return elf_vaddr - vaddr + offset
        return None

    def offset_to_elf_vaddr(self, offset: int) -> int | None:
        for vaddr, seg_off, filesz in self.loads:
            if seg_off <= offset < seg_off + filesz:
                return offset - seg_off + vaddr
        return None

    def bytes_at_offset(self, offset: int, n: int) -> bytes:
        return self.data[offset:offset + n]


class _BytesFile:
    """A minimal seekable file over bytes for pyelftools."""

    def __init__(self, data: bytes):
        import io
        self._io = io.BytesIO(data)

    def __getattr__(self, name):
        return getattr(self._io, name)


def _eh_frame_function_starts(elf) -> list[int]:
    """Function start addresses from .eh_frame_hdr's sorted search table
    (encoding DW_EH_PE_datarel|sdata4, what GNU ld writes)."""
    hdr = elf.get_section_by_name(".eh_frame_hdr")
    if hdr is None:
        return []
    data, base = hdr.data(), hdr["sh_addr"]
    if len(data) < 12 or data[0] != 1 or data[3] != 0x3B or data[2] != 0x03:
        return []
    count = struct.unpack_from("<I", data, 8)[0]
    table = struct.unpack_from(f"<{2 * count}i", data, 12)
    return [base + table[2 * i] for i in range(count)]


# -- guest user space ------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    """One executable line of a guest /proc/PID/maps."""
    start: int
    end: int
    offset: int
    path: str

    @classmethod
    def parse_maps(cls, text: str) -> list["Mapping"]:
        """The executable, file-backed lines of a maps text."""
        return [cls(m.start, m.end, m.offset, m.path)
                for m in parse_maps(text)
                if m.executable and m.path.startswith("/")]


class GuestUserSymbols:
    """guestpc + code bytes -> (ELF, symbol) for guest user space, per
    guest process (``mappings``: pid -> its maps lines; a plain list is
    one process of unknown pid)."""

    def __init__(self, image_root: Path | None, share: Path | None,
                 mappings=(), extra_elves: list[Path] = (),
                 plt_entry: int = 0):
        self.image_root = image_root
        self.plt_entry = plt_entry      # the guest's PLT stub size
        self.share = share
        self.by_pid: dict[int | None, list[Mapping]] = \
            {k: list(v) for k, v in mappings.items()} \
            if isinstance(mappings, dict) else {None: list(mappings)}
        self.mappings = [m for ms in self.by_pid.values() for m in ms]
        self._elves: dict[str, ElfImage | None] = {}
        self.candidates = [p for p in (self._host_path(m.path)
                                       for m in self.mappings) if p]
        self.candidates += [Path(p) for p in extra_elves]

    def _host_path(self, guest_path: str) -> Path | None:
        if self.share is not None and (guest_path == SHARE_MOUNT or
                                       guest_path.startswith(
                                           SHARE_MOUNT + "/")):
            return self.share / guest_path[len(SHARE_MOUNT):].lstrip("/")
        if self.image_root is not None:
            return self.image_root / guest_path.lstrip("/")
        return None

    def elf(self, host_path: Path) -> ElfImage | None:
        key = str(host_path)
        if key not in self._elves:
            try:
                self._elves[key] = ElfImage(host_path,
                                            plt_entry=self.plt_entry)
            except (OSError, ELFError, ValueError):
                self._elves[key] = None
        return self._elves[key]

    def _mapped_elf(self, m: Mapping) -> ElfImage | None:
        host = self._host_path(m.path)
        return self.elf(host) if host else None

    def mapping_at(self, guestpc: int, pid: int | None) -> Mapping | None:
        """pid's executable mapping holding guestpc, if a snapshot saw it."""
        for m in self.by_pid.get(pid, []) if pid is not None else []:
            if m.start <= guestpc < m.end:
                return m
        return None

    def dso_offset(self, guestpc: int, code: bytes, pid: int | None
                   ) -> tuple[str, int] | None:
        """(guest path, file offset) of guestpc in the file mapped there:
        the same code at two ASLR addresses has one name."""
        found = self.locate(guestpc, code, pid)
        if found is not None:
            return found[2].path, found[1]
        m = self.mapping_at(guestpc, pid)
        return (m.path, guestpc - m.start + m.offset) if m else None

    def _in_pid(self, pid: int | None) -> list[Mapping]:
        """pid's mappings first, then every other process's."""
        own = self.by_pid.get(pid, []) if pid is not None else []
        return own + [m for m in self.mappings if m not in own]

    def locate(self, guestpc: int, code: bytes, pid: int | None = None,
               only_pid: bool = False):
        """(ElfImage, file offset, Mapping) of the mapping that holds
        ``code`` (its first 16 bytes; b"": unchecked) at ``guestpc``:
        pid's own mappings, then (unless only_pid) any process's."""
        probe = code[:16]
        pool = self.by_pid.get(pid, []) if only_pid else self._in_pid(pid)
        for m in pool:
            if not m.start <= guestpc < m.end:
                continue
            img = self._mapped_elf(m)
            offset = guestpc - m.start + m.offset
            if img is not None and (not probe or img.bytes_at_offset(
                    offset, len(probe)) == probe):
                return img, offset, m
        return None

    def has_code(self, pid: int, guestpc: int, code: bytes) -> bool:
        return self.locate(guestpc, code, pid, only_pid=True) is not None

    def relocate(self, guestpc: int, code: bytes, pid: int) -> int | None:
        """Where process ``pid`` has the code that another process had at
        ``guestpc`` (x86 TBs are shared through the physical page, so the
        page offset is kept): at the same file offset of the same ELF if a
        snapshot shows where ``guestpc`` came from, else the first place
        in pid's executable mappings with these bytes at this page
        offset."""
        src = self.locate(guestpc, code)
        if src is not None:
            img, offset, _ = src
            for m in self.by_pid.get(pid, []):
                if self._mapped_elf(m) is img and \
                        m.offset <= offset < m.offset + (m.end - m.start):
                    return m.start + offset - m.offset
        return self._scan(guestpc, code, pid)

    def _scan(self, guestpc: int, code: bytes, pid: int) -> int | None:
        probe, page_offset = code[:64], guestpc & (PAGE - 1)
        if not probe:
            return None
        for m in self.by_pid.get(pid, []):
            img = self._mapped_elf(m)
            if img is None:
                continue
            hi = m.offset + (m.end - m.start)
            pos = img.data.find(probe, m.offset, hi)
            while pos >= 0:
                vaddr = m.start + pos - m.offset
                if vaddr & (PAGE - 1) == page_offset:
                    return vaddr
                pos = img.data.find(probe, pos + 1, hi)
        return None

    def guestpc_to_symbol(self, guestpc: int, code: bytes,
                          pid: int | None = None
                          ) -> tuple[Symbol, ElfImage] | None:
        """The function at ``guestpc`` whose ELF bytes match ``code``,
        looked up in pid's mappings first."""
        found = self.locate(guestpc, code, pid)
        if found is not None:
            img, offset, _ = found
            elf_vaddr = img.offset_to_elf_vaddr(offset)
            sym = img.symbols.lookup(elf_vaddr) if elf_vaddr is not None \
                else None
            if sym:
                return sym, img
        return self._static_candidates(guestpc, code[:16])

    def _static_candidates(self, guestpc: int, probe: bytes):
        for host in self.candidates:
            img = self.elf(host)
            if img is None or not img.is_static_exec:
                continue
            offset = img.elf_vaddr_to_offset(guestpc)
            if offset is None or (probe and img.bytes_at_offset(
                    offset, len(probe)) != probe):
                continue
            sym = img.symbols.lookup(guestpc)
            if sym:
                return sym, img
        return None


# -- emulator ---------------------------------------------------------------------

class HostSymbols:
    """Host DSOs (QEMU, its libraries, the plugin) by path, loaded lazily."""

    def __init__(self):
        self._images: dict[str, ElfImage | None] = {}

    def image(self, path: str) -> ElfImage | None:
        if path not in self._images:
            try:
                self._images[path] = ElfImage(Path(path),
                                              function_starts=True)
            except (OSError, ELFError, ValueError):
                self._images[path] = None
        return self._images[path]

    def why_unnamed(self, path: str) -> str:
        img = self.image(path)
        return img.why_unnamed() if img else "not readable on the host"

    def dso_offset_to_name(self, path: str, dso_offset: int) -> str:
        img = self.image(path)
        sym = img.symbols.lookup(dso_offset) if img else None
        if sym is not None:
            return sym.name
        return f"{Path(path).name}!{dso_offset:#x}"
