"""The ABI is defined once in pvperf_abi.h; check the Python mirror and the
C layout (compiled with the host gcc) against it."""
import re
import subprocess

import pytest

from pyhost import abi

from support import REPO

HEADER = REPO / "contracts" / "pvperf_abi.h"

# Header macro -> abi attribute
CONSTANTS = {
    "PVPERF_ABI_VERSION": "ABI_VERSION",
    "PVPERF_HCALL_ALIGN": "HCALL_ALIGN",
    "PVPERF_MARKER_MAGIC": "MARKER_MAGIC",
    "PVPERF_HC_PERF_OP": "HC_PERF_OP",
    "PVPERF_OP_OPEN": "OP_OPEN", "PVPERF_OP_CLOSE": "OP_CLOSE",
    "PVPERF_OP_ENABLE": "OP_ENABLE", "PVPERF_OP_DISABLE": "OP_DISABLE",
    "PVPERF_OP_READ": "OP_READ", "PVPERF_OP_PROBE": "OP_PROBE",
    "PVPERF_OP_FAULT": "OP_FAULT",
    "PVPERF_OP_PMU_DISABLE": "OP_PMU_DISABLE",
    "PVPERF_OP_PMU_ENABLE": "OP_PMU_ENABLE",
    "PVPERF_OP_SET_PERIOD": "OP_SET_PERIOD",
    "PVPERF_OP_SAMPLE_BUF": "OP_SAMPLE_BUF",
    "PVPERF_OP_EVENTS": "OP_EVENTS", "PVPERF_OP_TICK": "OP_TICK",
    "PVPERF_EVENTS_BUF_MAX": "EVENTS_BUF_MAX",
    "PVPERF_ATTR_RANDOM_SHIFT": "ATTR_RANDOM_SHIFT",
    "PVPERF_ATTR_PRECISE_SHIFT": "ATTR_PRECISE_SHIFT",
    "PVPERF_MIN_PERIOD": "MIN_PERIOD",
    "PVPERF_COUNT_LINGER_MS": "COUNT_LINGER_MS",
    "PVPERF_MAX_RAM_MB": "MAX_RAM_MB",
    "PVPERF_X86_64_KERNEL_HALF_START": "X86_64_KERNEL_HALF_START",
    "PVPERF_AARCH64_KERNEL_HALF_START": "AARCH64_KERNEL_HALF_START",
    "PVPERF_RISCV64_KERNEL_HALF_START": "RISCV64_KERNEL_HALF_START",
    "PVPERF_AARCH64_MARKER_INSN": "AARCH64_MARKER_INSN",
    "PVPERF_AARCH64_MARKER_INSN_LEN": "AARCH64_MARKER_INSN_LEN",
    "PVPERF_RISCV64_MARKER_INSN": "RISCV64_MARKER_INSN",
    "PVPERF_RISCV64_MARKER_INSN_LEN": "RISCV64_MARKER_INSN_LEN",
    "PVPERF_SAMPLE_BUF_MIN": "SAMPLE_BUF_MIN",
    "PVPERF_MODE_KERNEL": "MODE_KERNEL", "PVPERF_MODE_USER": "MODE_USER",
    "PVPERF_MAX_EVENTS": "MAX_EVENTS", "PVPERF_MAX_EVENT_ID": "MAX_EVENT_ID",
    "PVPERF_SAMPLE_REGS": "SAMPLE_REGS", "PVPERF_NR_REGS": "NR_REGS",
    "PVPERF_X86_64_REG_AX": "X86_64_REG_AX", "PVPERF_X86_64_REG_BX": "X86_64_REG_BX",
    "PVPERF_X86_64_REG_CX": "X86_64_REG_CX", "PVPERF_X86_64_REG_DX": "X86_64_REG_DX",
    "PVPERF_X86_64_REG_SI": "X86_64_REG_SI", "PVPERF_X86_64_REG_DI": "X86_64_REG_DI",
    "PVPERF_X86_64_REG_BP": "X86_64_REG_BP", "PVPERF_X86_64_REG_SP": "X86_64_REG_SP",
    "PVPERF_X86_64_REG_R8": "X86_64_REG_R8",
    "PVPERF_AARCH64_REG_X0": "AARCH64_REG_X0",
    "PVPERF_AARCH64_REG_FP": "AARCH64_REG_FP",
    "PVPERF_AARCH64_REG_LR": "AARCH64_REG_LR",
    "PVPERF_AARCH64_REG_SP": "AARCH64_REG_SP",
    "PVPERF_RISCV64_REG_PC": "RISCV64_REG_PC",
    "PVPERF_RISCV64_REG_RA": "RISCV64_REG_RA",
    "PVPERF_RISCV64_REG_SP": "RISCV64_REG_SP",
    "PVPERF_RISCV64_REG_FP": "RISCV64_REG_FP",
}


