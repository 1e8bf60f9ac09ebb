//! `cairn track`, `checkpoint`, `checkpoints`, `rollback`, `gc`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::{CheckpointId, CheckpointInfo, Timestamp};
use cairn::{
    CheckpointRequest, RetentionPolicy, RetentionReport, RollbackReport, RollbackRequest, ScanMode,
};

use super::args::{CheckpointArgs, GcArgs, RollbackArgs, StampArgs};
use super::output::{
    cell, count, quote_not_captured, quote_path, reason_words, relative, Style, Table,
};
use super::Settings;

/// Parses a checkpoint id, with a hint on how to list them.
pub fn parse_id(s: &str) -> Result<CheckpointId> {
    s.parse::<CheckpointId>()
        .map_err(|e| super::usage(format!("{e}; list checkpoints with `cairn checkpoints`")))
}

fn info_json(c: &CheckpointInfo) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": c.id.to_string(),
        "lsn": c.lsn.0,
        "ts": c.ts.to_iso(),
        "session": c.session,
        "run": c.run,
        "phase": c.phase,
        "agent": c.agent,
        "model": c.model,
        "label": c.label,
        "root": c.root.to_hex(),
        "state": c.state.map(|h| h.to_hex()),
        "files": c.counts.files,
        "changed": c.counts.changed,
        "skipped": c.counts.skipped.values().sum::<u64>(),
        "skipped_by_reason": c.counts.skipped,
        "discarded": c.discarded,
        "not_captured": c.not_captured,
    });
    // How the checkpoint found what changed: known to the command that
    // took it, not to a listing.
    if let (Some(s), Some(m)) = (&c.scan, v.as_object_mut()) {
        m.insert("scan".into(), serde_json::json!(s.how));
        m.insert("scan_reason".into(), serde_json::json!(s.reason));
    }
    v
}

/// `cairn track PATH...`.
pub fn track(settings: &Settings, paths: &[String]) -> Result<ExitCode> {
    let store = settings.open_write()?;
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    store.track(&refs)?;
    print_warnings(&store);
    // (In memory, no next checkpoint captures them: see memory::gone_note.)
    if !settings.quiet && !settings.in_memory {
        eprintln!(
            "tracking {}; the next checkpoint captures {}",
            count(paths.len() as u64, "path"),
            if paths.len() == 1 { "it" } else { "them" }
        );
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// An empty `--session` is refused as `record` refuses an empty `session`
/// field, rather than recorded as the default session.
fn refuse_empty_session(session: Option<&str>) -> Result<()> {
    match session {
        Some("") => Err(super::usage(
            "--session must not be empty (leave it out for the default session)",
        )),
        _ => Ok(()),
    }
}

/// An empty `--run`, `--phase`, `--agent` or `--model` is refused: it would
/// be recorded as an empty id that no filter finds, not as none.
fn refuse_empty_stamp(stamp: &StampArgs) -> Result<()> {
    for (flag, v) in [
        ("--run", &stamp.run),
        ("--phase", &stamp.phase),
        ("--agent", &stamp.agent),
        ("--model", &stamp.model),
    ] {
        if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(super::usage(format!(
                "{flag} must not be empty (leave it out for none)"
            )));
        }
    }
    Ok(())
}

/// The bytes of a `--state FILE` (`-`: stdin), read before the store is
/// opened, so a bad file never takes the lock; the error names the file.
fn read_state(file: Option<&std::path::Path>) -> Result<Option<Vec<u8>>> {
    let Some(f) = file else {
        return Ok(None);
    };
    if f.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
            .context("--state -: read stdin")?;
        return Ok(Some(bytes));
    }
    if f.is_dir() {
        return Err(super::usage(format!(
            "--state {}: is a directory; give a file (or `-` for stdin)",
            f.display()
        )));
    }
    std::fs::read(f)
        .with_context(|| format!("--state {}: read the state file", f.display()))
        .map(Some)
}

