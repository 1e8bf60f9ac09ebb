//! What the read commands share: the filter flags validated into a
//! [`Filter`], points parsed, and records printed as a table or JSONL.

use std::io::Write;

use anyhow::{Context, Result};
use cairn::jsonl::write_json_line;
use cairn::jsonl::Record;
use cairn::EventRef;
use cairn::Point;
use cairn::{EventKind, Timestamp};

use super::hiargs::RecordFilter;
use super::output::{cell, count, one_line, quote_path, relative, Style, Table};
use super::Settings;

/// Refuses a `--since`/`--until` checkpoint id that names no checkpoint of
/// this store (`c7` where LSN 7 is a prompt), as every other command that
/// takes a point does. A checkpoint record imported without a manifest
/// bounds the log as well as any: it is a record, though it holds no tree.
pub fn check_record_bounds(store: &cairn::Store, filter: &RecordFilter) -> Result<()> {
    for &(flag, c) in &filter.checkpoint_bounds {
        store
            .query(|q| match q.resolve(Point::Checkpoint(c)) {
                Err(_) if q.is_imported_checkpoint(c) => Ok(c.0),
                r => r,
            })
            .with_context(|| format!("--{flag} {c}"))?;
    }
    Ok(())
}

/// A path to match records by, as the user typed it: `./src` is `src`,
/// and an absolute path inside the workspace is made relative to it. Any
/// other absolute path is kept as given (a tool may have named one).
pub fn record_path(p: &str, workspace: Option<&std::path::Path>) -> String {
    let abs = std::path::Path::new(p);
    if let Some(rel) = workspace.and_then(|w| abs.strip_prefix(w).ok()) {
        return rel.to_string_lossy().into_owned();
    }
    let mut p = p;
    while let Some(rest) = p.strip_prefix("./") {
        p = rest.trim_start_matches('/');
    }
    if p == "." {
        return String::new();
    }
    p.to_string()
}

/// Says on stderr (unless `--quiet`) when a time point falls where the
/// log's times go backwards, so it leaves out records stamped before it
/// (see [`Point::Time`]).
pub fn note_time_points(settings: &Settings, store: &cairn::Store, points: &[Point]) -> Result<()> {
    // Only a time point can leave records out; asking the query index
    // about any other would load it whole, which a new process answering
    // from the index files (`show @LSN:PATH`) must not pay.
    if settings.quiet || !points.iter().any(|p| matches!(p, Point::Time(_))) {
        return Ok(());
    }
    // From the index files when this process has not loaded the index
    // (a segment or so read), else from the whole index.
    let cold: Option<Vec<_>> = points
        .iter()
        .filter(|p| matches!(p, Point::Time(_)))
        .map(|p| store.cold_time_point(*p))
        .collect();
    let notes = match cold {
        Some(tps) => tps.iter().filter_map(|tp| tp.note()).collect(),
        None => store.query(|q| {
            Ok(points
                .iter()
                .filter_map(|p| q.time_point(*p)?.note())
                .collect::<Vec<_>>())
        })?,
    };
    for n in notes {
        eprintln!("note: {n}");
    }
    Ok(())
}

/// One-line summary of what a record says.
pub fn summary(r: &Record) -> String {
    let e = &r.event;
    let mut parts = Vec::new();
    if let Some(t) = &e.tool {
        parts.push(cell(t));
    }
    if let Some(p) = &e.path {
        match &e.to_path {
            Some(to) => parts.push(format!(
                "{} -> {}",
                cell(&quote_path(p)),
                cell(&quote_path(to))
            )),
            None => parts.push(cell(&quote_path(p))),
        }
    }
    if let Some(l) = &e.label {
        parts.push(format!("\"{}\"", cell(l)));
    }
    if let Some(t) = e.target {
        parts.push(format!("to {t}"));
    }
    if let Some(c) = e.checkpoint {
        parts.push(c.to_string());
    }
    if let Some(t) = &e.text {
        parts.push(format!("\"{}\"", one_line(t, 60)));
    }
    if let Some(d) = e.diff_stats {
        parts.push(format!("+{} -{}", d.lines_added, d.lines_removed));
    }
    if let Some(err) = &e.error_kind {
        parts.push(format!("error: {err}"));
    }
    if e.files.len() > 1 || (e.files.len() == 1 && e.path.is_none()) {
        parts.push(count(e.files.len() as u64, "file"));
    }
    parts.join("  ")
}

/// Prints a list of records: a table, or canonical JSONL with `json`.
pub fn print_records(records: &[Record], json: bool) -> Result<()> {
    let mut printer = RecordPrinter::new(json);
    for r in records {
        printer.print(r)?;
    }
    Ok(printer.finish()?)
}

