"""Synthetic profile sessions (session.json's shape, resolve.py's sample
fields) for the renderers' tests: the flame graphs and the diff."""
from __future__ import annotations

import re
from collections import Counter


def guest(space: str, symbol: str, n: int, thread: str = "CPU 0/TCG"
          ) -> list[dict]:
    """n samples in the translated code of a guest function."""
    return [{"space": space, "symbol": symbol, "code_cache": True,
             "resolved": True, "behalf": None, "thread": thread,
             "host_stack": ["[code cache]"], "dso": "x", "tid": 1}] * n


def helper(stack: list[str], n: int, behalf: tuple[str, str] | None,
           thread: str = "CPU 0/TCG") -> list[dict]:
    """n emulator samples, host stack outermost first; a stack through
    the code cache names the guest function it worked for (behalf)."""
    leaf = stack[-1]
    return [{"space": "emulator", "symbol": leaf, "code_cache": False,
             "resolved": False, "thread": thread, "host_stack": list(stack),
             "behalf": {"space": behalf[0], "symbol": behalf[1], "pid": 1}
             if behalf else None, "dso": "/usr/bin/qemu", "tid": 1}] * n


def unresolved(n: int) -> list[dict]:
    return [{"space": "emulator", "symbol": "[code cache, unresolved]",
             "code_cache": True, "resolved": False, "behalf": None,
             "thread": "CPU 0/TCG", "host_stack": ["[code cache]"],
             "dso": "[code cache]", "tid": 1}] * n


def session(samples: list[dict], hz: int = 4000, command: str = "./x",
            **extra) -> dict:
    return {"version": 2, "meta": {
        "event": "cpu-clock", "frequency_hz": hz,
        "duration_s": len(samples) / hz, "samples": len(samples),
        "lost_samples": 0, "vcpus": 1, "target": "qemu-system-x86_64 pid 1",
        "command": command, "exit_status": 0, "qemu_pid": 1,
        "rmap_translations": 1, "rmap_generations": [0]},
        "samples": samples, "hot_guest_code": [], "translations": [],
        **extra}


def hotcold(hot: int = 800, cold: int = 200, *, tlb: int = 60,
            lookups: int = 90, kernel: int = 50, host_kernel: int = 30,
            main_loop: int = 40, unresolved_n: int = 5) -> dict:
    """hot and cold in guest user code; helpers and a TLB fill on hot's
    behalf; guest kernel code; the host kernel under the main loop."""
    return session(
        guest("guest-user", "hot", hot) + guest("guest-user", "cold", cold)
        + guest("guest-kernel", "clear_page_erms", kernel)
        + helper(["[code cache]", "helper_lookup_tb_ptr",
                  "qht_lookup_custom"], lookups, ("guest-user", "hot"))
        + helper(["[code cache]", "helper_ldul_mmu", "x86_cpu_tlb_fill"],
                 tlb, ("guest-user", "hot"))
        + helper(["[code cache]", "helper_lookup_tb_ptr"], lookups // 3,
                 ("guest-kernel", "clear_page_erms"))
        + helper(["main", "main_loop_wait", "[host kernel] do_sys_poll"],
                 host_kernel, None, thread="qemu-system-x86")
        + helper(["main", "main_loop_wait"], main_loop, None,
                 thread="qemu-system-x86")
        + unresolved(unresolved_n))


def expected_stacks(samples: list[dict]) -> Counter:
    """The viewer's stacks, written out from the samples independently of
    flamegraph_html: the thread; the host frames, with the code cache
    replaced by the guest function it ran or worked for; host-kernel
    frames unprefixed."""
    out = Counter()
    for s in samples:
        frames = [(s["thread"], "emulator")]
        for f in s["host_stack"]:
            if f == "[code cache]" and s["resolved"]:
                frames.append((s["symbol"], s["space"]))
            elif f == "[code cache]" and s["behalf"]:
                frames.append((s["behalf"]["symbol"], s["behalf"]["space"]))
            elif f == "[code cache]" and s["code_cache"]:
                frames.append((s["symbol"], "emulator"))
            elif f.startswith("[host kernel] "):
                frames.append((f.split("] ", 1)[1], "host-kernel"))
            else:
                frames.append((f, "emulator"))
        out[tuple(frames)] += 1
    return out


def prefix_counts(stacks: Counter) -> Counter:
    """Samples under every stack prefix (a frame's width, in samples)."""
    out = Counter()
    for stack, n in stacks.items():
        for i in range(1, len(stack) + 1):
            out[stack[:i]] += n
    return out


def report_rows(text: str, title: str) -> dict[tuple[str, str], int]:
    """(space, symbol) -> samples of one table of report.txt."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"# {title}"))
    rows = {}
    for line in lines[start + 2:]:
        m = re.match(r"\s+[\d.]+%\s+(\d+)\s+(\S+)\s+(.*)$", line)
        if not m:
            break
        rows[(m[2], m[3])] = int(m[1])
    return rows
