//! Time travel: a workspace at any point of its history, through `show`,
//! `tree`, `diff`, `history`, `blame` and `branches`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::diff::DiffStatus;
use cairn::jsonl::Record;
use cairn::Point;
use cairn::{EventKind, Lsn};

use super::hiargs::{parse_point, PointArg};
use super::output::{
    cell, count, one_line, quote_not_captured, quote_path, reason_words, Style, Table,
};
use super::records::{note_time_points, print_records, print_scan, record_path};
use super::{Settings, EXIT_CORRUPT};

/// Splits `POINT:PATH` at the rightmost colon whose left side is a point,
/// so ISO times (which contain colons) work: `2026-11-22T10:00:00Z:a.rs`.
fn split_point_path(spec: &str) -> Result<(Point, &str)> {
    for (i, _) in spec.rmatch_indices(':') {
        if let Ok(p) = spec[..i].parse::<Point>() {
            let path = &spec[i + 1..];
            if path.is_empty() {
                return Err(super::usage(format!(
                    "`{spec}` names no path after the point"
                )));
            }
            return Ok((p, path));
        }
    }
    // Say what is wrong with the point, when there is one before a colon.
    let why = match spec.rfind(':') {
        Some(i) => match spec[..i].parse::<Point>() {
            Err(e) => format!(": {e}"),
            Ok(_) => String::new(),
        },
        None => String::new(),
    };
    Err(super::usage(format!(
        "`{spec}` is not POINT:PATH (for example c12:src/main.rs, @40:README.md, head:Cargo.toml, 2026-11-22T10:00:00Z:README.md){why}"
    )))
}

/// The PATH of a POINT:PATH as `show` (and `blame c12:PATH`) reads it, as
/// git reads `HEAD:path`: from the workspace root, unless it starts with
/// `./` or `../` (then from the current directory).
fn spec_path(settings: &Settings, typed: &str) -> String {
    (typed.starts_with("./") || typed.starts_with("../"))
        .then(|| settings.workspace_and_cwd())
        .flatten()
        .map_or_else(
            || typed.to_string(),
            |(root, cwd)| super::paths::from_cwd(typed, &root, &cwd),
        )
}

/// `path` (resolved from what the user `typed`) as a read command looks it
/// up, normalised as `rollback --path` and `diff --` take paths: a path
/// outside the workspace (`../x` from the root) is refused as such, not
/// looked up; one under `.git` is looked up, as records may name it.
fn lookup_path(store: &cairn::Store, path: &str, typed: &str) -> Result<String> {
    // A path outside the workspace that records name is history only: say
    // so, rather than that no such file is in the workspace.
    if let Some(why) = cairn::paths::history_only(typed) {
        let named = store.query(|q| Ok(!q.index().path(typed).is_empty()))?;
        if named {
            anyhow::bail!("`{typed}` {why}");
        }
    }
    Ok(match store.workspace_dir() {
        Some(root) => {
            cairn::paths::normalize_for_reading(root, path).map_err(|e| match e {
                // Named as typed, not as resolved from the current directory.
                cairn::SnapshotError::BadPath { reason, .. } => {
                    cairn::SnapshotError::bad_path(typed, reason)
                }
                e => e,
            })?
        }
        None => path.to_string(),
    })
}

/// `cairn show POINT:PATH`. As git reads `HEAD:path`, the path is from
/// the workspace root unless it starts with `./` or `../` (then from the
/// current directory).
pub fn show(settings: &Settings, spec: &str) -> Result<ExitCode> {
    let (point, typed) = split_point_path(spec)?;
    let path = spec_path(settings, typed);
    let store = settings.open_read()?;
    // The contents are read from the blob store, which a read-only open
    // leaves unopened: open it first, so that a store whose blob store
    // cannot be opened (a link in `blobs/`, a damaged index) is refused
    // as such, not reported as contents lost.
    store
        .blobs()
        .with_context(|| format!("open the blob store of {}", store.root().display()))?;
    note_time_points(settings, &store, &[point])?;
    match show_from(&store, spec, point, typed, &path) {
        // Contents that the log names but the store lost are damage, as
        // `verify` and `rollback` report it: the corruption exit code. So
        // is any failure on a log that lost its newest records (the point
        // asked for may have been among them).
        Err(e) if names_lost_data(&store, &e) || store.log_loss_warning().is_some() => {
            eprintln!("{} {}", Style::stderr().red("error:"), super::describe(&e));
            eprintln!(
                "the store has lost data that its log names: `cairn verify` names every checkpoint, record and path affected"
            );
            Ok(ExitCode::from(EXIT_CORRUPT))
        }
        r => r,
    }
}

/// True when `e` says that a blob the log names (a checkpoint's tree, a
/// file's contents) is missing, unless retention discarded that checkpoint
/// (then gc removing its tree is no loss, and the error says so).
fn names_lost_data(store: &cairn::Store, e: &anyhow::Error) -> bool {
    use cairn::EngineError;
    use cairn::QueryError;
    e.chain().any(|c| {
        if matches!(
            c.downcast_ref::<EngineError>(),
            Some(EngineError::BlobNotFound { .. })
        ) {
            return true;
        }
        let manifest = match c.downcast_ref::<QueryError>() {
            Some(QueryError::Manifest { lsn, .. }) => Some(*lsn),
            _ => match c.downcast_ref::<cairn::Error>() {
                Some(cairn::Error::Query(QueryError::Manifest { lsn, .. })) => Some(*lsn),
                _ => None,
            },
        };
        manifest.is_some_and(|lsn| !beyond_retention(store, lsn))
    })
}