/// The columns of a table of records.
const RECORD_COLUMNS: [&str; 7] = ["LSN", "TIME", "", "SESSION", "KIND", "OK", "SUMMARY"];

/// One record as a row of [`RECORD_COLUMNS`].
pub fn record_row(r: &Record, st: &Style, now: Timestamp) -> Vec<String> {
    let e = &r.event;
    let kind = match e.kind {
        EventKind::CheckpointCreate | EventKind::CheckpointDiscard => st.green(e.kind.name()),
        EventKind::Rollback | EventKind::Undo => st.yellow(e.kind.name()),
        k if k.is_file_op() => st.cyan(k.name()),
        k => k.name().to_string(),
    };
    vec![
        r.lsn.to_string(),
        e.ts.to_iso(),
        st.dim(&relative(e.ts, now)),
        cell(&e.session),
        kind,
        if e.ok { "ok".into() } else { st.red("FAIL") },
        summary(r),
    ]
}

/// Rows of the `log` table laid out and printed together: the table is
/// streamed, so memory holds this many records, not the whole log (a
/// column only ever widens from one part to the next).
const LOG_TABLE_PART_ROWS: usize = 1000;

/// Prints the records of `store` that `filter` selects as they are read
/// (streamed: a log of any length in bounded memory), and gives how many.
/// What was read before an error (damage) is printed, then the error; a
/// failed write (a closed pipe) stops the scan and is the error.
pub fn print_scan(store: &cairn::Store, filter: &cairn::Filter, json: bool) -> Result<usize> {
    let mut printer = RecordPrinter::new(json);
    let (mut n, mut failed) = (0usize, None);
    let scanned = store.scan(filter, &mut |r| match printer.print(&r) {
        Ok(()) => {
            n += 1;
            Ok(true)
        }
        Err(e) => {
            failed = Some(e);
            Ok(false)
        }
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    printer.finish()?;
    scanned?;
    Ok(n)
}

/// Prints records as they come (see [`LOG_TABLE_PART_ROWS`]): a table, or
/// canonical JSONL; as [`print_records`] prints a list.
pub struct RecordPrinter {
    json: bool,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    table: Table,
    widths: Vec<usize>,
    rows: usize,
    st: Style,
    now: Timestamp,
    buf: Vec<u8>,
}

impl RecordPrinter {
    /// A printer of a table, or of JSONL with `json`.
    pub fn new(json: bool) -> RecordPrinter {
        RecordPrinter {
            json,
            out: std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock()),
            table: Table::new(&RECORD_COLUMNS),
            widths: Vec::new(),
            rows: 0,
            st: Style::stdout(),
            now: Timestamp::now(),
            buf: Vec::new(),
        }
    }

    /// Prints one record (a table's rows go out a part at a time).
    pub fn print(&mut self, r: &Record) -> std::io::Result<()> {
        self.rows += 1;
        if self.json {
            self.buf.clear();
            write_json_line(r.lsn, r.chain, &EventRef::of(&r.event), &mut self.buf)
                .map_err(std::io::Error::other)?;
            return self.out.write_all(&self.buf);
        }
        self.table.row(record_row(r, &self.st, self.now));
        if self.table.len() >= LOG_TABLE_PART_ROWS {
            self.flush_part()?;
        }
        Ok(())
    }

    fn flush_part(&mut self) -> std::io::Result<()> {
        let part = std::mem::replace(&mut self.table, Table::headless());
        self.out
            .write_all(part.render_part(&mut self.widths).as_bytes())
    }

    /// Prints what is left of the table.
    pub fn finish(mut self) -> std::io::Result<()> {
        if !self.json {
            if self.rows == 0 {
                writeln!(self.out, "no records match")?;
            } else if !self.table.is_empty() {
                self.flush_part()?;
            }
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_paths_as_typed() {
        let ws = std::path::Path::new("/w/proj");
        assert_eq!(record_path("./src/", Some(ws)), "src/");
        assert_eq!(record_path(".//src", Some(ws)), "src");
        assert_eq!(record_path("/w/proj/src/a.rs", Some(ws)), "src/a.rs");
        assert_eq!(record_path("/w/proj", Some(ws)), "");
        assert_eq!(record_path(".", Some(ws)), "");
        assert_eq!(
            record_path("/usr/include/stdio.h", Some(ws)),
            "/usr/include/stdio.h"
        );
        assert_eq!(record_path("src/a.rs", None), "src/a.rs");
    }
}
