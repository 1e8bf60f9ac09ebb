#!/usr/bin/env python3
"""What an fdatasync costs after a segment's worth of writes: writes 64 MiB
in 256 KiB `pwrite`s to a fresh file and times the final fdatasync, with no
sync before it (the pages written back first or not) and with an fdatasync
every 8 MiB and every 4 MiB along the way.

On a disk with a volatile write cache the final fdatasync makes durable all
that the device has not flushed since its last flush, whether or not the
pages were already written back. This is why the log's tail is fdatasynced
every few MiB by a thread of its own when appends are not synced
(engine/src/vfs/real/linux/ahead.rs, `SYNC_EVERY_BYTES`): sealing a full
segment fdatasyncs it with the writer lock held. docs/BENCHMARKS.md
(session 17) quotes its output.

Usage: python3 benches/scripts/device_flush_cost.py [DIR]   (DIR defaults
to $CAIRN_BENCH_DIR or the system temporary directory)
"""
import ctypes
import os
import sys
import tempfile
import time

SEGMENT = 64 << 20
WRITE = 256 << 10
# sync_file_range flags (linux/fs.h).
WAIT_BEFORE, WRITE_OUT, WAIT_AFTER = 1, 2, 4

libc = ctypes.CDLL("libc.so.6", use_errno=True)


def sync_range(fd, off, n, flags):
    if libc.sync_file_range(fd, ctypes.c_longlong(off), ctypes.c_longlong(n), flags) != 0:
        raise OSError(ctypes.get_errno(), "sync_file_range")


def run(path, every, written_back):
    buf = os.urandom(WRITE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        off, periodic = 0, []
        while off < SEGMENT:
            os.pwrite(fd, buf, off)
            off += WRITE
            if written_back:
                sync_range(fd, 0, off, WAIT_BEFORE | WRITE_OUT | WAIT_AFTER)
            if every and off % every == 0 and off < SEGMENT:
                t = time.perf_counter()
                os.fdatasync(fd)
                periodic.append(time.perf_counter() - t)
        t = time.perf_counter()
        os.fdatasync(fd)
        final = time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)
    return final, periodic


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "CAIRN_BENCH_DIR", tempfile.gettempdir())
    path = os.path.join(base, "cairn-device-flush-cost.tmp")
    for every, written_back, what in [
        (0, False, "no sync before"),
        (0, True, "no sync before, every page written back first"),
        (8 << 20, False, "an fdatasync every 8 MiB"),
        (4 << 20, False, "an fdatasync every 4 MiB"),
    ]:
        final, periodic = run(path, every, written_back)
        extra = ""
        if periodic:
            extra = "; the %d before it took %.1f ms in all (at most %.1f ms)" % (
                len(periodic), sum(periodic) * 1e3, max(periodic) * 1e3)
        print("64 MiB, %s: final fdatasync %.1f ms%s" % (what, final * 1e3, extra))


if __name__ == "__main__":
    main()