/// True if the record at `lsn` is a checkpoint that was discarded, or a
/// rollback to one: its tree may have been collected by gc.
fn beyond_retention(store: &cairn::Store, lsn: Lsn) -> bool {
    let target = store.record(lsn).ok().and_then(|r| {
        r.event
            .target
            .filter(|_| r.event.kind == EventKind::Rollback)
    });
    store
        .query(|q| {
            let discarded = |id: cairn::CheckpointId| {
                q.index()
                    .checkpoint(id)
                    .is_some_and(|c| c.discarded_at.is_some())
            };
            Ok(discarded(cairn::CheckpointId(lsn)) || target.is_some_and(discarded))
        })
        .unwrap_or(false)
}

/// [`show`] once the store is open.
fn show_from(
    store: &cairn::Store,
    spec: &str,
    point: Point,
    typed: &str,
    path: &str,
) -> Result<ExitCode> {
    let path = lookup_path(store, path, typed)?;
    let path = path.as_str();
    if path.is_empty() {
        return Err(super::usage(format!(
            "`{spec}` names the workspace root, a directory: `cairn tree {point}` lists its files"
        )));
    }
    if let Some(entry) = cold_entry(store, point, typed, path) {
        return print_contents(store, &entry);
    }
    let (found, unrecorded) = store.query(|q| {
        let at = q.resolve(point)?;
        let unrecorded = q.unrecorded_write(at, path)?;
        Ok((
            q.entry_at(at, path)?.ok_or_else(|| q.not_a_file(at, path)),
            unrecorded,
        ))
    })?;
    let entry = match found {
        Ok(e) => {
            if let Some(r) = &unrecorded {
                eprintln!(
                    "note: {}: these are its contents from before that record (a checkpoint captures the new ones)",
                    unrecorded_words(path, r)
                );
            }
            e
        }
        Err(e) => {
            if let Some(r) = &unrecorded {
                anyhow::bail!(
                    "{}: no record holds them at {point} (a checkpoint captures them)",
                    unrecorded_words(path, r)
                );
            }
            // Not in the tree because the checkpoint could not capture it:
            // say so, rather than that it did not exist.
            if let Some(n) = not_captured_at(store, &point)?
                .into_iter()
                .find(|n| n.path == path)
            {
                anyhow::bail!(
                    "`{}` was not captured at {point} ({}): it was in the workspace, but its contents were not stored",
                    quote_path(path),
                    reason_words(&n.why)
                );
            }
            return Err(e.into());
        }
    };
    // A trailing `/` asks for a directory, as it does to a shell: a file
    // by that name is not what was asked for.
    if typed.ends_with('/') {
        return Err(super::usage(format!(
            "`{typed}` ends with `/`, a directory, but `{}` is a file at {point}: `cairn show {point}:{}` prints it",
            quote_path(path),
            quote_path(path)
        )));
    }
    print_contents(store, &entry)
}

/// The entry of `path` at `point` as a new process reads it from the
/// per-segment index files (its last change before the point, no replay
/// from the start); `None` leaves every other case, and every error's
/// wording, to the query index (as for a `typed` path ending in `/`).
fn cold_entry(
    store: &cairn::Store,
    point: Point,
    typed: &str,
    path: &str,
) -> Option<cairn::TreeEntry> {
    if typed.ends_with('/') {
        return None;
    }
    store.cold_entry_at(point, path)
}

/// Prints the contents of `entry`, streamed chunk by chunk (each
/// verified): a large file is never held whole in memory.
fn print_contents(store: &cairn::Store, entry: &cairn::TreeEntry) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    store.blobs()?.get_to(&entry.blob, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// "`a.txt` was written at @2 (file.write) by a record that does not
/// carry its contents": a file event recorded without `after` (as after
/// `cairn track`), which no checkpoint has captured since (see
/// `Query::unrecorded_write`).
fn unrecorded_words(path: &str, r: &Record) -> String {
    let what = match r.event.kind {
        EventKind::FileCreate => "created",
        EventKind::FileWrite => "written",
        _ => "changed",
    };
    format!(
        "{} was {what} at @{} ({}) by a record without its contents",
        quote_path(path),
        r.lsn,
        r.event.kind.name()
    )
}

/// The most files [`unrecorded_note`] names; it counts the rest.
const UNRECORDED_NAMED: usize = 5;

/// A note naming the files written by records without their contents
/// (see [`unrecorded_words`]), and the `consequence` for the answer.
fn unrecorded_note(list: &[(String, Record)], consequence: &str) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    let mut named: Vec<String> = list
        .iter()
        .take(UNRECORDED_NAMED)
        .map(|(p, r)| format!("{} (@{} {})", quote_path(p), r.lsn, r.event.kind.name()))
        .collect();
    if list.len() > UNRECORDED_NAMED {
        named.push(format!("and {} more", list.len() - UNRECORDED_NAMED));
    }
    let files = if list.len() == 1 {
        "file was written by a record"
    } else {
        "files were written by records"
    };
    Some(format!(
        "note: {} {files} without the new contents, so {consequence}: {} (a checkpoint captures them)",
        list.len(),
        named.join(", ")
    ))
}

