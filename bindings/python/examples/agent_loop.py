"""An agent loop on cairn: every turn is checkpointed, every prompt, tool
call, file write and reply is recorded, and a turn that went wrong is
rolled back (workspace and the agent's memory together).

    python examples/agent_loop.py /tmp/demo-workspace
"""

import json
import sys
import tempfile

import cairn


def fake_model(turn):
    """Stands in for an LLM: what to write on each turn."""
    if turn == 2:
        return "src/app.py", b"def answer():\n    return 0  # wrong\n"
    return "src/app.py", f"def answer():\n    return {41 + turn}\n".encode()


def main(workspace):
    memory = []  # the agent's own state, kept with each checkpoint
    with cairn.Store.open(workspace, create=True) as store:
        s = store.session("thread-1", agent="demo", model="fake-model")
        for turn in (1, 2):
            before = s.checkpoint(f"Before turn {turn}", state=json.dumps(memory).encode())
            s.prompt(f"turn {turn}: make answer() right")
            path, body = fake_model(turn)
            s.write_file(path, body)
            s.record({"kind": "tool_call", "tool": "pytest", "ok": turn != 2, "latency_ms": 150})
            memory.append(f"turn {turn} wrote {path}")
            s.reply(f"turn {turn} done")
            if turn == 2:  # the tests failed: undo the turn
                back = s.rollback(before)
                memory = json.loads(back.state)
                print(f"rolled back to {back.target}: {back.written or back.deleted}, memory {memory}")
        print(store.show("head", "src/app.py").decode(), end="")
        for e in store.events(session="thread-1", kind="prompt"):
            print(e["lsn"], e["text"])
        print("verify:", "ok" if store.verify()["ok"] else "DAMAGED")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        import os

        os.makedirs(sys.argv[1], exist_ok=True)
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
