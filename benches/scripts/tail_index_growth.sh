#!/usr/bin/env bash
# What the archive grows by while a tail fills, round by round
# (docs/BENCHMARKS.md, "A query index of the tail in place"): a store
# made afresh (`cairn init`, the benchmark's file contents put as blobs),
# then ROUNDS imports of PER events each from EVENTS (the events.jsonl
# of `KEEP=DIR benches/scripts/cold_query.sh`), after each import
# `replicate --once` to one file:// archive. Prints, per round, the
# archive's bytes and the query index bytes it holds (objects of the
# tail's index and the sealed segments' index files, named by the
# newest manifest or an earlier one: every object is kept).
#
# usage: benches/scripts/tail_index_growth.sh BIN DIR [ROUNDS] [PER]
#   BIN     the cairn binary (target/release/cairn)
#   DIR     cold_query.sh's KEEP directory (events.jsonl, contents/),
#           only read, e.g. /tmp/cq1m
#   ROUNDS  imports, default 20
#   PER     events an import, default 25000
# KEEP=DIR works in DIR (made empty first) and keeps the store (DIR/ws)
# and the archive (DIR/archive) for queries in place afterwards.
set -euo pipefail
C=$(realpath "$1")
D=$2
ROUNDS=${3:-20}
PER=${4:-25000}
if [ -n "${KEEP:-}" ]; then
  T=$KEEP; rm -rf "$T"; mkdir -p "$T"
else
  T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-tailgrowth.XXXXXX")
  trap 'rm -rf "$T"' EXIT
fi
mkdir -p "$T/ws"
(cd "$T/ws" && "$C" init -q . >/dev/null)
"$C" --store "$T/ws/.cairn" blob put "$D"/contents/*.rs >/dev/null
echo "| round | events | archive bytes | index objects bytes (all manifests) |"
echo "|---|---|---|---|"
for i in $(seq 1 "$ROUNDS"); do
  sed -n "$(( (i - 1) * PER + 1 )),$(( i * PER ))p" "$D/events.jsonl" >"$T/part.jsonl"
  (cd "$T/ws" && "$C" --durability never import --format jsonl "$T/part.jsonl" >/dev/null 2>&1)
  "$C" --store "$T/ws/.cairn" replicate "file://$T/archive" --once -q >/dev/null 2>&1
  # Every index object any manifest names (`.qix` entries, and a
  # version 4 manifest's tail_index), counted once.
  idx=$(python3 - "$T/archive" <<'PY'
import json, os, struct, sys
root = sys.argv[1]
seen = {}
for dirpath, _, names in os.walk(os.path.join(root, "manifests")):
    for n in names:
        b = open(os.path.join(dirpath, n), "rb").read()
        m = json.loads(b[16:])
        entries = [f for f in m["files"] if f["path"].endswith(".qix")]
        if m.get("tail_index"):
            entries.append(m["tail_index"])
        for f in entries:
            for p in f["pieces"]:
                seen[p["hash"]] = p["len"]
print(sum(seen.values()))
PY
)
  echo "| $i | $(( i * PER )) | $(du -sb "$T/archive" | cut -f1) | $idx |"
done
