'use strict'
// An agent loop on cairn: every turn checkpointed, every prompt, tool call,
// file write and reply recorded, and a turn that went wrong rolled back
// (the workspace and the agent's memory together).
//
//     node examples/agent_loop.js /tmp/demo-workspace

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const cairn = require('..')

async function main(workspace) {
  let memory = []
  const store = await cairn.Store.open(workspace, { create: true })
  const s = store.session('thread-1', { agent: 'demo', model: 'fake-model' })
  for (const turn of [1, 2]) {
    const before = await s.checkpoint(`Before turn ${turn}`, Buffer.from(JSON.stringify(memory)))
    await s.prompt(`turn ${turn}: make answer() right`)
    const body = turn === 2 ? 'return 0 // wrong\n' : `return ${41 + turn}\n`
    await s.writeFile('src/app.js', Buffer.from(body))
    await s.record({ kind: 'tool_call', tool: 'npm test', ok: turn !== 2, latency_ms: 150 })
    memory.push(`turn ${turn} wrote src/app.js`)
    await s.reply(`turn ${turn} done`)
    if (turn === 2) {
      const back = await s.rollback(before.id)
      memory = JSON.parse(back.state.toString())
      console.log(`rolled back to ${back.target}: ${back.written}, memory ${JSON.stringify(memory)}`)
    }
  }
  process.stdout.write((await store.show('head', 'src/app.js')).toString())
  for await (const e of store.events({ session: 'thread-1', kind: 'prompt' })) console.log(e.lsn, e.text)
  console.log('verify:', (await store.verify()).ok ? 'ok' : 'DAMAGED')
  await store.close()
}

const dir = process.argv[2] || fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-demo-'))
fs.mkdirSync(dir, { recursive: true })
main(dir).catch((e) => {
  console.error(e)
  process.exit(1)
})
