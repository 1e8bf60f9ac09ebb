//! `cairn import --format claude-code|codex|swe-agent`: agent histories
//! in, through the library's importers (`cairn::import::claude_code`,
//! `cairn::import::codex`, `cairn::import::swe_agent`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cairn::import::claude_code::{ClaudeCodeOptions, ClaudeCodeReport};
use cairn::import::codex::{CodexOptions, CodexReport};
use cairn::import::swe_agent::{SweAgentOptions, SweAgentReport};
use cairn::import::AgentCounts;

use super::output::count;
use super::Settings;

/// The `--format` values this module imports (the agent history shapes,
/// beside the JSONL shapes `interop` imports).
pub const AGENT_FORMATS: [&str; 3] = ["claude-code", "codex", "swe-agent"];

/// `cairn import --format FORMAT PATH...` for the agent formats (whose
/// flags [`crate::hiargs`] has checked).
pub fn import(
    settings: &Settings,
    format: &str,
    files: &[PathBuf],
    json: bool,
    file_history: Option<PathBuf>,
    base: Option<PathBuf>,
) -> Result<ExitCode> {
    match format {
        "codex" => import_codex(settings, files, json, base),
        "swe-agent" => import_swe_agent(settings, files, json, base),
        _ => import_claude_code(settings, files, json, file_history),
    }
}

/// `cairn import --format codex PATH...`: each PATH a rollout or a
/// directory of them. Prints what was recorded, what was recorded before,
/// the record types kept as generic records, and each update whose diff
/// was not applied (recorded without contents).
fn import_codex(
    settings: &Settings,
    files: &[PathBuf],
    json: bool,
    base: Option<PathBuf>,
) -> Result<ExitCode> {
    let store = settings.open_write()?;
    let report = store.import_codex(files, &CodexOptions::default().with_base(base))?;
    if json {
        outln!("{}", codex_json(&report));
    } else if !settings.quiet {
        eprintln!("{}", codex_words(&report));
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// The summary `--json` prints for a Codex import.
fn codex_json(r: &CodexReport) -> serde_json::Value {
    let not_applied: Vec<serde_json::Value> = r
        .not_applied
        .iter()
        .map(|n| serde_json::json!({"file": n.file, "line": n.line, "path": n.path, "reason": n.reason}))
        .collect();
    counts_json(
        &r.imported,
        serde_json::json!({
            "lines": r.lines,
            "unknown_types": r.unknown,
            "diffs_not_applied": not_applied,
        }),
    )
}

/// The summary of a Codex import in words, for stderr.
fn codex_words(r: &CodexReport) -> String {
    let mut s = counts_words(
        &r.imported,
        "rollout",
        &[
            count(r.imported.sessions.len() as u64, "session"),
            count(r.lines, "line"),
        ],
    );
    s += &unknown_words(&r.unknown);
    for n in &r.not_applied {
        s += &format!(
            "\n{}:{}: {}: {}; recorded without contents",
            n.file, n.line, n.path, n.reason
        );
    }
    s
}

/// What every agent import's `--json` summary says (`count`, the LSNs,
/// `files`, `already_recorded`, `sessions`), with `own`'s fields added.
fn counts_json(c: &AgentCounts, own: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "count": c.records,
        "first_lsn": c.range.map(|x| x.0 .0),
        "last_lsn": c.range.map(|x| x.1 .0),
        "files": c.files,
        "already_recorded": c.already,
        "sessions": c.sessions,
    });
    if let (Some(all), serde_json::Value::Object(own)) = (v.as_object_mut(), own) {
        all.extend(own);
    }
    v
}

/// "imported N records from M FILES (DETAILS)", and the events recorded
/// before, as every agent import says it.
fn counts_words(c: &AgentCounts, file_noun: &str, details: &[String]) -> String {
    let mut s = format!(
        "imported {} from {} ({})",
        count(c.records, "record"),
        count(c.files, file_noun),
        details.join(", "),
    );
    if c.already > 0 {
        s += &format!("; {} recorded before, skipped", count(c.already, "event"));
    }
    s
}

/// The record types an import kept as generic records, in words ("" for none).
fn unknown_words(unknown: &std::collections::BTreeMap<String, u64>) -> String {
    if unknown.is_empty() {
        return String::new();
    }
    let t: Vec<String> = unknown.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    format!("; record types kept as generic records: {}", t.join(", "))
}

/// `cairn import --format swe-agent FILE.traj...`. Prints what was
/// recorded, what was recorded before, the trajectories whose submission
/// made no file events (no `--base`), and each submitted file whose hunks
/// were not applied (recorded without contents).
fn import_swe_agent(
    settings: &Settings,
    files: &[PathBuf],
    json: bool,
    base: Option<PathBuf>,
) -> Result<ExitCode> {
    let store = settings.open_write()?;
    let report = store.import_swe_agent(files, &SweAgentOptions::default().with_base(base))?;
    if json {
        outln!("{}", swe_agent_json(&report));
    } else if !settings.quiet {
        eprintln!("{}", swe_agent_words(&report));
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// The summary `--json` prints for a SWE-agent import.
fn swe_agent_json(r: &SweAgentReport) -> serde_json::Value {
    let not_applied: Vec<serde_json::Value> = r
        .not_applied
        .iter()
        .map(|n| serde_json::json!({"file": n.file, "path": n.path, "reason": n.reason}))
        .collect();
    counts_json(
        &r.imported,
        serde_json::json!({
            "steps": r.steps,
            "submitted_files": r.submitted_files,
            "submissions_without_base": r.without_base,
            "diffs_not_applied": not_applied,
        }),
    )
}

/// The summary of a SWE-agent import in words, for stderr.
fn swe_agent_words(r: &SweAgentReport) -> String {
    let mut s = counts_words(
        &r.imported,
        "trajectory file",
        &[
            count(r.steps, "step"),
            format!("{} of submissions", count(r.submitted_files, "file")),
        ],
    );
    for f in &r.without_base {
        s += &format!(
            "\n{f}: its submission is recorded as a patch only: give --base DIR (the tree the run started from) for its file events"
        );
    }
    for n in &r.not_applied {
        s += &format!(
            "\n{}: {}: {}; recorded without contents",
            n.file, n.path, n.reason
        );
    }
    s
}

/// `cairn import --format claude-code PATH...`: each PATH a session's
/// transcript or a project directory. Prints what was recorded, what was
/// recorded before, the record types kept as generic records, and the
/// edits whose contents disagree with the transcript's own patch.
fn import_claude_code(
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
    counts_json(
        &r.imported,
        serde_json::json!({
            "lines": r.lines,
            "unknown_types": r.unknown,
            "contents_disagree": r.mismatches,
            "backups": r.backups,
            "backups_missing": r.backups_missing,
        }),
    )
}

/// The summary in words, for stderr.
fn report_words(r: &ClaudeCodeReport) -> String {
    let mut s = counts_words(
        &r.imported,
        "transcript",
        &[
            count(r.imported.sessions.len() as u64, "session"),
            count(r.lines, "line"),
        ],
    );
    s += &unknown_words(&r.unknown);
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
