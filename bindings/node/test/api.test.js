'use strict'
// Every call of the Node binding, against a real store on disk.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const cairn = require('..')

function workspace() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-node-'))
}

async function collect(it) {
  const out = []
  for await (const x of it) out.push(x)
  return out
}

test('open without create refuses a workspace without a store', async () => {
  const ws = workspace()
  await assert.rejects(cairn.Store.open(ws), (e) => e instanceof cairn.NotFoundError && /\.cairn/.test(e.message))
  await assert.rejects(cairn.Store.open(ws), cairn.Error)
  await assert.rejects(cairn.Store.open(ws, { create: true, durability: 'sometimes' }), /sometimes/)
})

test('init, open, close', async () => {
  const ws = workspace()
  const root = await cairn.Store.init(ws)
  assert.ok(root.endsWith('.cairn'))
  const store = await cairn.Store.open(ws)
  assert.equal(await store.head(), 0)
  assert.equal(store.closed, false)
  await store.close()
  assert.equal(store.closed, true)
  await store.close()
  await assert.rejects(store.session('t').prompt('after close'), /closed/)
})

test('a session records every kind of call', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1', { run: 'r1', agent: 'coder', model: 'm1' })
  assert.equal(s.id, 't1')
  assert.equal(await s.prompt('make the tests pass'), 1)
  assert.equal(await s.toolCall('bash'), 2)
  assert.equal(await s.toolCall('bash', false), 3)
  assert.equal(await s.record({ kind: 'tool_call', tool: 'grep', latency_ms: 12, meta: { cmd: 'ls' } }), 4)
  assert.equal(await s.reply('done'), 5)
  assert.deepEqual(await s.recordBatch([{ kind: 'prompt', text: 'a' }, { kind: 'prompt', text: 'b' }]), [6, 7])
  assert.equal(await s.recordBatch([]), null)
  const events = await collect(store.events({ session: 't1' }))
  assert.deepEqual(events.map((e) => e.lsn), [1, 2, 3, 4, 5, 6, 7])
  assert.equal(events[0].text, 'make the tests pass')
  assert.deepEqual([events[0].run, events[0].agent, events[0].model], ['r1', 'coder', 'm1'])
  assert.equal(events[2].ok, false)
  assert.deepEqual(events[3].meta, { cmd: 'ls' })
  assert.equal(store.session('').id, 'default')
  await store.close()
})

test('file tools, checkpoint and rollback', async () => {
  const ws = workspace()
  const store = await cairn.Store.open(ws, { create: true, durability: 'never' })
  const s = store.session('t1')
  const c1 = await s.checkpoint('start', Buffer.from('epoch 1'))
  assert.equal(c1.id, `c${c1.lsn}`)
  assert.equal(c1.counts.files, 0)
  await s.writeFile('src/a.txt', Buffer.from('one\n'))
  await s.writeFile('src/a.txt', Buffer.from('one\ntwo\n'))
  await s.moveFile('src/a.txt', 'src/b.txt')
  await s.writeFile('gone.txt', Buffer.from('x'))
  await s.deleteFile('gone.txt')
  await s.track('later.txt')
  assert.equal(fs.readFileSync(path.join(ws, 'src/b.txt'), 'utf8'), 'one\ntwo\n')
  const c2 = await s.checkpoint('edited')
  assert.equal(c2.counts.files, 1)
  assert.deepEqual((await store.checkpoints('t1')).map((c) => c.id), [c1.id, c2.id])

  const dry = await s.rollback(c1.id, { dryRun: true })
  assert.equal(dry.dryRun, true)
  assert.deepEqual(dry.deleted, ['src/b.txt'])
  assert.ok(fs.existsSync(path.join(ws, 'src/b.txt')))

  const back = await s.rollback(c1.id, { state: Buffer.from('epoch 2') })
  assert.deepEqual(back.deleted, ['src/b.txt'])
  assert.equal(back.state.toString(), 'epoch 1')
  assert.ok(!fs.existsSync(path.join(ws, 'src/b.txt')))
  const undo = await s.rollback(back.source)
  assert.equal(undo.state.toString(), 'epoch 2')

  await s.writeFile('keep.txt', Buffer.from('keep'))
  const c3 = await s.checkpoint('both')
  fs.writeFileSync(path.join(ws, 'keep.txt'), 'keep 2')
  fs.writeFileSync(path.join(ws, 'src/b.txt'), 'changed 2')
  const part = await s.rollback(c3.id, { paths: ['src/'] })
  assert.deepEqual(part.written, ['src/b.txt'])
  assert.equal(fs.readFileSync(path.join(ws, 'keep.txt'), 'utf8'), 'keep 2')
  await assert.rejects(s.rollback('c999'), cairn.NotFoundError)
  await assert.rejects(s.writeFile('../escape', Buffer.from('x')), cairn.OutsideWorkspaceError)
  await store.close()
})

