#!/bin/bash
# `cairn diff` of a directory moved by a shell command (`mv a b`), which
# only the next checkpoint sees: every file of it is one rename to pair.
#
# usage: benches/scripts/diff_rename.sh [CAIRN_BINARY] [FILES]
#   CAIRN_BINARY  default target/release/cairn (build it first:
#                 cargo build --release)
#   FILES         default 20000
#
# A fresh directory under $TMPDIR (default /tmp): FILES files of ~12 bytes
# in 100 directories under a/, checkpoint c1, `mv a b`, checkpoint c2; then
# the timed steps: `cairn diff c1 c2` (one Renamed line per file) and the
# same with --json.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
N=${2:-20000}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-diff-rename.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T"
python3 - "$N" <<'PY'
import os, sys
for i in range(int(sys.argv[1])):
    d = 'a/d%d' % (i % 100)
    os.makedirs(d, exist_ok=True)
    with open('%s/f%d.txt' % (d, i), 'w') as f:
        f.write('file %d\n' % i)
PY
"$C" init -q
"$C" checkpoint -q
mv a b
"$C" checkpoint -q
echo "diff of $N renamed files:"
time ("$C" diff c1 c2 | grep -c '^Renamed')
echo "diff --json of $N renamed files:"
time ("$C" diff c1 c2 --json | wc -l)
