#!/bin/bash
# What each read command fetches from an archive read in place
# (docs/BENCHMARKS.md, "Replication to object storage"): the store STORE
# is replicated once to a file:// archive, then each command runs with
# `--store file://ARCHIVE` and an empty cache, and the cache's size
# after it is what it fetched (the default cache bound, 1 GiB, is
# larger than the archive, so nothing fetched is dropped).
#
# usage: benches/scripts/in_place_bytes.sh BIN STORE [POINT] [EARLIER] [PATH]
#   BIN      the cairn binary (target/release/cairn)
#   STORE    a store directory (.cairn), e.g. cold_query.sh's KEEP=/tmp/cq1m
#            store: /tmp/cq1m/ws/.cairn
#   POINT    a point for show/tree/blame, default @500007
#   EARLIER  the other point of diff, default @400007
#   PATH     the path of show/history/blame, default src/f8.rs
# ARCHIVE=DIR reads the file:// archive in DIR, already replicated from
# STORE (e.g. by tail_index_growth.sh's rounds, KEEP=DIR: DIR/archive),
# instead of replicating STORE once. The last column says whether the
# command printed in place what it prints on STORE (ages aside).
set -euo pipefail
C=$(realpath "$1")
S=$2
POINT=${3:-@500007}
EARLIER=${4:-@400007}
P=${5:-src/f8.rs}
T=$(mktemp -d "${TMPDIR:-/tmp}/cairn-inplace.XXXXXX")
trap 'rm -rf "$T"' EXIT
if [ -n "${ARCHIVE:-}" ]; then
  A=$(realpath "$ARCHIVE")
else
  A=$T/archive
  "$C" --store "$S" replicate "file://$A" --once -q
fi
echo "archive: $(du -sb "$A" | cut -f1) bytes"
echo "| command in place | fetched bytes | ms | as on the store |"
echo "|---|---|---|---|"
run() {
    rm -rf "$T/cache"
    local t0 t1 same
    t0=$(date +%s%N)
    CAIRN_CACHE_DIR="$T/cache" "$C" --store "file://$A" "$@" >"$T/out"
    t1=$(date +%s%N)
    # Ages ("13s ago", and the padding of their column) follow the clock
    # between the two runs.
    same=no
    cmp -s <("$C" --store "$S" "$@" | sed -E 's/[0-9]+[smhdw] ago/AGO/g; s/ +/ /g') \
        <(sed -E 's/[0-9]+[smhdw] ago/AGO/g; s/ +/ /g' "$T/out") && same=yes
    echo "| \`$*\` | $(du -sb "$T/cache" 2>/dev/null | cut -f1) | $(( (t1 - t0) / 1000000 )) | $same |"
}
run log --session s1 --kind prompt --limit 5
run checkpoints --session s1
run log --session s1 --newest-first --limit 5
run show "$POINT:$P"
run history "$P"
run tree "$POINT"
run diff "$EARLIER" "$POINT"
run blame "$POINT" "$P"
run log --limit 5
