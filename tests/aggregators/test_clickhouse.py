"""cairn's JSONL export loaded into ClickHouse answers as cairn does.

The tables are the ones docs/AGGREGATORS.md documents: the test reads
their `CREATE TABLE` statements and the `INSERT ... FORMAT JSONEachRow`
settings from that file, so the guide cannot drift from what works.
ClickHouse runs in-process through chDB (PyPI `chdb`). The store is
written through the `cairn` command line ($CAIRN_BIN, else
target/debug/cairn, else target/release/cairn), with records in four
sessions and every kind a coding agent produces, real checkpoints and a
rollback among them.
"""

import collections
import json
import os
import pathlib
import random
import re
import shutil
import subprocess

import pytest

try:
    import chdb.session as chdb_session
except ImportError:
    # scripts/test installs chDB; CI sets CAIRN_REQUIRE_CHDB=1 so that a
    # missing chDB fails instead of skipping.
    if os.environ.get("CAIRN_REQUIRE_CHDB") == "1":
        raise
    pytest.skip("chDB is not installed (pip install chdb)", allow_module_level=True)

REPO = pathlib.Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "AGGREGATORS.md"

# How many records `cairn record` writes: enough that every session has
# every kind several times, small enough for a debug binary in CI.
RECORDS = 2_000
SESSIONS = ["s1", "s2", "s3", "s4"]
# Kinds written through `cairn record`; checkpoints and a rollback are
# made by the command line itself.
KINDS = ["prompt", "reply", "tool_call", "file.create", "file.write", "file.edit", "file.delete"]
# 2026-03-01T00:00:00Z in epoch milliseconds: the first record's time.
BASE_MS = 1_772_323_200_000


def cairn_binary():
    for c in (
        os.environ.get("CAIRN_BIN"),
        str(REPO / "target" / "debug" / "cairn"),
        str(REPO / "target" / "release" / "cairn"),
        shutil.which("cairn"),
    ):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    pytest.fail("no cairn binary: build it (cargo build) or set CAIRN_BIN")


def iso(ms):
    """Epoch milliseconds as cairn's ISO-8601 UTC timestamp."""
    import datetime

    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def record_lines(rng):
    """RECORDS canonical events, one per 997 ms, in random sessions and kinds."""
    for i in range(RECORDS):
        kind = rng.choice(KINDS)
        e = {
            "ts": iso(BASE_MS + i * 997),
            "session": rng.choice(SESSIONS),
            "kind": kind,
            "agent": rng.choice(["claude-code", "codex"]),
            "model": rng.choice(["model-a", "model-b"]),
            "ok": rng.random() > 0.1,
        }
        if kind in ("prompt", "reply"):
            e["text"] = f"{kind} {i}: \"quoted\", ünïcode, tab\there"
        elif kind == "tool_call":
            e["tool"] = "bash"
            e["latency_ms"] = rng.randrange(1, 5_000)
        else:
            e["tool"] = "write_file"
            e["path"] = f"src/f{rng.randrange(20)}.rs"
        yield json.dumps(e)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A workspace with its store, and the `cairn` that wrote it."""
    ws = tmp_path_factory.mktemp("ws")
    c = cairn_binary()
    run = lambda *a, **kw: subprocess.run(  # noqa: E731
        [c, *a], cwd=ws, check=True, capture_output=True, text=True, **kw
    )
    run("init", "-q", ".", "--durability", "never")
    rng = random.Random(7)
    run("record", "-q", input="\n".join(record_lines(rng)) + "\n")
    (ws / "a.txt").write_text("one\n")
    first = json.loads(run("checkpoint", "--session", "s1", "--label", "one", "--json").stdout)
    (ws / "a.txt").write_text("two\n")
    run("checkpoint", "--session", "s2", "--label", "two", "-q")
    run("rollback", first["id"], "--session", "s1", "-q")
    return ws, c


def cairn(store, *args):
    ws, c = store
    return subprocess.run([c, *args], cwd=ws, check=True, capture_output=True, text=True).stdout


def cairn_log(store, *args):
    """cairn's own answer: `cairn log --json` with these filters."""
    return [json.loads(line) for line in cairn(store, "log", "--json", *args).splitlines()]


def guide_sql():
    """The guide's SQL blocks: each CREATE TABLE by table name, and the
    load statement (with `{table}` and `{file}` to fill in)."""
    text = GUIDE.read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    creates = {}
    load = None
    for b in blocks:
        m = re.match(r"CREATE TABLE (\w+)", b.strip())
        if m:
            creates[m.group(1)] = b.strip()
        elif b.strip().startswith("INSERT INTO {table}"):
            load = b.strip()
    assert {"cairn_events", "cortexide_audit", "comma_audit"} <= creates.keys(), creates.keys()
    assert load is not None, "docs/AGGREGATORS.md has no INSERT INTO {table} block"
    return creates, load


