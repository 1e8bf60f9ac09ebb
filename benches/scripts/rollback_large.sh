#!/bin/bash
# A rollback of a large renamed tree (user trial 12: 50,000 files all
# renamed), timed for cairn and for `git checkout` of the same change.
#
# usage: benches/scripts/rollback_large.sh [CAIRN_BINARY] [FILES]
#   CAIRN_BINARY  default target/release/cairn (build it first:
#                 cargo build --release)
#   FILES         default 50000
#   $WRAP         a command to run the timed `cairn rollback` under, e.g.
#                 WRAP="strace -f -c -o /tmp/rollback.strace" or
#                 WRAP="perf record -g -o /tmp/rollback.perf"
#
# Each tool gets a fresh directory under $TMPDIR (default /tmp): FILES files
# of ~30 bytes in 500 directories, a checkpoint (or commit), every file
# renamed, a second checkpoint (commit), then the timed step: back to the
# first. cairn makes the restored files durable (fsync, or one syncfs for
# a large plan); git does not fsync the working tree, so git's figure is a
# floor for cairn's.
set -euo pipefail
C=$(realpath "${1:-target/release/cairn}")
N=${2:-50000}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-rollback-large.XXXXXX")
trap 'rm -rf "$T"' EXIT

make_tree() { python3 - "$N" <<'PY'
import os, sys
n = int(sys.argv[1])
for i in range(n):
    d = 'src/d%03d' % (i % 500)
    os.makedirs(d, exist_ok=True)
    with open('%s/f%05d.txt' % (d, i), 'w') as f:
        f.write('file %d\n' % i * 3)
PY
}
rename_all() { python3 - "$N" <<'PY'
import os, sys
n = int(sys.argv[1])
for i in range(n):
    d = 'src/d%03d' % (i % 500)
    os.rename('%s/f%05d.txt' % (d, i), '%s/g%05d.txt' % (d, i))
PY
}
now() { date +%s.%N; }

mkdir "$T/cairn" && cd "$T/cairn"
"$C" init -q .
make_tree; "$C" checkpoint -q
rename_all; "$C" checkpoint -q
# shellcheck disable=SC2086 # WRAP is a command line, split into words
sync; s=$(now); ${WRAP:-} "$C" rollback c1 -q; e=$(now)
echo "cairn rollback c1 ($N files renamed back): $(echo "$e - $s" | bc) s"

mkdir "$T/git" && cd "$T/git"
git init -q . && git config user.email b@b && git config user.name bench
make_tree; git add -A && git commit -qm one
rename_all; git add -A && git commit -qm two
sync; s=$(now); git checkout -q HEAD~1; e=$(now)
echo "git checkout HEAD~1 ($N files renamed back, not fsync'd): $(echo "$e - $s" | bc) s"
