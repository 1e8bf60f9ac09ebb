#!/usr/bin/env bash
# A history of 100,000 records (10 sessions of prompts, replies, tool
# calls and file events, 200 checkpoints with a changed file each), then
# `cairn report` on it: the time to write the page and its size, the
# bounds being 5 s and 25 MB; then, where Chromium is installed, the time
# headless Chromium takes to open it (bound: 2 s).
# Usage: report_100k.sh [CAIRN] [DIR]
set -euo pipefail
CAIRN=${1:-target/release/cairn}
CAIRN=$(realpath "$CAIRN")
DIR=${2:-$(mktemp -d)}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR/ws/src" && cd "$DIR/ws"
for i in $(seq 1 50); do printf 'fn f%s() {}\n' "$i" > "src/f$i.rs"; done
"$CAIRN" init -q . 2>/dev/null || "$CAIRN" init .
python3 - "$CAIRN" <<'PY'
import subprocess, sys, json
cairn = sys.argv[1]
kinds = ["prompt", "reply", "tool_call", "file.write"]
lsn = 0
for c in range(200):
    lines = []
    for i in range(499):
        k = kinds[i % 4]
        e = {"kind": k, "session": f"s{(c + i) % 10}", "agent": "bench", "model": f"m{i % 3}"}
        if k in ("prompt", "reply"):
            e["text"] = f"turn {c}.{i}: please make the tests in src/f{i % 50}.rs pass without breaking anything else"
        elif k == "tool_call":
            e["tool"] = "bash"
        else:
            e["path"] = f"src/f{i % 50}.rs"
        lines.append(json.dumps(e))
    subprocess.run([cairn, "record"], input="\n".join(lines) + "\n", text=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(f"src/f{c % 50}.rs", "a") as f:
        f.write(f"// change {c}\n")
    subprocess.run([cairn, "checkpoint", "--session", f"s{c % 10}", "--label", f"turn {c}"], check=True, stdout=subprocess.DEVNULL)
PY
echo "records: $("$CAIRN" log --json | wc -l)"
/usr/bin/time -f "report: %e s, %M KiB peak" "$CAIRN" report -o "$DIR/report.html"
ls -l "$DIR/report.html" | awk '{printf "size: %.1f MB\n", $5/1e6}'
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
  python3 "$HERE/../../cli/tests/browser/check_report.py" --time "$CHROMIUM" "$DIR/report.html"
else
  echo "open: skipped (no chromium; apt-get install chromium)"
fi
