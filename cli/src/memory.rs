//! `--in-memory` and `--load`: a command run on a store held in memory,
//! for a workspace that cannot hold a store (read-only) or to inspect and
//! export a log file without creating one. The store is opened, and the
//! `--load` files imported into it, before the command runs; the command
//! takes it where it would open a store on disk, and it is gone when the
//! command exits.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cairn::Format;
use cairn::Store;

use super::args::{BlobCommand, Command};
use super::{usage, Settings};

/// How to keep a store that lasts, for a workspace that cannot hold one:
/// said with what a command did to a store that does not.
const LASTING: &str = "for a store that lasts, create one on a writable disk and name it: \
     `cairn --store DIR init WORKSPACE`, then `cairn --store DIR COMMAND`";

/// Refuses, before anything is opened, a command that has no meaning on a
/// store that lasts one command, and a `--load -` whose stdin the command
/// itself reads.
pub fn check(command: &Command, loads: &[PathBuf]) -> Result<()> {
    let refused = match command {
        Command::Init { .. } => Some(
            "cairn init --in-memory: an in-memory store lasts one command, so there is nothing to \
             create; give --in-memory to the command you want to run instead (e.g. \
             `cairn --in-memory checkpoint --label start`, `cairn --in-memory --load audit.jsonl log`)",
        ),
        Command::Repair { .. } => Some(
            "cairn repair --in-memory: repair mends a store on disk; an in-memory store has nothing \
             to repair (give `cairn verify` --in-memory to check what --load read)",
        ),
        Command::Demo(_) => Some(
            "cairn demo --in-memory: the demo creates its own store, in a workspace it generates \
             (a temporary directory); run it without --in-memory",
        ),
        _ => None,
    };
    if let Some(why) = refused {
        return Err(usage(why));
    }
    let load_stdin = loads.iter().any(|f| f.as_os_str() == "-");
    let command_stdin = match command {
        Command::Record(a) => a.file.is_none(),
        Command::Import { files, .. } => files.iter().any(|f| f.as_os_str() == "-"),
        Command::Checkpoint(a) => a.state.as_ref().is_some_and(|f| f.as_os_str() == "-"),
        Command::Rollback(a) => a.state.as_ref().is_some_and(|f| f.as_os_str() == "-"),
        _ => false,
    };
    if load_stdin && command_stdin {
        return Err(usage(
            "--load - reads stdin, and so does the command: give one of them a file",
        ));
    }
    if loads.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        return Err(usage("--load - is given twice: stdin can be read once"));
    }
    Ok(())
}

/// The workspace of an in-memory store: `--workspace DIR`, else the
/// current directory; it must exist.
pub fn workspace(flag: Option<&Path>) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("read the current directory")?;
    let dir = match flag {
        Some(w) if w.is_absolute() => w.to_path_buf(),
        Some(w) => cwd.join(w),
        None => cwd,
    };
    dir.canonicalize()
        .with_context(|| format!("open the workspace {}", dir.display()))
}

/// Opens the in-memory store over the workspace and imports the `--load`
/// files into it, in order. An input loaded twice (the same file, a copy,
/// the same lines on stdin, or one an earlier `--load` holds the start of)
/// is refused as `import` refuses input imported before, by the import
/// journal of the memory store, unless `--load-again` (load it anyway) or
/// `--load-resume` (load the lines after those loaded) is given.
pub fn open(settings: &Settings, loads: &[PathBuf], format: Format) -> Result<Store> {
    let ws = workspace(settings.workspace.as_deref())?;
    let store = Store::builder()
        .in_memory()
        .workspace(&ws)
        .open()
        .with_context(|| format!("open an in-memory store for the workspace {}", ws.display()))?;
    super::interop::import_files(
        settings,
        &store,
        format,
        loads,
        settings.load_options,
        super::interop::Purpose::Load,
    )?;
    Ok(store)
}

/// What `command`, run on an in-memory store, made that is gone when cairn
/// exits, and where to keep it instead: a note to print once it has run,
/// or `None` for a command that only reads (or, like `record`, says so
/// itself). A writing command's own words would otherwise promise what
/// cannot happen: "the next checkpoint captures it", a checkpoint id no
/// later command knows.
pub fn gone_note(command: &Command) -> Option<String> {
    let gone = "a store held in memory, which is gone when cairn exits";
    Some(match command {
        Command::Track { paths } => {
            format!(
                "--in-memory: tracking {} in {gone}, and the tracking with it: no later command's checkpoint captures {}; {LASTING}",
                super::output::count(paths.len() as u64, "path"),
                if paths.len() == 1 { "it" } else { "them" },
            )
        }
        Command::Checkpoint(_) => format!(
            "--in-memory: the checkpoint is in {gone}: no later command can show, diff or roll back to it (what this command printed is all that is kept); {LASTING}"
        ),
        Command::Rollback(a) if !a.dry_run => format!(
            "--in-memory: the workspace's files were changed on disk and stay so, but the rollback's record and its undo point are in {gone}: no later command can undo it; {LASTING}"
        ),
        Command::Gc(_) => format!(
            "--in-memory: gc collected {gone}: nothing on disk was collected (to collect a store on disk, run gc without --in-memory, with --store DIR if it is not found from here)"
        ),
        Command::Import { .. } => format!(
            "--in-memory: the records are imported into {gone} (`cairn --in-memory --load FILE COMMAND` imports a file before any command, to read it); {LASTING}"
        ),
        Command::Blob(BlobCommand::Put { .. }) => format!(
            "--in-memory: the blobs are stored in {gone}: no later command can get them; {LASTING}"
        ),
        _ => return None,
    })
}

/// The end of a command run on an in-memory store: on success, the note
/// of [`gone_note`] (unless --quiet); on failure to find a checkpoint, that
/// an in-memory store holds only what this command loaded and made.
pub fn finish(
    settings: &Settings,
    note: Option<String>,
    result: Result<std::process::ExitCode>,
) -> Result<std::process::ExitCode> {
    match result {
        Ok(code) => {
            if let (Some(note), false) = (note, settings.quiet) {
                eprintln!("note: {note}");
            }
            Ok(code)
        }
        // (Said after the error, as a hint; the exit code stays 1.)
        Err(e) if names_no_checkpoint(&e) => Err(anyhow::anyhow!(
            "{}\nnote: --in-memory: the store holds only what this command loaded and made; \
             a checkpoint an earlier `cairn --in-memory` command made was gone when that command \
             exited; {LASTING}",
            super::describe(&e)
        )),
        Err(e) => Err(e),
    }
}

/// Whether `e` says a checkpoint it names is not in the store.
fn names_no_checkpoint(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<cairn::SnapshotError>(),
            Some(cairn::SnapshotError::UnknownCheckpoint { .. })
        ) || matches!(
            c.downcast_ref::<cairn::QueryError>(),
            Some(cairn::QueryError::NoSuchCheckpoint { .. })
        )
    })
}
