#!/usr/bin/env python3
"""Cost of a page-cache page that the machine has not used lately against a
recycled one: writes 512 MiB through a shared map of an allocated file,
three times over fresh files, and prints microseconds per 4 KiB page.

On a virtual machine that returns free memory to its host (virtio_balloon
with free page reporting), the first pass pays a host fault per page and
the next ones reuse the pages the previous pass freed. This is why the log
writer drops its tail's old pages from the page cache (engine/src/vfs/real.rs,
`recycle`); docs/BENCHMARKS.md quotes its output.

Usage: python3 benches/scripts/vm_page_cost.py [DIR]   (DIR defaults to
$CAIRN_BENCH_DIR or the system temporary directory)
"""
import mmap
import os
import sys
import tempfile
import time

SIZE = 512 << 20
BLOCK = 1 << 20


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAIRN_BENCH_DIR", tempfile.gettempdir())
    blk = b"y" * BLOCK
    for run in range(3):
        path = os.path.join(base, f"cairn-page-cost-{os.getpid()}-{run}.bin")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, SIZE)
            m = mmap.mmap(fd, SIZE)
            t = time.perf_counter()
            for off in range(0, SIZE, BLOCK):
                m[off:off + BLOCK] = blk
            dt = time.perf_counter() - t
            m.close()
        finally:
            os.close(fd)
            os.unlink(path)
        print(f"pass {run}: {SIZE / dt / 1e6:.0f} MB/s, {dt / (SIZE / 4096) * 1e6:.2f} us per 4 KiB page")


if __name__ == "__main__":
    main()
