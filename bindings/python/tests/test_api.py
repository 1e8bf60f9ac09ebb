"""Every call of the Python binding, against a real store on disk."""

import io
import json

import pytest

import cairn


def test_open_without_create_refuses_a_workspace_without_a_store(ws):
    with pytest.raises(cairn.NotFoundError, match=r"\.cairn"):
        cairn.Store.open(ws)


def test_init_then_open_and_context_manager_closes(ws):
    root = cairn.Store.init(ws)
    assert root.endswith(".cairn")
    with cairn.Store.open(ws) as store:
        assert store.head == 0
        assert not store.closed
        assert store.workspace == str(ws)
    assert store.closed
    store.close()  # twice is no error
    with pytest.raises(cairn.Error, match="closed"):
        store.session("t").prompt("after close")


def test_bad_durability_is_an_error_naming_it(ws):
    with pytest.raises(cairn.Error, match="sometimes"):
        cairn.Store.open(ws, create=True, durability="sometimes")


def test_session_records_every_kind_of_call(store):
    s = store.session("t1", run="r1", agent="coder", model="m1")
    assert s.id == "t1"
    assert s.prompt("make the tests pass") == 1
    assert s.tool_call("bash") == 2
    assert s.tool_call("bash", ok=False) == 3
    assert s.record({"kind": "tool_call", "tool": "grep", "latency_ms": 12, "meta": {"cmd": "ls"}}) == 4
    assert s.reply("done") == 5
    assert s.record_batch([{"kind": "prompt", "text": f"b{i}"} for i in range(3)]) == (6, 8)
    assert s.record_batch([]) is None
    events = list(store.events(session="t1"))
    assert [e["lsn"] for e in events] == list(range(1, 9))
    first = events[0]
    assert first["kind"] == "prompt" and first["text"] == "make the tests pass"
    assert (first["run"], first["agent"], first["model"]) == ("r1", "coder", "m1")
    assert "hash" in first and "ts" in first
    assert events[2]["ok"] is False
    assert events[3]["meta"] == {"cmd": "ls"} and events[3]["latency_ms"] == 12
    assert store.session("").id == "default"


def test_file_tools_checkpoint_and_rollback(store, ws):
    s = store.session("t1")
    c1 = s.checkpoint("start", state=b"epoch 1")
    assert c1.id == f"c{c1.lsn}" and c1.label == "start" and c1.state
    assert c1.counts["files"] == 0
    s.write_file("src/a.txt", b"one\n")
    s.write_file("src/a.txt", b"one\ntwo\n")
    s.move_file("src/a.txt", "src/b.txt")
    s.write_file("gone.txt", b"x")
    s.delete_file("gone.txt")
    s.track("later.txt")
    assert (ws / "src" / "b.txt").read_bytes() == b"one\ntwo\n"
    c2 = s.checkpoint("edited")
    assert c2.counts["files"] == 1
    assert [c.id for c in store.checkpoints(session="t1")] == [c1.id, c2.id]

    dry = s.rollback(c1, dry_run=True)
    assert dry.dry_run and dry.source is None and dry.deleted == ["src/b.txt"]
    assert (ws / "src" / "b.txt").exists()

    back = s.rollback(c1.id, state=b"epoch 2")
    assert back.target == c1.id and back.deleted == ["src/b.txt"]
    assert back.state == b"epoch 1"
    assert not (ws / "src" / "b.txt").exists()
    undo = s.rollback(back.source)
    assert undo.state == b"epoch 2"
    assert (ws / "src" / "b.txt").read_bytes() == b"one\ntwo\n"

    s.write_file("keep.txt", b"keep")
    s.write_file("src/b.txt", b"changed")
    c3 = s.checkpoint("both")
    (ws / "keep.txt").write_bytes(b"keep 2")
    (ws / "src" / "b.txt").write_bytes(b"changed 2")
    part = s.rollback(c3, paths=["src/"])
    assert part.written == ["src/b.txt"]
    assert (ws / "keep.txt").read_bytes() == b"keep 2"


