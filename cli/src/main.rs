//! The `cairn` command-line tool: raw flags ([`args`]), then validated
//! settings and dispatch to one module per group of commands. It is a
//! package of its own, so the `cairn` library an embedder depends on pulls
//! in no argument parser, progress bars or `anyhow`.

/// `println!` for the CLI's output: a write error (the reader of a pipe
/// gone, `cairn log | head`; a full disk under `> file`) is returned with
/// `?` instead of panicking, so `main` ends quietly on a closed pipe and
/// reports any other failure, and the store is closed as usual.
macro_rules! outln {
    () => {
        ::std::io::Write::write_all(&mut ::std::io::stdout().lock(), b"\n")?
    };
    ($($arg:tt)*) => {
        ::std::io::Write::write_fmt(
            &mut ::std::io::stdout().lock(),
            format_args!("{}\n", format_args!($($arg)*)),
        )?
    };
}

/// `print!` for the CLI's output, returning write errors as [`outln`] does.
macro_rules! out {
    ($($arg:tt)*) => {
        ::std::io::Write::write_fmt(&mut ::std::io::stdout().lock(), format_args!($($arg)*))?
    };
}

pub mod agents;
pub mod args;
pub mod blob;
pub mod checkpoint;
pub mod demo;
pub mod discover;
pub mod health;
pub mod hiargs;
pub mod hooks;
pub mod interop;
pub mod memory;
pub mod output;
pub mod paths;
pub mod progress;
pub mod record;
pub mod records;
pub mod replicate;
pub mod report;
pub mod travel;
pub mod turns;
pub mod watch;

fn main() -> ExitCode {
    let args: Cli = Cli::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let style = output::Style::stderr();
            eprintln!("{} {}", style.red("error:"), describe(&e));
            exit_code_for(&e)
        }
    }
}

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::Durability;
use cairn::EngineError;
use cairn::{Error, Store};
use clap::Parser;

use args::{Cli, Command};

/// Exit code: an error.
pub const EXIT_ERROR: u8 = 1;
/// Exit code: bad usage (clap's own, and a bad value for an option).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: corruption found (verify, or a read that hit damage).
pub const EXIT_CORRUPT: u8 = 3;
/// Exit code: some input lines were rejected (record, import).
pub const EXIT_REJECTED: u8 = 4;

/// A bad value for an option (`--kind bogus`, `--since yesterday`): the
/// command exits with [`EXIT_USAGE`], as for clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] saying `msg`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// The exit code for an error: corruption, refused input lines and bad
/// usage get their own.
pub fn exit_code_for(e: &anyhow::Error) -> ExitCode {
    ExitCode::from(exit_status_for(e))
}

/// The exit status [`exit_code_for`] gives `e`.
pub fn exit_status_for(e: &anyhow::Error) -> u8 {
    let corrupt = e.chain().any(|c| {
        c.downcast_ref::<Error>().is_some_and(Error::is_corruption)
            || c.downcast_ref::<EngineError>()
                .is_some_and(EngineError::is_corruption)
            || replicate::is_damaged_archive(c)
    });
    // Input refused: lines of an import, or an event the log would not take.
    let rejected = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<Error>(),
            Some(Error::Rejected(_) | Error::InvalidEvent(_))
        )
    });
    let bad_usage = e.chain().any(|c| c.is::<UsageError>());
    if corrupt {
        EXIT_CORRUPT
    } else if rejected {
        EXIT_REJECTED
    } else if bad_usage {
        EXIT_USAGE
    } else {
        EXIT_ERROR
    }
}

/// True when the error is a closed pipe (`cairn log | head`): not a failure.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A store opened with a workspace it is not bound to, in the command
/// line's words (the library's name `StoreBuilder` calls).
fn mismatch_in_cli_words(m: &cairn::binding::WorkspaceMismatch) -> String {
    if m.store_inside_bound() {
        // A store inside its workspace moves with it: the other
        // directory is a mistake, not a move.
        return format!(
            "the store {} belongs to the workspace {} that holds it, not {}: check --workspace",
            m.store.display(),
            m.bound.display(),
            m.given.display(),
        );
    }
    format!(
        "the store {} belongs to the workspace {}, not {}: check --workspace and --store \
         (or CAIRN_STORE); if the workspace really moved, bind the store to it with \
         `cairn --store {} init {} --rebind`",
        m.store.display(),
        m.bound.display(),
        m.given.display(),
        m.store.display(),
        m.given.display(),
    )
}

