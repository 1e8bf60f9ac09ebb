//! Stage two of argument parsing, as ripgrep's `lowargs` -> `hiargs`: the
//! flags clap parsed ([`crate::args`], stage one) are checked here and
//! turned into the values a command runs with ([`Filter`], [`Point`],
//! [`Format`], [`ImportOptions`], a [`ChainHash`]) before any store is
//! opened. A bad flag, or flags that do not go together, is a usage error
//! naming the flag; the handlers take only validated values and check no
//! flag themselves.

use std::path::PathBuf;

use anyhow::Result;
use cairn::import::ImportOptions;
use cairn::{
    parse_time_bound, ChainHash, CheckpointId, CollectedCheckpoints, EventKind, Filter, Format,
    Point, TimeBound, Timestamp,
};

use super::args::{Command, ExportArgs, FilterArgs, ReportArgs};
use super::usage;

/// A command with its flags validated: what `run` dispatches on.
pub enum Plan {
    /// `cairn log`.
    Log {
        /// The records to print.
        filter: RecordFilter,
        /// Canonical JSONL instead of a table.
        json: bool,
    },
    /// `cairn export`.
    Export(ExportPlan),
    /// `cairn tree POINT`.
    Tree {
        /// The point.
        point: PointArg,
        /// One JSON object per line.
        json: bool,
    },
    /// `cairn diff A B [PATH...]`.
    Diff {
        /// From.
        a: PointArg,
        /// To.
        b: PointArg,
        /// Only these paths, as typed (read against the workspace once the
        /// store is open).
        paths: Vec<String>,
        /// JSON output.
        json: bool,
    },
    /// `cairn verify`.
    Verify {
        /// `--head`: the chain must reach this hash.
        head: Option<ChainHash>,
        /// The report as JSON.
        json: bool,
    },
    /// `cairn import`.
    Import(ImportPlan),
    /// `cairn report`.
    Report(ReportPlan),
    /// A command whose flags clap's own checks cover.
    Other(Command),
}

/// A point as the user typed it (what messages quote) and parsed.
pub struct PointArg {
    /// Parsed.
    pub point: Point,
    /// As typed.
    pub typed: String,
}

impl PointArg {
    fn new(typed: String) -> Result<PointArg> {
        Ok(PointArg {
            point: parse_point(&typed)?,
            typed,
        })
    }
}

