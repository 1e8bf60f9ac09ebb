#!/bin/bash
# The one-file full-scan rows of docs/BENCHMARKS.md ("Checkpoints at
# scale, from the command line", issue 30), reproduced: a tree of FILES
# source files (the generator of checkpoint_scale.sh: ~1 KiB each, 100 a
# directory, under src/), a git twin of it, and the paired timer run
#
#   1. cairn against git: a line appended to one file, then
#        cairn --store W/.cairn checkpoint -q                 (A)
#      against the same edit in the twin, then
#        git add -A && git commit                              (B)
#   2. cairn against the bare lstat walk of the same tree:
#        the edit and the checkpoint as above                  (A)
#        find W -printf %s                                     (B)
#   3. (with OTHER_BIN) cairn against another cairn binary on a third
#      copy of the tree (W2), the same edit and checkpoint each    (A/B)
#
# usage: benches/scripts/one_file_pair.sh BIN FILES RUNS PAIR [OTHER_BIN]
#   BIN        the cairn binary (cargo build --release -p cairn-cli)
#   FILES      files in the tree (default 100000)
#   RUNS       paired runs for each pair (default 11)
#   PAIR       the paired timer: a command called as
#              `PAIR -n RUNS --timeout 3600 --vs 'B' -- A` that runs A B A B
#              and prints the per-pair ratios A/B (required)
#   OTHER_BIN  optional: a second cairn binary to pair against (pair 3)
#
# Each store (and the git twin) gets its first checkpoint (commit) before
# any pair, so every timed run is a one-file change with a full scan (no
# watcher runs). The trees live under $TMPDIR (default /tmp) and are
# removed at the end; say the load (`uptime`) beside the figures.
set -euo pipefail
if [ $# -lt 4 ]; then
    sed -n '2,/^set /p' "$0" | sed '$d' >&2
    exit 2
fi
C=$(realpath "$1")
N=${2:-100000}
RUNS=${3:-11}
PAIR=$4
OTHER=${5:+$(realpath "$5")}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-onefile.XXXXXX")
trap 'rm -rf "$T"' EXIT

make_tree() { python3 "$(dirname "$(realpath "$0")")/source_tree.py" "$1" "$2"; }
GIT="git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0"

make_tree "$T/W" "$N"
make_tree "$T/G" "$N"
(cd "$T/W" && "$C" init -q . && "$C" --store "$T/W/.cairn" checkpoint -q)
(cd "$T/G" && $GIT init -q . && $GIT add -A && $GIT commit -q -m first) >/dev/null
if [ -n "$OTHER" ]; then
    make_tree "$T/W2" "$N"
    (cd "$T/W2" && "$OTHER" init -q . && "$OTHER" --store "$T/W2/.cairn" checkpoint -q)
fi
sync

EDIT=src/d0000/f000000.rs
A="sh -c 'echo x >> $T/W/$EDIT; exec $C --store $T/W/.cairn checkpoint -q'"
GIT_B="sh -c 'echo x >> $T/G/$EDIT; cd $T/G && $GIT add -A && exec $GIT commit -q -m one'"
WALK_B="find $T/W -printf %s"

echo "files: $N, runs: $RUNS; load: $(uptime | sed 's/.*load average: //')"
echo "== 1. cairn (A) against git add -A && git commit (B)"
eval "$PAIR -n $RUNS --timeout 3600 --vs \"$GIT_B\" -- $A"
echo "== 2. cairn (A) against find W -printf %s (B)"
eval "$PAIR -n $RUNS --timeout 3600 --vs \"$WALK_B\" -- $A"
if [ -n "$OTHER" ]; then
    OTHER_B="sh -c 'echo x >> $T/W2/$EDIT; exec $OTHER --store $T/W2/.cairn checkpoint -q'"
    echo "== 3. cairn $C (A) against $OTHER (B)"
    eval "$PAIR -n $RUNS --timeout 3600 --vs \"$OTHER_B\" -- $A"
fi
echo "load after: $(uptime | sed 's/.*load average: //')"