@pytest.fixture(scope="module")
def clickhouse(store, tmp_path_factory):
    """A chDB session holding the three exports, loaded as the guide says."""
    creates, load = guide_sql()
    d = tmp_path_factory.mktemp("ch")
    sess = chdb_session.Session(str(d / "db"))
    for table, fmt in (("cairn_events", "jsonl"), ("cortexide_audit", "cortexide"), ("comma_audit", "comma")):
        f = d / f"{fmt}.jsonl"
        cairn(store, "export", "--format", fmt, "--output", str(f))
        sess.query(creates[table])
        sess.query(load.replace("{table}", table).replace("{file}", str(f)))
    yield sess
    sess.close()


def rows(sess, sql):
    out = sess.query(sql, "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def counts_by_session_kind(records):
    return collections.Counter((r["session"], r["kind"]) for r in records)


def test_every_record_is_loaded(store, clickhouse):
    everything = cairn_log(store)
    # Two checkpoints, the one a rollback takes before it, and the rollback.
    assert len(everything) == RECORDS + 4
    got = rows(clickhouse, "SELECT count() AS n, min(lsn) AS lo, max(lsn) AS hi FROM cairn_events")
    assert got == [{"n": len(everything), "lo": 1, "hi": len(everything)}]


def test_counts_per_session_and_kind_equal_cairns(store, clickhouse):
    got = {
        (r["session"], r["kind"]): r["n"]
        for r in rows(clickhouse, "SELECT session, kind, count() AS n FROM cairn_events GROUP BY session, kind")
    }
    want = {}
    for s in SESSIONS:
        for k in KINDS + ["checkpoint.create", "rollback"]:
            n = len(cairn_log(store, "--session", s, "--kind", k))
            if n:
                want[(s, k)] = n
    assert got == want
    assert got[("s1", "rollback")] == 1
    assert got[("s2", "checkpoint.create")] == 1
    assert got[("s1", "checkpoint.create")] == 2


def test_a_time_range_equals_cairns(store, clickhouse):
    since, until = BASE_MS + 400 * 997, BASE_MS + 900 * 997 + 3
    want = [r["lsn"] for r in cairn_log(store, "--since", iso(since), "--until", iso(until))]
    assert len(want) == 501
    got = rows(
        clickhouse,
        f"SELECT lsn FROM cairn_events WHERE ts BETWEEN '{iso(since)[:-1]}' AND '{iso(until)[:-1]}' ORDER BY lsn",
    )
    assert [r["lsn"] for r in got] == want
    # The same range in the tool-call latencies, as a dashboard asks it.
    calls = [r for r in cairn_log(store, "--since", iso(since), "--until", iso(until), "--kind", "tool_call")]
    got = rows(
        clickhouse,
        "SELECT count() AS n, sum(latency_ms) AS total FROM cairn_events "
        f"WHERE kind = 'tool_call' AND ts BETWEEN '{iso(since)[:-1]}' AND '{iso(until)[:-1]}'",
    )
    assert got == [{"n": len(calls), "total": sum(r["latency_ms"] for r in calls)}]


def test_text_round_trips_exactly(store, clickhouse):
    want = {r["lsn"]: r["text"] for r in cairn_log(store, "--kind", "prompt")}
    got = {r["lsn"]: r["text"] for r in rows(clickhouse, "SELECT lsn, text FROM cairn_events WHERE kind = 'prompt'")}
    assert got == want


def test_cortexide_shape_counts_equal_cairns(store, clickhouse):
    # Every kind but tool_call has a cortexide projection; the session and
    # cairn's kind ride in meta.cairn, the action names the rest.
    got = {
        (r["session"], r["action"]): r["n"]
        for r in rows(
            clickhouse,
            "SELECT JSONExtractString(meta, 'cairn', 'session') AS session, action, count() AS n "
            "FROM cortexide_audit GROUP BY session, action",
        )
    }
    action = {
        "prompt": "prompt",
        "reply": "reply",
        "file.create": "apply",
        "file.write": "apply",
        "file.edit": "apply",
        "file.delete": "apply",
        "checkpoint.create": "snapshot:create",
        "rollback": "rollback",
    }
    want = collections.Counter()
    for r in cairn_log(store):
        if r["kind"] in action:
            want[(r["session"], action[r["kind"]])] += 1
    assert got == dict(want)
    # Its epoch-millisecond `ts` is the same instant as the canonical one.
    got = rows(
        clickhouse,
        f"SELECT count() AS n FROM cortexide_audit WHERE ts BETWEEN {BASE_MS} AND {BASE_MS + 99 * 997}",
    )
    first = cairn_log(store, "--since", str(BASE_MS), "--until", str(BASE_MS + 99 * 997))
    assert got == [{"n": sum(1 for r in first if r["kind"] in action)}]


def test_comma_shape_counts_equal_cairns(store, clickhouse):
    got = {
        (r["sessionId"], r["operation"]): r["n"]
        for r in rows(clickhouse, "SELECT sessionId, operation, count() AS n FROM comma_audit GROUP BY sessionId, operation")
    }
    want = {}
    for s in SESSIONS:
        for op in ("create", "write", "edit", "delete"):
            n = len(cairn_log(store, "--session", s, "--kind", f"file.{op}"))
            if n:
                want[(s, op)] = n
    assert got == want
