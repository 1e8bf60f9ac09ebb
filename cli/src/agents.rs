//! `cairn import --format claude-code`: agent transcripts in, through the
//! library's importer (`cairn::import::claude_code`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cairn::import::claude_code::{ClaudeCodeOptions, ClaudeCodeReport};

use super::Settings;

/// The `--format` values this module imports (the agent transcript
/// shapes, beside the JSONL shapes `interop` imports).
pub const AGENT_FORMATS: [&str; 1] = ["claude-code"];

/// `cairn import --format claude-code PATH...`: each PATH a session's
/// transcript or a project directory. Prints what was recorded, what was
/// recorded before, the record types kept as generic records, and the
/// edits whose contents disagree with the transcript's own patch.
pub fn import(
    settings: &Settings,
    files: &[PathBuf],
    json: bool,
    file_history: Option<PathBuf>,
) -> Result<ExitCode> {
    let store = settings.open_write()?;
    let opts = ClaudeCodeOptions::default().with_file_history(file_history);
    let report = store.import_claude_code(files, &opts)?;
    if json {
        outln!("{}", report_json(&report));
    } else if !settings.quiet {
        eprintln!("{}", report_words(&report));
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// The summary `--json` prints.
fn report_json(r: &ClaudeCodeReport) -> serde_json::Value {
    serde_json::json!({
        "count": r.records,
        "first_lsn": r.range.map(|x| x.0 .0),
        "last_lsn": r.range.map(|x| x.1 .0),
        "files": r.files,
        "lines": r.lines,
        "already_recorded": r.already,
        "sessions": r.sessions,
        "unknown_types": r.unknown,
        "contents_disagree": r.mismatches,
        "backups": r.backups,
        "backups_missing": r.backups_missing,
    })
}

/// The summary in words, for stderr.
fn report_words(r: &ClaudeCodeReport) -> String {
    use super::output::count;
    let mut s = format!(
        "imported {} from {} ({}, {})",
        count(r.records, "record"),
        count(r.files, "transcript"),
        count(r.sessions.len() as u64, "session"),
        count(r.lines, "line"),
    );
    if r.already > 0 {
        s += &format!("; {} recorded before, skipped", count(r.already, "event"));
    }
    if !r.unknown.is_empty() {
        let t: Vec<String> = r.unknown.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        s += &format!("; record types kept as generic records: {}", t.join(", "));
    }
    if r.backups + r.backups_missing > 0 {
        s += &format!(
            "; {} stored ({} not found)",
            count(r.backups, "file-history backup"),
            r.backups_missing
        );
    }
    for m in &r.mismatches {
        s += &format!(
            "\n{m}: the edit's result disagrees with its structuredPatch; recorded without the new contents"
        );
    }
    s
}
