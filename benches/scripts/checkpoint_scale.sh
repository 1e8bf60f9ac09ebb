#!/bin/bash
# Checkpoints at 1k / 10k / 100k files through the command line, each step
# paired with git on an identical tree (issue 30's scaling table in
# docs/BENCHMARKS.md):
#
#   first     the first checkpoint           vs git add -A && git commit (first)
#   full-1    a one-file change, full scan    vs git add -A && git commit
#   watch-1   a one-file change, `cairn watch --daemon` running
#                                             vs git add -A && git commit
#   rb-5 (full scan)  a rollback of 5 changed files, no watcher (the
#             rollback's undo checkpoint scans the whole tree)
#                                             vs git checkout -- .
#   rb-5      a rollback of 5 changed files, `cairn watch --daemon` running
#                                             vs git checkout -- .
#
# usage: benches/scripts/checkpoint_scale.sh [CAIRN_BINARY] [SIZES] [RUNS]
#   CAIRN_BINARY  default target/release/cairn (cargo build --release)
#   SIZES         default "1000 10000 100000"
#   RUNS          paired runs per step, default 5 (the first step is
#                 measured once per run on a fresh tree)
#
# Pairs run A B A B ... so drift on a shared machine hits both; the table
# gives each side's median wall time and the median of the per-pair ratios
# cairn/git. Files: ~1 KiB of text each, 100 per directory, under $TMPDIR.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
SIZES=${2:-"1000 10000 100000"}
RUNS=${3:-5}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-scale.XXXXXX")
cleanup() {
    for d in "$T"/c*; do [ -d "$d/.cairn" ] && "$C" --store "$d/.cairn" watch --stop -q >/dev/null 2>&1 || true; done
    rm -rf "$T"
}
trap cleanup EXIT

make_tree() { python3 "$(dirname "$(realpath "$0")")/source_tree.py" "$1" "$2"; }
now() { date +%s%N; }
# ms since $1 (ns)
since() { echo $(( ($(now) - $1) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
git_q() { git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 "$@" >/dev/null 2>&1; }
edit_one() { echo "// edit $RANDOM$RANDOM" >> "$1/src/d0000/f000000.rs"; }
edit_five() { for i in 1 2 3 4 5; do echo "// edit $RANDOM" >> "$1/src/d0000/f00000$i.rs"; done; }

row() { # name, cairn ms list, git ms list
    local a b r
    a=$(tr ' ' '\n' <<<"$2" | grep . | median)
    b=$(tr ' ' '\n' <<<"$3" | grep . | median)
    r=$(paste -d' ' <(tr ' ' '\n' <<<"$2" | grep .) <(tr ' ' '\n' <<<"$3" | grep .) |
        awk '{ printf "%.4f\n", ($2 > 0 ? $1 / $2 : 0) }' | median)
    printf '| %s | %s | %s ms | %s ms | %.2fx |\n' "$N" "$1" "$a" "$b" "$r"
}

echo "| files | step | cairn (median) | git (median) | cairn/git (median of pairs) |"
echo "|---|---|---|---|---|"
for N in $SIZES; do
    first_c=""; first_g=""
    for r in $(seq "$RUNS"); do
        rm -rf "$T/c" "$T/g"; mkdir "$T/c" "$T/g"
        make_tree "$T/c" "$N"; make_tree "$T/g" "$N"
        (cd "$T/g" && git_q init -q .)
        sync
        s=$(now); (cd "$T/c" && "$C" init -q . && "$C" checkpoint -q); first_c+="$(since "$s") "
        s=$(now); (cd "$T/g" && git_q add -A && git_q commit -q -m first); first_g+="$(since "$s") "
    done
    row first "$first_c" "$first_g"

    full_c=""; full_g=""
    for r in $(seq "$RUNS"); do
        edit_one "$T/c"; edit_one "$T/g"
        s=$(now); (cd "$T/c" && "$C" checkpoint -q); full_c+="$(since "$s") "
        s=$(now); (cd "$T/g" && git_q add -A && git_q commit -q -m one); full_g+="$(since "$s") "
    done
    row full-1 "$full_c" "$full_g"

    rbf_c=""; rbf_g=""
    for r in $(seq "$RUNS"); do
        base=$(cd "$T/c" && "$C" checkpoint --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
        edit_five "$T/c"; edit_five "$T/g"
        s=$(now); (cd "$T/c" && "$C" rollback -q "$base"); rbf_c+="$(since "$s") "
        s=$(now); (cd "$T/g" && git_q checkout -- .); rbf_g+="$(since "$s") "
    done
    row "rb-5 (full scan)" "$rbf_c" "$rbf_g"

    (cd "$T/c" && "$C" watch --daemon -q && "$C" checkpoint -q) # its first checkpoint is full
    watch_c=""; watch_g=""
    for r in $(seq "$RUNS"); do
        edit_one "$T/c"; edit_one "$T/g"
        s=$(now); (cd "$T/c" && "$C" checkpoint -q); watch_c+="$(since "$s") "
        s=$(now); (cd "$T/g" && git_q add -A && git_q commit -q -m one); watch_g+="$(since "$s") "
    done
    row watch-1 "$watch_c" "$watch_g"

    rb_c=""; rb_g=""
    for r in $(seq "$RUNS"); do
        base=$(cd "$T/c" && "$C" checkpoint --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
        edit_five "$T/c"; edit_five "$T/g"
        s=$(now); (cd "$T/c" && "$C" rollback -q "$base"); rb_c+="$(since "$s") "
        s=$(now); (cd "$T/g" && git_q checkout -- .); rb_g+="$(since "$s") "
    done
    row "rb-5 (watching)" "$rb_c" "$rb_g"
    (cd "$T/c" && "$C" watch --stop -q >/dev/null)
done