/// `cairn tree POINT`.
pub fn tree(settings: &Settings, point: PointArg, json: bool) -> Result<ExitCode> {
    let (p, point) = (point.point, point.typed);
    let store = settings.open_read()?;
    note_time_points(settings, &store, &[p])?;
    // From the per-segment index files when this process has not loaded
    // the query index (the last reset and the file records after it),
    // else from the whole index, which also words any error.
    let (tree, unrecorded, uncaptured) = match store.cold_tree(p) {
        Some(t) => (t.tree, t.unrecorded, t.not_captured),
        None => {
            let (tree, unrecorded) = store.query(|q| {
                let at = q.resolve(p)?;
                Ok((q.tree_at(p)?, q.unrecorded_writes(Lsn(0), at)?))
            })?;
            (tree, unrecorded, not_captured_at(&store, &p)?)
        }
    };
    let mut out = std::io::stdout().lock();
    write_tree(&mut out, &tree, json)?;
    if !json && tree.is_empty() && uncaptured.is_empty() && unrecorded.is_empty() {
        eprintln!("note: no files at {point}");
    }
    if let Some(note) = unrecorded_note(
        &unrecorded,
        "the tree has them as they were before, or not at all",
    ) {
        eprintln!("{note}");
    }
    if !uncaptured.is_empty() {
        if json {
            note_uncaptured(&uncaptured, &point);
        } else {
            write_uncaptured(&mut out, &uncaptured, &p, &point)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `tree`'s entries, one a line: a JSON object with `--json`, else
/// mode, short blob hash and path.
fn write_tree(out: &mut impl Write, tree: &cairn::Tree, json: bool) -> Result<()> {
    for (path, entry) in tree.iter() {
        if json {
            let v = serde_json::json!({
                "path": path, "blob": entry.blob.to_hex(), "mode": format!("{:o}", entry.mode),
                "kind": kind_name(entry.kind),
            });
            writeln!(out, "{v}")?;
        } else {
            // A symlink has no permission bits: shown as git shows it.
            let mode = match entry.kind {
                cairn::EntryKind::Symlink => "120000".to_string(),
                cairn::EntryKind::File => format!("{:o}", entry.mode),
            };
            writeln!(
                out,
                "{mode:>6}  {}  {}",
                &entry.blob.to_hex()[..12],
                quote_path(path)
            )?;
        }
    }
    Ok(())
}

/// With `--json`, names the files not captured at `point` on stderr: the
/// lines stay one shape (each a tree entry with its blob).
fn note_uncaptured(uncaptured: &[cairn::checkpoint::NotCaptured], point: &str) {
    let names: Vec<String> = uncaptured
        .iter()
        .map(|n| quote_not_captured(n).into_owned())
        .collect();
    let verb = if uncaptured.len() == 1 { "was" } else { "were" };
    eprintln!(
        "note: {} {verb} not captured at {point} (in the workspace then, contents not stored), so not listed: {}",
        count(uncaptured.len() as u64, "file"),
        names.join(", ")
    );
}

/// Lists the files not captured at `p` (typed as `point`) after the tree,
/// each with its reason.
fn write_uncaptured(
    out: &mut impl Write,
    uncaptured: &[cairn::checkpoint::NotCaptured],
    p: &Point,
    point: &str,
) -> Result<()> {
    // Only a checkpoint is a rollback's target.
    let rollback = match p {
        Point::Checkpoint(_) => "; a rollback to it keeps them as they are",
        _ => "",
    };
    writeln!(
        out,
        "not captured at {point} (in the workspace then, contents not stored{rollback}):"
    )?;
    // The reasons in one column, as wide as the longest.
    let width = uncaptured
        .iter()
        .map(|n| reason_words(&n.why).chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    for n in uncaptured {
        writeln!(
            out,
            "     -  {:<width$}  {}",
            reason_words(&n.why),
            quote_not_captured(n)
        )?;
    }
    Ok(())
}

/// The files in the workspace at point `p` whose contents no record holds
/// (too large or unreadable for a checkpoint then: absent from its tree,
/// though they were there); see `Query::not_captured_at_lsn`. A record
/// names at most [`cairn::checkpoint::MAX_NOT_CAPTURED_NAMED`].
fn not_captured_at(store: &cairn::Store, p: &Point) -> Result<Vec<cairn::checkpoint::NotCaptured>> {
    Ok(store.query(|q| q.not_captured_at(*p))?)
}

/// `cairn diff A B [-- PATH...]`.
pub fn diff(
    settings: &Settings,
    a: PointArg,
    b: PointArg,
    paths: &[String],
    json: bool,
) -> Result<ExitCode> {
    let (pa, pb) = (a.point, b.point);
    let (a, b) = (a.typed.as_str(), b.typed.as_str());
    let store = settings.open_read()?;
    // Paths as `rollback --path` reads them: relative (`./src/`) or absolute
    // inside the workspace; one outside it is refused, not an empty diff.
    let paths = match store.workspace_dir() {
        Some(root) => paths
            .iter()
            .map(|p| cairn::paths::normalize_for_reading(root, p))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        None => paths.to_vec(),
    };
    note_time_points(settings, &store, &[pa, pb])?;
    // From the per-segment index files when this process has not loaded
    // the query index, else from the whole index (which words any error).
    let (diffs, mut unrecorded, uncaptured) = match store.cold_diff(pa, pb, &paths) {
        Some(d) => (d.diffs, d.unrecorded, (d.not_captured_a, d.not_captured_b)),
        None => {
            let (diffs, unrecorded) = store.query(|q| {
                let (la, lb) = (q.resolve(pa)?, q.resolve(pb)?);
                let diffs = q.diff(pa, pb, &paths)?;
                // Between the two points, in either order.
                Ok((diffs, q.unrecorded_writes(la.min(lb), la.max(lb))?))
            })?;
            let uncaptured = (not_captured_at(&store, &pa)?, not_captured_at(&store, &pb)?);
            (diffs, unrecorded, uncaptured)
        }
    };
    // Within the filter.
    unrecorded.retain(|(path, _)| cairn::paths::in_scope(path, &paths));
    let view = DiffView::new((a, uncaptured.0), (b, uncaptured.1), &diffs);
    let st = Style::stdout();
    let mut out = std::io::stdout().lock();
    for d in &diffs {
        if json {
            writeln!(out, "{}", view.json(d))?;
        } else {
            view.print(&mut out, &st, d)?;
        }
    }
    let unrecorded_said = unrecorded_note(&unrecorded, "the diff cannot show those changes")
        .inspect(|note| eprintln!("{note}"))
        .is_some();
    if diffs.is_empty() && !json {
        writeln!(out, "no differences")?;
        if (matches!(pa, Point::Head) || matches!(pb, Point::Head)) && !unrecorded_said {
            eprintln!(
                "note: `head` is the state after the last record, not the files on disk: an edit since the last checkpoint is in it once `cairn checkpoint` captures it"
            );
        }
    }
    drop(out);
    note_renames_not_compared(&diffs);
    Ok(ExitCode::SUCCESS)
}

/// Says when too many files were left unpaired each way (as the query's
/// second pass counted them) to look for moved-and-edited files.
fn note_renames_not_compared(diffs: &[cairn::diff::FileDiff]) {
    let left = |status: DiffStatus| {
        diffs
            .iter()
            .filter(|d| d.status == status && d.similarity.is_none())
            .filter(|d| {
                d.old
                    .or(d.new)
                    .is_some_and(|e| e.kind == cairn::EntryKind::File)
            })
            .count()
    };
    let (gone, new) = (left(DiffStatus::Removed), left(DiffStatus::Added));
    if cairn::diff::too_many_to_compare(gone, new) {
        eprintln!(
            "note: {gone} files removed and {new} added are too many to compare for moved-and-edited files (over {} pairs): only renames with unchanged contents are shown",
            cairn::diff::MAX_SIMILARITY_PAIRS
        );
    }
}

/// What `diff` prints for each changed path, beyond the query's answer:
/// each end's name and the files its checkpoint did not capture.
struct DiffView<'a> {
    /// The first point as typed, and what its checkpoint did not capture.
    a: (&'a str, Vec<cairn::checkpoint::NotCaptured>),
    /// The second point, the same.
    b: (&'a str, Vec<cairn::checkpoint::NotCaptured>),
    /// The changes whose path one end did not capture.
    not_captured: std::collections::HashSet<(String, DiffStatus)>,
}

impl<'a> DiffView<'a> {
    fn new(
        a: (&'a str, Vec<cairn::checkpoint::NotCaptured>),
        b: (&'a str, Vec<cairn::checkpoint::NotCaptured>),
        diffs: &[cairn::diff::FileDiff],
    ) -> DiffView<'a> {
        let mut view = DiffView {
            a,
            b,
            not_captured: Default::default(),
        };
        view.not_captured = diffs
            .iter()
            .filter(|d| view.uncaptured(d).is_some())
            .map(|d| (d.path.clone(), d.status))
            .collect();
        view
    }

    /// A file a checkpoint did not capture is absent from its tree, but was
    /// in the workspace: not "added" or "removed" there. The end's name and
    /// why it was not captured.
    fn uncaptured(&self, d: &cairn::diff::FileDiff) -> Option<(&str, &str)> {
        let (side, list) = match d.status {
            DiffStatus::Added => (self.a.0, &self.a.1),
            DiffStatus::Removed => (self.b.0, &self.b.1),
            DiffStatus::Modified => return None,
        };
        list.iter()
            .find(|n| n.path == d.path)
            .map(|n| (side, n.why.as_str()))
    }

    /// A rename pairs a removed path with an added one of the same
    /// contents; a path a checkpoint did not capture was there all along,
    /// so a pair with one is no rename.
    fn real_rename(&self, from: &str, to: &str) -> bool {
        !self
            .not_captured
            .contains(&(from.to_string(), DiffStatus::Removed))
            && !self
                .not_captured
                .contains(&(to.to_string(), DiffStatus::Added))
    }

    /// The path this one was renamed from and to, where the rename is real.
    fn renames<'d>(&self, d: &'d cairn::diff::FileDiff) -> (Option<&'d str>, Option<&'d str>) {
        let from = d
            .renamed_from
            .as_deref()
            .filter(|from| self.real_rename(from, &d.path));
        let to = d
            .renamed_to
            .as_deref()
            .filter(|to| self.real_rename(&d.path, to));
        (from, to)
    }

    /// One `diff --json` line.
    fn json(&self, d: &cairn::diff::FileDiff) -> serde_json::Value {
        let (renamed_from, renamed_to) = self.renames(d);
        let mut v = serde_json::json!({"path": d.path, "status": status_name(d.status), "binary": d.binary, "too_large": d.too_large, "unified": d.unified});
        if let Some((side, why)) = self.uncaptured(d) {
            v["not_captured_at"] = serde_json::json!(side);
            v["not_captured_why"] = serde_json::json!(why);
        }
        if let Some(from) = renamed_from {
            v["renamed_from"] = serde_json::json!(from);
        }
        if let Some(to) = renamed_to {
            v["renamed_to"] = serde_json::json!(to);
        }
        if renamed_from.is_some() || renamed_to.is_some() {
            v["similarity"] = serde_json::json!(d.similarity);
        }
        if let Some(u) = d.rename_unified.as_ref().filter(|_| renamed_from.is_some()) {
            v["rename_unified"] = serde_json::json!(u);
        }
        // Each side's mode and kind where that side is known, so a
        // change of mode alone, or between a file and a symlink
        // (`unified` is null then), is visible too.
        for (mode, kind, side) in [
            ("old_mode", "old_kind", d.old),
            ("new_mode", "new_kind", d.new),
        ] {
            if let Some(e) = side {
                v[mode] = serde_json::json!(json_mode(&e));
                v[kind] = serde_json::json!(kind_name(e.kind));
            }
        }
        v
    }

    /// One path's change as `diff` prints it for a person.
    fn print(&self, out: &mut impl Write, st: &Style, d: &cairn::diff::FileDiff) -> Result<()> {
        let (renamed_from, renamed_to) = self.renames(d);
        // A rename is one line, printed at its new path (as git's
        // `rename from`/`rename to`); its removed end says nothing more.
        if renamed_to.is_some() {
            return Ok(());
        }
        let shown = quote_path(&d.path);
        if let Some(from) = renamed_from {
            let how = match d.similarity {
                Some(n) if n < 100 => format!("{n}% similar"),
                _ => "contents unchanged".to_string(),
            };
            writeln!(
                out,
                "{} {} -> {shown} ({how})",
                st.bold("Renamed"),
                quote_path(from)
            )?;
            if let Some(u) = &d.rename_unified {
                let (header, hunks) =
                    split_unified(u, &format!("a/{from}"), &format!("b/{}", d.path));
                print_hunks(out, st, &header, hunks)?;
            }
            return Ok(());
        }
        if let Some((side, why)) = self.uncaptured(d) {
            writeln!(
                out,
                "{shown} not captured at {side} ({}): it was in the workspace, its contents were not stored, so it cannot be compared",
                reason_words(why)
            )?;
            return Ok(());
        }
        print_change(out, st, d, &shown)
    }
}

/// `added`, `removed` or `modified`.
fn status_name(s: DiffStatus) -> &'static str {
    match s {
        DiffStatus::Added => "added",
        DiffStatus::Removed => "removed",
        DiffStatus::Modified => "modified",
    }
}

/// A change that is no rename and was captured at both ends: its mode
/// change, then its hunks, or a line naming a large, binary or empty file.
fn print_change(
    out: &mut impl Write,
    st: &Style,
    d: &cairn::diff::FileDiff,
    shown: &str,
) -> Result<()> {
    let status = status_name(d.status);
    let changed = mode_change(d);
    if let (Some(c), true) = (&changed, d.old.map(|e| e.blob) != d.new.map(|e| e.blob)) {
        // The contents changed too: the mode first, as git's `old mode`
        // and `new mode` lines come first.
        writeln!(out, "{shown} {c}")?;
    }
    if d.too_large {
        writeln!(
            out,
            "{} {shown} ({status}; over {} MiB, not compared line by line)",
            st.bold("Large file"),
            cairn::diff::MAX_LINE_DIFF_BYTES >> 20
        )?;
    } else if d.binary {
        writeln!(out, "{} {shown} ({status})", st.bold("Binary file"))?;
    } else if let Some(u) = &d.unified {
        let side = |present: bool, prefix: &str| match present {
            true => format!("{prefix}{}", d.path),
            false => "/dev/null".to_string(),
        };
        let (header, hunks) = split_unified(
            u,
            &side(d.old.is_some(), "a/"),
            &side(d.new.is_some(), "b/"),
        );
        if hunks.is_empty() {
            // No line to show (an empty file added or removed, or
            // contents that differ only in bytes that are not UTF-8),
            // yet the path changed: one line says so, as for a mode.
            let why = match d.status {
                DiffStatus::Added | DiffStatus::Removed => "empty",
                DiffStatus::Modified => "contents differ, no line-by-line difference to show",
            };
            writeln!(out, "{shown} {status} ({why})")?;
            return Ok(());
        }
        print_hunks(out, st, &header, hunks)?;
    } else {
        let what = changed.unwrap_or_else(|| "mode or kind changed".into());
        writeln!(out, "{shown} {status} ({what})")?;
    }
    Ok(())
}

/// How a path's mode or kind changed between the two ends of a diff, when
/// it did: `mode 644 -> 755`, `file -> symlink`.
fn mode_change(d: &cairn::diff::FileDiff) -> Option<String> {
    use cairn::EntryKind;
    let (a, b) = (d.old?, d.new?);
    let kind = |k: EntryKind| match k {
        EntryKind::File => "file",
        EntryKind::Symlink => "symlink",
    };
    if a.kind != b.kind {
        Some(format!("{} -> {}", kind(a.kind), kind(b.kind)))
    } else if a.mode != b.mode && a.kind == EntryKind::File {
        Some(format!("mode {:o} -> {:o}", a.mode, b.mode))
    } else {
        None
    }
}

/// A tree entry's mode as `--json` spells it: octal digits, as `tree
/// --json` gives them (`644`, `755`).
fn json_mode(e: &cairn::TreeEntry) -> String {
    format!("{:o}", e.mode)
}

/// A tree entry's kind as `tree --json` and `diff --json` name it.
fn kind_name(k: cairn::EntryKind) -> &'static str {
    match k {
        cairn::EntryKind::File => "file",
        cairn::EntryKind::Symlink => "symlink",
    }
}

/// A text diff's `---`/`+++` header lines, with the path quoted as every
/// listing quotes it (git's `--- "a/nl\nname"`), and its hunks. The header
/// is the one the query wrote (`a` is `a/PATH` or `/dev/null`, `b` is
/// `b/PATH`), cut off by its known text rather than by lines, which a
/// newline in the path would split. Without hunks (no line differs) there
/// is no header either.
fn split_unified<'a>(u: &'a str, a: &str, b: &str) -> ([String; 2], &'a str) {
    let hunks = u.strip_prefix(&format!("--- {a}\n+++ {b}\n")).unwrap_or(u);
    let header = [
        format!("--- {}", quote_path(a)),
        format!("+++ {}", quote_path(b)),
    ];
    (header, hunks)
}

/// Prints a diff's header (bold) and its hunks, colored as git colors them.
/// The hunks are the file's lines as they are, as `show` prints a file (a
/// diff is a patch to apply): each line is written with its own ending, so
/// the `\r` of a `\r\n` line stays, after the color's reset as git puts
/// it, and a lone `\r` inside a line stays where it is.
fn print_hunks(out: &mut impl Write, st: &Style, header: &[String], hunks: &str) -> Result<()> {
    for line in header {
        writeln!(out, "{}", st.bold(line))?;
    }
    for whole in cairn::diff::split_lines(hunks) {
        let line = cairn::diff::line_text(whole);
        // A last line without one ends the output with one.
        let ending = Some(&whole[line.len()..])
            .filter(|e| !e.is_empty())
            .unwrap_or("\n");
        let styled = if line.starts_with('+') {
            st.green(line)
        } else if line.starts_with('-') {
            st.red(line)
        } else if line.starts_with("@@") {
            st.cyan(line)
        } else {
            line.to_string()
        };
        write!(out, "{styled}{ending}")?;
    }
    Ok(())
}

/// `cairn history PATH`.
pub fn history(
    settings: &Settings,
    path: &str,
    checkpoints: bool,
    follow: bool,
    json: bool,
) -> Result<ExitCode> {
    let store = settings.open_read()?;
    let path = record_path(path, store.workspace_dir());
    if path.is_empty() {
        // The empty path and the workspace root name no file: every record
        // would match, which `cairn log` lists.
        return Err(super::usage(
            "history needs a file or directory below the workspace root (`src/`, `README.md`); `cairn log` lists every record",
        ));
    }
    let printed = match (follow, checkpoints) {
        // The plain history is the records naming the path: answered from
        // the per-segment indexes without loading the whole query index,
        // and printed as they are read (as `log` prints), never held.
        (false, false) => {
            let filter = cairn::Filter {
                path: Some(path.clone()),
                ..cairn::Filter::all()
            };
            print_scan(&store, &filter, json)?
        }
        _ => {
            let records = store.query(|q| match (follow, checkpoints) {
                (true, true) => q.history_following_with_resets(&path),
                (true, false) => q.history_following(&path),
                _ => q.history_with_resets(&path),
            })?;
            print_records(&records, json)?;
            records.len()
        }
    };
    let outside =
        std::path::Path::new(&path).is_absolute() || path == ".." || path.starts_with("../");
    if printed == 0 && outside {
        // Kept as typed, since a record may name any path: say that none
        // named this one, and that it would be history only.
        eprintln!(
            "note: {} lies outside the workspace: no record names it (records that do are kept as history only, never part of the workspace's files)",
            quote_path(&path)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn blame POINT PATH`.
pub fn blame(settings: &Settings, point: &str, path: Option<&str>, json: bool) -> Result<ExitCode> {
    // `blame c12:src/a.rs`, as `show` takes it: the path is then read as
    // `show` reads its own (from the root unless it starts with `./`).
    let (p, point, typed, path) = match path {
        Some(path) => (parse_point(point)?, point, path, path.to_string()),
        None => {
            let (p, typed) = split_point_path(point).map_err(|_| {
                super::usage(format!(
                    "blame takes POINT PATH or POINT:PATH (for example `cairn blame c12 src/main.rs`); `{point}` is neither"
                ))
            })?;
            let at = &point[..point.len() - typed.len() - 1];
            (p, at, typed, spec_path(settings, typed))
        }
    };
    let store = settings.open_read()?;
    let path = lookup_path(&store, &path, typed)?;
    if path.is_empty() {
        return Err(super::usage(format!(
            "`{typed}` names the workspace root, a directory: blame takes a file (`cairn tree {point}` lists them)"
        )));
    }
    let path = path.as_str();
    note_time_points(settings, &store, &[p])?;
    // From the per-segment index files when this process has not loaded
    // the query index; else (or on any error, which it words) one query
    // of the whole index, so both answers are of the same head.
    let (unrecorded, lines) = match store.cold_blame(p, path) {
        Some((unrecorded, lines)) => (unrecorded, Ok(lines)),
        None => {
            store.query(|q| Ok((q.unrecorded_write(q.resolve(p)?, path)?, q.blame(p, path))))?
        }
    };
    let lines = lines
        .map_err(cairn::Error::Query)
        .with_context(|| match &unrecorded {
            Some(r) => format!(
                "blame {} at {point} ({}: no record holds them)",
                quote_path(path),
                unrecorded_words(path, r)
            ),
            None => format!("blame {} at {point}", quote_path(path)),
        })?;
    if let Some(r) = &unrecorded {
        eprintln!(
            "note: {}: the lines shown are from before that record (a checkpoint captures the new ones)",
            unrecorded_words(path, r)
        );
    }
    write_blame(&mut std::io::stdout().lock(), &lines, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes blame's `lines`, one a line: a JSON object with `--json`, else
/// the record that wrote it (marked when history was cut or began
/// later), its session and model, the line number and its text.
fn write_blame(out: &mut impl Write, lines: &[cairn::BlameLine], json: bool) -> Result<()> {
    let st = Style::stdout();
    for l in lines {
        if json {
            let v = serde_json::json!({
                "line": l.line_no, "lsn": l.lsn.0, "session": l.session, "model": l.model, "kind": l.kind.name(), "text": l.text,
                "history_cut": l.history_cut, "before_history": l.before_history,
            });
            writeln!(out, "{v}")?;
        } else {
            // A line whose history retention cut: written by this record
            // or an earlier one no longer known. A line already there when
            // history began: found by this, the first checkpoint.
            let at = match (l.history_cut, l.before_history) {
                (true, _) => "<=@",
                (_, true) => "^@",
                _ => "@",
            };
            let who = format!(
                "{:<7} {:<12} {:<14}",
                format!("{at}{}", l.lsn),
                one_line(&l.session, 12),
                one_line(l.model.as_deref().unwrap_or("-"), 14)
            );
            writeln!(out, "{} {:>5} {}", st.dim(&who), l.line_no, l.text)?;
        }
    }
    Ok(())
}

/// The node `branches ID` lists from: a checkpoint id (`c12`), or `@N` for
/// a rollback record as NODE names it.
fn parse_branch_point(typed: &str) -> Result<cairn::CheckpointId> {
    let id = match typed.strip_prefix('@') {
        Some(_) => match parse_point(typed)? {
            Point::Lsn(l) => cairn::CheckpointId(l),
            _ => {
                return Err(super::usage(format!(
                    "{typed} is neither a checkpoint nor a rollback record (`cairn branches` lists them)"
                )))
            }
        },
        None => super::checkpoint::parse_id(typed)?,
    };
    Ok(id)
}

/// A usage error naming what `typed` is when it names a node of the other
/// kind (`c5` for a rollback record) or none at all.
fn check_branch_point(store: &cairn::Store, typed: &str, id: cairn::CheckpointId) -> Result<()> {
    let kind = store.query(|q| Ok(q.index().node(id.0).map(|n| n.kind)))?;
    match kind {
        Some(EventKind::Rollback) if typed.starts_with('c') => Err(super::usage(format!(
            "{typed} names a rollback record, not a checkpoint: `cairn branches @{}` lists what continues from it",
            id.0
        ))),
        None if typed.starts_with('@') => Err(super::usage(format!(
            "{typed} is neither a checkpoint nor a rollback record (`cairn branches` lists them)"
        ))),
        _ => Ok(()),
    }
}

/// `cairn branches [ID]`.
pub fn branches(settings: &Settings, id: Option<&str>, json: bool) -> Result<ExitCode> {
    let typed = id;
    let id = typed.map(parse_branch_point).transpose()?;
    let store = settings.open_read()?;
    if let (Some(id), Some(typed)) = (id, typed) {
        check_branch_point(&store, typed, id)?;
    }
    let g = branch_graph(&store, id)?;
    if json {
        print_branches_json(&g)?;
    } else if g.nodes.is_empty() {
        match typed {
            Some(c) => {
                outln!("nothing continues from {c} yet: no checkpoint or rollback has it as parent")
            }
            None if g.rollbacks == 0 => outln!("no checkpoints or rollbacks yet"),
            None => outln!(
                "no checkpoints yet; the log's {} {} no checkpoint of this store \
                 (an imported one, say), so it is not a branch point",
                count(g.rollbacks as u64, "rollback record"),
                if g.rollbacks == 1 { "names" } else { "name" }
            ),
        }
    } else {
        out!("{}", branches_table(&g).render());
    }
    Ok(ExitCode::SUCCESS)
}

/// What `cairn branches` lists: the nodes in LSN order, with what their
/// FROM column needs.
struct BranchGraph {
    /// The checkpoints and rollback records listed, in LSN order.
    nodes: Vec<cairn::Branch>,
    /// The parents that are checkpoints, named by id as NODE names them.
    checkpoints: std::collections::HashSet<Lsn>,
    /// The checkpoint each rollback to a checkpoint lost to damage restored.
    lost_target: std::collections::HashMap<Lsn, cairn::CheckpointId>,
    /// How many rollback records the log holds.
    rollbacks: usize,
}

/// The nodes continuing from `id`, or the whole graph.
fn branch_graph(store: &cairn::Store, id: Option<cairn::CheckpointId>) -> Result<BranchGraph> {
    let (nodes, rollbacks, lost) = store.query(|q| {
        // Rollbacks whose checkpoint was lost to damage are listed too
        // (with the whole graph), naming the id they restored.
        let lost = match id {
            None => q.rollbacks_to_lost_checkpoints()?,
            Some(_) => Vec::new(),
        };
        let nodes = q.branches(id)?;
        // The parents that are checkpoints, named by id as NODE names them
        // (a parent need not be listed itself: `branches c2` lists c2's
        // children only).
        let checkpoints: std::collections::HashSet<_> = nodes
            .iter()
            .filter_map(|n| n.parent)
            .filter(|p| {
                q.index()
                    .node(*p)
                    .is_some_and(|n| n.kind == EventKind::CheckpointCreate)
            })
            .collect();
        Ok((
            (nodes, checkpoints),
            q.index().kind(EventKind::Rollback).len(),
            lost,
        ))
    })?;
    let (mut nodes, checkpoints) = nodes;
    let lost_target: std::collections::HashMap<_, _> =
        lost.iter().map(|(b, t)| (b.lsn, *t)).collect();
    nodes.extend(lost.into_iter().map(|(b, _)| b));
    nodes.sort_by_key(|n| n.lsn);
    Ok(BranchGraph {
        nodes,
        checkpoints,
        lost_target,
        rollbacks,
    })
}

/// `cairn branches --json`: one object per node.
fn print_branches_json(g: &BranchGraph) -> Result<()> {
    for n in &g.nodes {
        let mut v = serde_json::json!({
            "lsn": n.lsn.0, "id": (n.kind == EventKind::CheckpointCreate).then(|| format!("c{}", n.lsn.0)),
            "kind": n.kind.name(), "session": n.session, "parent": n.parent.map(|p| p.0),
            "label": n.label, "ts": n.ts.to_iso(), "children": n.children,
        });
        if !n.tree {
            // A point of an imported conversation: no tree to restore.
            v["tree"] = serde_json::json!(false);
        }
        if let Some(t) = g.lost_target.get(&n.lsn) {
            v["lost_target"] = serde_json::json!(t.to_string());
        }
        outln!("{v}");
    }
    Ok(())
}

/// `cairn branches` as a table.
fn branches_table(g: &BranchGraph) -> Table {
    let mut t = Table::new(&["NODE", "KIND", "SESSION", "FROM", "CHILDREN", "LABEL"]);
    for n in &g.nodes {
        let node = if n.kind == EventKind::CheckpointCreate {
            format!("c{}", n.lsn)
        } else {
            format!("@{}", n.lsn)
        };
        t.row(vec![
            node,
            n.kind.name().into(),
            cell(&n.session),
            // A checkpoint parent by its id, as NODE names it.
            match (n.parent, g.lost_target.get(&n.lsn)) {
                (Some(p), _) if g.checkpoints.contains(&p) => format!("c{p}"),
                (Some(p), _) => format!("@{p}"),
                (None, Some(t)) => format!("{t} (lost to damage)"),
                (None, None) => String::new(),
            },
            n.children.to_string(),
            match (n.tree, n.label.as_deref().unwrap_or_default()) {
                (true, l) => cell(l),
                // A point of an imported conversation: no tree.
                (false, l) => format!("{} (no tree)", cell(l)),
            },
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_path_split() {
        let (p, path) = split_point_path("2026-11-22T10:00:00Z:src/a.rs").unwrap();
        assert!(matches!(p, Point::Time(_)));
        assert_eq!(path, "src/a.rs");
        let (p, path) = split_point_path("c12:dir/with:colon").unwrap();
        assert!(matches!(p, Point::Checkpoint(_)));
        assert_eq!(path, "dir/with:colon");
        assert!(split_point_path("nothing").is_err());
        assert!(split_point_path("head:").is_err());
    }
}
