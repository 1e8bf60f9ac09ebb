#!/bin/bash
# A big file edited in place, through the command line, side by side with
# git (issue 30, "Big files and many files"; docs/BENCHMARKS.md
# "Checkpoints at scale, through the command line"):
#
#   first   a SIZE_MB file of incompressible bytes, the first checkpoint
#           vs git add -A && git commit
#   edit    EDIT_MB overwritten in the middle of it (the same bytes in both
#           trees), then a checkpoint vs git add -A && git commit
#
# For each step and side: wall time, user and system CPU, peak RSS (from
# /usr/bin/time -v) and how many bytes the store (.cairn, .git) grew by.
#
# usage: benches/scripts/big_files.sh [CAIRN_BINARY] [SIZE_MB] [EDIT_MB] [RUNS]
#   CAIRN_BINARY  default target/release/cairn (cargo build --release -p cairn-cli)
#   SIZE_MB       default 1024
#   EDIT_MB       default 1
#   RUNS          edits measured, default 3 (each on the tree the last left;
#                 the first checkpoint is measured once)
#
# The trees live under $TMPDIR (default /tmp) and need about 4 x SIZE_MB
# of free space; they are removed at the end. CAIRN_MAX_FILE_BYTES is
# raised above the file's size (by default a checkpoint skips files over
# 256 MiB as too_large); the script fails if the file was not captured. The file was just written,
# so every read is from the page cache, on both sides. Each checkpoint
# runs a second after the write before it, outside cairn's racy-mtime
# window (capture.rs, RACY_WINDOW_NS), so the file is read once.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
HERE=$(dirname "$(realpath "$0")")
SIZE_MB=${2:-1024}
EDIT_MB=${3:-1}
RUNS=${4:-3}
export CAIRN_MAX_FILE_BYTES=$(((SIZE_MB + 1) << 20))
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-big.XXXXXX")
trap 'rm -rf "$T"' EXIT

git_q() { git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 "$@" >/dev/null 2>&1; }
bytes_of() { du -sb "$1" | cut -f1; }

# measure NAME DIR STORE_DIR CMD...: runs CMD in DIR under /usr/bin/time -v
# and prints one table row.
measure() {
    local name=$1 dir=$2 store=$3
    shift 3
    local before after
    before=$(bytes_of "$dir/$store")
    (cd "$dir" && /usr/bin/time -v -o "$T/time.txt" "$@" >/dev/null 2>&1)
    after=$(bytes_of "$dir/$store")
    awk -v name="$name" -v grew=$((after - before)) -f "$HERE/time_row.awk" "$T/time.txt"
}

mkdir "$T/c" "$T/g"
head -c "$((SIZE_MB << 20))" /dev/urandom >"$T/c/big.bin"
cp "$T/c/big.bin" "$T/g/big.bin"
(cd "$T/c" && "$C" init -q .)
(cd "$T/g" && git_q init -q .)
sync
sleep 1

echo "| step | wall | user CPU | system CPU | peak RSS | store grew by |"
echo "|---|---|---|---|---|---|"
measure "cairn first checkpoint" "$T/c" .cairn "$C" checkpoint -q
measure "git first add+commit" "$T/g" .git sh -c 'git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 add -A && git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 commit -q -m first'
for r in $(seq "$RUNS"); do
    head -c "$((EDIT_MB << 20))" /dev/urandom >"$T/edit.bin"
    # Somewhere in the middle, moved by a few KiB each run so no two runs
    # write at the same offset.
    off=$(((SIZE_MB << 19) + r * 4099))
    for d in c g; do
        dd if="$T/edit.bin" of="$T/$d/big.bin" bs=64K oflag=seek_bytes seek="$off" conv=notrunc status=none
    done
    sleep 1
    measure "cairn after a $EDIT_MB MiB edit (run $r)" "$T/c" .cairn "$C" checkpoint -q
    measure "git after a $EDIT_MB MiB edit (run $r)" "$T/g" .git sh -c 'git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 add -A && git -c user.email=b@b -c user.name=b -c commit.gpgsign=false -c gc.auto=0 commit -q -m edit'
done
# Every checkpoint above captured the file: one more, with nothing
# changed, names nothing it left out.
(cd "$T/c" && "$C" checkpoint --json) | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["files"] == 1 and not c["not_captured"], c'