/// The filter flags of `log` and `export`, validated.
pub struct RecordFilter {
    /// The filter; its path is still as typed (made workspace-relative
    /// once the store is open, see [`crate::records::record_path`]).
    pub filter: Filter,
    /// `--since`/`--until` values that are checkpoint ids, to check once
    /// the store is open that each names a checkpoint of it: (flag, id).
    pub checkpoint_bounds: Vec<(&'static str, CheckpointId)>,
}

/// `cairn export`, validated.
pub struct ExportPlan {
    /// `--format`.
    pub format: Format,
    /// The records to export.
    pub filter: RecordFilter,
    /// `--output`.
    pub output: Option<PathBuf>,
    /// `--follow`.
    pub follow: bool,
}

/// `cairn report`, validated.
pub struct ReportPlan {
    /// `--output`, `--session`, `--format` as given.
    pub args: ReportArgs,
    /// `--since`, parsed.
    pub since: Option<Point>,
    /// `--until`, parsed.
    pub until: Option<Point>,
}

/// `cairn import`, validated: an agent history or JSONL records.
pub enum ImportPlan {
    /// `--format claude-code|codex|swe-agent`.
    Agent {
        /// The format (one of [`crate::agents::AGENT_FORMATS`]).
        format: String,
        /// The transcripts, rollouts, trajectories or directories.
        files: Vec<PathBuf>,
        /// The summary as JSON.
        json: bool,
        /// claude-code: `--file-history`.
        file_history: Option<PathBuf>,
        /// codex, swe-agent: `--base`, a directory.
        base: Option<PathBuf>,
    },
    /// `--format jsonl|cortexide|comma`.
    Records {
        /// The shape.
        format: Format,
        /// The files (`-` is stdin).
        files: Vec<PathBuf>,
        /// The summary as JSON.
        json: bool,
        /// `--again`, `--resume`, `--skip-torn-tail`,
        /// `--collected-checkpoints`.
        options: ImportOptions,
    },
}

impl Plan {
    /// Validates `command`'s flags.
    pub fn new(command: Command) -> Result<Plan> {
        Ok(match command {
            Command::Log(a) => Plan::Log {
                filter: record_filter(&a.filter)?,
                json: a.json,
            },
            Command::Export(a) => Plan::Export(export_plan(a)?),
            Command::Tree { point, json } => Plan::Tree {
                point: PointArg::new(point)?,
                json,
            },
            Command::Diff { a, b, paths, json } => Plan::Diff {
                a: PointArg::new(a)?,
                b: PointArg::new(b)?,
                paths,
                json,
            },
            Command::Verify(a) => Plan::Verify {
                head: a
                    .head
                    .as_deref()
                    .map(|h| {
                        ChainHash::from_hex(h.trim()).map_err(|e| usage(format!("--head: {e}")))
                    })
                    .transpose()?,
                json: a.json,
            },
            Command::Report(a) => Plan::Report(ReportPlan {
                since: a.since.as_deref().map(parse_point).transpose()?,
                until: a.until.as_deref().map(parse_point).transpose()?,
                args: a,
            }),
            c @ Command::Import { .. } => Plan::Import(import_plan(c)?),
            other => Plan::Other(other),
        })
    }
}

/// A point (`@LSN`, `c12`, a time, `head`), a usage error when it is none.
pub fn parse_point(s: &str) -> Result<Point> {
    s.parse::<Point>().map_err(|e| usage(e.to_string()))
}

/// `s` as an export/import shape; a bad one is a usage error naming `flag`.
pub fn parse_format_flag(flag: &str, s: &str) -> Result<Format> {
    s.parse::<Format>()
        .map_err(|e| usage(format!("{flag} {s}: {e}")))
}

/// The options of `--again` and `--resume` (or `--load-again` and
/// `--load-resume`), which exclude each other.
pub fn import_options(again: bool, resume: bool) -> ImportOptions {
    if again {
        ImportOptions::again()
    } else if resume {
        ImportOptions::resume()
    } else {
        ImportOptions::default()
    }
}

/// The mode of `import --collected-checkpoints` (`refuse` when not
/// given); another word is a usage error naming the flag.
fn collected_mode(s: Option<&str>) -> Result<CollectedCheckpoints> {
    match s {
        None => Ok(CollectedCheckpoints::default()),
        Some(s) => s
            .parse()
            .map_err(|e| usage(format!("--collected-checkpoints {s}: {e}"))),
    }
}

/// Turns the filter flags into a validated [`Filter`].
pub fn record_filter(a: &FilterArgs) -> Result<RecordFilter> {
    let time = |flag: &str, v: &Option<String>, b: TimeBound| -> Result<Option<Timestamp>> {
        v.as_deref()
            .map(|s| parse_time_bound(s, b).map_err(|e| usage(format!("--{flag}: {e}"))))
            .transpose()
    };
    let kind = match &a.kind {
        None => None,
        Some(k) => Some(
            k.parse::<EventKind>()
                .map_err(|e| usage(format!("--kind: {e}")))?,
        ),
    };
    let mut checkpoint_bounds = Vec::new();
    // `@LSN` and `c12` bound by record; anything else is a time.
    let mut bound = |flag: &'static str, v: &Option<String>, b: TimeBound| match v
        .as_deref()
        .map(str::parse::<Point>)
    {
        Some(Ok(Point::Lsn(l))) => Ok((Some(l), None)),
        Some(Ok(Point::Checkpoint(c))) => {
            checkpoint_bounds.push((flag, c));
            Ok((Some(c.0), None))
        }
        _ => time(flag, v, b).map(|t| (None, t)),
    };
    let (since_lsn, since) = bound("since", &a.since, TimeBound::Since)?;
    let (until_lsn, until) = bound("until", &a.until, TimeBound::Until)?;
    Ok(RecordFilter {
        filter: Filter {
            session: a.session.clone(),
            run: a.run.clone(),
            phase: a.phase.clone(),
            kind,
            agent: a.agent.clone(),
            model: a.model.clone(),
            ok: a.ok,
            path: a.path.clone(),
            since,
            until,
            since_lsn,
            until_lsn,
            limit: a.limit,
            newest_first: a.newest_first,
        },
        checkpoint_bounds,
    })
}

fn export_plan(a: ExportArgs) -> Result<ExportPlan> {
    let format = parse_format_flag("--format", &a.format)?;
    let filter = record_filter(&a.filter)?;
    if a.follow && filter.filter.newest_first {
        return Err(usage(
            "--follow prints records in the order they are committed; it cannot be combined with --newest-first",
        ));
    }
    Ok(ExportPlan {
        format,
        filter,
        output: a.output,
        follow: a.follow,
    })
}

/// `cairn import`: each flag given must be one of its format's.
fn import_plan(command: Command) -> Result<ImportPlan> {
    let Command::Import {
        format,
        file_history,
        base,
        files,
        json,
        again,
        resume,
        skip_torn_tail,
        collected_checkpoints,
    } = command
    else {
        unreachable!("import_plan is given `cairn import`")
    };
    if !super::agents::AGENT_FORMATS.contains(&format.as_str()) {
        refuse_agent_flags(&format, file_history.is_some(), base.is_some())?;
        let options = import_options(again, resume)
            .with_skip_torn_tail(skip_torn_tail)
            .with_collected_checkpoints(collected_mode(collected_checkpoints.as_deref())?);
        return Ok(ImportPlan::Records {
            format: parse_format_flag("--format", &format)?,
            files,
            json,
            options,
        });
    }
    let journal_flags = [
        ("--again", again),
        ("--resume", resume),
        ("--skip-torn-tail", skip_torn_tail),
        ("--collected-checkpoints", collected_checkpoints.is_some()),
    ];
    check_agent_flags(
        &format,
        &journal_flags,
        file_history.is_some(),
        base.as_deref(),
    )?;
    Ok(ImportPlan::Agent {
        format,
        files,
        json,
        file_history,
        base,
    })
}

/// Refuses, for the records format `format` (not an agent history's), the
/// flags only an agent history takes: `--file-history` and `--base`.
fn refuse_agent_flags(format: &str, file_history: bool, base: bool) -> Result<()> {
    if file_history {
        return Err(usage(format!(
            "--file-history is for --format claude-code, not {format}"
        )));
    }
    if base {
        return Err(usage(format!(
            "--base is for --format codex or swe-agent, not {format}"
        )));
    }
    Ok(())
}

/// Checks the flags given for the agent history format `format`: no
/// `journal_flags` (flag, given) of a records import, `--file-history`
/// only for claude-code, `--base` only for the others and a directory.
fn check_agent_flags(
    format: &str,
    journal_flags: &[(&str, bool)],
    file_history: bool,
    base: Option<&std::path::Path>,
) -> Result<()> {
    // An agent history is re-imported by each line's key (what the store
    // holds already is skipped), so the options of a JSONL import's
    // journal do not apply to it.
    if let Some((flag, _)) = journal_flags.iter().find(|(_, given)| *given) {
        return Err(usage(format!(
            "{flag} is for --format jsonl, cortexide or comma, not {format}: an agent history is imported again by running the same command (what the store holds already is skipped)"
        )));
    }
    if file_history && format != "claude-code" {
        return Err(usage(format!(
            "--file-history is for --format claude-code, not {format}"
        )));
    }
    if base.is_some() && format == "claude-code" {
        return Err(usage(
            "--base is for --format codex or swe-agent, not claude-code",
        ));
    }
    if let Some(b) = base {
        if !b.is_dir() {
            return Err(usage(format!(
                "--base {}: not a directory (the tree the session started from)",
                b.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(args: &[&str]) -> Result<Plan> {
        let cli =
            crate::args::Cli::try_parse_from(std::iter::once("cairn").chain(args.iter().copied()))
                .expect("clap accepts the flags");
        Plan::new(cli.command)
    }

    fn usage_text(args: &[&str]) -> String {
        match plan(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => {
                assert!(e.downcast_ref::<crate::UsageError>().is_some(), "{e:#}");
                format!("{e:#}")
            }
        }
    }

    #[test]
    fn log_filter_is_built_before_any_store_is_opened() {
        let Plan::Log { filter, json } = plan(&[
            "log", "--kind", "prompt", "--since", "c7", "--limit", "5", "--json",
        ])
        .unwrap() else {
            panic!("not a log plan")
        };
        assert!(json);
        assert_eq!(filter.filter.kind, Some(EventKind::Prompt));
        assert_eq!(filter.filter.since_lsn, Some(cairn::Lsn(7)));
        assert_eq!(filter.filter.limit, Some(5));
        assert_eq!(
            filter.checkpoint_bounds,
            vec![("since", CheckpointId(cairn::Lsn(7)))]
        );
    }

    #[test]
    fn bad_flags_are_usage_errors_naming_the_flag() {
        assert!(usage_text(&["log", "--kind", "nope"]).contains("--kind"));
        assert!(usage_text(&["log", "--until", "yesterday-ish"]).contains("--until"));
        assert!(usage_text(&["tree", "c"]).contains('c'));
        assert!(usage_text(&["verify", "--head", "zz"]).contains("--head"));
        assert!(usage_text(&["export", "--follow", "--newest-first"]).contains("--follow"));
        assert!(usage_text(&["report", "--since", "later"]).contains("later"));
    }

    #[test]
    fn import_flags_must_be_the_formats_own() {
        assert!(
            usage_text(&["import", "--format", "comma", "--base", ".", "f"])
                .contains("--base is for")
        );
        assert!(
            usage_text(&["import", "--format", "jsonl", "--file-history", ".", "f"])
                .contains("--file-history is for")
        );
        assert!(
            usage_text(&["import", "--format", "codex", "--again", "f"]).contains("--again is for")
        );
        assert!(
            usage_text(&["import", "--format", "claude-code", "--resume", "f"])
                .contains("--resume is for")
        );
        let Plan::Import(ImportPlan::Records { options, .. }) = plan(&[
            "import",
            "--format",
            "comma",
            "--resume",
            "--skip-torn-tail",
            "f",
        ])
        .unwrap() else {
            panic!("not a records import")
        };
        assert_eq!(options, ImportOptions::resume().with_skip_torn_tail(true));
    }
}
