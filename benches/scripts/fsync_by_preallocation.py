#!/usr/bin/env python3
"""pwrite + fdatasync latency by how the space ahead was prepared: plain
appends (the file grows), space allocated with fallocate, space written
with zeros and synced. Each case runs 2 s for a 229-byte write (one log
record) and a 3,664-byte write (a group of 16). Why the log writer gives
its tail real zeros under the `always` policy (engine/src/vfs/real.rs,
`reserve`); docs/BENCHMARKS.md quotes its output.

Usage: python3 benches/scripts/fsync_by_preallocation.py [DIR]
"""
import os
import sys
import tempfile
import time

SECONDS = 2.0
SPACE = 64 << 20


def run(path: str, mode: str, size: int) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if mode == "fallocate":
            os.posix_fallocate(fd, 0, SPACE)
        elif mode == "zeros":
            zeros = b"\0" * (1 << 20)
            for off in range(0, SPACE, 1 << 20):
                os.pwrite(fd, zeros, off)
            os.fdatasync(fd)
        buf, off, n = b"x" * size, 0, 0
        t = time.perf_counter()
        while time.perf_counter() - t < SECONDS:
            os.pwrite(fd, buf, off)
            os.fdatasync(fd)
            off += size
            n += 1
        return (time.perf_counter() - t) / n * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAIRN_BENCH_DIR", tempfile.gettempdir())
    path = os.path.join(base, f"cairn-fsync-prealloc-{os.getpid()}.bin")
    for size in (229, 3664):
        for mode in ("append", "fallocate", "zeros"):
            print(f"{size} bytes, {mode}: {run(path, mode, size):.0f} us per pwrite + fdatasync")


if __name__ == "__main__":
    main()
