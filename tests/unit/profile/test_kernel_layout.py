"""pyhost.kernel_layout: struct offsets from BTF (a synthetic blob, then
the default image's own kernel) and the plugin's task= option."""
from __future__ import annotations

import struct

import pytest

from pyhost.profile import kernel_layout as kl


def btf_blob(types: list[bytes], names: list[str]) -> bytes:
    """A BTF blob: header, the given type records, a string section of
    names (offset 0 is the empty string)."""
    strings = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    type_data = b"".join(types)
    header = kl.BTF_HEADER.pack(kl.BTF_MAGIC, 1, 0, kl.BTF_HEADER.size, 0,
                                len(type_data), len(type_data), len(strings))
    return header + type_data + strings


def name_off(names: list[str], name: str) -> int:
    return 1 + sum(len(n) + 1 for n in names[:names.index(name)])


def btf_type(name: int, kind: int, vlen: int, size: int, kflag=0) -> bytes:
    return kl.BTF_TYPE.pack(name, (kflag << 31) | (kind << 24) | vlen, size)


def test_members_through_anonymous_unions_and_bitfield_offsets():
    names = ["int", "task_struct", "pid", "tgid", "comm", "flags", "rq",
             "curr"]
    n = lambda s: name_off(names, s)            # noqa: E731
    types = [
        btf_type(n("int"), 1, 0, 4) + struct.pack("<I", 32),       # id 1
        # id 2: struct task_struct { int pid; union { int tgid; }; ...}
        btf_type(n("task_struct"), kl.KIND_STRUCT, 3, 64)
        + kl.BTF_MEMBER.pack(n("pid"), 1, 0)
        + kl.BTF_MEMBER.pack(0, 3, 8 * 16)
        + kl.BTF_MEMBER.pack(n("comm"), 1, 8 * 40),
        # id 3: the anonymous union
        btf_type(0, kl.KIND_UNION, 1, 4)
        + kl.BTF_MEMBER.pack(n("tgid"), 1, 8 * 4),
        # id 4: struct rq with bitfield-style offsets (kind_flag)
        btf_type(n("rq"), kl.KIND_STRUCT, 2, 32, kflag=1)
        + kl.BTF_MEMBER.pack(n("flags"), 1, (3 << 24) | 0)
        + kl.BTF_MEMBER.pack(n("curr"), 1, 8 * 24),
    ]
    btf = kl.Btf(btf_blob(types, names))
    assert btf.member_offset("task_struct", "pid") == 0
    assert btf.member_offset("task_struct", "tgid") == 20
    assert btf.member_offset("task_struct", "comm") == 40
    assert btf.member_offset("rq", "curr") == 24
    with pytest.raises(kl.LayoutError):
        btf.member_offset("task_struct", "mm")
    with pytest.raises(kl.LayoutError):
        kl.Btf(b"\0" * 64)


def test_btf_inside_a_flat_image():
    names = ["int"]
    blob = btf_blob([btf_type(1, 1, 0, 4) + struct.pack("<I", 32)], names)
    # a decoy header whose sections would run past the image's end first
    decoy = kl.BTF_HEADER.pack(kl.BTF_MAGIC, 1, 0, kl.BTF_HEADER.size, 0,
                               1 << 20, 1 << 20, 16)
    image = b"\x00" * 100 + decoy + b"\x11" * 40 + blob + b"\x22" * 64
    assert kl.flat_image_btf(image) == blob
    with pytest.raises(kl.LayoutError):
        kl.flat_image_btf(b"\x00" * 100 + decoy)


@pytest.mark.parametrize("image_name,arch_name", [("x86_64", "x86_64"),
                                                  ("aarch64", "aarch64"),
                                                  ("riscv64", "riscv64")])
def test_image_task_layout(image_name, arch_name):
    # only the image's kernel is needed, not an up-to-date initramfs
    from pyhost import arch, image
    d = image.image_dir(image_name)
    vmlinux, system_map = d / "vmlinux", d / "System.map"
    if not (vmlinux.exists() and system_map.exists()):
        pytest.skip(f"no {image_name} image kernel (pvperf image build "
                    f"--arch {arch_name})")
    layout = kl.task_layout(vmlinux, system_map.read_text(),
                            arch.get(arch_name))
    btf = kl.vmlinux_btf(vmlinux)
    # pid_t pid; pid_t tgid; are adjacent in task_struct; comm is
    # TASK_COMM_LEN bytes
    assert layout.tgid == btf.member_offset("task_struct", "pid") + 4
    path, *fields, linear = layout.plugin_option().split(":")
    assert len(fields) == 4 and all(f.startswith("0x") for f in fields)
    if arch_name == "x86_64":
        # the per-cpu runqueues is a small offset; page_offset_base a
        # kernel variable
        assert len(layout.path) == 1 and layout.path[0] < 1 << 20
        assert linear.startswith("@") and int(linear[1:], 16) > 1 << 63
    elif arch_name == "aarch64":
        # current->se.cfs_rq->rq->curr; virt's RAM at 1 GiB is the linear
        # map's start (PAGE_OFFSET of 48-bit VAs)
        assert path.count("/") == 2 and len(layout.path) == 3
        assert int(linear, 16) == (0xFFFF000000000000 - 0x40000000)
    else:
        # the same path from tp; the linear base is read where the kernel
        # keeps it: kernel_map.va_pa_offset (a u64 after the struct's
        # page_offset, virt_addr, virt_offset, phys_addr, size)
        assert path.count("/") == 2 and len(layout.path) == 3
        kernel_map = next(int(line.split()[0], 16) for line in
                          system_map.read_text().splitlines()
                          if line.endswith(" kernel_map"))
        assert linear == f"@{kernel_map + btf.member_offset('kernel_mapping', 'va_pa_offset'):#x}"
        assert 40 <= btf.member_offset("kernel_mapping", "va_pa_offset") < 128