/// `cairn checkpoint`.
pub fn create(settings: &Settings, a: CheckpointArgs) -> Result<ExitCode> {
    refuse_empty_session(a.session.as_deref())?;
    refuse_empty_stamp(&a.stamp)?;
    let state = read_state(a.state.as_deref())?;
    let store = settings.open_write()?;
    let spin = super::progress::Spinner::start(settings.quiet, "checkpointing the workspace");
    let info = store.checkpoint(CheckpointRequest {
        session: a
            .session
            .unwrap_or_else(|| cairn::DEFAULT_SESSION.to_string()),
        run: a.stamp.run,
        phase: a.stamp.phase,
        agent: a.stamp.agent,
        model: a.stamp.model,
        label: a.label.filter(|l| !l.trim().is_empty()),
        state,
        scan: if a.tracked_only {
            ScanMode::TrackedOnly
        } else {
            ScanMode::Full
        },
    })?;
    drop(spin);
    print_warnings(&store);
    if a.json {
        outln!("{}", info_json(&info));
    } else {
        print_created(settings, &info)?;
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// Says what `cairn checkpoint` captured: its id, counts and label, why
/// it scanned everything, what it skipped, and (even with `--quiet`, as
/// a warning) the files it could not capture.
fn print_created(settings: &Settings, info: &CheckpointInfo) -> Result<()> {
    let skipped: u64 = info.counts.skipped.values().sum();
    let st = Style::stdout();
    if !settings.quiet {
        outln!(
            "{} {}  {}, {} changed, {} skipped{}",
            st.green("checkpoint"),
            st.bold(&info.id.to_string()),
            count(info.counts.files, "file"),
            info.counts.changed,
            skipped,
            info.label
                .as_deref()
                .map(|l| format!("  \"{}\"", cell(l)))
                .unwrap_or_default()
        );
        // A watcher runs, yet this checkpoint walked everything: say why.
        if let Some(why) = info.scan.as_ref().and_then(|s| s.reason.as_deref()) {
            if why != cairn::watcher::NO_WATCHER {
                outln!("  full scan: {why}");
            }
        }
        if skipped > 0 {
            let reasons: Vec<String> = info
                .counts
                .skipped
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            outln!("  skipped: {}", reasons.join(", "));
        }
    }
    if let Some(named) = not_captured(info) {
        // Quiet, it is still said, as a warning: these files are not
        // in the checkpoint, which the user may not expect.
        if settings.quiet {
            eprintln!("warning: not captured in {}: {named}", info.id);
        } else {
            outln!("  {} {named}", st.yellow("not captured:"));
        }
    }
    Ok(())
}

/// The files a checkpoint could not capture (too large, unreadable, a
/// name that is not UTF-8), the first few by name, and what that means;
/// `None` when there are none.
fn not_captured(info: &CheckpointInfo) -> Option<String> {
    if info.not_captured.is_empty() {
        return None;
    }
    // The first few by name; the record's meta keeps them all (up to
    // its own bound), and `checkpoints --json` gives them.
    const SHOWN: usize = 5;
    let mut named: Vec<String> = info
        .not_captured
        .iter()
        .take(SHOWN)
        .map(|n| format!("{} ({})", quote_not_captured(n), reason_words(&n.why)))
        .collect();
    // The record names at most 100; the counts have them all.
    use cairn::checkpoint::reason;
    let total = reason::NAMED
        .iter()
        .filter_map(|r| info.counts.skipped.get(*r))
        .sum::<u64>()
        .max(info.not_captured.len() as u64);
    if total > SHOWN as u64 {
        named.push(format!("{} more", total - SHOWN as u64));
    }
    let changing = info
        .counts
        .skipped
        .get(reason::CHANGING)
        .is_some_and(|n| *n > 0);
    Some(format!(
        "{}: a rollback cannot bring {} back{}",
        named.join(", "),
        if total == 1 { "it" } else { "them" },
        if changing {
            "; `changing`: written to on every read, and a mix of old and new bytes is never stored: checkpoint again once it is still"
        } else {
            ""
        }
    ))
}

/// `cairn checkpoints`.
pub fn list(settings: &Settings, session: Option<&str>, json: bool) -> Result<ExitCode> {
    // Read-only: listing never waits for (or blocks) a recording process.
    let store = settings.open_read()?;
    // One scan gives both the checkpoints and the imported records.
    let cairn::CheckpointListing {
        checkpoints: all,
        imported,
    } = store.checkpoint_listing(session)?;
    if let Some(w) = store.unfinished_rollback_warning() {
        eprintln!("warning: {w}");
    }
    if json {
        for c in &all {
            outln!("{}", info_json(c));
        }
        if !imported.is_empty() {
            eprintln!(
                "note: {} imported without files (from another tool's audit log, or copies of checkpoints whose files gc had collected) {} not listed: `cairn log --kind checkpoint.create` shows {}",
                super::output::count(imported.len() as u64, "checkpoint record"),
                if imported.len() == 1 { "is" } else { "are" },
                if imported.len() == 1 { "it" } else { "them" },
            );
        }
    } else if all.is_empty() && !imported.is_empty() {
        outln!("no checkpoints of this store yet");
    } else if all.is_empty() && settings.quiet {
        outln!("no checkpoints yet");
    } else if all.is_empty() {
        outln!("no checkpoints yet: create one with `cairn checkpoint --label NAME`");
    } else {
        out!("{}", checkpoints_table(&all).render());
    }
    store.close()?;
    if !json && !imported.is_empty() {
        print_imported(&imported)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkpoints `all` as `cairn checkpoints` lists them.
fn checkpoints_table(all: &[CheckpointInfo]) -> Table {
    let st = Style::stdout();
    let now = Timestamp::now();
    let mut t = Table::new(&["ID", "WHEN", "SESSION", "FILES", "CHANGED", "LABEL"]);
    for c in all {
        let id = if c.discarded {
            st.dim(&format!("{} (discarded)", c.id))
        } else {
            st.bold(&c.id.to_string())
        };
        t.row(vec![
            id,
            format!(
                "{} {}",
                c.ts.to_iso(),
                st.dim(&format!("({})", relative(c.ts, now)))
            ),
            cell(&c.session),
            c.counts.files.to_string(),
            c.counts.changed.to_string(),
            cell(c.label.as_deref().unwrap_or_default()),
        ]);
    }
    t
}

/// Lists checkpoint records imported without files after the table:
/// records, not checkpoints of this store, listed apart so no one takes
/// them for restore points.
fn print_imported(imported: &[cairn::Record]) -> Result<()> {
    let collected = imported
        .iter()
        .any(|r| cairn::checkpoint::collected_note(&r.event).is_some());
    // Points of imported conversations name what they continue from.
    let points = imported.iter().any(|r| !r.event.parents.is_empty());
    outln!(
        "imported checkpoint records (from another tool's audit log{}{}; no files, not restorable):",
        if collected {
            ", or copies of checkpoints whose files gc had collected"
        } else {
            ""
        },
        if points {
            ", or points of conversations imported from their transcripts"
        } else {
            ""
        }
    );
    for r in imported {
        outln!(
            "  c{}  {}{}",
            r.lsn,
            super::output::one_line(r.event.label.as_deref().unwrap_or("-"), 60),
            collected_copy_words(&r.event)
        );
    }
    Ok(())
}

/// For an imported checkpoint record that copies a checkpoint whose files
/// gc had collected (`import --collected-checkpoints record`), the words
/// that say so after its label; nothing for any other record.
fn collected_copy_words(e: &cairn::Event) -> String {
    let Some(note) = cairn::checkpoint::collected_note(e) else {
        return String::new();
    };
    match note.get("checkpoint").and_then(|c| c.as_str()) {
        Some(of) => format!("  (a copy of {of}: gc had collected its files)"),
        None => "  (gc had collected its files)".to_string(),
    }
}

/// `cairn rollback`.
pub fn rollback(settings: &Settings, a: RollbackArgs) -> Result<ExitCode> {
    let target = parse_id(&a.id)?;
    refuse_empty_session(a.session.as_deref())?;
    refuse_empty_stamp(&a.stamp)?;
    // Read (and so checked) for a dry run too, which does not use it: the
    // dry run of a command that would fail fails.
    let state = read_state(a.state.as_deref())?;
    // A dry run changes nothing, so it reads beside a recording process.
    let store = if a.dry_run {
        settings.open_read()?
    } else {
        settings.open_write()?
    };
    // A path in neither tree is most likely a typo: refused, as git
    // refuses a pathspec that matches no file, rather than a rollback
    // (with its undo point and record) that changes nothing.
    let unmatched = store
        .paths_matching_nothing(target, &a.paths)
        .with_context(|| format!("roll back to {target}"))?;
    if let Some(p) = unmatched.first() {
        anyhow::bail!(
            "roll back to {target}: `--path {}` matches nothing in the workspace or in checkpoint {target}",
            quote_path(p)
        );
    }
    // The directory acted on, first and absolute: a store says where its
    // workspace is, and the user sees it before reading what changes.
    // (A store without one fails below, with the reason.)
    let workspace = store
        .workspace_dir()
        .map(|w| w.canonicalize().unwrap_or_else(|_| w.to_path_buf()));
    if let (Some(w), false, false) = (&workspace, a.json, settings.quiet && !a.dry_run) {
        outln!("workspace {}", quote_path(&w.to_string_lossy()));
    }
    let spin = super::progress::Spinner::start(settings.quiet, "rolling back");
    let report = store
        .rollback(RollbackRequest {
            target,
            paths: a.paths.clone(),
            dry_run: a.dry_run,
            session: a
                .session
                .unwrap_or_else(|| cairn::DEFAULT_SESSION.to_string()),
            run: a.stamp.run,
            phase: a.stamp.phase,
            agent: a.stamp.agent,
            model: a.stamp.model,
            state,
        })
        .with_context(|| format!("roll back to {target}"))?;
    drop(spin);
    print_warnings(&store);
    if a.json {
        outln!("{}", rollback_json(&report, a.dry_run));
    } else if settings.quiet && !a.dry_run {
        warn_kept(&report);
    } else {
        print_rollback(&report, a.dry_run)?;
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// `rollback --json`'s one object.
fn rollback_json(report: &RollbackReport, dry_run: bool) -> serde_json::Value {
    serde_json::json!({
        "workspace": report.workspace.to_string_lossy(),
        "target": report.target.to_string(),
        "source": report.source.map(|s| s.to_string()),
        "lsn": report.lsn.map(|l| l.0),
        "dry_run": dry_run,
        "written": report.written,
        "deleted": report.deleted,
        "created_dirs": report.created_dirs,
        "removed_dirs": report.removed_dirs,
        "dir_modes": report.dir_modes,
        "kept": report.kept,
        "state": report.state_hash.map(|h| h.to_hex()),
        "interrupted_temporaries": report.interrupted_temporaries,
    })
}

/// A quiet real rollback says only what needs the user: the paths it
/// left as they are, as warnings. (A dry run's plan is its answer.)
fn warn_kept(report: &RollbackReport) {
    for k in &report.kept {
        eprintln!(
            "warning: kept {} as it is on disk ({}): move it aside to roll it back",
            quote_path(&k.path),
            k.why
        );
    }
}

/// A rollback's plan (dry run) or what it did, path by path, then in a
/// line of counts.
fn print_rollback(report: &RollbackReport, dry_run: bool) -> Result<()> {
    let st = Style::stdout();
    if report.interrupted_temporaries > 0 {
        // Not in the plan: cairn's own, removed before the rollback
        // takes its undo point (the real one warns how many it removed).
        outln!(
            "first, the rollback would remove the {} a rollback interrupted part way left (.cairn-restore-*.tmp; not listed below)",
            count(report.interrupted_temporaries as u64, "temporary file")
        );
    }
    // Each group: the dry run's word, the real run's, the paths, a
    // suffix (directories), the colour.
    type Paint = fn(&Style, &str) -> String;
    let groups: [(&str, &str, &[String], &str, Paint); 5] = [
        ("write ", "wrote  ", &report.written, "", Style::green),
        ("delete", "deleted", &report.deleted, "", Style::red),
        ("mkdir ", "created", &report.created_dirs, "/", Style::cyan),
        ("rmdir ", "removed", &report.removed_dirs, "/", Style::red),
        ("chmod ", "chmod'd", &report.dir_modes, "/", Style::cyan),
    ];
    for (would, did, paths, suffix, paint) in groups {
        // A dry run cannot know whether a directory holds files no
        // checkpoint tracks (ignored ones), which keep it.
        let suffix = if dry_run && would == "rmdir " {
            "/ (if it ends up empty)"
        } else {
            suffix
        };
        for p in paths {
            let word = if dry_run { would } else { did };
            outln!("  {} {}{suffix}", paint(&st, word), quote_path(p));
        }
    }
    for k in &report.kept {
        outln!(
            "  {} {} ({})",
            st.yellow(if dry_run { "keep  " } else { "kept   " }),
            quote_path(&k.path),
            k.why
        );
    }
    if !report.kept.is_empty() {
        let (are, them) = match report.kept.len() {
            1 => ("it is", "it"),
            _ => ("they are", "them"),
        };
        outln!(
            "{} left as {are} on disk: move {them} aside to roll {them} back",
            count(report.kept.len() as u64, "path"),
        );
    }
    print_rollback_counts(report, dry_run)
}

/// The line of counts that ends [`print_rollback`], and where the state
/// and the undo point are.
fn print_rollback_counts(report: &RollbackReport, dry_run: bool) -> Result<()> {
    let verb = if dry_run { "would" } else { "did" };
    let mut dirs = String::new();
    if !report.removed_dirs.is_empty() {
        dirs += &format!(
            ", remove {}",
            count(report.removed_dirs.len() as u64, "dir")
        );
    }
    if !report.dir_modes.is_empty() {
        dirs += &format!(
            ", set the mode of {}",
            count(report.dir_modes.len() as u64, "dir")
        );
    }
    outln!(
        "{} {verb} write {}, delete {}, create {}{dirs}",
        if dry_run { "dry run:" } else { "rolled back:" },
        report.written.len(),
        report.deleted.len(),
        count(report.created_dirs.len() as u64, "dir")
    );
    if let Some(h) = report.state_hash {
        let size = report.state.as_deref().map_or(0, <[u8]>::len);
        outln!(
            "{}'s application state is blob {h} ({}): `cairn blob get {h}` prints it",
            report.target,
            super::output::bytes(size as u64)
        );
    }
    if let Some(src) = report.source {
        outln!(
            "the state before the rollback is checkpoint {src}: `cairn rollback {src}` undoes it"
        );
    }
    Ok(())
}

/// `cairn gc`.
pub fn gc(settings: &Settings, a: GcArgs) -> Result<ExitCode> {
    let store = settings.open_write()?;
    let policy = RetentionPolicy {
        keep_per_session: a.keep_per_session,
        max_bytes: a.max_bytes,
    };
    let spin = super::progress::Spinner::start(settings.quiet, "collecting garbage");
    let report = if a.compact {
        store.gc_compact(&policy)?
    } else {
        store.gc(&policy)?
    };
    drop(spin);
    print_warnings(&store);
    for p in &report.gc.problems {
        eprintln!("warning: gc: {p}");
    }
    let discarded: Vec<String> = report.discarded.iter().map(|c| c.to_string()).collect();
    if a.json {
        outln!("{}", gc_json(&report, &discarded, a.compact));
    } else if settings.quiet {
        // Quiet, only a budget not met is said, as a warning.
        if let Some(b) = report.budget.as_ref().filter(|b| !b.met()) {
            eprintln!("warning: {}", budget_not_met(b));
        }
        if let Some(over) = report.stored_over_budget() {
            eprintln!("warning: {}", stored_over_budget(&report, over));
        }
    } else {
        print_gc(&report, &policy, &discarded)?;
    }
    for (c, why) in &report.damaged {
        eprintln!("warning: checkpoint {c}: its tree cannot be read whole: {why}");
    }
    store.close()?;
    if !report.collected {
        eprintln!(
            "no blob was collected, as what a damaged tree names is unknown (see `cairn verify`)"
        );
        return Ok(ExitCode::from(super::EXIT_CORRUPT));
    }
    Ok(ExitCode::SUCCESS)
}
/// `gc --json`'s one object.
fn gc_json(report: &RetentionReport, discarded: &[String], compact: bool) -> serde_json::Value {
    let left = report.gc.left();
    let (below, damaged_packs) = (
        report.gc.left_below_threshold,
        report.gc.left_in_damaged_packs,
    );
    serde_json::json!({
        "discarded": discarded,
        "retained": report.retained,
        "live_blobs": report.live_blobs,
        "removed_blobs": report.gc.removed_blobs,
        "freed_bytes": report.gc.freed_bytes,
        "damaged": report.damaged.iter().map(|(c, why)| serde_json::json!({"checkpoint": c.to_string(), "reason": why})).collect::<Vec<_>>(),
        "collected": report.collected,
        "budget": report.budget.as_ref().map(|b| serde_json::json!({
            "max_bytes": b.max_bytes,
            "kept_bytes": b.kept_bytes,
            "floor_bytes": b.floor_bytes,
            "met": b.met(),
            "stored_bytes": report.gc.stored_bytes,
            "stored_over_by": report.stored_over_budget().unwrap_or(0),
        })),
        "compact": compact,
        "stored_bytes": report.gc.stored_bytes,
        "left_blobs": left.blobs,
        "left_bytes": left.dead_bytes,
        "left_below_threshold": {
            "blobs": below.blobs,
            "bytes": below.dead_bytes,
            "rewrite_threshold": REWRITE_THRESHOLD,
            "free_with": "cairn gc --compact",
        },
        "left_in_damaged_packs": {
            "blobs": damaged_packs.blobs,
            "bytes": damaged_packs.dead_bytes,
        },
        "packs_rewritten_for_budget": report.gc.packs_rewritten_for_budget,
        "problems": report.gc.problems,
        "budget_met": report.budget.as_ref().map(|b| b.met()),
        "collected_discarded": report.collected_discarded.iter().map(|c| serde_json::json!({
            "checkpoint": c.id.to_string(),
            "discarded_at": c.discarded_at.0,
            "by_retention": c.by_retention,
        })).collect::<Vec<_>>(),
    })
}

/// What a gc did, in words.
fn print_gc(
    report: &RetentionReport,
    policy: &RetentionPolicy,
    discarded: &[String],
) -> Result<()> {
    if policy.keep_per_session.is_none() && policy.max_bytes.is_none() {
        outln!("no retention policy given: no checkpoint evicted (see --keep-per-session, --max-bytes)");
    } else if discarded.is_empty() {
        outln!("no checkpoint evicted");
    } else {
        outln!(
            "evicted {}: {}",
            count(discarded.len() as u64, "checkpoint"),
            super::output::short_list(discarded)
        );
    }
    outln!(
        "{} retained; {}; removed {}, freed {}",
        count(report.retained as u64, "checkpoint"),
        count(report.live_blobs as u64, "live blob"),
        count(report.gc.removed_blobs, "unreferenced blob"),
        super::output::bytes(report.gc.freed_bytes)
    );
    print_gc_packs(report)?;
    if let Some(b) = report.budget.as_ref().filter(|b| !b.met()) {
        outln!("{}", budget_not_met(b));
    }
    if let Some(over) = report.stored_over_budget() {
        outln!("{}", stored_over_budget(report, over));
    }
    if let Some(line) = collected_discarded(report) {
        outln!("{line}");
    }
    Ok(())
}

/// What gc left in packs it did not rewrite (under the rewrite threshold,
/// or kept for a damaged live blob), and the packs it rewrote under the
/// threshold to fit the budget.
fn print_gc_packs(report: &RetentionReport) -> Result<()> {
    let (below, damaged_packs) = (
        report.gc.left_below_threshold,
        report.gc.left_in_damaged_packs,
    );
    if below.blobs > 0 {
        let (their_packs_are, they_stay, them) = if below.blobs == 1 {
            ("its pack is", "it stays", "it")
        } else {
            ("their packs are", "they stay", "them")
        };
        outln!(
            "left {} ({}) in place: {their_packs_are} at most {} dead, under the rewrite threshold, so rewriting would copy more than twice what it frees; {they_stay} readable until a later gc rewrites the pack: `cairn gc --compact` removes {them} now",
            count(below.blobs, "unreferenced blob"),
            super::output::bytes(below.dead_bytes),
            threshold_percent()
        );
    }
    if damaged_packs.blobs > 0 {
        outln!(
            "left {} ({}) in packs kept because a live blob in them is damaged (see the warnings above and `cairn verify`)",
            count(damaged_packs.blobs, "unreferenced blob"),
            super::output::bytes(damaged_packs.dead_bytes)
        );
    }
    if report.gc.packs_rewritten_for_budget > 0 {
        outln!(
            "rewrote {} under the rewrite threshold to fit the budget on disk: the blob store takes {}",
            count(report.gc.packs_rewritten_for_budget, "pack"),
            super::output::bytes(report.gc.stored_bytes)
        );
    }
    Ok(())
}

/// The line naming the checkpoints discarded before this gc whose
/// contents it collected, and what discarded each; `None` when there are
/// none.
fn collected_discarded(report: &RetentionReport) -> Option<String> {
    if report.collected_discarded.is_empty() {
        return None;
    }
    let named: Vec<String> = report
        .collected_discarded
        .iter()
        .map(|c| {
            format!(
                "{} (discarded at LSN {} {})",
                c.id,
                c.discarded_at,
                if c.by_retention {
                    "by an earlier gc"
                } else {
                    "by a recorded checkpoint.discard event"
                }
            )
        })
        .collect();
    Some(format!(
        "collected the contents of {} discarded before this gc: {}",
        count(named.len() as u64, "checkpoint"),
        named.join(", ")
    ))
}

/// The dead share past which gc rewrites a pack (the store's default, the
/// one `cairn gc` runs with).
const REWRITE_THRESHOLD: f64 = cairn::checkpoint::DEFAULT_REWRITE_THRESHOLD;

/// [`REWRITE_THRESHOLD`] in words: "30%".
fn threshold_percent() -> String {
    format!("{:.0}%", REWRITE_THRESHOLD * 100.0)
}

/// What gc says when the blob store is still `over` bytes over the
/// `--max-bytes` budget on disk after collecting.
fn stored_over_budget(report: &cairn::RetentionReport, over: u64) -> String {
    let max = report.budget.as_ref().map_or(0, |b| b.max_bytes);
    let left = report.gc.left();
    let mut s = format!(
        "over budget on disk: the blob store takes {}, {} over the budget of {}; ",
        super::output::bytes(report.gc.stored_bytes),
        super::output::bytes(over),
        super::output::bytes(max)
    );
    if left.blobs == 0 {
        s += "every unreferenced blob is gone, and what is left is referenced (the retained checkpoints' files and trees, blobs records name, a rollback's tree)";
    } else {
        s += &format!(
            "{} ({}) could not be removed, and the rest is referenced",
            count(left.blobs, "unreferenced blob"),
            super::output::bytes(left.dead_bytes)
        );
    }
    s
}

/// What gc says when `--max-bytes` could not be met.
fn budget_not_met(b: &cairn::checkpoint::BudgetOutcome) -> String {
    format!(
        "budget not met: the retained checkpoints hold {} of contents, over the budget of {}; {} of it no eviction can free (the newest checkpoint of each session is always kept, and contents records or a rollback still name stay)",
        super::output::bytes(b.kept_bytes),
        super::output::bytes(b.max_bytes),
        super::output::bytes(b.floor_bytes)
    )
}

/// Prints, on stderr, the warnings of the snapshot flows the store ran
/// (a damaged cache file set aside, an interrupted rollback recorded).
fn print_warnings(store: &cairn::Store) {
    for w in store.take_checkpoint_warnings() {
        eprintln!("warning: {w}");
    }
}
