#!/usr/bin/env bash
# `cairn export` through the binary against the library's export of the
# same store (benches/examples/export_library.rs), as whole processes,
# alternating, on a store of EVENTS small events (default 1,000,000).
#
#   cargo build --release && cargo build --release -p cairn-benches --example export_library
#   benches/scripts/export_cli.sh [EVENTS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-1000000}
runs=${2:-5}
cairn=$PWD/target/release/cairn
lib=$PWD/target/release/examples/export_library
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$events" > "$dir/events.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"kind": "tool_call", "session": "s%d" % (i % 50), "tool": "bash",
                      "path": "src/f%d.rs" % (i % 100), "text": "ran cargo test number %d" % i}))
PY
(cd "$dir" && "$cairn" init >/dev/null && "$cairn" --durability never import --format jsonl events.jsonl >/dev/null)
bytes=$(cd "$dir" && "$cairn" export | wc -c)
cmp <(cd "$dir" && "$cairn" export) <("$lib" "$dir/.cairn" 2>/dev/null)
echo "export: $bytes bytes of canonical JSONL; the binary's and the library's output are identical"
for i in $(seq "$runs"); do
  a=$( { /usr/bin/time -f %e sh -c "cd '$dir' && '$cairn' export > /dev/null"; } 2>&1 )
  b=$( { /usr/bin/time -f %e "$lib" "$dir/.cairn" > /dev/null; } 2>&1 | tail -1 )
  python3 -c "import sys; a,b,n=float(sys.argv[1]),float(sys.argv[2]),int(sys.argv[3]); print(f'run: cairn export {a:.2f} s ({n/a/1e6:.0f} MB/s), library {b:.2f} s ({n/b/1e6:.0f} MB/s), binary / library time {a/b:.2f}x')" "$a" "$b" "$bytes"
done
