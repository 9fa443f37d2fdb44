# SPDX-License-Identifier: GPL-2.0-or-later
"""pvharness - run the pvperf plugin on the freestanding test guest.

Used by tests/plugin/test_plugin.py and bench_overhead.py.  Pieces:

* build()          make the plugin and the test guest (pvtest.S)
* Guest            symbols of pvtest.elf and instruction/branch counts of
                   its regions, taken with objdump (independent of QEMU,
                   the plugin and capstone)
* FakeService      a minimal pvperf service: SOCK_SEQPACKET on an abstract
                   socket, one connection per vCPU, answers every hypercall
                   and records each counter snapshot
* run_guest()      qemu-system-x86_64 with guest RAM in a /dev/shm file
                   (removed afterwards), isa-debug-exit for the status

Constants come from abi-consts.h, which the compiler derives from
pvperf_abi.h and pvperf_proto.h: no hypercall number is repeated here.
"""
import mmap
import os
import re
import selectors
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
PLUGIN_DIR = TESTS_DIR.parent
PLUGIN_SO = PLUGIN_DIR / "pvperf.so"
KBASE = 0xFFFF800000000000
RET_SENTINEL = -1234
RAM_SIZE = 64 << 20

#: QEMU binary; override with PVPERF_QEMU=/path/to/qemu-system-x86_64
QEMU = os.environ.get("PVPERF_QEMU", "qemu-system-x86_64")


def qemu_available():
    return shutil.which(QEMU) is not None


def build(bench=False):
    """Build pvperf.so and the test guests; return the consts dict."""
    subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), "pvperf.so"], check=True)
    subprocess.run(["make", "-s", "-C", str(TESTS_DIR)], check=True)
    return load_consts()


def load_consts():
    consts = {}
    for line in (TESTS_DIR / "abi-consts.h").read_text().splitlines():
        m = re.match(r"#define (\w+) (-?\d+)$", line)
        if m:
            consts[m.group(1)] = int(m.group(2))
    return consts


C = None  # filled by build()/load_consts() on first use


def consts():
    global C
    if C is None:
        C = load_consts()
    return C


BRANCH_RE = re.compile(
    r"^(j\w+|call\w*|ret\w*|lret\w*|iret\w*|int\w*|loop\w*|syscall|sysret\w*|"
    r"sysenter|sysexit\w*)$")


class Guest:
    """Symbols and objdump-based instruction counts of a test guest ELF."""

    def __init__(self, elf):
        self.elf = Path(elf)
        self.sym = {}
        out = subprocess.run(["nm", str(self.elf)], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            addr, _, name = line.split()
            self.sym[name] = int(addr, 16)
        self._insns = self._disassemble()

    def _disassemble(self):
        out = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", "-M", "x86-64", str(self.elf)],
            check=True, capture_output=True, text=True).stdout
        insns = []
        for line in out.splitlines():
            m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)", line)
            if m:
                insns.append((int(m.group(1), 16), m.group(2)))
        return insns

    def count(self, start, end):
        """(instructions, branches) statically in [start, end)."""
        lo = self.sym[start] if isinstance(start, str) else start
        hi = self.sym[end] if isinstance(end, str) else end
        mnems = [m for a, m in self._insns if lo <= a < hi]
        return len(mnems), sum(1 for m in mnems if BRANCH_RE.match(m))

    def n(self, name):
        return self.sym[name]


@dataclass
class Record:
    vcpu: int
    gpa: int
    insn_vaddr: int
    counters: tuple
    op: int
    args: tuple


