'use strict'
// Benchmarks of the Node binding, side by side in one run (see
// docs/BENCHMARKS.md, "Bindings"):
// 1. 8 concurrent sessions recording prompts with durability 'always'
//    against a JSONL file written with fs.appendFileSync plus fsync per
//    event (the same 8 writers, taking turns: the calls are synchronous);
// 2. recordBatch of 1,000 with durability 'never' from one caller;
// 3. the cost of one call (await session.prompt, durability 'never')
//    against the same call in Rust (bindings/common/examples/call_cost.rs,
//    if built).
//
//     node bindings/node/bench/bench.js [--quick] [--durable-only | --batch-only | --calls-only]
//
// --durable-only, --batch-only and --calls-only run one cairn part alone
// (no peer), for profiling it, e.g.
// `strace -f -c -e trace=fdatasync node bench/bench.js --durable-only`.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const cairn = require('..')

const QUICK = process.argv.includes('--quick')
const WRITERS = 8
const PER_WRITER = QUICK ? 50 : 400
const BATCH = 1000
const BATCHES = QUICK ? 20 : 200
const CALLS = QUICK ? 20000 : 200000
const REPO = path.resolve(__dirname, '..', '..', '..')

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-bench-'))
const now = () => Number(process.hrtime.bigint()) / 1e9

async function cairnWriters() {
  const store = await cairn.Store.open(tmp(), { create: true, durability: 'always' })
  const start = now()
  await Promise.all(
    Array.from({ length: WRITERS }, async (_, t) => {
      const s = store.session(`t${t}`)
      for (let i = 0; i < PER_WRITER; i++) await s.prompt(`writer ${t} prompt ${i}`)
    }),
  )
  const secs = now() - start
  await store.close()
  return (WRITERS * PER_WRITER) / secs
}

function jsonlWriters() {
  const file = path.join(tmp(), 'events.jsonl')
  const fd = fs.openSync(file, 'a')
  const start = now()
  for (let i = 0; i < PER_WRITER; i++) {
    for (let t = 0; t < WRITERS; t++) {
      fs.appendFileSync(fd, JSON.stringify({ kind: 'prompt', session: `t${t}`, text: `writer ${t} prompt ${i}`, ts: Date.now() }) + '\n')
      fs.fsyncSync(fd)
    }
  }
  const secs = now() - start
  fs.closeSync(fd)
  return (WRITERS * PER_WRITER) / secs
}

async function cairnBatches() {
  const store = await cairn.Store.open(tmp(), { create: true, durability: 'never' })
  const s = store.session('bench')
  const batches = Array.from({ length: BATCHES }, (_, b) => Array.from({ length: BATCH }, (_, i) => ({ kind: 'prompt', text: `b${b} ${i}` })))
  const start = now()
  for (const b of batches) await s.recordBatch(b)
  const secs = now() - start
  await store.close()
  return (BATCH * BATCHES) / secs
}

async function cairnCalls() {
  const store = await cairn.Store.open(tmp(), { create: true, durability: 'never' })
  const s = store.session('bench')
  const start = now()
  for (let i = 0; i < CALLS; i++) await s.prompt(`prompt ${i}`)
  const secs = now() - start
  await store.close()
  return (secs * 1e6) / CALLS
}

function rustCalls() {
  // target/<host>/release when built with the bindings' CARGO_BUILD_TARGET (scripts/test).
  const host = `${process.arch === 'x64' ? 'x86_64' : process.arch === 'arm64' ? 'aarch64' : process.arch}-unknown-linux-gnu`
  const exe = [path.join(REPO, 'target', 'release', 'examples', 'call_cost'), path.join(REPO, 'target', host, 'release', 'examples', 'call_cost')].find((p) => fs.existsSync(p))
  if (!exe) return null
  const r = spawnSync(exe, [tmp()], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(r.stderr)
  return JSON.parse(r.stdout)
}

async function only() {
  const fmt = (n) => Math.round(n).toLocaleString('en-US')
  if (process.argv.includes('--durable-only')) console.log(`durable: ${fmt(await cairnWriters())} events/s`)
  else if (process.argv.includes('--batch-only')) console.log(`recordBatch: ${fmt(await cairnBatches())} events/s`)
  else if (process.argv.includes('--calls-only')) console.log(`one call: ${(await cairnCalls()).toFixed(2)} us`)
  else return false
  return true
}

async function main() {
  if (await only()) return
  const fmt = (n) => Math.round(n).toLocaleString('en-US')
  const rows = []
  const c = await cairnWriters()
  const j = jsonlWriters()
  rows.push(['8 concurrent sessions, prompts, durability always', `${fmt(c)} events/s`, `appendFileSync + fsync per event: ${fmt(j)} events/s`, `${(c / j).toFixed(1)}x`])
  const b = await cairnBatches()
  // The Rust side right after, so both see the same load.
  const rust = rustCalls()
  rows.push([
    '1 caller, recordBatch of 1,000, durability never',
    `${fmt(b)} events/s`,
    rust ? `Rust append_batch of 1,000, same run: ${fmt(rust.batch_events_per_s)} events/s` : 'Rust: build the call_cost example',
    rust ? `${(b / rust.batch_events_per_s).toFixed(2)}x` : '',
  ])
  const us = await cairnCalls()
  rows.push([
    'one call: await session.prompt, durability never',
    `${us.toFixed(2)} us`,
    rust ? `Rust session.prompt: ${rust.prompt_us.toFixed(2)} us` : 'Rust: build the call_cost example',
    rust ? `${(us / rust.prompt_us).toFixed(1)}x` : '',
  ])
  console.log('| Node | cairn | peer | ratio |')
  console.log('|---|---|---|---|')
  for (const r of rows) console.log(`| ${r.join(' | ')} |`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