test('time-travel queries', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1', { model: 'm1' })
  const c1 = await s.checkpoint('start')
  const first = await s.writeFile('notes.md', Buffer.from('first\n'))
  await s.writeFile('notes.md', Buffer.from('first\nsecond\n'))
  const then = await store.show(`@${first}`, 'notes.md')
  assert.ok(Buffer.isBuffer(then))
  assert.equal(then.toString(), 'first\n')
  assert.equal((await store.show('head', 'notes.md')).toString(), 'first\nsecond\n')
  assert.deepEqual(Object.keys(await store.tree()), ['notes.md'])
  assert.deepEqual(await store.tree(c1.id), {})
  const d = await store.diff(c1.id, 'head')
  assert.deepEqual(d.map((x) => [x.path, x.status]), [['notes.md', 'added']])
  assert.deepEqual((await store.history('notes.md')).map((h) => h.kind), ['file.create', 'file.write'])
  const blame = await store.blame('head', 'notes.md')
  assert.deepEqual(blame.map((b) => [b.text, b.lsn]), [['first', first], ['second', first + 1]])
  const c2 = await s.checkpoint('end')
  assert.deepEqual((await store.branches()).map((n) => n.lsn), [c1.lsn, c2.lsn])
  assert.deepEqual((await store.branches(c1.id)).map((n) => n.lsn), [c2.lsn])
  await assert.rejects(store.show('head', 'nope'), cairn.NotFoundError)
  assert.throws(() => store.show('nonsense', 'notes.md'), /nonsense/)
  await store.close()
})

test('events are filtered and read lazily, page by page', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const a = store.session('a')
  await a.recordBatch(Array.from({ length: 600 }, (_, i) => ({ kind: 'prompt', text: `p${i}` })))
  await store.session('b').writeFile('x/y.txt', Buffer.from('y'))
  assert.equal((await collect(store.events({ session: 'a' }))).length, 600)
  assert.deepEqual((await collect(store.events({ path: 'x' }))).map((e) => e.path), ['x/y.txt'])
  assert.deepEqual((await collect(store.events({ limit: 3 }))).map((e) => e.lsn), [1, 2, 3])
  assert.equal((await collect(store.events({ since: '2000-01-01', until: '2999-12-31' }))).length, 601)
  await assert.rejects(store.events({ kind: 'prompts' }).next(), /unknown event kind/)
  // Breaking out early reads no further pages.
  for await (const e of store.events()) {
    assert.equal(e.lsn, 1)
    break
  }
  await store.close()
})

test('follow waits for new records', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1')
  await s.prompt('old')
  const seen = []
  const following = (async () => {
    for await (const e of store.follow({ idleTimeoutMs: 5000 })) {
      seen.push(e.text)
      if (seen.length === 3) break
    }
  })()
  // follow() starts after the head at the time it is called.
  await new Promise((r) => setImmediate(r))
  for (let i = 0; i < 3; i++) await s.prompt(`new ${i}`)
  await following
  assert.deepEqual(seen, ['new 0', 'new 1', 'new 2'])
  const all = await collect(store.follow({ fromLsn: 1, idleTimeoutMs: 0 }))
  assert.deepEqual(all.map((e) => e.text), ['old', 'new 0', 'new 1', 'new 2'])
  await store.close()
})

test('follow() starts at the head when it is called, even while the thread pool is busy', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1')
  await s.prompt('old')
  // Hold libuv's 4 pool threads (waits on a cursor far past the head),
  // so follow()'s own start runs only after the prompt below is
  // committed, which the committer does without the pool.
  const far = await store.followCursor(1000000)
  const busy = Array.from({ length: 4 }, () => far.next(300))
  const it = store.follow({ idleTimeoutMs: 3000 })
  const first = it.next()
  await s.prompt('right after follow()')
  assert.equal((await first).value?.text, 'right after follow()')
  await it.return()
  await Promise.all(busy)
  await store.close()
})

