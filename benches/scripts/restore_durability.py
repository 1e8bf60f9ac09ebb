#!/usr/bin/env python3
"""How a restore of many small files can be made durable, and what the
file system's inode allocator costs after many deletes: the experiments
behind snapshot/src/whole_fs.rs (docs/BENCHMARKS.md, "Session 13").

usage: python3 benches/scripts/restore_durability.py [FILES]   (default 20000)

Each experiment runs in a fresh directory under $TMPDIR (default /tmp):

durability: FILES files of 60 bytes in 200 directories, each written to a
  temporary, made durable, then renamed into place, as a rollback does:
  - batch:  batches of 64, fsync'd on 16 threads (cairn below 1,024 files)
  - syncfs: all written and closed, one syncfs, all renamed, one syncfs
            (cairn at 1,024 files and more, Linux)
  - none:   no durability at all (the floor)
allocator: FILES files deleted then FILES created, against created then
  deleted (what a rollback of a renamed tree does, in either order).

The file system's state carries over (ext4 skips inodes freed in the last
minutes when it allocates, so creates after many deletes are slower): the
experiments' directories are removed only at the end, the durability
experiments run before the allocator ones (which delete), and a run soon
after another (or after any large delete) is slower throughout. Compare
the figures of one run, and repeat.
"""
import ctypes
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
DATA = b"x" * 60
LIBC = ctypes.CDLL(None, use_errno=True)


def fresh(name):
    root = tempfile.mkdtemp(prefix=f"cairn-{name}-")
    for d in range(200):
        os.makedirs(f"{root}/d{d:03d}")
    os.sync()
    return root, [f"{root}/d{i % 200:03d}/f{i:05d}" for i in range(N)]


def write_temp(p):
    fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.write(fd, DATA)
    return fd


def syncfs(root):
    fd = os.open(root, os.O_RDONLY)
    try:
        if LIBC.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
    finally:
        os.close(fd)


def durability(mode):
    root, paths = fresh(mode)
    t = time.time()
    if mode == "batch":
        with ThreadPoolExecutor(16) as ex:
            for b in range(0, N, 64):
                fds = [(write_temp(p), p) for p in paths[b:b + 64]]
                list(ex.map(lambda x: os.fsync(x[0]), fds))
                for fd, p in fds:
                    os.close(fd)
                    os.rename(p + ".tmp", p)
    else:
        for p in paths:
            os.close(write_temp(p))
        if mode == "syncfs":
            syncfs(root)
        for p in paths:
            os.rename(p + ".tmp", p)
        if mode == "syncfs":
            syncfs(root)
    took = time.time() - t
    made.append(root)
    print(f"durability {mode:7} {N} files: {took:5.2f} s ({N / took:,.0f} files/s)")


def allocator(order):
    root, paths = fresh(order)
    for p in paths:
        with open(p, "w") as f:
            f.write("x")
    os.sync()
    t = time.time()
    if order == "delete-first":
        for p in paths:
            os.unlink(p)
    for p in paths:
        with open(p + ".new", "w") as f:
            f.write("y")
    if order == "create-first":
        for p in paths:
            os.unlink(p)
    took = time.time() - t
    made.append(root)
    print(f"allocator  {order:12} {N} deletes and {N} creates: {took:5.2f} s")


made = []
try:
    for m in ("batch", "syncfs", "none"):
        durability(m)
    for o in ("create-first", "delete-first"):
        allocator(o)
finally:
    for root in made:
        shutil.rmtree(root)
