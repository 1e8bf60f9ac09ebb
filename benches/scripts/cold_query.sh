#!/usr/bin/env bash
# Queries from a new process: `cairn log --session S --kind K --limit 5`,
# `cairn history PATH`, `cairn checkpoints --session S` and `cairn show
# @LSN:PATH` (a file's contents mid-history) through the binary, each
# paired with the `sqlite3` command line answering the same question on
# the same EVENTS events (default 1,000,000) in one table indexed on
# session, path and kind (the file contents in a second table, by hash).
#
#   cargo static            # the static binary (README); or cargo build --release
#   benches/scripts/cold_query.sh [EVENTS] [RUNS] [PAIR]
#
#   LOOP=10 KEEP=/tmp/cq10m benches/scripts/cold_query.sh 10000000 30 PAIR
#
# PAIR is the command that times two commands as whole processes,
# alternating, and prints the ratio run by run; the default is
# /usr/bin/time in a loop (figures: median wall seconds, then
# cairn/sqlite3). Each cairn command is run once before it is timed: the
# first query of a store builds the per-segment index files it needs
# (the time of that first run is printed too).
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-1000000}
runs=${2:-5}
pair=${3:-}
# CAIRN=BIN times that binary instead of target/release/cairn (copy a
# freshly linked binary out of target/ first: its first runs start slower).
# LOOP=N (with PAIR): each side of a pair runs the command N times in a
# loop, so a pair times N processes, not one (a ~2 ms process's CPU time
# scatters widely run to run).
loop=${LOOP:-1}
cairn=${CAIRN:-$PWD/target/release/cairn}
# KEEP=DIR keeps the store and the database in DIR (reused if there).
if [ -n "${KEEP:-}" ]; then
  dir=$KEEP; mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