def test_time_travel_queries(store):
    s = store.session("t1", model="m1")
    c1 = s.checkpoint("start")
    first = s.write_file("notes.md", b"first\n")
    s.write_file("notes.md", b"first\nsecond\n")
    assert store.show(first, "notes.md") == b"first\n"
    assert store.show(f"@{first}", "notes.md") == b"first\n"
    assert store.show("head", "notes.md") == b"first\nsecond\n"
    tree = store.tree()
    assert list(tree) == ["notes.md"] and tree["notes.md"]["kind"] == "file"
    assert store.tree(c1) == {}
    d = store.diff(c1, "head")
    assert [(x["path"], x["status"]) for x in d] == [("notes.md", "added")]
    assert "+second" in store.diff(first)[0]["unified"]
    assert [x["path"] for x in store.diff(c1, paths=["notes.md"])] == ["notes.md"]
    with pytest.raises(cairn.Error, match="names no file"):
        store.diff(c1, paths=["other/"])
    hist = store.history("notes.md")
    assert [h["kind"] for h in hist] == ["file.create", "file.write"]
    blame = store.blame("head", "notes.md")
    assert [(b["text"], b["lsn"]) for b in blame] == [("first", first), ("second", first + 1)]
    assert blame[0]["model"] == "m1"
    c2 = s.checkpoint("end")
    nodes = store.branches()
    assert [n["lsn"] for n in nodes] == [c1.lsn, c2.lsn]
    assert [n["lsn"] for n in store.branches(c1.id)] == [c2.lsn]  # what continues from c1
    with pytest.raises(cairn.NotFoundError):
        store.show("head", "no-such-file")
    with pytest.raises(cairn.Error, match="nonsense"):
        store.show("nonsense", "notes.md")


def test_events_filters_and_laziness(store):
    a, b = store.session("a"), store.session("b")
    for i in range(300):
        (a if i % 2 == 0 else b).prompt(f"p{i}")
    b.write_file("x/y.txt", b"y")
    it = store.events(session="a")
    assert iter(it) is it
    first = next(it)
    assert first["text"] == "p0"
    assert len(list(it)) == 149  # the rest, across pages
    assert len(list(store.events(kind="file.create"))) == 1
    assert [e["path"] for e in store.events(path="x")] == ["x/y.txt"]
    assert [e["lsn"] for e in store.events(limit=3)] == [1, 2, 3]
    assert len(list(store.events(since="2000-01-01", until="2999-12-31"))) == 301
    assert list(store.events(until="2000-01-01")) == []
    with pytest.raises(cairn.Error, match="unknown event kind"):
        store.events(kind="prompts")


def test_follow_waits_for_new_records(store):
    import threading

    s = store.session("t1")
    s.prompt("old")
    seen = []
    f = store.follow(idle_timeout=5)

    def writer():
        for i in range(3):
            s.prompt(f"new {i}")

    t = threading.Thread(target=writer)
    t.start()
    for e in f:
        seen.append(e["text"])
        if len(seen) == 3:
            break
    t.join()
    assert seen == ["new 0", "new 1", "new 2"]
    assert [e["text"] for e in store.follow(from_lsn=1, idle_timeout=0)] == ["old", "new 0", "new 1", "new 2"]


def test_export_import_verify_stats_gc(store, tmp_path):
    s = store.session("t1")
    for i in range(5):
        s.prompt(f"p{i}")
        s.checkpoint(f"c{i}")
    out = tmp_path / "out.jsonl"
    st = store.export(out)
    assert st["records"] == 10
    lines = out.read_text().splitlines()
    assert [json.loads(line)["lsn"] for line in lines] == list(range(1, 11))
    buf = io.BytesIO()
    assert store.export(buf, session="t1", kind="prompt")["records"] == 5
    text = io.StringIO()
    store.export(text)
    assert text.getvalue() == out.read_text()
    with pytest.raises(cairn.Error, match="unknown format"):
        store.export(out, format="csv")

    other = tmp_path / "other"
    other.mkdir()
    with cairn.Store.open(other, create=True) as o:
        prompts = tmp_path / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"kind": "prompt", "session": "imp", "text": f"i{i}"}) + "\n" for i in range(4)))
        assert o.import_(prompts, "jsonl") == {"first": 1, "last": 4}
        with pytest.raises(cairn.Error, match="imported"):
            o.import_(prompts, "jsonl")
        assert [e["text"] for e in o.events(session="imp")] == ["i0", "i1", "i2", "i3"]
        with pytest.raises(cairn.NotFoundError):
            o.import_(tmp_path / "missing.jsonl", "jsonl")

    v = store.verify()
    assert v["ok"] and v["records"] == 10 and v["problems"] == []
    stats = store.stats()
    assert stats["head"]["lsn"] == 10 and stats["log"]["records"] == 10
    g = store.gc(keep_per_session=2)
    assert len(g["discarded"]) == 3 and g["retained"] == 2
    assert store.head == 13  # three checkpoint.discard records


