#!/usr/bin/env python3
"""fdatasyncs per second on one file from 1, 2 and 4 threads, each doing
pwrite + fdatasync of 229 bytes for 3 s. Whether syncs started while
another runs overlap on the device: the reason the log writer lets two
group-commit syncs run at once (MAX_SYNCS_IN_FLIGHT in
engine/src/log/writer.rs).

Usage: python3 benches/scripts/fsync_concurrency.py [DIR]
"""
import os
import sys
import tempfile
import threading
import time

SECONDS = 3.0


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAIRN_BENCH_DIR", tempfile.gettempdir())
    path = os.path.join(base, f"cairn-fsync-threads-{os.getpid()}.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.posix_fallocate(fd, 0, 64 << 20)
    lock = threading.Lock()
    state = {"off": 0, "count": 0}

    def worker(stop: float) -> None:
        while time.perf_counter() < stop:
            with lock:
                off = state["off"]
                state["off"] += 229
            os.pwrite(fd, b"x" * 229, off)
            os.fdatasync(fd)
            with lock:
                state["count"] += 1

    try:
        for n in (1, 2, 4):
            state["count"] = 0
            stop = time.perf_counter() + SECONDS
            threads = [threading.Thread(target=worker, args=(stop,)) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(f"{n} threads: {state['count'] / SECONDS:.0f} fdatasyncs/s")
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
