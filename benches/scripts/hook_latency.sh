#!/usr/bin/env bash
# The latency of `cairn hooks claude-code` as Claude Code runs it: a
# workspace of FILES small source files (default 10,000), one session, then
# RUNS Edit calls (default 30), each a PreToolUse and a PostToolUse payload
# on stdin with the file changed between them, and one Bash PostToolUse
# (a full-scan checkpoint). Prints the median wall time of each, beside
# `cairn --version` (a process that opens nothing) in the same run.
#
#   cargo build --release && benches/scripts/hook_latency.sh [FILES] [RUNS]
set -euo pipefail
CAIRN=$(realpath "${CAIRN:-target/release/cairn}")
files=${1:-10000}
runs=${2:-30}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/src" && cd "$dir"
python3 - "$files" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    open(f"src/f{i}.rs", "w").write(f"fn f{i}() -> u32 {{ {i} }}\n")
PY
"$CAIRN" init . >/dev/null
payload() { # HOOK TOOL ID
  printf '{"session_id":"s","cwd":"%s","transcript_path":"/tmp/t.jsonl","hook_event_name":"%s","tool_name":"%s","tool_use_id":"%s","tool_input":{"file_path":"%s/src/f1.rs","old_string":"a","new_string":"b","command":"true"}}' \
    "$dir" "$1" "$2" "$3" "$dir"
}
ms() { # prints the wall milliseconds of running "$@" with stdin from $PAYLOAD
  python3 -c 'import subprocess,sys,time
t=time.perf_counter(); subprocess.run(sys.argv[2:], stdin=open(sys.argv[1]), check=True); print((time.perf_counter()-t)*1000)' "$PAYLOAD" "$@"
}
printf '{"session_id":"s","cwd":"%s","hook_event_name":"UserPromptSubmit","prompt":"go"}' "$dir" > p.json
PAYLOAD=p.json; first=$(ms "$CAIRN" hooks claude-code)
pre=(); post=(); ver=()
for i in $(seq "$runs"); do
  payload PreToolUse Edit "t$i" > pre.json; PAYLOAD=pre.json; pre+=("$(ms "$CAIRN" hooks claude-code)")
  echo "// edit $i" >> src/f1.rs
  payload PostToolUse Edit "t$i" > post.json; PAYLOAD=post.json; post+=("$(ms "$CAIRN" hooks claude-code)")
  PAYLOAD=/dev/null; ver+=("$(ms "$CAIRN" --version)")
done
payload PostToolUse Bash b1 > bash.json; PAYLOAD=bash.json; bash_ms=$(ms "$CAIRN" hooks claude-code)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%.1f ms", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "files: $files, runs: $runs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "first UserPromptSubmit (store's first full scan): $(printf '%.1f ms' "$first")"
echo "PreToolUse of an Edit, median: $(median "${pre[@]}")"
echo "PostToolUse of an Edit, median: $(median "${post[@]}")"
echo "cairn --version, median: $(median "${ver[@]}")"
echo "PostToolUse of Bash (full-scan checkpoint): $(printf '%.1f ms' "$bash_ms")"
