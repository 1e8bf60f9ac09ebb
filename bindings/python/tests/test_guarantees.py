"""The guarantees: bad input refused, the lock, damage, threads, a killed
process, and the command line reading what Python wrote."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading

import pytest

import cairn


def test_a_bad_event_raises_invalid_event_and_appends_nothing(store):
    s = store.session("t1")
    s.prompt("ok")
    bad = [
        ({"text": "no kind"}, "kind"),
        ({"kind": "no.such"}, "no.such"),
        ({"kind": "prompt", "latency_ms": -1}, "latency_ms"),
        ({"kind": "prompt", "unknown_field": 1}, "unknown_field"),
        ({"kind": "file.write", "path": ""}, "path"),
        ({"kind": "prompt", "session": ""}, "session"),
        ({"kind": "prompt", "meta": {"x": object()}}, "object"),
        ("not a dict", "dict"),
    ]
    for event, word in bad:
        with pytest.raises(cairn.InvalidEventError, match=word):
            s.record(event)
    with pytest.raises(cairn.InvalidEventError, match="event 2 of the batch"):
        s.record_batch([{"kind": "prompt"}, {"kind": "nope"}])
    loop = {"kind": "prompt"}
    loop["meta"] = {"self": loop}
    with pytest.raises(cairn.InvalidEventError, match="nests deeper"):
        s.record(loop)
    assert store.head == 1
    assert issubclass(cairn.InvalidEventError, cairn.Error)


def test_a_second_writer_gets_locked_error(store, ws):
    with pytest.raises(cairn.LockedError, match="lock"):
        cairn.Store.open(ws)
    # Another process too.
    code = (
        "import cairn, sys\n"
        "try:\n"
        "    cairn.Store.open(sys.argv[1])\n"
        "except cairn.LockedError as e:\n"
        "    print('locked:', e); sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(ws)], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    # A read-only handle needs no lock and sees what the writer wrote.
    store.session("t1").prompt("hello")
    with cairn.Store.open(ws, read_only=True) as ro:
        assert [e["text"] for e in ro.events()] == ["hello"]
        with pytest.raises(cairn.Error):
            ro.session("t1").prompt("refused")


def _segment_files(ws):
    return sorted((ws / ".cairn" / "log").glob("*"))


def test_a_damaged_store_raises_corrupt_error(ws):
    with cairn.Store.open(ws, create=True) as store:
        s = store.session("t1")
        for i in range(50):
            s.prompt(f"prompt number {i} " + "x" * 100)
    segs = [p for p in _segment_files(ws) if p.stat().st_size > 4096]
    assert segs, list(_segment_files(ws))
    seg = segs[0]
    data = bytearray(seg.read_bytes())
    # Flip bytes in the middle of the records (not the tail, which a
    # crash may tear and recovery trims).
    mid = len(data) // 3
    for i in range(mid, mid + 16):
        data[i] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(cairn.CorruptError):
        with cairn.Store.open(ws) as store:
            list(store.events())
    with cairn.Store.open(ws, read_only=True) as ro:
        report = ro.verify()
    assert not report["ok"] and report["problems"]


def test_damaged_blob_raises_corrupt_error_on_read(ws):
    with cairn.Store.open(ws, create=True) as store:
        store.session("t1").write_file("a.bin", os.urandom(64 * 1024))
    packs = [p for p in (ws / ".cairn" / "blobs").rglob("*") if p.is_file() and p.stat().st_size > 32 * 1024]
    assert packs
    data = bytearray(packs[0].read_bytes())
    mid = len(data) // 2
    for i in range(mid, mid + 64):
        data[i] ^= 0xFF
    packs[0].write_bytes(bytes(data))
    with cairn.Store.open(ws) as store:
        with pytest.raises(cairn.CorruptError):
            store.show("head", "a.bin")
        v = store.verify()
        assert not v["ok"] and v["problems"]


THREADS = 8
PER_THREAD = 100


def test_many_threads_append_at_once_lsns_dense_nothing_lost(ws):
    with cairn.Store.open(ws, create=True, durability="always") as store:
        acked = [[] for _ in range(THREADS)]
        errors = []

        def work(t):
            try:
                s = store.session(f"thread-{t}")
                for i in range(PER_THREAD):
                    acked[t].append((s.prompt(f"{t}:{i}"), f"{t}:{i}"))
            except Exception as e:  # reported below: a thread's failure fails the test
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        all_acked = sorted(x for a in acked for x in a)
        assert [lsn for lsn, _ in all_acked] == list(range(1, THREADS * PER_THREAD + 1))
        for a in acked:  # each thread's own appends are in order
            assert [lsn for lsn, _ in a] == sorted(lsn for lsn, _ in a)
    with cairn.Store.open(ws) as store:
        got = {e["lsn"]: e["text"] for e in store.events()}
    assert got == dict(all_acked)


KILL_AFTER = 200

CHILD = r"""
import sys, cairn
store = cairn.Store.open(sys.argv[1], create=True, durability="always")
s = store.session("crash")
i = 0
while True:
    lsn = s.prompt(f"event {i}")
    print(lsn, i, flush=True)   # acknowledged: durable before prompt() returned
    i += 1
"""


def test_a_process_killed_during_appends_loses_no_acknowledged_event(ws):
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ws)], stdout=subprocess.PIPE, text=True)
    acked = []
    try:
        for line in p.stdout:
            lsn, i = map(int, line.split())
            acked.append((lsn, f"event {i}"))
            if len(acked) >= KILL_AFTER:
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert len(acked) >= KILL_AFTER, "the child stopped before it was killed"
    with cairn.Store.open(ws) as store:
        got = {e["lsn"]: e["text"] for e in store.events(session="crash")}
        assert store.verify()["ok"]
    for lsn, text in acked:
        assert got.get(lsn) == text, f"acknowledged LSN {lsn} lost"
    assert sorted(got) == list(range(1, len(got) + 1))


def test_the_command_line_reads_what_python_wrote(ws, cli):
    with cairn.Store.open(ws, create=True) as store:
        s = store.session("t1", agent="coder")
        s.prompt("hello")
        c = s.checkpoint("start")
        s.write_file("src/a.txt", b"alpha\n")
        s.record({"kind": "tool_call", "tool": "bash", "meta": {"args": ["-c", "ls"]}})
        ours = list(store.events())
    r = subprocess.run([cli, "log", "--json"], cwd=ws, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    theirs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert theirs == ours
    r = subprocess.run([cli, "show", "head:src/a.txt"], cwd=ws, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"alpha\n"
    r = subprocess.run([cli, "checkpoints", "--json"], cwd=ws, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert c.id in r.stdout
    r = subprocess.run([cli, "verify"], cwd=ws, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_example_agent_loop_runs(tmp_path):
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"
    r = subprocess.run([sys.executable, str(example), str(tmp_path / "ws")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rolled back" in r.stdout
