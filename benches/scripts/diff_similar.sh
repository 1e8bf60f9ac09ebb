#!/bin/bash
# `cairn diff` of files moved and edited in one step (`git mv` then an
# edit), which only the next checkpoint sees: each pair is found by
# likeness, comparing every gone file with every new one (at most
# renames::MAX_SIMILARITY_PAIRS pairs; past that only exact renames).
#
# usage: benches/scripts/diff_similar.sh [CAIRN_BINARY] [FILES]
#   CAIRN_BINARY  default target/release/cairn (build it first:
#                 cargo build --release)
#   FILES         default 500 (500 x 500 = 250,000 pairs, the most that
#                 are compared)
#
# A fresh directory under $TMPDIR (default /tmp): FILES files of 60 lines
# (~1.2 KB, all of one size, so no pair is ruled out by size) under old/,
# checkpoint c1; each moved to new/ with one line changed; checkpoint c2;
# then the timed steps: `cairn diff c1 c2` (one `Renamed ... (N% similar)`
# per file) and `blame` of one moved file.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
N=${2:-500}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-diff-similar.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T"
python3 - "$N" <<'PY'
import os, sys
os.makedirs('old')
for i in range(int(sys.argv[1])):
    with open('old/f%05d.rs' % i, 'w') as f:
        f.write(''.join('fn f%05d_%02d() -> u32 { %d }\n' % (i, j, j) for j in range(60)))
PY
"$C" init -q
"$C" checkpoint -q
python3 - "$N" <<'PY'
import os, sys
os.makedirs('new')
for i in range(int(sys.argv[1])):
    s = open('old/f%05d.rs' % i).read().replace('{ 3 }', '{ 33 }')
    open('new/g%05d.rs' % i, 'w').write(s)
    os.remove('old/f%05d.rs' % i)
PY
"$C" checkpoint -q
echo "diff of $N files moved and edited:"
time ("$C" diff c1 c2 | grep -c '^Renamed')
echo "blame of one of them:"
time ("$C" blame c2 new/g00007.rs | grep -c '^@1 ')
