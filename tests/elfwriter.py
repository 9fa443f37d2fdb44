"""A tiny synthetic ELF64 (x86-64) builder for symbolizer tests.

    elf = ElfWriter(base=0x401000, etype="EXEC")
    elf.function("hot", b"\\x90" * 16)
    data = elf.build()          # one PT_LOAD R+X segment, .text, .symtab

File layout: ELF header, one program header, .text at file offset 0x1000
(loaded at ``base``), then .symtab, .strtab, .shstrtab and the section
headers.  Function symbols are STT_FUNC/STB_GLOBAL with their sizes.
"""
from __future__ import annotations

import struct

TEXT_OFFSET = 0x1000


class ElfWriter:
    def __init__(self, base: int = 0x401000, etype: str = "EXEC"):
        self.base = base
        self.etype = {"EXEC": 2, "DYN": 3}[etype]
        self.text = bytearray()
        self.symbols: list[tuple[str, int, int]] = []

    def function(self, name: str, code: bytes) -> int:
        addr = self.base + len(self.text)
        self.symbols.append((name, addr, len(code)))
        self.text += code
        return addr

    def build(self) -> bytes:
        strtab = b"\0"
        syms = [b"\0" * 24]
        for name, addr, size in self.symbols:
            syms.append(struct.pack("<IBBHQQ", len(strtab), 0x12, 0, 1,
                                    addr, size))
            strtab += name.encode() + b"\0"
        symtab = b"".join(syms)
        shstr = b"\0.text\0.symtab\0.strtab\0.shstrtab\0"
        text_end = TEXT_OFFSET + len(self.text)
        sym_off = (text_end + 7) & ~7
        str_off = sym_off + len(symtab)
        shs_off = str_off + len(strtab)
        sh_off = (shs_off + len(shstr) + 7) & ~7
        ehdr = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0,
                           0, self.etype, 62, 1, self.base, 64, sh_off, 0,
                           64, 56, 1, 64, 5, 4)
        phdr = struct.pack("<IIQQQQQQ", 1, 5, TEXT_OFFSET, self.base,
                           self.base, len(self.text), len(self.text), 0x1000)

        def sh(name, stype, flags, addr, off, size, link=0, info=0,
               align=1, entsize=0):
            return struct.pack("<IIQQQQIIQQ", name, stype, flags, addr, off,
                               size, link, info, align, entsize)
        shdrs = (sh(0, 0, 0, 0, 0, 0) +
                 sh(1, 1, 6, self.base, TEXT_OFFSET, len(self.text),
                    align=16) +
                 sh(7, 2, 0, 0, sym_off, len(symtab), link=3, info=1,
                    align=8, entsize=24) +
                 sh(15, 3, 0, 0, str_off, len(strtab)) +
                 sh(23, 3, 0, 0, shs_off, len(shstr)))
        out = bytearray(ehdr + phdr)
        out += b"\0" * (TEXT_OFFSET - len(out)) + self.text
        out += b"\0" * (sym_off - len(out)) + symtab + strtab + shstr
        out += b"\0" * (sh_off - len(out)) + shdrs
        return bytes(out)
