#!/usr/bin/env python3
"""PROTOTYPE: checks a64class.c against binutils' objdump on real arm64
code.  Every instruction objdump disassembles in the given files gets an
expected class from its mnemonic; a64class-cli classifies the word; the
differences are counted per mnemonic.

    check.py A64CLASS_CLI FILE... [--raw IMAGE]   (raw: a kernel Image)
"""
import collections
import re
import subprocess
import sys

BR = 1; COND = 2; CALL = 4; RET = 8; IND = 16; LOAD = 32; STORE = 64
EXCL = 128; ATOM = 256; PAIR = 512; SIMD = 1024; PRF = 2048; ERET = 4096
EXC = 8192
CHECKED = BR | COND | CALL | RET | IND | LOAD | STORE | EXCL | ATOM | PRF | ERET | EXC

COND_BR = {"cbz", "cbnz", "tbz", "tbnz"}
ATOMIC_OPS = ("add", "clr", "eor", "set", "smax", "smin", "umax", "umin")


def atomic_suffix(rest):
    return any(re.fullmatch(op + r"(a|al|l)?(b|h)?", rest) for op in ATOMIC_OPS)


def expected(mn, ops):
    if mn in ("b", "bl") or mn.startswith("b.") or mn.startswith("bc."):
        return BR | (CALL if mn == "bl" else 0) | (COND if "." in mn else 0)
    if mn in COND_BR:
        return BR | COND
    if mn in ("br", "braa", "brab", "braaz", "brabz"):
        return BR | IND
    if mn in ("blr", "blraa", "blrab", "blraaz", "blrabz"):
        return BR | IND | CALL
    if mn in ("ret", "retaa", "retab"):
        return BR | IND | RET
    if mn in ("eret", "eretaa", "eretab"):
        return ERET
    if mn in ("svc", "hvc", "smc", "brk", "hlt"):
        return EXC
    if mn in ("prfm", "prfum"):
        return PRF
    if mn == "dc" and ops.startswith("zva"):
        return STORE
    if mn.startswith("swp") or mn.startswith("cas"):
        return LOAD | STORE | ATOM
    if mn.startswith("ld") and atomic_suffix(mn[2:]):
        return LOAD | STORE | ATOM
    if mn.startswith("st") and atomic_suffix(mn[2:]):
        return LOAD | STORE | ATOM        # stadd = ldadd with xzr
    if re.fullmatch(r"lda?x(r[bh]?|p)", mn):
        return LOAD | EXCL
    if re.fullmatch(r"stl?x(r[bh]?|p)", mn):
        return STORE | EXCL
    if mn.startswith("ld"):
        return LOAD
    if mn.startswith("st"):
        return STORE
    return 0


def instructions(path, raw):
    args = ["aarch64-linux-gnu-objdump", "-D" if raw else "-d"]
    if raw:
        args += ["-b", "binary", "-m", "aarch64"]
    out = subprocess.run(args + [path], capture_output=True, text=True).stdout
    for m in re.finditer(r"^\s*[0-9a-f]+:\s+([0-9a-f]{8})\s+(\S+)\s*([^\n]*)", out, re.M):
        yield m.group(1), m.group(2), m.group(3)


def main():
    cli, files = sys.argv[1], sys.argv[2:]
    raw = False
    words, exp, mns = [], [], []
    for f in files:
        if f == "--raw":
            raw = True
            continue
        for word, mn, ops in instructions(f, raw):
            if mn in (".inst", "udf", "undefined"):
                continue
            words.append(word); exp.append(expected(mn, ops)); mns.append(mn)
        raw = False
    got = subprocess.run([cli], input="\n".join(words) + "\n", capture_output=True,
                         text=True).stdout.split("\n")
    bad = collections.Counter()
    example = {}
    classes = collections.Counter()
    for word, e, mn, line in zip(words, exp, mns, got):
        g = int(line.split()[1]) & CHECKED
        if g & BR: classes["branch"] += 1
        if g & LOAD: classes["load"] += 1
        if g & STORE: classes["store"] += 1
        if g & ATOM: classes["atomic"] += 1
        if g != e:
            bad[mn] += 1
            example.setdefault(mn, (word, e, g))
    print(f"{len(words)} instructions, {sum(bad.values())} differ; classes: {dict(classes)}")
    for mn, n in bad.most_common(30):
        w, e, g = example[mn]
        print(f"  {mn:10} {n:7}  e.g. {w} expected {e:#x} got {g:#x}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
