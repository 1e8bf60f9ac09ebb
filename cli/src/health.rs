//! The store's health: `log` (its records), `verify`, `repair` and
//! `stats`.

use std::process::ExitCode;

use anyhow::Result;
use cairn::ChainHash;

use super::hiargs::RecordFilter;
use super::output::{bytes, count, Style, Table};
use super::records::{check_record_bounds, print_scan, record_path};
use super::{Settings, EXIT_CORRUPT};

/// `cairn log`: streamed, so a log of any length prints in bounded memory.
pub fn log(settings: &Settings, filter: RecordFilter, json: bool) -> Result<ExitCode> {
    let store = settings.open_read()?;
    check_record_bounds(&store, &filter)?;
    let mut filter = filter.filter;
    filter.path = filter.path.map(|p| record_path(&p, store.workspace_dir()));
    print_scan(&store, &filter, json)?;
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// `cairn verify`.
pub fn verify(settings: &Settings, pinned: Option<ChainHash>, json: bool) -> Result<ExitCode> {
    let spin = super::progress::Spinner::start(settings.quiet, "verifying every record and blob");
    let opened = settings
        .open_read()
        .and_then(|store| Ok((store.verify(pinned)?, store)));
    drop(spin);
    let (report, store) = match opened {
        Ok(x) => x,
        Err(e) if json => {
            // Damage that stops the log from being read at all is still a
            // report to a script: not-ok, with the reason.
            let v = serde_json::json!({"ok": false, "error": super::describe(&e)});
            outln!("{v}");
            return Ok(ExitCode::from(super::exit_status_for(&e)));
        }
        Err(e) => return Err(e),
    };
    let ok = report.is_ok();
    // Not damage, so not part of the verdict: a workspace the log does not
    // yet explain.
    if let Some(w) = store.unfinished_rollback_warning() {
        eprintln!("warning: {w}");
    }
    if json {
        outln!("{}", verify_json(&report, ok));
    } else if settings.quiet && ok {
        // Quiet, an intact store is said by the exit code alone.
    } else {
        print_verify(settings, &report, ok)?;
    }
    store.close()?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CORRUPT)
    })
}

/// `verify --json`'s one object.
fn verify_json(report: &cairn::StoreVerifyReport, ok: bool) -> serde_json::Value {
    serde_json::json!({
        "ok": ok,
        "segments": report.log.segments,
        "records": report.log.records,
        "bytes": report.log.bytes,
        "head_lsn": report.log.head.last_lsn.0,
        "head_hash": report.log.head.chain.to_hex(),
        "problems": report.log.problems.iter().map(|p| serde_json::json!({
            "file": p.path.display().to_string(), "offset": p.offset, "lsn": p.lsn.map(|l| l.0), "detail": p.detail,
        })).collect::<Vec<_>>(),
        "blobs": report.blobs.blobs,
        "blob_problems": report.blobs.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "superseded_blob_entries": report.blobs.superseded.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "referenced_blobs": report.lost.checked_blobs,
        "lost_contents": &report.lost.lost,
        "lost_contents_not_listed": report.lost.not_listed,
        "index_files": report.index.checked,
        "index_problems": &report.index.damaged,
        "stale_index_files": &report.index.stale,
        "pinned_head": report.pinned.map(|(h, at)| serde_json::json!({"hash": h.to_hex(), "found_at_lsn": at.map(|l| l.0)})),
    })
}

/// `verify` for a person: the counts, each problem, and the verdict (only
/// the damage and the verdict when quiet).
fn print_verify(settings: &Settings, report: &cairn::StoreVerifyReport, ok: bool) -> Result<()> {
    let st = Style::stdout();
    // Quiet, only the damage and the verdict are printed.
    if !settings.quiet {
        outln!(
            "{}, {} ({}), {} checked; {} that records name, {} not discarded",
            count(report.log.segments, "segment"),
            count(report.log.records, "record"),
            bytes(report.log.bytes),
            count(report.blobs.blobs, "blob"),
            count(report.lost.checked_blobs, "blob"),
            count(report.lost.checkpoints, "checkpoint tree")
        );
        outln!(
            "head: LSN {} hash {}",
            report.log.head.last_lsn,
            report.log.head.chain.to_hex()
        );
    }
    print_problems(settings, &st, report)?;
    if !report.blobs.superseded.is_empty() && !settings.quiet {
        print_superseded(report)?;
    }
    if let Some((h, at)) = report.pinned {
        match at {
            Some(_) if settings.quiet => {}
            Some(lsn) => outln!("pinned head {} found at LSN {lsn}", &h.to_hex()[..16]),
            None => outln!(
                "{} pinned head {} is not in this history: records were removed or rewritten",
                st.red("TAMPERED"),
                h.to_hex()
            ),
        }
    }
    outln!("{}", verdict(&st, report, ok));
    Ok(())
}