/// The error and its causes on one line, leaving out a cause whose text the
/// message before it already includes (library errors name their source),
/// in the command line's words: its flags for the library calls a message
/// names.
pub fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = match cause.downcast_ref::<Error>() {
            Some(Error::WorkspaceMismatch(m)) => mismatch_in_cli_words(m),
            Some(Error::WorkspaceGone { store, bound }) => format!(
                "the store {} belongs to the workspace {}, which does not exist: if it moved, \
                 bind the store to its new place with `cairn --store {} init NEWDIR --rebind`",
                store.display(),
                bound.display(),
                store.display()
            ),
            // A refusal names the import options `import`'s flags set.
            Some(Error::Rejected(r)) => interop::in_flag_words(r, interop::Purpose::Import),
            _ => cause.to_string(),
        };
        let text = output::escape_controls(&text).into_owned();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    if disk_full(e) {
        out.push_str(DISK_FULL_HINT);
    }
    out
}

/// What to do when the disk holding the store is full, in the command
/// line's words: `gc` frees space without needing any first (it deletes
/// packs of unreferenced blobs and cuts their dead tails before it writes
/// anything).
const DISK_FULL_HINT: &str = "; the disk holding the store is full: free space on it, or run \
     `cairn gc` (it removes what no checkpoint or record refers to; `cairn gc \
     --keep-per-session N` or `--max-bytes SIZE` also evicts old checkpoints), then run the \
     command again";

/// True when a cause of `e` is a write that found no space (`ENOSPC`, or
/// a quota reached).
fn disk_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        }) || {
            let t = c.to_string();
            t.contains("No space left on device") || t.contains("Disk quota exceeded")
        }
    })
}

/// How long a write command waits for the store lock before reporting
/// "locked": long enough to outlast a read command that holds it briefly,
/// short enough that a real second writer is told promptly.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// How often a waiting write command retries the lock (and writes its
/// announcement again, see [`turns`]): often enough that it takes the lock
/// soon after a yielding `record` lets go, rarely enough to cost nothing.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// The environment variable that sets the largest file a checkpoint (and
/// a rollback) of a store on disk captures, in bytes; unset, the library's
/// default (`cairn::SnapshotOptions`, 256 MiB). Larger files are skipped
/// and counted as `too_large`, never silently. An environment variable, not
/// a flag, so a hook or a script sets it once for every command it runs.
pub const MAX_FILE_BYTES_ENV: &str = "CAIRN_MAX_FILE_BYTES";

/// A number of bytes from the environment variable `name`: `None` when
/// unset or blank, a usage error naming the variable (with `example`)
/// when it is not a number. Every byte-count variable
/// ([`MAX_FILE_BYTES_ENV`], `CAIRN_CACHE_BYTES`) is read through it.
pub fn bytes_from_env(name: &str, example: u64) -> Result<Option<u64>> {
    let bad = |v: &dyn std::fmt::Debug| {
        usage(format!(
            "{name}={v:?} is not a number of bytes (for example {example})"
        ))
    };
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map(Some).map_err(|_| bad(&v)),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad(&v)),
    }
}