test('export, import, verify, stats, gc', async () => {
  const dir = workspace()
  const store = await cairn.Store.open(dir, { create: true, durability: 'never' })
  const s = store.session('t1')
  for (let i = 0; i < 5; i++) {
    await s.prompt(`p${i}`)
    await s.checkpoint(`c${i}`)
  }
  const out = path.join(os.tmpdir(), `cairn-export-${process.pid}.jsonl`)
  const st = await store.export(out)
  assert.equal(st.records, 10)
  const lines = fs.readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  assert.deepEqual(lines.map((l) => l.lsn), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
  assert.throws(() => store.export(out, 'csv'), /unknown format/)

  const other = await cairn.Store.open(workspace(), { create: true })
  const input = path.join(os.tmpdir(), `cairn-import-${process.pid}.jsonl`)
  fs.writeFileSync(input, [0, 1, 2].map((i) => JSON.stringify({ kind: 'prompt', session: 'imp', text: `i${i}` })).join('\n') + '\n')
  assert.deepEqual(await other.import(input, 'jsonl'), { first: 1, last: 3 })
  await assert.rejects(other.import(input, 'jsonl'), /imported/)
  await assert.rejects(other.import(input + '.missing'), cairn.NotFoundError)
  await other.close()

  const v = await store.verify()
  assert.equal(v.ok, true)
  assert.deepEqual(v.problems, [])
  const stats = await store.stats()
  assert.equal(stats.head.lsn, 10)
  const g = await store.gc(2)
  assert.equal(g.discarded.length, 3)
  assert.equal(await store.head(), 13)
  await store.close()
})

test('a bad event is an InvalidEventError and appends nothing', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1')
  await s.prompt('ok')
  for (const [event, word] of [
    [{ text: 'no kind' }, /kind/],
    [{ kind: 'no.such' }, /no\.such/],
    [{ kind: 'prompt', latency_ms: -1 }, /latency_ms/],
    [{ kind: 'prompt', unknown_field: 1 }, /unknown_field/],
    [{ kind: 'file.write', path: '' }, /path/],
  ]) {
    assert.throws(() => s.record(event), (e) => e instanceof cairn.InvalidEventError && word.test(e.message))
  }
  await assert.rejects(s.recordBatch([{ kind: 'prompt' }, { kind: 'nope' }]), (e) => e instanceof cairn.InvalidEventError && /event 2 of the batch/.test(e.message))
  await assert.rejects(s.recordBatch(['not an object']), cairn.InvalidEventError)
  await assert.rejects(s.recordBatch([{ kind: 'prompt' }, undefined]), (e) => e instanceof cairn.InvalidEventError && /event 2 of the batch/.test(e.message))
  assert.throws(() => s.recordBatch('nope'), TypeError)
  assert.equal(await store.head(), 1)
  await store.close()
})

test('recordBatch stamps the session on events that leave it out, in one read of each line', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('t1', { agent: 'coder', model: 'm1' })
  const events = [
    // Commas, brackets, quotes and backslashes inside strings do not split the batch.
    { kind: 'prompt', text: 'line\nbreak, "quoted\\", ] } [ { caf\u00e9' },
    { kind: 'tool_call', tool: 'bash', ok: false, latency_ms: 7, agent: 'other' },
    { kind: 'reply', session: 't2', model: null, meta: { n: 1 } },
  ]
  assert.deepEqual(await s.recordBatch(events), [1, 3])
  const got = await collect(store.events())
  assert.equal(got[0].text, 'line\nbreak, "quoted\\", ] } [ { caf\u00e9')
  assert.deepEqual([got[0].session, got[0].agent, got[0].model], ['t1', 'coder', 'm1'])
  assert.deepEqual([got[1].agent, got[1].ok, got[1].latency_ms], ['other', false, 7])
  assert.deepEqual([got[2].session, got[2].model, got[2].meta], ['t2', 'm1', { n: 1 }])
  await assert.rejects(s.recordBatch([{ kind: 'prompt' }, { kind: 'prompt', session: '' }]), (e) => e instanceof cairn.InvalidEventError && /event 2 of the batch: .*session/.test(e.message))
  assert.equal(await store.head(), 3)
  await store.close()
})