/// Each problem `verify` found, a line each: damaged log and blob
/// records, lost contents, damaged index files, and (unless quiet) stale
/// ones.
fn print_problems(
    settings: &Settings,
    st: &Style,
    report: &cairn::StoreVerifyReport,
) -> Result<()> {
    for p in &report.log.problems {
        outln!("{} {p}", st.red("CORRUPT"));
    }
    for p in &report.blobs.problems {
        outln!("{} {p}", st.red("CORRUPT"));
    }
    for l in &report.lost.lost {
        outln!("{} {l}", st.red("LOST"));
    }
    for p in &report.index.damaged {
        outln!("{} {p}", st.red("INDEX"));
    }
    if !settings.quiet {
        for p in &report.index.stale {
            outln!("note: {p} (queries rebuild it; nothing reads it as it is)");
        }
    }
    if report.lost.not_listed > 0 {
        outln!(
            "{} {} more (not listed; `cairn verify --json` lists the first {})",
            st.red("LOST"),
            count(report.lost.not_listed, "lost content"),
            cairn::verify_refs::MAX_LOST_LISTED
        );
    }
    Ok(())
}

/// The damaged entries left in the packs that an intact copy of their
/// blob replaces, and what becomes of them.
fn print_superseded(report: &cairn::StoreVerifyReport) -> Result<()> {
    let n = report.blobs.superseded.len();
    outln!(
        "note: {} left in the packs, {}; nothing reads {}, and a gc that rewrites {} drops {}:",
        count(n as u64, "damaged entry"),
        if n == 1 {
            "replaced by an intact copy of its blob"
        } else {
            "each replaced by an intact copy of its blob"
        },
        if n == 1 { "it" } else { "them" },
        if n == 1 { "its pack" } else { "their packs" },
        if n == 1 { "it" } else { "them" },
    );
    for p in &report.blobs.superseded {
        outln!("  {p}");
    }
    Ok(())
}

/// The last line of `verify`: intact, or what the damage means and what
/// to do about it.
fn verdict(st: &Style, report: &cairn::StoreVerifyReport, ok: bool) -> String {
    if ok {
        st.green("ok: no damage found")
    } else if report.log.problems.is_empty()
        && report.blobs.problems.is_empty()
        && report.lost.is_ok()
        && report.pinned.is_none_or(|(_, at)| at.is_some())
    {
        st.red("query index files (named above) are damaged: the history is intact; delete them and the next query rebuilds them from the log (a query that reads a damaged part rebuilds that file itself)")
    } else if report
        .log
        .problems
        .iter()
        .any(|p| p.missing_dictionary.is_some())
    {
        st.red("records need a dictionary file that is missing or damaged, and so is its second copy (named above): restore it from a backup; `cairn repair` refuses to run until then, as it would drop those intact records")
    } else if report.log.problems.is_empty()
        && report.blobs.problems.is_empty()
        && report.lost.is_ok()
    {
        st.red("the log does not contain the pinned head: records were removed or rewritten since it was pinned (nothing in the store can restore them)")
    } else if report.log.problems.is_empty() && report.blobs.problems.is_empty() {
        st.red("contents that records name are missing from the blob store (the checkpoints, records and paths named above): restore .cairn/blobs from a backup; the records and every other file stay readable")
    } else if report.log.problems.is_empty() {
        st.red("damaged blobs (named above) cannot be rebuilt from the store: restore .cairn/blobs from a backup; the records and every other file stay readable")
    } else {
        st.red("damage found: see above; `cairn repair` keeps every intact record")
    }
}

/// `cairn repair`.
pub fn repair(settings: &Settings, json: bool) -> Result<ExitCode> {
    let found = super::discover::find(settings.store.as_deref(), settings.workspace.as_deref())?;
    let spin = super::progress::Spinner::start(settings.quiet, "repairing");
    let report = cairn::Store::repair(&found.store)?;
    drop(spin);
    // Quiet, the report is printed only when something was lost, set
    // aside or is still damaged.
    let lost = !report.dropped.is_empty()
        || report.placeholders > 0
        || report.damaged_dir.is_some()
        || !report.damaged_blobs.is_empty();
    if json {
        outln!("{}", serde_json::to_string(&report)?);
    } else if lost || !settings.quiet {
        out!("{report}");
    }
    if report.damaged_blobs.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    // Damage repair cannot mend stays: exit as `verify` would right after,
    // so `cairn repair && ...` does not go on as if the store were whole.
    let st = Style::stderr();
    eprintln!(
        "{} repair could not mend {} in the blob store{}",
        st.red("error:"),
        count(report.damaged_blobs.len() as u64, "problem"),
        if json { ":" } else { " (named above)" }
    );
    if json {
        for p in &report.damaged_blobs {
            eprintln!("  {p}");
        }
    }
    eprintln!(
        "no workspace file has the same contents, and a blob's bytes are otherwise only in its \
         pack, so the store cannot rebuild them: restore .cairn/blobs from a backup (or put a file \
         with those contents back in the workspace and run `cairn repair` again); the records, and \
         every file whose blobs are intact, stay readable (`cairn verify` exits {EXIT_CORRUPT} until then)"
    );
    Ok(ExitCode::from(EXIT_CORRUPT))
}

