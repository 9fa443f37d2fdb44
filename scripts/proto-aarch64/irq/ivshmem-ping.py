#!/usr/bin/env python3
"""PROTOTYPE (groundwork for the arm64 port; may be rewritten): a minimal
ivshmem server (QEMU docs/specs/ivshmem-spec.rst: int64 messages, file
descriptors by SCM_RIGHTS) for ONE ivshmem-doorbell client with one
vector, then a ping loop: write the client's vector-0 eventfd, wait until
the guest's handler (ivirq.ko) has bumped the counter in shared memory,
and report round-trip times.

    ivshmem-ping.py SOCKET SHM_SIZE_MB PINGS -- qemu-system-aarch64 ... \
        -chardev socket,path=SOCKET,id=iv -device ivshmem-doorbell,chardev=iv,vectors=1

The guest must print IVIRQ-READY on the console once ivirq.ko is loaded.
"""
import mmap
import os
import socket
import statistics
import struct
import subprocess
import sys
import time


def send(conn, value, fd=None):
    # One message per write, a pause between them: QEMU's chardev may read
    # several messages at once and then pairs the descriptors with the
    # wrong message.
    time.sleep(0.05)
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))] if fd is not None else []
    conn.sendmsg([struct.pack("<q", value)], anc)


def serve_one(listener, shm_fd):
    """Protocol for the first (and only) peer: version, its id, the shared
    memory, then its own eventfds (one vector).  Returns the eventfd."""
    conn, _ = listener.accept()
    peer_id, vector_fd = 1, os.eventfd(0, os.EFD_NONBLOCK)
    send(conn, 0)               # protocol version
    send(conn, peer_id)         # its id
    send(conn, -1, shm_fd)      # the shared memory
    send(conn, peer_id, vector_fd)   # its vector 0
    return conn, vector_fd


def main():
    path, size_mb, pings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    argv = sys.argv[sys.argv.index("--") + 1:]
    shm_fd = os.memfd_create("ivshmem")
    os.ftruncate(shm_fd, size_mb << 20)
    shm = mmap.mmap(shm_fd, size_mb << 20)
    listener = socket.socket(socket.AF_UNIX)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    listener.listen(1)
    qemu = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    conn, vector_fd = serve_one(listener, shm_fd)
    for line in qemu.stdout:
        if not line.startswith("["):
            print(line, end="")
        if "IVIRQ-READY" in line:
            break
    rtts = []
    for _ in range(pings):
        before = struct.unpack_from("<I", shm, 0)[0]
        t0 = time.monotonic()
        os.eventfd_write(vector_fd, 1)
        while struct.unpack_from("<I", shm, 0)[0] == before:
            if time.monotonic() - t0 > 2:
                break
        rtts.append(time.monotonic() - t0)
        if rtts[-1] > 2:
            try:
                left = os.eventfd_read(vector_fd)
            except BlockingIOError:
                left = 0
            print("HOST: no interrupt reached the guest's handler in 2 s; "
                  f"eventfd {'not read by QEMU' if left else 'read by QEMU'}")
            break
        time.sleep(0.005)
    got = struct.unpack_from("<I", shm, 0)[0]
    print(f"HOST: {pings} eventfd writes, guest handled {got}; round trip "
          f"median {statistics.median(rtts) * 1e6:.0f} us, "
          f"max {max(rtts) * 1e6:.0f} us")
    os.eventfd_write(vector_fd, 1)
    for line in qemu.stdout:
        if not line.startswith("["):
            print(line, end="")
    qemu.wait()
    os.unlink(path)


if __name__ == "__main__":
    main()