def header_defines() -> dict[str, str]:
    defs = {}
    for m in re.finditer(r"^#define\s+(PVPERF_\w+)\s+(.+?)\s*(?:/\*.*)?$",
                         HEADER.read_text(), re.M):
        defs[m.group(1)] = m.group(2)
    return defs


def c_int(expr: str) -> int:
    """A header macro's value: a number or a shift of numbers."""
    m = re.fullmatch(r"\(?\s*(\w+?)U?L*\s*(?:<<\s*(\w+)\s*)?\)?", expr)
    assert m, expr
    return int(m.group(1), 0) << int(m.group(2) or "0", 0)


@pytest.mark.parametrize("macro,attr", sorted(CONSTANTS.items()))
def test_constant_matches_header(macro, attr):
    assert c_int(header_defines()[macro]) == getattr(abi, attr)


def test_attr_flags_match_header():
    defs = header_defines()
    for name in ("EXCLUDE_USER", "EXCLUDE_KERNEL", "EXCLUDE_HV",
                 "EXCLUDE_IDLE", "FREQ", "EXCLUDE_GUEST", "EXCLUDE_HOST",
                 "KNOWN", "PRECISE_MASK", "BUFFERED", "RANDOM_MASK"):
        expr = defs[f"PVPERF_ATTR_{name}"].replace("ULL", "")
        expr = expr.split("/*")[0]
        assert eval(expr) == getattr(abi, f"ATTR_{name}"), name


def test_doorbell_bytes_match_header():
    text = header_defines()["PVPERF_X86_64_MARKER_INSN_BYTES"]
    assert bytes(int(b, 0) for b in re.findall(r"0x[0-9a-f]+", text)) == \
        abi.X86_64_MARKER_INSN_BYTES
    # The store's imm32 is the magic, little-endian.
    assert abi.X86_64_MARKER_INSN_BYTES[2:] == abi.MARKER_MAGIC.to_bytes(4, "little")


def c_layout(tmp_path) -> dict[str, int]:
    """sizeof/offsetof as the C compiler sees the header."""
    lines = [f'printf("{s} %zu\\n", sizeof(struct {s}));'
             for s in abi.STRUCT_SIZES]
    lines += [f'printf("{s}.{f} %zu\\n", offsetof(struct {s}, {f}));'
              for s, f in abi.STRUCT_OFFSETS]
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n'
                   f'#include "{HEADER}"\nint main(void) {{\n'
                   + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", exe, src], check=True)
    out = subprocess.run([exe], capture_output=True, text=True, check=True)
    return {k: int(v) for k, v in (l.split() for l in out.stdout.splitlines())}


def test_struct_layout_matches_c(tmp_path):
    layout = c_layout(tmp_path)
    for name, size in abi.STRUCT_SIZES.items():
        assert layout[name] == size, name
    for (name, fld), off in abi.STRUCT_OFFSETS.items():
        assert layout[f"{name}.{fld}"] == off, (name, fld)


def test_hypercall_numbers_are_literals_only_in_the_two_abi_files():
    """Call and op numbers are named, never spelled, elsewhere."""
    pattern = re.compile(r"PVPERF_OP_\w+\s+0x|OP_\w+\s*=\s*\d")
    allowed = {HEADER, REPO / "pyhost" / "abi.py"}
    for path in list((REPO / "pyhost").rglob("*.py")) + \
            list((REPO / "qemu_plugin").rglob("*.[ch]")) + \
            list((REPO / "guest_kernel_patch").glob("*.[ch]")):
        if path in allowed:
            continue
        assert not pattern.search(path.read_text()), path


def test_pack_unpack_roundtrip():
    attr = abi.GuestPerfAttr(4, 0xC0, 0, 0, 3, abi.ATTR_EXCLUDE_KERNEL,
                             0, 0, 0)
    assert abi.GuestPerfAttr.unpack(attr.pack()) == attr
    param = abi.GuestPerfParam(0x1000, 0x2000, 7)
    assert abi.GuestPerfParam.unpack(param.pack()) == param
    raw = abi.pack_hcall(abi.HC_PERF_OP, abi.OP_ENABLE, (7,))
    blk = abi.HcallBlock.unpack(raw)
    assert (blk.nr, blk.op, blk.args[0]) == (abi.HC_PERF_OP, abi.OP_ENABLE, 7)


def test_max_period_matches_header():
    text = header_defines()["PVPERF_MAX_PERIOD"]
    assert re.fullmatch(r"\(1ULL << (\d+)\)", text), text
    assert 1 << int(re.search(r"<< (\d+)", text).group(1)) == abi.MAX_PERIOD


def test_sample_buf_max_matches_header():
    assert eval(header_defines()["PVPERF_SAMPLE_BUF_MAX"]) == abi.SAMPLE_BUF_MAX


def test_ops_are_distinct_and_named():
    ops = [v for k, v in vars(abi).items() if k.startswith("OP_")
           and isinstance(v, int)]
    assert len(ops) == len(set(ops)) == len(abi.OP_NAMES)
