"""Benchmarks of the Python binding, side by side in one run (see
docs/BENCHMARKS.md, "Bindings"):

1. 8 threads recording prompts with durability "always" against Python's
   sqlite3 (WAL, synchronous=FULL, one commit per event) from the same
   8 threads;
2. batches (record_batch of 1,000) with durability "never" from one thread;
3. the cost of one call (session.prompt, durability "never") against the
   same call in Rust (bindings/common/examples/call_cost.rs, if built).

    python bindings/python/bench/bench.py [--quick]

`--cairn-durable-only` runs only cairn's side of (1) and prints its rate,
so a syscall count of it (`strace -f -c -e trace=fdatasync python
bindings/python/bench/bench.py --cairn-durable-only`) shows how many
events share each sync.
"""

import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import cairn

QUICK = "--quick" in sys.argv
THREADS = 8
PER_THREAD = 50 if QUICK else 400
BATCH = 1000
BATCHES = 20 if QUICK else 200
CALLS = 20_000 if QUICK else 200_000
REPO = pathlib.Path(__file__).resolve().parents[3]


def run_threads(work):
    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def cairn_threads(d):
    with cairn.Store.open(d, create=True, durability="always") as store:
        def work(t):
            s = store.session(f"t{t}")
            for i in range(PER_THREAD):
                s.prompt(f"thread {t} prompt {i}")
        secs = run_threads(work)
        assert store.head == THREADS * PER_THREAD
    return THREADS * PER_THREAD / secs


def sqlite_threads(d):
    path = os.path.join(d, "events.db")
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, session TEXT, kind TEXT, text TEXT, ts INTEGER)")
    con.commit()
    con.close()

    def work(t):
        c = sqlite3.connect(path, timeout=60, isolation_level=None)
        c.execute("PRAGMA synchronous=FULL")
        for i in range(PER_THREAD):
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO events (session, kind, text, ts) VALUES (?, 'prompt', ?, ?)",
                      (f"t{t}", f"thread {t} prompt {i}", int(time.time() * 1000)))
            c.execute("COMMIT")
        c.close()

    secs = run_threads(work)
    return THREADS * PER_THREAD / secs


def cairn_batches(d):
    with cairn.Store.open(d, create=True, durability="never") as store:
        s = store.session("bench")
        batches = [[{"kind": "prompt", "text": f"b{b} {i}"} for i in range(BATCH)] for b in range(BATCHES)]
        start = time.perf_counter()
        for b in batches:
            s.record_batch(b)
        secs = time.perf_counter() - start
    return BATCH * BATCHES / secs


def cairn_calls(d):
    with cairn.Store.open(d, create=True, durability="never") as store:
        s = store.session("bench")
        texts = [f"prompt {i}" for i in range(CALLS)]
        start = time.perf_counter()
        for t in texts:
            s.prompt(t)
        secs = time.perf_counter() - start
    return secs * 1e6 / CALLS


def rust_calls(d):
    exe = REPO / "target" / "release" / "examples" / "call_cost"
    if not exe.exists():
        return None
    r = subprocess.run([str(exe), d], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main():
    if "--cairn-durable-only" in sys.argv:
        with tempfile.TemporaryDirectory() as a:
            print(f"8 threads, {THREADS * PER_THREAD} prompts, durability always: "
                  f"{cairn_threads(a):,.0f} events/s")
        return
    rows = []
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        c = cairn_threads(a)
        q = sqlite_threads(b)
        rows.append(("8 threads, prompts, durability always", f"{c:,.0f} events/s",
                     f"sqlite3 WAL synchronous=FULL, commit per event: {q:,.0f} events/s", f"{c / q:.1f}x"))
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        r = cairn_batches(a)
        # The Rust side right after, so both see the same load.
        rust = rust_calls(b)
    if rust:
        peer = f"Rust append_batch of 1,000, same run: {rust['batch_events_per_s']:,.0f} events/s"
        ratio = f"{r / rust['batch_events_per_s']:.2f}x"
    else:
        peer, ratio = "Rust: build the call_cost example", ""
    rows.append(("1 thread, record_batch of 1,000, durability never", f"{r:,.0f} events/s", peer, ratio))
    with tempfile.TemporaryDirectory() as a:
        us = cairn_calls(a)
        peer = f"Rust session.prompt: {rust['prompt_us']:.2f} us" if rust else "Rust: build the call_cost example"
        ratio = f"{us / rust['prompt_us']:.1f}x" if rust else ""
        rows.append(("one call: session.prompt, durability never", f"{us:.2f} us", peer, ratio))
    print("| Python | cairn | peer | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
