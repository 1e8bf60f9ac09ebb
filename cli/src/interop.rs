//! `cairn export` and `cairn import`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::import::{ImportOption, Refusal};
use cairn::Filter;
use cairn::Format;
use cairn::{Lsn, Store};

use super::hiargs::ExportPlan;
use super::Settings;

/// Exports the whole log as canonical JSONL to `path` (atomically: temp file, then rename).
pub fn export_to_file(store: &Store, path: &Path) -> Result<u64> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("create a file in {}", dir.display()))?;
    let stats = {
        let mut w = BufWriter::new(tmp.as_file_mut());
        let stats = store.export(&Filter::all(), Format::Jsonl, &mut w)?;
        w.flush()?;
        stats
    };
    tmp.as_file().sync_data()?;
    tmp.persist(path)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(stats.records)
}

/// `cairn export`.
pub fn export(settings: &Settings, a: ExportPlan) -> Result<ExitCode> {
    let format = a.format;
    let store = settings.open_read()?;
    super::records::check_record_bounds(&store, &a.filter)?;
    let mut filter = a.filter.filter;
    filter.path = filter
        .path
        .map(|p| super::records::record_path(&p, store.workspace_dir()));
    let mut sink: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let spin = match (&a.output, a.follow) {
        (Some(p), false) => super::progress::Spinner::start(
            settings.quiet,
            &format!("exporting to {}", p.display()),
        ),
        _ => super::progress::Spinner::start(true, ""),
    };
    let stats = if a.follow {
        // Following into a pipe ends when its reader does, like `tail -f`.
        let to_stdout = a.output.is_none();
        let stop = || to_stdout && super::output::stdout_reader_gone();
        store.follow(&filter, format, Lsn::FIRST, &mut sink, &stop)?
    } else {
        store.export(&filter, format, &mut sink)?
    };
    sink.flush()?;
    drop(spin);
    if let Some(p) = &a.output {
        if !settings.quiet {
            eprintln!(
                "exported {} to {}",
                super::output::count(stats.records, "record"),
                p.display()
            );
        }
    }
    let skipped: u64 = stats.skipped.values().sum();
    if skipped > 0 && !settings.quiet {
        let kinds: Vec<String> = stats
            .skipped
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        let (have, were) = if skipped == 1 {
            ("has", "was")
        } else {
            ("have", "were")
        };
        eprintln!(
            "{} {have} no {} projection and {were} left out ({}); the canonical `jsonl` format has every record",
            super::output::count(skipped, "record"),
            format.name(),
            kinds.join(", ")
        );
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// `cairn import`.
pub fn import(
    settings: &Settings,
    format: Format,
    files: &[PathBuf],
    json: bool,
    opts: cairn::import::ImportOptions,
) -> Result<ExitCode> {
    let mut done = Done::default();
    let got = settings.open_write().and_then(|store| {
        import_files_counting(
            settings,
            &store,
            format,
            files,
            opts,
            Purpose::Import,
            &mut done,
        )?;
        Ok(store)
    });
    let summary = || {
        let torn: Vec<serde_json::Value> = done
            .torn_tails
            .iter()
            .map(|(file, t)| serde_json::json!({"file": file, "line": t.line, "bytes": t.bytes}))
            .collect();
        serde_json::json!({
            "count": done.count,
            "first_lsn": done.range.map(|r: (Lsn, Lsn)| r.0 .0),
            "last_lsn": done.range.map(|r: (Lsn, Lsn)| r.1 .0),
            "torn_tails": torn,
            "collected_checkpoints": collected_json(&done.collected),
        })
    };
    let store = match got {
        Ok(store) => store,
        Err(e) => {
            // A script reading the summary gets an object even when the
            // import is refused as a whole.
            if json {
                let mut v = summary();
                v["error"] = super::describe(&e).into();
                outln!("{v}");
            }
            return Err(e);
        }
    };
    if json {
        outln!("{}", summary());
    } else if !settings.quiet {
        eprintln!(
            "imported {} from {}{}",
            super::output::count(done.count, "record"),
            super::output::count(files.len() as u64, "file"),
            collected_words(&done.collected)
        );
    }
    store.close()?;
    Ok(ExitCode::SUCCESS)
}

/// The checkpoint lines an import recorded without the files gc had
/// collected, as `--json` lists them: file, line, the record made, the
/// checkpoint it copies and where that one was discarded.
fn collected_json(collected: &[(String, cairn::CollectedCheckpoint)]) -> serde_json::Value {
    collected
        .iter()
        .map(|(file, c)| {
            serde_json::json!({
                "file": file,
                "line": c.line,
                "id": c.id.to_string(),
                "copy_of": c.copy_of.to_string(),
                "discarded_at": c.discarded_at.0,
            })
        })
        .collect()
}

/// The words the import summary adds for the checkpoint lines recorded
/// without the files gc had collected: how many, which records they made
/// of which checkpoints, and that they cannot be rolled back to; nothing
/// when there are none.
fn collected_words(collected: &[(String, cairn::CollectedCheckpoint)]) -> String {
    if collected.is_empty() {
        return String::new();
    }
    let made: Vec<String> = collected.iter().map(|(_, c)| c.id.to_string()).collect();
    let copied: Vec<String> = collected
        .iter()
        .map(|(_, c)| c.copy_of.to_string())
        .collect();
    let n = collected.len() as u64;
    format!(
        "; {} copying discarded checkpoints whose files gc had collected ({}) {} recorded without them, as {}: {} cannot be rolled back to",
        super::output::count(n, "checkpoint line"),
        super::output::short_list(&copied),
        if n == 1 { "was" } else { "were" },
        super::output::short_list(&made),
        if n == 1 { "it" } else { "they" },
    )
}

/// The flag that sets `option` for `purpose`: what a user of `cairn` can
/// type where the library's refusal names its own call.
/// (`--load` has no flag for collected checkpoints: the in-memory store
/// it loads into holds no checkpoint gc collected, so no line of a load
/// can copy one.)
pub fn option_flag(option: ImportOption, purpose: Purpose) -> &'static str {
    match (option, purpose) {
        (ImportOption::Again, Purpose::Import) => "--again",
        (ImportOption::Again, Purpose::Load) => "--load-again",
        (ImportOption::Resume, Purpose::Import) => "--resume",
        (ImportOption::Resume, Purpose::Load) => "--load-resume",
        (ImportOption::SkipTornTail, Purpose::Import) => "--skip-torn-tail",
        (ImportOption::SkipTornTail, Purpose::Load) => "--load-skip-torn-tail",
        (ImportOption::RecordCollected, Purpose::Import) => "--collected-checkpoints record",
        (ImportOption::RecordCollected, Purpose::Load) => {
            "`cairn import --collected-checkpoints record`"
        }
    }
}

/// A refusal's message with its options named by their flags for `purpose`.
pub fn in_flag_words(r: &Refusal, purpose: Purpose) -> String {
    r.render(|o| option_flag(o, purpose).to_string())
}

/// Why files are imported: it changes what an error says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `cairn import`: what was recorded before a bad file stays recorded.
    Import,
    /// `--load` into an in-memory store, which a bad file leaves unused.
    Load,
}