/// Validated global settings (stage two of argument parsing).
pub struct Settings {
    /// `--store`.
    pub store: Option<std::path::PathBuf>,
    /// `--store URL` (or `$CAIRN_STORE` set to one): the archive read in
    /// place, and the bound on its cache (see [`replicate::open_in_place`]).
    pub archive: Option<(String, u64)>,
    /// `--workspace`.
    pub workspace: Option<std::path::PathBuf>,
    /// `--durability`, parsed.
    pub durability: Option<Durability>,
    /// `$CAIRN_MAX_FILE_BYTES`, parsed: the largest file a checkpoint
    /// captures (see [`MAX_FILE_BYTES_ENV`]).
    pub max_file_bytes: Option<u64>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--in-memory`: the command runs on [`Settings::memory`], not on a
    /// store on disk.
    pub in_memory: bool,
    /// `--load` files, to import into the in-memory store.
    pub loads: Vec<std::path::PathBuf>,
    /// `--load-format`, parsed (default: canonical JSONL).
    pub load_format: cairn::Format,
    /// `--load-again`, `--load-resume`, `--load-skip-torn-tail`: how the
    /// `--load` files are imported.
    pub load_options: cairn::import::ImportOptions,
    /// With `--in-memory`: the store, opened and loaded before the command
    /// runs (see [`memory::open`]); the command's open takes it.
    memory: std::cell::RefCell<Option<Store>>,
}

impl Settings {
    /// `command` with the paths it names read from the current directory
    /// (see [`paths`]); `show` reads its own (see [`travel::show`]). The
    /// store is looked for only when the command names a path.
    fn paths_from_cwd(&self, mut command: Command) -> Command {
        let typed: Vec<&mut String> = match &mut command {
            Command::Track { paths } | Command::Diff { paths, .. } => paths.iter_mut().collect(),
            Command::Rollback(a) => a.paths.iter_mut().collect(),
            Command::History { path, .. } => vec![path],
            Command::Blame { path, .. } => path.iter_mut().collect(),
            Command::Log(a) => a.filter.path.iter_mut().collect(),
            Command::Export(a) => a.filter.path.iter_mut().collect(),
            _ => Vec::new(),
        };
        if typed.is_empty() {
            return command;
        }
        if let Some((root, cwd)) = self.workspace_and_cwd() {
            for p in typed {
                *p = paths::from_cwd(p, &root, &cwd);
            }
        }
        command
    }

    /// The workspace root and the current directory, both canonical, if a
    /// store is found.
    pub(crate) fn workspace_and_cwd(&self) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        if self.in_memory {
            let root = memory::workspace(self.workspace.as_deref()).ok()?;
            let cwd = std::env::current_dir().ok()?.canonicalize().ok()?;
            return Some((root, cwd));
        }
        if self.archive.is_some() {
            // Paths in an archive are read as typed, from its workspace root.
            return None;
        }
        let found = discover::find(self.store.as_deref(), self.workspace.as_deref()).ok()?;
        let root = found.workspace.canonicalize().ok()?;
        let cwd = std::env::current_dir().ok()?.canonicalize().ok()?;
        Some((root, cwd))
    }

    fn from_cli(cli: &Cli) -> Result<Settings> {
        let durability = match &cli.durability {
            None => None,
            // The parse error already lists the policies.
            Some(s) => Some(
                s.parse::<Durability>()
                    .map_err(|e| usage(format!("--durability: {e}")))?,
            ),
        };
        let load_format = match &cli.load_format {
            None => cairn::Format::Jsonl,
            Some(s) => hiargs::parse_format_flag("--load-format", s)?,
        };
        let archive = match replicate::archive_url(cli.store.as_deref(), cli.in_memory) {
            Some(url) => Some((url, replicate::cache_bytes(cli.cache_bytes)?)),
            None => None,
        };
        let max_file_bytes = bytes_from_env(MAX_FILE_BYTES_ENV, 2_147_483_648)?;
        Ok(Settings {
            store: cli.store.clone(),
            archive,
            workspace: cli.workspace.clone(),
            durability,
            max_file_bytes,
            quiet: cli.quiet,
            in_memory: cli.in_memory,
            loads: cli.load.clone(),
            load_format,
            load_options: hiargs::import_options(cli.load_again, cli.load_resume)
                .with_skip_torn_tail(cli.load_skip_torn_tail),
            memory: std::cell::RefCell::new(None),
        })
    }

    fn builder(&self, found: &discover::Found) -> cairn::StoreBuilder {
        let mut b = Store::builder()
            .store_dir(&found.store)
            .workspace(&found.workspace);
        if let Some(d) = self.durability {
            b = b.durability(d);
        }
        if let Some(n) = self.max_file_bytes {
            let mut opts = cairn::SnapshotOptions::default();
            opts.max_file_bytes = n;
            b = b.snapshot_options(opts);
        }
        b
    }

    /// Opens the store for writing.
    pub fn open_write(&self) -> Result<Store> {
        self.open_write_with(None)
    }

    /// The in-memory store, for the command's one open of its store.
    fn take_memory(&self) -> Result<Store> {
        self.memory.borrow_mut().take().ok_or_else(|| {
            anyhow::anyhow!("internal error: the in-memory store was opened twice by one command")
        })
    }

    /// Opens the store for writing with a durability override (none for
    /// an in-memory store, which is never on disk).
    pub fn open_write_with(&self, durability: Option<Durability>) -> Result<Store> {
        self.open_write_waiting(durability, false)
    }

    /// [`Settings::open_write_with`]; with `patient`, waits for the store
    /// lock as long as another process holds it (saying so once, after
    /// [`LOCK_WAIT`]) instead of reporting "locked": for `record`, which
    /// must not drop the events it was given. While it waits, it announces
    /// that it does ([`turns::Announcement`]), so a `cairn record` holding
    /// the lock lets go of it for a while.
    pub fn open_write_waiting(
        &self,
        durability: Option<Durability>,
        patient: bool,
    ) -> Result<Store> {
        if self.in_memory {
            return self.take_memory();
        }
        if let Some((url, _)) = &self.archive {
            anyhow::bail!("an archive is read-only; restore it first: cairn restore {url} DIR");
        }
        let found = discover::find(self.store.as_deref(), self.workspace.as_deref())?;
        let mut b = self.builder(&found);
        if let Some(d) = durability {
            b = b.durability(d);
        }
        // A read command may hold the lock for a moment (it opens for
        // writing when it can, so recovery runs); wait for it rather than fail.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut told = false;
        // Removed when this function returns: got the lock, or gave up.
        let mut wanted: Option<turns::Announcement> = None;
        loop {
            match b.clone().open() {
                Err(Error::Engine(EngineError::Locked { lock_file, .. }))
                    if patient || std::time::Instant::now() < deadline =>
                {
                    wanted
                        .get_or_insert_with(|| turns::Announcement::new(&found.store))
                        .renew();
                    if patient && !told && !self.quiet && std::time::Instant::now() >= deadline {
                        eprintln!(
                            "note: waiting for the store lock ({}), held by another cairn process that writes",
                            lock_file.display()
                        );
                        told = true;
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                r => {
                    return r
                        .map_err(with_write_hint)
                        .with_context(|| format!("open store {}", found.store.display()))
                }
            }
        }
    }

    /// Opens the store to read: read-only, without the lock, so a reader
    /// (a paged `cairn log`, an `export --follow`) never keeps a recording
    /// process from writing, and a store this user may only read can be
    /// read. A torn tail a crash left is "not yet written" to a reader;
    /// the next writer cuts it. The query index it extends is saved for the
    /// next command where the store can be written.
    pub fn open_read(&self) -> Result<Store> {
        if self.in_memory {
            return self.take_memory();
        }
        if let Some((url, cache_bytes)) = &self.archive {
            return replicate::open_in_place(url, *cache_bytes);
        }
        let found = discover::find(self.store.as_deref(), self.workspace.as_deref())?;
        // Reading a store another user owns, or others may read, is
        // allowed (it writes nothing) but said: writing it is refused.
        if let Err(e) = cairn::store_dir::check_owner_and_mode(&found.store) {
            eprintln!("warning: {e} (reading it anyway; writing it is refused)");
        }
        // Likewise a store reached through a link it does not record, or
        // whose binding cannot be trusted: its records are read, its
        // workspace is neither written nor rolled back.
        if let Some(e) = found.binding_problem() {
            eprintln!(
                "warning: {e} (reading its records anyway; writing and rolling back are refused)"
            );
        }
        let mut b = self.builder(&found).read_only().save_index_read_only(true);
        if let Some(read) = &found.bound {
            b = b.binding_read(read.clone());
        }
        let store = b
            .open()
            .with_context(|| format!("open store {} read-only", found.store.display()))?;
        // Every read command says so when the log lost its newest records.
        if let Some(w) = store.log_loss_warning() {
            eprintln!("{} {w}", output::Style::stderr().red("warning:"));
        }
        Ok(store)
    }
}

/// Adds to an error that says this process may not write the store (a
/// permission or a read-only file system somewhere in its causes) what can
/// still be done.
fn with_write_hint(e: Error) -> anyhow::Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let (mut denied, mut read_only_fs) = (false, false);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            denied |= io.kind() == std::io::ErrorKind::PermissionDenied;
            read_only_fs |= io.kind() == std::io::ErrorKind::ReadOnlyFilesystem;
        }
        cause = c.source();
    }
    if denied || read_only_fs {
        // The cause as it is: a file system mounted read-only is no
        // matter of this user's permissions.
        let why = if read_only_fs {
            "the store is on a read-only file system"
        } else {
            "this user may not write the store here"
        };
        anyhow::anyhow!(
            "{e}\n{why}; commands that only read it \
             (log, show, tree, diff, checkpoints, rollback --dry-run, export) still work \
             where it can be read, and `cairn --in-memory checkpoint` checkpoints the \
             workspace into memory"
        )
    } else {
        anyhow::Error::new(e)
    }
}

/// Adds to an error that says the store cannot be created here (the
/// workspace is read-only) how to run commands on it anyway: examples of
/// `--in-memory`, which the error names.
fn with_in_memory_example(e: Error) -> anyhow::Error {
    let read_only = matches!(&e, Error::Engine(EngineError::ReadOnly { .. }));
    if read_only {
        anyhow::anyhow!(
            "{e}\nfor example: `cairn --in-memory checkpoint --label start` checkpoints this \
             workspace into memory; `cairn --in-memory --load audit.jsonl log` reads a log file \
             without a store on disk; `cairn --in-memory record --echo < events.jsonl` records \
             and prints the records"
        )
    } else {
        anyhow::Error::new(e)
    }
}

/// Runs one command.
pub fn run(cli: Cli) -> Result<ExitCode> {
    let settings = Settings::from_cli(&cli)?;
    if let Some((url, _)) = &settings.archive {
        if let Some(why) = replicate::refuse_on_archive(&cli.command, url) {
            anyhow::bail!("{why}");
        }
    }
    if settings.in_memory {
        memory::check(&cli.command, &settings.loads)?;
    }
    let command = settings.paths_from_cwd(cli.command);
    if settings.in_memory {
        let store = memory::open(&settings, &settings.loads, settings.load_format)?;
        *settings.memory.borrow_mut() = Some(store);
    }
    let gone = if settings.in_memory {
        memory::gone_note(&command)
    } else {
        None
    };
    let result = match hiargs::Plan::new(command) {
        Err(e) => Err(e),
        Ok(plan) => dispatch(&settings, plan),
    };
    if settings.in_memory {
        return memory::finish(&settings, gone, result);
    }
    result
}

/// Runs a validated command.
fn dispatch(settings: &Settings, plan: hiargs::Plan) -> Result<ExitCode> {
    use hiargs::{ImportPlan, Plan};
    let command = match plan {
        Plan::Log { filter, json } => return health::log(settings, filter, json),
        Plan::Export(p) => return interop::export(settings, p),
        Plan::Tree { point, json } => return travel::tree(settings, point, json),
        Plan::Diff { a, b, paths, json } => return travel::diff(settings, a, b, &paths, json),
        Plan::Verify { head, json } => return health::verify(settings, head, json),
        Plan::Report(p) => return report::run(settings, p),
        Plan::Import(ImportPlan::Agent {
            format,
            files,
            json,
            file_history,
            base,
        }) => return agents::import(settings, &format, &files, json, file_history, base),
        Plan::Import(ImportPlan::Records {
            format,
            files,
            json,
            options,
        }) => return interop::import(settings, format, &files, json, options),
        Plan::Other(command) => command,
    };
    match command {
        Command::Init { dir, rebind } => init(settings, dir.as_deref(), rebind),
        Command::Record(a) => record::run(settings, a),
        Command::Repair { json } => health::repair(settings, json),
        Command::Stats { json } => health::stats(settings, json),
        Command::Blob(b) => blob::run(settings, b),
        Command::Track { paths } => checkpoint::track(settings, &paths),
        Command::Checkpoint(a) => checkpoint::create(settings, a),
        Command::Checkpoints { session, json } => {
            checkpoint::list(settings, session.as_deref(), json)
        }
        Command::Rollback(a) => checkpoint::rollback(settings, a),
        Command::Gc(a) => checkpoint::gc(settings, a),
        Command::Show { spec } => travel::show(settings, &spec),
        Command::History {
            path,
            checkpoints,
            follow,
            json,
        } => travel::history(settings, &path, checkpoints, follow, json),
        Command::Blame { point, path, json } => {
            travel::blame(settings, &point, path.as_deref(), json)
        }
        Command::Branches { id, json } => travel::branches(settings, id.as_deref(), json),
        Command::Demo(a) => demo::run(settings, a),
        Command::Hooks { action } => hooks::run(action),
        Command::Watch(a) => watch::run(settings, a),
        Command::Completions { shell } => completions(&shell),
        Command::Replicate(a) => replicate::replicate(settings, a),
        Command::Restore(a) => replicate::restore(a),
        Command::Archive(a) => replicate::archive(a),
        Command::Log(_)
        | Command::Export(_)
        | Command::Tree { .. }
        | Command::Diff { .. }
        | Command::Verify(_)
        | Command::Report(_)
        | Command::Import { .. } => {
            unreachable!("hiargs::Plan::new validates these into their own plans")
        }
    }
}

fn init(settings: &Settings, dir: Option<&Path>, rebind: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let workspace = match dir.or(settings.workspace.as_deref()) {
        Some(d) if d.is_absolute() => d.to_path_buf(),
        Some(d) => cwd.join(d),
        None => cwd,
    };
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("create {}", workspace.display()))?;
    // `cairn init .` names the store `/w/.cairn`, not `/w/./.cairn`.
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("resolve {}", workspace.display()))?;
    let store_dir = settings
        .store
        .clone()
        .unwrap_or_else(|| workspace.join(cairn::store_dir::STORE_DIR_NAME));
    let existed = store_dir.join("log").is_dir();
    let store = Store::builder()
        .store_dir(&store_dir)
        .workspace(&workspace)
        .rebind_workspace(rebind)
        .open()
        .map_err(with_in_memory_example)?;
    if let Some(m) = store.workspace_mismatch() {
        anyhow::bail!("{}", mismatch_in_cli_words(m));
    }
    store.close()?;
    if settings.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    if existed && rebind {
        outln!(
            "cairn store at {} now belongs to the workspace {}",
            store_dir.display(),
            workspace.display()
        );
    } else if existed {
        outln!("cairn store already exists at {}", store_dir.display());
    } else {
        outln!("created cairn store at {}", store_dir.display());
        outln!("next: `cairn checkpoint --label start`, or pipe events into `cairn record`");
    }
    Ok(ExitCode::SUCCESS)
}

fn completions(shell: &str) -> Result<ExitCode> {
    use clap::CommandFactory;
    let sh: clap_complete::Shell = shell.parse().map_err(|_| {
        usage(format!(
            "unknown shell `{shell}`: use bash, zsh, fish, elvish or powershell"
        ))
    })?;
    // Every command's flags built at once, in the order `Cli` declares
    // them (see `args::EagerCommand`).
    let mut cmd = Cli::<args::EagerCommand>::command();
    clap_complete::generate(sh, &mut cmd, "cairn", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod write_hint_tests {
    use super::*;

    /// Trial 13 N13: a read-only file system is named as the cause, not
    /// this user's permissions.
    #[test]
    fn the_hint_names_the_cause() {
        let hint = |kind| {
            let io = std::io::Error::new(kind, "lock");
            let path = std::path::Path::new("/ws/.cairn/LOCK");
            with_write_hint(Error::Engine(cairn::EngineError::io("lock", path, io))).to_string()
        };
        let ro = hint(std::io::ErrorKind::ReadOnlyFilesystem);
        assert!(
            ro.contains("the store is on a read-only file system"),
            "{ro}"
        );
        assert!(ro.contains("cairn --in-memory checkpoint"), "{ro}");
        let denied = hint(std::io::ErrorKind::PermissionDenied);
        assert!(
            denied.contains("this user may not write the store here"),
            "{denied}"
        );
        let other = hint(std::io::ErrorKind::NotFound);
        assert!(!other.contains("--in-memory"), "{other}");
    }
}

#[cfg(test)]
mod disk_full_tests {
    use super::*;

    /// Regression (issue 27): a full disk's error said only "No space left
    /// on device"; it now says what to do, in the command line's words.
    #[test]
    fn a_full_disk_says_to_free_space_or_run_gc() {
        let io = std::io::Error::from_raw_os_error(28); // ENOSPC
        let path = std::path::Path::new("/ws/.cairn/blobs/pack-00000001.pack");
        let e = anyhow::Error::new(Error::Engine(cairn::EngineError::io(
            "append to pack",
            path,
            io,
        )));
        let text = describe(&e);
        assert!(text.contains("No space left on device"), "{text}");
        assert!(
            text.contains("free space") && text.contains("`cairn gc`"),
            "{text}"
        );
        assert!(!text.contains("  "), "{text}");
        let other = anyhow::Error::new(std::io::Error::other("boom"));
        assert!(!describe(&other).contains("cairn gc"));
    }
}
