#!/usr/bin/env bash
# `cairn import --format codex` and `--format swe-agent` through the
# release binary, on a generated Codex rollout of TURNS turns (each a
# prompt, reasoning, a shell call with its output and exit code, and an
# apply_patch whose update diffs apply to the file before them) and a
# generated SWE-agent trajectory of as many steps with a submission of 50
# files. Prints the input's size and the best of RUNS imports into a
# fresh store, in MB of input per second.
#
#   cargo build --release
#   benches/scripts/agent_import.sh [TURNS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
turns=${1:-3000}
runs=${2:-3}
cairn=${CAIRN:-$PWD/target/release/cairn}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/base/src"
python3 - "$turns" "$dir" <<'PY'
import difflib, json, sys
turns, d = int(sys.argv[1]), sys.argv[2]
files = {f"src/m{i}.py": "".join(f"def f{j}():\n    return {j}\n" for j in range(40)) for i in range(50)}
for p, c in files.items():
    open(f"{d}/base/{p}", "w").write(c)
base = dict(files)
def udiff(a, b):
    lines = list(difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=1))
    return "".join(lines[2:])
out = open(f"{d}/rollout-bench.jsonl", "w")
def w(typ, payload, t):
    out.write(json.dumps({"timestamp": f"2026-11-28T10:{t // 60 % 60:02d}:{t % 60:02d}.000Z", "type": typ, "payload": payload}) + "\n")
w("session_meta", {"id": "bench", "cwd": "/w", "cli_version": "0.60.0", "originator": "codex_cli_rs", "source": "cli"}, 0)
w("turn_context", {"cwd": "/w", "model": "gpt-5-codex", "approval_policy": "on-request"}, 0)
for t in range(turns):
    p = f"src/m{t % 50}.py"
    old = files[p]
    new = old.replace(f"return {t % 40}\n", f"return {t % 40} + {t}\n", 1)
    files[p] = new
    w("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"change f{t % 40} in {p} (turn {t})"}]}, t)
    w("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look, then patch. " * 8}], "encrypted_content": "x" * 400}, t)
    w("response_item", {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", f"sed -n 1,80p {p}"]}), "call_id": f"s{t}"}, t)
    w("event_msg", {"type": "exec_command_end", "call_id": f"s{t}", "command": ["bash", "-lc", f"sed -n 1,80p {p}"], "exit_code": 0, "stdout": old, "stderr": "", "aggregated_output": old, "formatted_output": old}, t)
    w("response_item", {"type": "function_call_output", "call_id": f"s{t}", "output": json.dumps({"output": old, "metadata": {"exit_code": 0}})}, t)
    w("response_item", {"type": "custom_tool_call", "call_id": f"p{t}", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: " + p + "\n" + udiff(old, new) + "*** End Patch\n"}, t)
    w("event_msg", {"type": "patch_apply_end", "call_id": f"p{t}", "stdout": "Success.\n", "stderr": "", "success": True, "changes": {"/w/" + p: {"type": "update", "unified_diff": udiff(old, new), "move_path": None}}}, t)
    w("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"Changed f{t % 40}."}]}, t)
    w("event_msg", {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 1000 + t, "output_tokens": 50}}}, t)
out.close()
steps = []
for t in range(turns):
    p = f"src/m{t % 50}.py"
    steps.append({"thought": f"Look at {p}.", "action": f"open {p}", "observation": base[p], "response": "...", "execution_time": 0.2, "state": {}, "query": [], "extra_info": {}})
sub = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n" + udiff(base[p], files[p]) for p in sorted(files))
json.dump({"environment": "main", "trajectory": steps, "history": [{"role": "user", "content": "bench"}],
           "info": {"exit_status": "submitted", "submission": sub}, "replay_config": None}, open(f"{d}/bench.traj", "w"))
PY
best() {
  local fmt=$1 input=$2 best=
  for i in $(seq "$runs"); do
    rm -rf "$dir/ws" && mkdir "$dir/ws"
    (cd "$dir/ws" && "$cairn" init >/dev/null)
    s=$( { /usr/bin/time -f %e sh -c "cd '$dir/ws' && '$cairn' import --format $fmt --base '$dir/base' '$input' --json > '$dir/out.json'"; } 2>&1 )
    best=$(python3 -c "import sys; print(min(float(x) for x in sys.argv[1:] if x))" "$s" ${best:+"$best"})
  done
  local bytes
  bytes=$(wc -c < "$input")
  python3 -c "import sys; b,s=int(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]}: {b/1e6:.2f} MB in {s:.2f} s: {b/s/1e6:.1f} MB/s')" "$fmt" "$bytes" "$best"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  records', r['count'], 'not applied', len(r['diffs_not_applied']))" "$dir/out.json"
}
best codex "$dir/rollout-bench.jsonl"
best swe-agent "$dir/bench.traj"