test('a long recordBatch with tricky strings reads back the same; its first bad element is named', async () => {
  const store = await cairn.Store.open(workspace(), { create: true, durability: 'never' })
  const s = store.session('long')
  // Quotes, escapes, brackets and commas inside strings must not split
  // an element; of two bad elements, the first is the one named.
  const n = 600
  const tricky = (i) => `${i}: "q\\", ] } [ { caf\u00e9 \ud83d\ude00`
  const events = Array.from({ length: n }, (_, i) => ({ kind: 'prompt', text: tricky(i) }))
  assert.deepEqual(await s.recordBatch(events), [1, n])
  const got = await collect(store.events())
  assert.deepEqual(got.map((e) => e.text), events.map((e) => e.text))
  assert.ok(got.every((e) => e.session === 'long'))
  const bad = events.slice()
  bad[450] = { kind: 'prompt', text: 'x', nope: 1 }
  bad[500] = { kind: 'nope' }
  await assert.rejects(s.recordBatch(bad), (e) => e instanceof cairn.InvalidEventError && /event 451 of the batch: .*nope/.test(e.message))
  bad[10] = { text: 'no kind' }
  await assert.rejects(s.recordBatch(bad), (e) => e instanceof cairn.InvalidEventError && /event 11 of the batch: .*kind/.test(e.message))
  assert.equal(await store.head(), n)
  await store.close()
})

test('a second writer gets LockedError; a reader does not', async () => {
  const ws = workspace()
  const store = await cairn.Store.open(ws, { create: true })
  await assert.rejects(cairn.Store.open(ws), (e) => e instanceof cairn.LockedError && e instanceof cairn.Error)
  await store.session('t1').prompt('hello')
  const ro = await cairn.Store.open(ws, { readOnly: true })
  assert.deepEqual((await collect(ro.events())).map((e) => e.text), ['hello'])
  await assert.rejects(ro.session('t1').prompt('refused'), cairn.Error)
  await ro.close()
  await store.close()
})

test('a damaged blob is a CorruptError', async () => {
  const ws = workspace()
  let store = await cairn.Store.open(ws, { create: true })
  await store.session('t1').writeFile('a.bin', require('node:crypto').randomBytes(64 * 1024))
  await store.close()
  const packs = []
  const walk = (d) => {
    for (const f of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, f.name)
      if (f.isDirectory()) walk(p)
      else if (fs.statSync(p).size > 32 * 1024) packs.push(p)
    }
  }
  walk(path.join(ws, '.cairn', 'blobs'))
  assert.ok(packs.length > 0)
  const data = fs.readFileSync(packs[0])
  const mid = Math.floor(data.length / 2)
  for (let i = mid; i < mid + 64; i++) data[i] ^= 0xff
  fs.writeFileSync(packs[0], data)
  store = await cairn.Store.open(ws)
  await assert.rejects(store.show('head', 'a.bin'), cairn.CorruptError)
  assert.equal((await store.verify()).ok, false)
  await store.close()
})

test('the event loop is never blocked by a call', async () => {
  // A timer keeps firing while a slow call (a checkpoint of many files)
  // runs: counted in ticks, never in wall-clock time.
  const ws = workspace()
  for (let i = 0; i < 2000; i++) fs.writeFileSync(path.join(ws, `f${i}.txt`), `file ${i}\n`.repeat(20))
  const store = await cairn.Store.open(ws, { create: true, durability: 'always' })
  let ticks = 0
  let done = false
  const tick = () => {
    ticks++
    if (!done) setImmediate(tick)
  }
  setImmediate(tick)
  const c = store.session('t1').checkpoint('many files')
  const before = ticks
  await c
  done = true
  assert.ok(ticks > before, 'the event loop ran while the checkpoint was taken')
  await store.close()
})

test('the agent-loop example runs', () => {
  const { spawnSync } = require('node:child_process')
  const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'examples', 'agent_loop.js'), workspace()], { encoding: 'utf8' })
  assert.equal(r.status, 0, r.stdout + r.stderr)
  assert.match(r.stdout, /rolled back/)
})

test('the README example runs', async () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
  const code = /```js\n([\s\S]*?)```/.exec(readme)[1]
    .replace("require('./bindings/node')", 'require(' + JSON.stringify(path.join(__dirname, '..')) + ')')
    .replace('/path/to/workspace', workspace())
  const lines = []
  const log = console.log
  console.log = (...a) => lines.push(a.join(' '))
  try {
    const AsyncFunction = (async () => {}).constructor
    await new AsyncFunction('require', code)(require)
  } finally {
    console.log = log
  }
  assert.ok(lines.some((l) => l.includes('make the tests pass')), lines.join('\n'))
})
