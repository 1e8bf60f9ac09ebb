#!/bin/bash
# Many empty files, through the command line, side by side with a bare
# lstat walk of the same tree (issue 30, "Big files and many files";
# docs/BENCHMARKS.md "Checkpoints at scale, through the command line"):
#
#   walk     find DIR -printf %s (one lstat per entry)
#   first    the first checkpoint (cairn init && cairn checkpoint -q)
#   full-1   one file changed, then a checkpoint (a full scan: no watcher)
#
# usage: benches/scripts/many_files.sh [CAIRN_BINARY] [FILES] [RUNS] [PAIR]
#   CAIRN_BINARY  default target/release/cairn (cargo build --release -p cairn-cli)
#   FILES         default 1000000 (1,000 per directory)
#   RUNS          paired runs of full-1 against the walk, default 5
#   PAIR          a command that times two whole processes alternating
#                 and prints the per-pair ratios, called as
#                 `PAIR -n RUNS --vs 'WALK' -- CHECKPOINT` (the paired
#                 timer); without it, /usr/bin/time in an A B A B loop.
#
# The first checkpoint is measured once, between two walks (the tree was
# just made, so its inodes are cached for both), with its peak RSS from
# /usr/bin/time -v; so is one full-1 for its peak RSS. The tree is made
# under $TMPDIR (default /tmp) and removed at the end.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
HERE=$(dirname "$(realpath "$0")")
N=${2:-1000000}
RUNS=${3:-5}
PAIR=${4:-}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-many.XXXXXX")
trap 'rm -rf "$T"' EXIT

python3 - "$T/w" "$N" <<'PY'
import os, sys
dest, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    if i % 1000 == 0:
        d = os.path.join(dest, 'd%04d' % (i // 1000))
        os.makedirs(d)
    os.close(os.open(os.path.join(d, 'f%07d' % i), os.O_CREAT | os.O_WRONLY, 0o644))
PY
sync
WALK="find $T/w -printf %s"

# timed LABEL CMD...: one run under /usr/bin/time -v, one table row.
timed() {
    local label=$1
    shift
    /usr/bin/time -v -o "$T/time.txt" "$@" >/dev/null 2>&1
    awk -v name="$label" -f "$HERE/time_row.awk" "$T/time.txt"
}

echo "files: $N"
echo "| step | wall | user CPU | system CPU | peak RSS |"
echo "|---|---|---|---|---|"
$WALK >/dev/null
timed "walk (before)" $WALK
(cd "$T/w" && "$C" init -q .)
timed "first checkpoint" "$C" --store "$T/w/.cairn" checkpoint -q
timed "walk (after)" $WALK
echo x >>"$T/w/d0000/f0000000"
timed "one-file change, full scan" "$C" --store "$T/w/.cairn" checkpoint -q
echo "stat cache: $(du -sb "$T/w/.cairn/snapshot" | cut -f1) bytes; store: $(du -sb "$T/w/.cairn" | cut -f1) bytes"

EDIT_AND_CHECKPOINT="sh -c 'echo x >>$T/w/d0000/f0000000 && exec $C --store $T/w/.cairn checkpoint -q'"
if [ -n "$PAIR" ]; then
    eval "$PAIR -n $RUNS --timeout 3600 --vs \"$WALK\" -- $EDIT_AND_CHECKPOINT"
else
    echo "| run | full-1 | walk | ratio |"
    echo "|---|---|---|---|"
    for r in $(seq "$RUNS"); do
        echo x >>"$T/w/d0000/f0000000"
        a=$(/usr/bin/time -f %e "$C" --store "$T/w/.cairn" checkpoint -q 2>&1 >/dev/null | tail -1)
        b=$(/usr/bin/time -f %e $WALK 2>&1 >/dev/null | tail -1)
        echo "| $r | $a s | $b s | $(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "n/a" }') |"
    done
fi