/// `cairn stats`.
pub fn stats(settings: &Settings, json: bool) -> Result<ExitCode> {
    let store = settings.open_read()?;
    let s = store.try_stats()?;
    if json {
        outln!("{}", stats_json(settings, &s));
    } else {
        let place = if settings.in_memory {
            "in memory (--in-memory: gone when this command exits)".to_string()
        } else {
            store.root().display().to_string()
        };
        out!("{}", stats_table(settings, &s, place));
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// The durability a cairn command given these options writes with. Not a
/// property of the files: each writing process chooses it when it opens
/// the store.
fn durability(settings: &Settings) -> cairn::Durability {
    settings.durability.unwrap_or_default()
}

/// `stats --json`'s one object.
fn stats_json(settings: &Settings, s: &cairn::StoreStats) -> serde_json::Value {
    let durability = durability(settings);
    serde_json::json!({
        "segments": s.log.segments,
        "sealed_segments": s.log.sealed_segments,
        "records": s.log.records,
        "log_bytes": s.log.bytes,
        "durability": durability.to_string(),
        "in_memory": settings.in_memory,
        "log_dictionary": s.log.dictionary.map(cairn::store_dir::dictionary_file_name),
        "head_lsn": s.head.last_lsn.0,
        "head_hash": s.head.chain.to_hex(),
        "blobs": s.blobs.blobs,
        "chunks": s.blobs.chunks,
        "packs": s.blobs.packs,
        "blob_raw_bytes": s.blobs.raw_bytes,
        "blob_stored_bytes": s.blobs.stored_bytes,
        "dedup_ratio": s.blobs.dedup_ratio,
        "compression_ratio": s.blobs.compression_ratio,
        "blob_dictionary": s.blobs.dictionary,
    })
}

/// `cairn stats` as a table of two columns, without its header row.
fn stats_table(settings: &Settings, s: &cairn::StoreStats, place: String) -> String {
    let mut t = Table::new(&["", ""]);
    t.row(vec!["store".into(), place]);
    t.row(vec!["records".into(), s.log.records.to_string()]);
    t.row(vec![
        "segments".into(),
        format!("{} ({} sealed)", s.log.segments, s.log.sealed_segments),
    ]);
    t.row(vec!["log bytes".into(), bytes(s.log.bytes)]);
    let durability = durability(settings);
    let durability = if settings.in_memory {
        "none: the store is in memory".to_string()
    } else {
        format!(
            "{durability} (for writes by cairn with these options; each writer chooses at open)"
        )
    };
    t.row(vec!["durability".into(), durability]);
    t.row(vec![
        "log dictionary".into(),
        s.log
            .dictionary
            .map_or_else(|| "none yet".into(), cairn::store_dir::dictionary_file_name),
    ]);
    t.row(vec![
        "head".into(),
        format!("LSN {} hash {}", s.head.last_lsn, s.head.chain.to_hex()),
    ]);
    t.row(vec![
        "blobs".into(),
        format!(
            "{} ({} chunks, {} packs)",
            s.blobs.blobs, s.blobs.chunks, s.blobs.packs
        ),
    ]);
    t.row(vec![
        "blob bytes".into(),
        format!(
            "{} raw, {} stored",
            bytes(s.blobs.raw_bytes),
            bytes(s.blobs.stored_bytes)
        ),
    ]);
    t.row(vec![
        "ratios".into(),
        format!(
            "dedup {:.2}x, compression {:.2}x (raw ÷ stored: stored is {:.0}% of raw)",
            s.blobs.dedup_ratio,
            s.blobs.compression_ratio,
            if s.blobs.raw_bytes == 0 {
                100.0
            } else {
                100.0 * s.blobs.stored_bytes as f64 / s.blobs.raw_bytes as f64
            }
        ),
    ]);
    t.row(vec![
        "blob dictionary".into(),
        s.blobs
            .dictionary
            .clone()
            .unwrap_or_else(|| "none yet".into()),
    ]);
    t.render()
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect::<String>()
}