store=$dir/ws/.cairn
[ -d "$store" ] || (mkdir -p "$dir/ws" && cd "$dir/ws" && ("$cairn" init -q . 2>/dev/null || "$cairn" init .) >/dev/null)
# The contents the file writes carry: VERSIONS versions of each of the 50
# files, put in the store first (an imported record may only name blobs
# the store holds), their hashes kept in contents.txt.
if [ ! -f "$dir/contents.txt" ]; then
  mkdir -p "$dir/contents"
  for j in $(seq 0 49); do for v in $(seq 0 7); do
    printf '// src/f%d.rs, version %d\npub fn f%d() -> u32 {\n    %d\n}\n' "$j" "$v" "$j" "$v" >"$dir/contents/f${j}_v${v}.rs"
  done; done
  "$cairn" --store "$store" blob put "$dir"/contents/*.rs >"$dir/contents.txt"
fi

[ -f "$dir/events.db" ] || python3 - "$events" "$dir" <<'PY'
import json, sqlite3, sys
n, d = int(sys.argv[1]), sys.argv[2]
kinds = ["prompt", "reply", "tool_call", "file.write"]
hashes, texts = {}, {}
for line in open(f"{d}/contents.txt"):
    h, _, path = line.split()
    name = path.rsplit("/", 1)[1]
    hashes[name] = h
    texts[h] = open(path).read()
db = sqlite3.connect(f"{d}/events.db")
db.execute("create table ev (lsn integer primary key, session text, kind text, path text, text text, after text)")
db.execute("create table blob (hash text primary key, content text)")
db.executemany("insert into blob values (?, ?)", texts.items())
with open(f"{d}/events.jsonl", "w") as out:
    rows = []
    for i in range(n):
        k = kinds[i % 4]
        # Sessions and paths change every 4 events, so each session has
        # every kind and each path 1 in 50 of the file writes; each write
        # of a file gives the next of its 8 versions.
        e = {"kind": k, "session": "s%d" % (i // 4 % 50)}
        if k == "file.write":
            e["path"] = "src/f%d.rs" % (i // 4 % 50)
            e["tool"] = "edit"
            e["after"] = hashes["f%d_v%d.rs" % (i // 4 % 50, i // 200 % 8)]
        else:
            e["text"] = "turn %d: make the tests pass" % i
        out.write(json.dumps(e) + "\n")
        rows.append((i + 1, e["session"], k, e.get("path"), e.get("text"), e.get("after")))
        if len(rows) == 100000:
            db.executemany("insert into ev values (?, ?, ?, ?, ?, ?)", rows)
            rows = []
    db.executemany("insert into ev values (?, ?, ?, ?, ?, ?)", rows)
db.execute("create index ev_session on ev (session, kind)")
db.execute("create index ev_path on ev (path)")
db.commit()
PY
[ -f "$dir/imported" ] || { (cd "$dir/ws" && "$cairn" --durability never import --format jsonl ../events.jsonl >/dev/null) && touch "$dir/imported"; }
echo "store: $events events, $(du -sh "$store/log" | cut -f1) of log in $(ls "$store/log" | grep -c '\.seg$') segments; sqlite3 file $(du -sh "$dir/events.db" | cut -f1)"
echo "machine: $(nproc) cores, $(uname -sr)"

# The point `show` asks at: mid-history, a few records past a write of
# the file (its contents are those of the write before the point).
mid=$((events / 2 + 7))
# name | cairn arguments | sqlite3 query
cases=(
  "log --session s1 --kind prompt --limit 5|log --session s1 --kind prompt --limit 5 --json|select * from ev where session='s1' and kind='prompt' order by lsn limit 5"
  "history src/f8.rs|history src/f8.rs --json|select * from ev where path='src/f8.rs' order by lsn"
  "checkpoints --session s1|checkpoints --session s1 --json|select * from ev where session='s1' and kind='checkpoint.create' order by lsn"
  "show @$mid:src/f8.rs|show @$mid:src/f8.rs|select b.content from ev e join blob b on b.hash = e.after where e.path='src/f8.rs' and e.lsn <= $mid order by e.lsn desc limit 1"
)
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for c in "${cases[@]}"; do
  IFS='|' read -r name args query <<<"$c"
  # shellcheck disable=SC2086
  first=$( { /usr/bin/time -f %e "$cairn" --store "$store" $args >/dev/null; } 2>&1 | tail -1 )
  echo "== $name (first run, building index files: ${first} s)"
  if [ -n "$pair" ] && [ "$loop" -gt 1 ]; then
    # Each side a loop of LOOP processes, written to a script so the
    # query's quotes need no second level of quoting.
    printf 'for i in $(seq %s); do %q --store %q %s >/dev/null; done\n' \
      "$loop" "$cairn" "$store" "$args" >"$dir/loop-cairn.sh"
    printf 'for i in $(seq %s); do sqlite3 -json %q %q >/dev/null; done\n' \
      "$loop" "$dir/events.db" "$query" >"$dir/loop-sqlite3.sh"
    $pair -n "$runs" --vs "sh $dir/loop-sqlite3.sh" -- sh "$dir/loop-cairn.sh"
    continue
  fi
  if [ -n "$pair" ]; then
    # shellcheck disable=SC2086
    $pair -n "$runs" --vs "sqlite3 -json $dir/events.db \"$query\"" -- "$cairn" --store "$store" $args
    continue
  fi
  a=(); b=()
  for _ in $(seq "$runs"); do
    # shellcheck disable=SC2086
    a+=( "$( { /usr/bin/time -f %e "$cairn" --store "$store" $args >/dev/null; } 2>&1 | tail -1 )" )
    b+=( "$( { /usr/bin/time -f %e sqlite3 -json "$dir/events.db" "$query" >/dev/null; } 2>&1 | tail -1 )" )
  done
  ma=$(printf '%s\n' "${a[@]}" | median); mb=$(printf '%s\n' "${b[@]}" | median)
  echo "cairn $ma s, sqlite3 $mb s (medians of $runs)"
done