@dataclass
class FakeService:
    """The service side of pvperf_proto.h, just enough for the tests.

    policy(op, args) -> (ret, flags).  silent=True accepts connections but
    never answers (the plugin must time out).
    """
    ram: mmap.mmap
    policy: object = None
    silent: bool = False
    name: str = field(default_factory=lambda: f"pvperf-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    records: list = field(default_factory=list)

    def __post_init__(self):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.bind("\0" + self.name)
        self._sock.listen(16)
        self._stop_r, self._stop_w = os.pipe()
        self._conns = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def sock_opt(self):
        return "@" + self.name

    def close(self):
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=10)
        for c in self._conns:
            c.close()
        self._sock.close()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _run(self):
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ, "listen")
        sel.register(self._stop_r, selectors.EVENT_READ, "stop")
        while True:
            for key, _ in sel.select():
                if key.data == "stop":
                    sel.close()
                    return
                if key.data == "listen":
                    conn, _ = self._sock.accept()
                    self._conns.append(conn)
                    sel.register(conn, selectors.EVENT_READ, "conn")
                else:
                    self._serve(sel, key.fileobj)

    def _serve(self, sel, conn):
        data = conn.recv(4096)
        if not data:
            sel.unregister(conn)
            return
        k = consts()
        assert len(data) == k["PROTO_HCALL_SIZE"], len(data)
        magic, vcpu, gpa, vaddr, *ctr = struct.unpack(
            f"<IIQQ{k['PVPERF_NR_COUNTERS']}Q", data)
        ctr = ctr[:4]   # the inline counters (PVPERF_CTR_*); no models here
        assert magic == k["PVPERF_PROTO_HCALL_MAGIC"]
        _, _, op, _, *args = struct.unpack_from("<IIII3Q", self.ram, gpa)
        self.records.append(Record(vcpu, gpa, vaddr, tuple(ctr), op, tuple(args)))
        if self.silent:
            return
        ret, flags = (self.policy or default_policy)(op, args)
        struct.pack_into("<q", self.ram, gpa + k["HCALL_RET"], ret)
        # struct pvperf_proto_reply: header, then no armed slots.
        head = struct.pack("<IIII", k["PVPERF_PROTO_REPLY_MAGIC"], flags, 0, 0)
        conn.send(head + bytes(k["PROTO_REPLY_SIZE"] - len(head)))


def default_policy(op, args):
    """PROBE: the ABI version, counting (instructions and branches) on.
    Marks: 0; mark 5 turns counting off, everything else leaves it on."""
    k = consts()
    counting = k["PVPERF_REPLY_COUNTING"] | k["PVPERF_REPLY_BRANCHES"]
    if op == k["PVPERF_OP_PROBE"]:
        return k["PVPERF_ABI_VERSION"], counting
    return 0, 0 if args[0] == 5 else counting


class GuestRam:
    """Guest RAM as a /dev/shm file; removed on close."""

    def __init__(self, size=RAM_SIZE):
        self.size = size
        self.path = Path("/dev/shm") / f"pvperf-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED)
        finally:
            os.close(fd)

    def close(self):
        self.map.close()
        self.path.unlink(missing_ok=True)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def exit_code(self):
        """The value the guest wrote to isa-debug-exit, or None."""
        if self.returncode & 1:
            return self.returncode >> 1
        return None


def qemu_argv(kernel, ram=None, smp=1, plugin_opts=None, append=None):
    argv = [QEMU, "-nodefaults", "-display", "none", "-no-reboot",
            "-smp", str(smp), "-kernel", str(kernel),
            "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-debugcon", "stdio"]
    if ram is not None:
        argv += ["-object", f"memory-backend-file,id=ram,size={ram.size},"
                            f"mem-path={ram.path},share=on",
                 "-machine", "pc,memory-backend=ram", "-m", f"{ram.size >> 20}M"]
    else:
        argv += ["-machine", "pc", "-m", f"{RAM_SIZE >> 20}M"]
    if append:
        argv += ["-append", append]
    if plugin_opts is not None:
        argv += ["-plugin", ",".join([str(PLUGIN_SO)] + list(plugin_opts))]
    return argv


def run_guest(kernel, ram=None, smp=1, plugin_opts=None, append=None, timeout=120):
    argv = qemu_argv(kernel, ram, smp, plugin_opts, append)
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