/// What the files of an import recorded, and the torn last lines it
/// skipped.
#[derive(Debug, Default)]
pub struct Done {
    /// The number of records.
    pub count: u64,
    /// Their LSNs, first and last.
    pub range: Option<(Lsn, Lsn)>,
    /// The file (as named) and line of each torn last line skipped.
    pub torn_tails: Vec<(String, cairn::import::TornTail)>,
    /// The file (as named) of each checkpoint line recorded without the
    /// files gc had collected, and what it made.
    pub collected: Vec<(String, cairn::CollectedCheckpoint)>,
}

/// Imports `files` in `format` into `store`, in order (`-` reads stdin).
/// The first bad line stops it with an error naming the file and line; a
/// torn last line skipped (`opts.skip_torn_tail`) is named on stderr.
/// Shared by `cairn import` and `--load`.
pub fn import_files(
    settings: &Settings,
    store: &Store,
    format: Format,
    files: &[PathBuf],
    opts: cairn::import::ImportOptions,
    purpose: Purpose,
) -> Result<Done> {
    let mut done = Done::default();
    import_files_counting(settings, store, format, files, opts, purpose, &mut done)?;
    Ok(done)
}

/// [`import_files`], adding to `done` as each file is recorded, so a
/// caller knows what the files before a failing one recorded.
fn import_files_counting(
    settings: &Settings,
    store: &Store,
    format: Format,
    files: &[PathBuf],
    opts: cairn::import::ImportOptions,
    purpose: Purpose,
    done: &mut Done,
) -> Result<()> {
    let what = match purpose {
        Purpose::Import => "import",
        Purpose::Load => "load",
    };
    for f in files {
        let stdin = f.as_os_str() == "-";
        let name = if stdin {
            "stdin".to_string()
        } else {
            f.display().to_string()
        };
        let spin = super::progress::Spinner::start(settings.quiet, &format!("{what}ing {name}"));
        let got = if stdin {
            store.import_reporting(format, &mut std::io::stdin().lock(), "stdin", opts)
        } else {
            store.import_file_reporting(format, f, opts)
        };
        let got = got
            .map_err(|e| match e {
                // Still a refusal (its exit status), now in this command's words.
                cairn::Error::Rejected(r) => {
                    cairn::Error::Rejected(Refusal::new(in_flag_words(&r, purpose)))
                }
                e => e,
            })
            .with_context(|| stopped_in(what, &name, done.count, purpose))?;
        drop(spin);
        add_file(done, name, got, purpose);
    }
    Ok(())
}

/// What an import that failed in the file `name` says: that it stopped
/// there, and, for `import`, that the `total` records of the files before
/// it were recorded.
fn stopped_in(what: &str, name: &str, total: u64, purpose: Purpose) -> String {
    let before = if total > 0 && purpose == Purpose::Import {
        format!(
            "; the {} of the files before it {} recorded",
            super::output::count(total, "record"),
            if total == 1 { "was" } else { "were" }
        )
    } else {
        String::new()
    };
    format!("{what} stopped in {name}{before}")
}

/// Adds what the file `name` recorded (`got`) to `done`, warning of a
/// torn last line it skipped.
fn add_file(done: &mut Done, name: String, got: cairn::import::ImportReport, purpose: Purpose) {
    if let Some((first, last)) = got.range {
        done.count += last.0 - first.0 + 1;
        done.range = Some((done.range.map_or(first, |r| r.0), last));
    }
    done.collected
        .extend(got.collected.into_iter().map(|c| (name.clone(), c)));
    if let Some(t) = got.torn_tail {
        // A warning, printed with --quiet too: input left out.
        let then = match purpose {
            Purpose::Import => {
                "; once its writer has completed it, `cairn import --resume` imports it"
            }
            Purpose::Load => "",
        };
        eprintln!(
            "warning: {name}:{}: skipped its torn last line ({} with no line end, its JSON cut short: its writer stopped part way through it){then}",
            t.line,
            super::output::count(t.bytes, "byte"),
        );
        done.torn_tails.push((name, t));
    }
}