def test_outside_the_workspace_is_its_own_error(store):
    s = store.session("t1")
    with pytest.raises(cairn.OutsideWorkspaceError):
        s.write_file("../escape.txt", b"x")
    with pytest.raises(cairn.OutsideWorkspaceError):
        s.write_file(".cairn/evil", b"x")
    assert store.head == 0


def test_unknown_checkpoint_is_not_found(store):
    with pytest.raises(cairn.NotFoundError):
        store.session("t1").rollback("c99")
    with pytest.raises(cairn.Error, match="checkpoint id"):
        store.session("t1").rollback("99")


def test_stubs_name_every_public_call():
    import pathlib

    stub = (pathlib.Path(cairn.__file__).parent / "_cairn.pyi").read_text()
    for cls in (cairn.Store, cairn.Session):
        for name in dir(cls):
            if not name.startswith("_") or name == "import_":
                assert f"def {name}(" in stub, f"{cls.__name__}.{name} is missing from _cairn.pyi"
    assert (pathlib.Path(cairn.__file__).parent / "py.typed").exists()


def test_plain_and_json_event_paths_record_the_same(store):
    s = store.session("t1", agent="a1", run="r1")
    fields = {"kind": "tool_call", "tool": "bash", "ok": False, "latency_ms": 5, "text": "t", "model": "m"}
    s.record(dict(fields))  # plain fields: built directly
    s.record(dict(fields, meta={"x": 1}))  # read as JSON
    s.record_batch([dict(fields), dict(fields, meta={"x": 1})])
    events = list(store.events())
    for e in events:
        for k in ("lsn", "ts", "hash"):
            e.pop(k)
    assert events[1].pop("meta") == {"x": 1} and events[3].pop("meta") == {"x": 1}
    assert events[0] == events[1] == events[2] == events[3]
    assert events[0]["agent"] == "a1" and events[0]["ok"] is False
    with pytest.raises(cairn.InvalidEventError, match="session"):
        s.record({"kind": "prompt", "session": ""})
    with pytest.raises(cairn.InvalidEventError):
        s.record({"kind": "prompt", "ok": "yes"})


def test_record_batch_reads_keys_and_kinds_not_written_as_literals(store):
    # The batch path finds a literal's (interned) keys and kind strings by
    # identity; keys built at run time (json.loads, joins) are the same
    # fields, found by their text.
    s = store.session("t1", agent="a1")
    key = "".join(["ki", "nd"])
    built = {key: "".join(["to", "ol_call"]), "".join(["to", "ol"]): "bash", "ok": False}
    parsed = json.loads('{"kind": "reply", "text": "caf\\u00e9 \\u2603", "model": "m2"}')
    literal = {"kind": "prompt", "text": "plain"}
    assert s.record_batch([built, parsed, literal, built, parsed]) == (1, 5)
    events = list(store.events())
    assert [e["kind"] for e in events] == ["tool_call", "reply", "prompt", "tool_call", "reply"]
    assert events[0]["tool"] == "bash" and events[0]["ok"] is False and events[0]["agent"] == "a1"
    assert events[1]["text"] == "caf\u00e9 \u2603" and events[1]["model"] == "m2"
    assert events[2]["text"] == "plain" and events[2]["ok"] is True


def test_record_batch_takes_tuples_and_generators(store):
    s = store.session("t1")
    assert s.record_batch(tuple({"kind": "prompt", "text": f"t{i}"} for i in range(3))) == (1, 3)
    assert s.record_batch({"kind": "reply", "text": f"g{i}"} for i in range(2)) == (4, 5)
    assert s.record_batch(iter([])) is None
    assert [e["text"] for e in store.events()] == ["t0", "t1", "t2", "g0", "g1"]


def test_record_batch_names_the_event_whose_text_is_not_utf8(store):
    s = store.session("t1")
    with pytest.raises(cairn.InvalidEventError, match="event 2 of the batch: field `text`: .*surrogate"):
        s.record_batch([{"kind": "prompt", "text": "ok"}, {"kind": "prompt", "text": "lone \ud800"}])
    with pytest.raises(cairn.InvalidEventError, match="field `agent`"):
        s.record({"kind": "prompt", "agent": "\udfff"})
    with pytest.raises(cairn.InvalidEventError, match="event 1 of the batch"):
        s.record_batch([{"kind": "prompt", "tool": 3}])
    assert store.head == 0


def test_the_readme_example_runs(tmp_path, capsys):
    import pathlib
    import re

    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    ws = tmp_path / "ws"
    ws.mkdir()
    exec(code.replace("/path/to/workspace", str(ws)), {})
    assert "make the tests pass" in capsys.readouterr().out
