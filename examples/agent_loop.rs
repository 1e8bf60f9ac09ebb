//! A minimal agent loop embedding cairn: records prompts, replies and tool
//! calls, tracks its file writes, checkpoints every turn, rolls back a bad
//! turn and exports JSONL.
//!
//! Run it with `cargo run --example agent_loop`; it works in a temporary
//! directory and prints what it does.

use cairn::{EventKind, Filter, Format, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let workspace = dir.path();
    std::fs::write(workspace.join("app.py"), "print('hello')\n")?;

    let store = Store::open(workspace)?;
    let session = store
        .session("thread-1")
        .with_agent("example-agent")
        .with_model("example-model");

    // Turn 1: a good change.
    let before_1 = session.before_turn(1)?;
    session.prompt("Print a friendlier greeting")?;
    session.tool_call("write_file", true)?;
    session.write_file("app.py", b"print('hello, world')\n")?;
    session.reply("Updated app.py.")?;
    session.after_turn(1)?;

    // Turn 2: a bad change, which we roll back.
    let before_2 = session.before_turn(2)?;
    session.prompt("Delete the app")?;
    // A tool call with its command line as metadata (no serde_json needed).
    let call = session
        .event(EventKind::ToolCall)
        .with_meta("cmd", "rm app.py");
    session.record(&call)?;
    // Tracked, recorded with the contents it had, and deleted.
    session.delete_file("app.py")?;
    session.after_turn(2)?;

    let report = session.rollback(before_2.id)?;
    println!(
        "rolled back turn 2: restored {:?}, undo point {:?}",
        report.written,
        report.source.map(|c| c.to_string())
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("app.py"))?,
        "print('hello, world')\n"
    );

    // Every checkpoint stays listed: before_1 is still reachable (redo/branch).
    let all = store.checkpoints(Some("thread-1"))?;
    println!("{} checkpoints, the first is {}", all.len(), before_1.id);

    // Export the session as canonical JSONL.
    let mut out = Vec::new();
    let stats = store.export(
        &Filter {
            session: Some("thread-1".into()),
            ..Filter::all()
        },
        Format::Jsonl,
        &mut out,
    )?;
    println!(
        "exported {} records, {} bytes of JSONL; first line:",
        stats.written,
        out.len()
    );
    println!(
        "{}",
        String::from_utf8_lossy(out.split(|&b| b == b'\n').next().unwrap_or_default())
    );
    store.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs() {
        super::main().expect("the agent loop example runs to the end");
    }
}
