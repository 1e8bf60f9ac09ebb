//! Raw command-line flags (stage one of two): what the user typed, parsed
//! by clap. [`super::settings`] turns them into validated settings.

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

/// The value parser of an option whose values are a known set: clap lists
/// them in `--help`, and shell completions offer them instead of file
/// names. The typed text is passed on unchanged: stage two checks it, with
/// its own error text and exit code, and may accept more than the list
/// (`--durability interval:MS`).
#[derive(Clone, Debug)]
pub struct Listed(Vec<PossibleValue>);

impl Listed {
    /// The values `names`, without help text.
    fn names(names: impl IntoIterator<Item = &'static str>) -> Listed {
        Listed(names.into_iter().map(PossibleValue::new).collect())
    }

    /// The values `(name, help)`.
    fn described(values: &[(&'static str, &'static str)]) -> Listed {
        Listed(
            values
                .iter()
                .map(|&(name, help)| PossibleValue::new(name).help(help))
                .collect(),
        )
    }
}

impl TypedValueParser for Listed {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.0.iter().cloned()))
    }
}

/// `--durability`: the policies `Durability::from_str` reads.
fn durabilities() -> Listed {
    Listed::described(&[
        (
            "always",
            "fsync before acknowledging, with group commit (the default)",
        ),
        (
            "interval",
            "fsync every 100 ms; interval:MS for another period",
        ),
        ("never", "leave syncing to the operating system"),
    ])
}

/// `--format`, `--load-format`: the shapes `Format::from_str` reads.
fn formats() -> Listed {
    Listed::described(&[
        ("jsonl", "cairn's canonical JSONL"),
        ("cortexide", "the cortexide IDE audit shape"),
        ("comma", "the comma file-tool audit shape"),
    ])
}

/// `import --format`: the JSONL shapes, and the agent transcripts
/// `agents.rs` imports.
fn import_formats() -> Listed {
    Listed::described(&[
        ("jsonl", "cairn's canonical JSONL"),
        ("cortexide", "the cortexide IDE audit shape"),
        ("comma", "the comma file-tool audit shape"),
        (
            "claude-code",
            "Claude Code transcripts: a session's .jsonl or a project directory",
        ),
        (
            "codex",
            "Codex CLI rollouts: a rollout-*.jsonl or a directory of them",
        ),
        ("swe-agent", "SWE-agent trajectories: .traj files"),
    ])
}

/// `import --collected-checkpoints`: the modes `CollectedCheckpoints`
/// reads.
fn collected_modes() -> Listed {
    Listed::described(&[
        (
            "refuse",
            "refuse the file at such a line, naming it (the default)",
        ),
        (
            "record",
            "record it as a checkpoint record without files, which cannot be rolled back to",
        ),
    ])
}

/// `--kind`: every event kind.
fn kinds() -> Listed {
    Listed::names(cairn::EventKind::ALL.map(cairn::EventKind::name))
}

/// `completions SHELL`: the shells clap_complete writes for.
fn shells() -> Listed {
    use clap::ValueEnum;
    Listed(
        clap_complete::Shell::value_variants()
            .iter()
            .filter_map(ValueEnum::to_possible_value)
            .collect(),
    )
}

/// cairn: durable, tamper-evident history for AI coding agents.
#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Durable, tamper-evident history for AI coding agents: an event log, checkpoints, rollback and time-travel queries.",
    after_help = "Examples:\n  cairn demo                      run a scripted agent session and explore it\n  cairn init && cairn checkpoint --label 'Before turn 1'\n  echo '{\"kind\":\"prompt\",\"text\":\"fix the build\"}' | cairn record --ack\n  cairn log --session thread-1 --json | jq .\n  cairn rollback c12 --dry-run\n  cairn --in-memory --load audit.jsonl log --session s1   # no store on disk\n\nExit codes: 0 ok, 1 error, 2 usage, 3 corruption found, 4 some input lines rejected (record, import, --load)."
)]
pub struct Cli<C: Subcommand = Command> {
    /// The store directory (a `.cairn` directory). Default: $CAIRN_STORE, else the
    /// nearest `.cairn` in this directory or above. An archive URL
    /// (s3://bucket/prefix, file:///dir) reads that archive in place:
    /// log, show, tree, diff, history, blame, export, verify, checkpoints,
    /// stats, branches, report.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub store: Option<PathBuf>,
    /// With --store URL (an archive, read in place): the bound on the
    /// local cache of fetched pieces, in bytes. Default: $CAIRN_CACHE_BYTES,
    /// else 1 GiB; the cache is in $CAIRN_CACHE_DIR, else
    /// $XDG_CACHE_HOME/cairn or ~/.cache/cairn.
    #[arg(
        long,
        global = true,
        value_name = "BYTES",
        help_heading = "Global options"
    )]
    pub cache_bytes: Option<u64>,
    /// The workspace whose files are checkpointed. Default: the one the
    /// store was created for (the directory that holds `.cairn`, or the
    /// DIR of `cairn --store S init DIR`); with --in-memory, the current
    /// directory.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub workspace: Option<PathBuf>,
    /// Durability of appends: always (fsync before acknowledging, with group commit),
    /// interval[:MS], never.
    #[arg(
        long,
        global = true,
        value_name = "POLICY",
        value_parser = durabilities(),
        conflicts_with = "in_memory",
        help_heading = "Global options"
    )]
    pub durability: Option<String>,
    /// Run the command on a store held in memory: no store is created on
    /// disk (the workspace is only read, except by `rollback`; checkpoint
    /// caches go to a temporary directory removed on exit) and the store
    /// is gone when the command exits. For a read-only workspace, or
    /// to inspect and export a log file (--load) without a store. No store
    /// on disk is looked for: $CAIRN_STORE is ignored, --store refused.
    #[arg(
        long,
        global = true,
        conflicts_with = "store",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub in_memory: bool,
    /// With --in-memory: before the command runs, import FILE into the
    /// memory store (`-` reads stdin); repeatable, loaded in order. A bad
    /// line fails the command, naming the file and line.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires = "in_memory",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub load: Vec<PathBuf>,
    /// The shape of the --load files: jsonl (cairn's canonical JSONL, as
    /// `cairn record` takes it and `cairn log --json` prints it), cortexide
    /// or comma.
    #[arg(
        long,
        global = true,
        value_name = "FORMAT",
        value_parser = formats(),
        requires = "load",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub load_format: Option<String>,
    /// Load a --load file even if an earlier --load of this command loaded
    /// the same input (by default it is refused, as `import` refuses input
    /// imported before: an input is known by its contents, not its name).
    #[arg(
        long,
        global = true,
        requires = "load",
        conflicts_with = "load_resume",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub load_again: bool,
    /// Skip a --load file's leading lines that an earlier --load of this
    /// command loaded (the input is that one grown) and load the rest, as
    /// `import --resume` does.
    #[arg(
        long,
        global = true,
        requires = "load",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub load_resume: bool,
    /// Load the complete lines of a --load file whose last line is torn
    /// (no line end, its JSON cut short), skipping that line, as `import
    /// --skip-torn-tail` does.
    #[arg(
        long,
        global = true,
        requires = "load",
        help_heading = "In-memory options (with --in-memory)"
    )]
    pub load_skip_torn_tail: bool,
    /// Print nothing on success but the command's answer: no progress, no
    /// notes or hints, no report of what was done (see --help for what
    /// still prints).
    ///
    /// Silent on success: init, track, checkpoint, rollback, gc, repair,
    /// verify, import, record's summary, export --output. Still printed:
    /// errors and warnings on stderr, with the same exit codes; the damage
    /// verify finds and what repair lost or could not mend; paths a
    /// rollback left as they are and files a checkpoint could not capture
    /// (as warnings); everything --json prints; and the output that is the
    /// command's answer: log, show, tree, diff, history, blame, branches,
    /// checkpoints, stats, export, blob put's hashes, blob get, record
    /// --ack and --echo, rollback --dry-run's plan, completions, demo.
    #[arg(long, short, global = true, help_heading = "Global options")]
    pub quiet: bool,
    /// The command.
    #[command(subcommand)]
    pub command: C,
}

/// Declares an enum of every subcommand, with the attributes and name
/// given: [`Command`], and [`EagerCommand`], the same enum without
/// `defer`, from which the shell completions are written.
macro_rules! subcommands {
    ($(#[$attr:meta])* $vis:vis enum $name:ident) => {
        $(#[$attr])*
        $vis enum $name {
            /// Create a store: DIR/.cairn (DIR defaults to the current directory).
            #[command(
                after_help = "Example:\n  cairn init ~/src/myproject\n  cairn --store /var/cairn/myproject init ~/src/myproject\n\nA store remembers its workspace: later commands find it, and refuse to\ncheckpoint or roll back another directory given with --workspace.\nA store inside its workspace (DIR/.cairn) moves with it; a store that\nnames any other workspace must have been bound there here, by you.\nA store is for its owner alone (mode 0700): others' are not written."
            )]
            Init {
                /// The workspace to create the store in (or, with --store, for).
                dir: Option<PathBuf>,
                /// The store exists and belongs to another workspace: make DIR its
                /// workspace from now on (for a workspace that moved away from a
                /// store kept outside it, or a store whose binding was not made
                /// here: copied, cloned or extracted, which cairn does not trust).
                #[arg(long)]
                rebind: bool,
            },
            /// Record canonical JSONL events from stdin (or --file), each as it arrives.
            #[command(
                after_help = "Example:\n  my-agent --audit-jsonl | cairn record --ack\n  cairn record --file events.jsonl --json\n  my-agent --audit-jsonl | cairn --in-memory record --echo > audit.jsonl\n\nEach line is one JSON object with at least \"kind\" (prompt, reply, tool_call, file.write, ...)."
            )]
            Record(RecordArgs),
            /// List records: a table, or canonical JSONL with --json.
            #[command(
                after_help = "Example:\n  cairn log --session thread-1 --kind file.write --since 2026-11-22T10:00:00Z --limit 20"
            )]
            Log(LogArgs),
            /// Check every frame, checksum, footer, blob and the hash chain.
            #[command(
                after_help = "Example:\n  cairn verify\n  cairn verify --head 3f2a...   # also check history was not truncated"
            )]
            Verify(VerifyArgs),
            /// Repair a damaged store: keep every intact record, set damaged files aside.
            #[command(
                after_help = "Example:\n  cairn verify || cairn repair\n\nDamaged files are moved to .cairn/log/damaged-<time>/, never deleted.\nA lost or damaged zstd dictionary is restored from its second copy.\nA damaged or missing blob is written again from a workspace file with the\nsame contents; one no file has is named, and repair exits 3, as verify does,\nuntil .cairn/blobs is restored."
            )]
            Repair {
                /// Print the report as JSON.
                #[arg(long)]
                json: bool,
            },
            /// Segments, records, bytes, blobs, durability.
            #[command(after_help = "Example:\n  cairn stats --json | jq .blob_stored_bytes")]
            Stats {
                /// Print as JSON.
                #[arg(long)]
                json: bool,
            },
            /// The blob store: put files, get blobs.
            #[command(
                subcommand,
                after_help = "Example:\n  cairn blob put notes.txt\n  git diff | cairn blob put -\n  cairn blob get 3f2a...   # 64 hex digits, as printed by put"
            )]
            Blob(BlobCommand),
            /// Tell cairn a path is about to be written, so the next checkpoint captures it.
            #[command(after_help = "Example:\n  cairn track src/main.rs build/generated.rs")]
            Track {
                /// Workspace-relative paths.
                #[arg(required = true)]
                paths: Vec<String>,
            },
            /// Checkpoint the workspace.
            #[command(
                after_help = "Example:\n  cairn checkpoint --label 'Before turn 3' --session thread-1\n  cairn checkpoint --label 'Before turn 3' --run run-1 --agent coder --model model-x --state memory.bin"
            )]
            Checkpoint(CheckpointArgs),
            /// List checkpoints.
            #[command(after_help = "Example:\n  cairn checkpoints --session thread-1 --json")]
            Checkpoints {
                /// Only this session.
                #[arg(long)]
                session: Option<String>,
                /// One JSON object per line.
                #[arg(long)]
                json: bool,
            },
            /// Roll the workspace back (or forward) to a checkpoint.
            #[command(
                after_help = "Example:\n  cairn rollback c12 --dry-run\n  cairn rollback c12 --path src/ --path Cargo.toml\n  cairn rollback c12 --run run-1 --state memory-now.bin --json   # \"state\": c12's state hash, for `cairn blob get`"
            )]
            Rollback(RollbackArgs),
            /// Apply retention (evict old checkpoints) and collect unreferenced blobs.
            #[command(
                after_help = "Checkpoints discarded by a recorded `checkpoint.discard` event (the platform's own, fed to `cairn record` or `import`) are collected too, and the summary names them. Such an event is refused for a checkpoint already discarded and for the newest checkpoint of its session not yet discarded: that one always stays restorable.\nA discarded checkpoint whose whole tree is still in the store (a later rollback restored it) can still be shown and rolled back to, and a rollback hands back its application state, which gc keeps with the tree.\nBlob packs are rewritten only when over 30% of one is dead: unreferenced blobs in a pack mostly live stay readable until then, and the summary says how many and how many bytes it left. `--compact` rewrites every pack holding one, so evicted contents nothing else names can no longer be read; `--max-bytes` rewrites such packs while the store is over the budget on disk.\n\nExample:\n  cairn gc --keep-per-session 50 --max-bytes 100000000\n  cairn gc --keep-per-session 1 --compact"
            )]
            Gc(GcArgs),
            /// A file's bytes at a point: `cairn show c12:src/main.rs`, `cairn show @40:README.md`.
            #[command(
                after_help = "Example:\n  cairn show c12:src/main.rs\n  cairn show 2026-11-22T10:00:00Z:README.md > old-readme.md"
            )]
            Show {
                /// POINT:PATH, where POINT is @LSN, a checkpoint id, an ISO time or `head`.
                spec: String,
            },
            /// The files at a point.
            #[command(after_help = "Example:\n  cairn tree c12\n  cairn tree @300 --json")]
            Tree {
                /// @LSN, a checkpoint id, an ISO time or `head`.
                point: String,
                /// One JSON object per line.
                #[arg(long)]
                json: bool,
            },
            /// Differences between two points.
            ///
            /// A file moved without a change (a recorded move, or a shell `mv` a
            /// checkpoint saw: one path gone, one new with the same contents) is
            /// shown as one `Renamed` line. A file moved and edited in the same
            /// step (at least 50% alike, as git's `diff -M`) is shown as `Renamed
            /// OLD -> NEW (N% similar)` followed by the diff between the two.
            #[command(after_help = "Example:\n  cairn diff c3 c9\n  cairn diff c3 head -- src/lib.rs")]
            Diff {
                /// From.
                a: String,
                /// To.
                b: String,
                /// Only these paths.
                #[arg(last = true)]
                paths: Vec<String>,
                /// One JSON object per file: `path`, `status` (added, removed,
                /// modified), `binary`, `too_large`, `unified`; `renamed_from` on
                /// the added end of a rename and `renamed_to` on its removed end,
                /// `similarity` (percent, 100 when unchanged) on both, and
                /// `rename_unified` (the diff from the old path's contents) on the
                /// added end of an edited one;
                /// `not_captured_at` and `not_captured_why` for a file a checkpoint
                /// did not capture.
                #[arg(long)]
                json: bool,
            },
            /// Every record that touched a path.
            #[command(after_help = "Example:\n  cairn history src/main.rs --json | jq -r .kind")]
            History {
                /// Workspace-relative path: a file, or a directory (everything under it).
                path: String,
                /// Also the checkpoints and rollbacks that changed the file (or
                /// anything under the directory) without a record naming it (a
                /// checkpoint that captured a shell edit); reads one manifest per
                /// checkpoint for a file, two trees per checkpoint for a directory.
                #[arg(long)]
                checkpoints: bool,
                /// Follow the file back through its moves, as `git log --follow`
                /// does: also the records of where it came from. A move is a
                /// `file.move` record, or one a checkpoint found (a shell `mv`: the
                /// file new there, its contents gone from another path), in which
                /// case that checkpoint is listed too (finding those reads one
                /// manifest entry per checkpoint). With --checkpoints, also the
                /// checkpoints that changed the file under each of its names.
                #[arg(long)]
                follow: bool,
                /// Canonical JSONL.
                #[arg(long)]
                json: bool,
            },
            /// Which record wrote each line of a file at a point.
            ///
            /// Moves (recorded, or a shell `mv` a checkpoint saw) and rollbacks
            /// are followed: a line keeps the record that wrote it. Where gc
            /// discarded the file's earlier history, a line is shown as `<=@N`
            /// (`"history_cut": true` in --json): written by record N or by an
            /// earlier one no longer known.
            #[command(
                after_help = "Example:\n  cairn blame head src/main.rs\n  cairn blame c12:src/main.rs"
            )]
            Blame {
                /// @LSN, a checkpoint id, an ISO time or `head`; or POINT:PATH as
                /// `show` takes it, with PATH omitted.
                point: String,
                /// Workspace-relative path.
                path: Option<String>,
                /// One JSON object per line.
                #[arg(long)]
                json: bool,
            },
            /// What was tried from a checkpoint: its children.
            #[command(after_help = "Example:\n  cairn branches c12")]
            Branches {
                /// A checkpoint id (or `@N` for a rollback record, as NODE names
                /// it): its children. Omitted: every checkpoint and
                /// rollback, with where it came from (FROM) and how many children
                /// it has (more than one: a branch point).
                id: Option<String>,
                /// One JSON object per line.
                #[arg(long)]
                json: bool,
            },
            /// Export the log as JSONL: cairn's canonical schema or a reference shape.
            #[command(
                after_help = "Example:\n  cairn export --format comma --session thread-1 --output audit.jsonl\n  cairn export --follow | jq ."
            )]
            Export(ExportArgs),
            /// Import JSONL written by other tools (cortexide or comma shapes) or agent histories (claude-code, codex, swe-agent).
            #[command(
                after_help = "Example:\n  cairn import --format comma .comma/audit/default.jsonl\n  cairn import --format claude-code ~/.claude/projects/-home-me-proj\n  cairn import --format codex --base ./repo ~/.codex/sessions/2026/11/28\n  cairn import --format swe-agent --base ./repo run.traj"
            )]
            Import {
                /// cortexide | comma | jsonl | claude-code | codex | swe-agent.
                #[arg(long, value_parser = import_formats())]
                format: String,
                /// claude-code: where Claude Code's file-history backups are
                /// (`DIR/<session>/<backupFileName>`; default `~/.claude/file-history`).
                #[arg(long, value_name = "DIR")]
                file_history: Option<PathBuf>,
                /// codex, swe-agent: the tree the session started from, to which
                /// the diffs of its edits are applied (codex: default, what the
                /// store holds; swe-agent: needed for the submission's file events).
                #[arg(long, value_name = "DIR")]
                base: Option<PathBuf>,
                /// Files to read; `-` reads stdin.
                #[arg(required = true)]
                files: Vec<PathBuf>,
                /// Print the summary as JSON.
                #[arg(long)]
                json: bool,
                /// Import a file even if it was imported before (by default it is
                /// refused: the store remembers where each import got to in its
                /// input, known by its contents).
                #[arg(long, conflicts_with = "resume")]
                again: bool,
                /// Skip a file's leading lines that are recorded already (an import
                /// cut short or killed, an append-only file that grew since) and
                /// import the rest.
                #[arg(long)]
                resume: bool,
                /// Import the complete lines of a file whose last line is torn (it
                /// has no line end and its JSON is cut short: the writer stopped
                /// part way through it), and skip that line, naming it on stderr;
                /// once it is complete, --resume imports it. Without this, such a
                /// file is refused. A bad line elsewhere is refused either way.
                #[arg(long)]
                skip_torn_tail: bool,
                /// What to do with a checkpoint line whose files gc collected: a
                /// copy of the record of a checkpoint of this store that was
                /// discarded and whose tree gc has since deleted, as the store's own
                /// export holds after a gc. `refuse` (the default) refuses the
                /// file, naming the line; `record` records the line as a checkpoint
                /// record without files (its hashes kept under `meta.collected`),
                /// which cannot be rolled back to, and the summary counts them.
                #[arg(long, value_name = "MODE", value_parser = collected_modes())]
                collected_checkpoints: Option<String>,
            },
            /// Claude Code hooks: record one hook payload (`hooks claude-code`), or
            /// add or remove cairn's hooks in Claude Code's settings.
            #[command(
                after_help = "Example:\n  cairn hooks install claude-code --scope project\n  cairn hooks uninstall claude-code"
            )]
            Hooks {
                /// What to do.
                #[command(subcommand)]
                action: super::hooks::HooksAction,
            },
            /// Start, stop or ask about the store's watcher: a process whose
            /// journal of changed paths lets every checkpoint re-read only what changed.
            #[command(
                after_help = "A checkpoint that cannot prove from the journal that it saw every change\n(no watcher, a restart, a queue overflow, ...) scans in full and says why\n(`scan` and `scan_reason` in `cairn checkpoint --json`). The watcher stops by\nitself after an hour without a checkpoint, or when its store is gone.\n\nExample:\n  cairn watch --daemon\n  cairn watch --status\n  cairn watch --stop"
            )]
            Watch(WatchArgs),
            /// Run a scripted agent session on a generated workspace (or a copy of DIR) and explore it.
            #[command(
                after_help = "Example:\n  cairn demo\n  cairn demo ./my-project   # works on a copy; your files are never touched"
            )]
            Demo(DemoArgs),
            /// Write one self-contained page of the history: a timeline per
            /// session with its checkpoints, rollbacks and diffs (HTML, or Markdown
            /// with `--format md`).
            #[command(
                after_help = "The HTML page opens from disk with no server or network; without JavaScript it\nstill shows every record, and a click on a checkpoint, rollback or file event\nshows its diff. The same store and options always give the same bytes.\n\nExample:\n  cairn report --output report.html\n  cairn report --session t1 --since c12 --format md"
            )]
            Report(ReportArgs),
            /// Print shell completions.
            #[command(
                after_help = "Example:\n  cairn completions bash > ~/.local/share/bash-completion/completions/cairn"
            )]
            Completions {
                /// bash, zsh, fish, elvish or powershell.
                #[arg(value_parser = shells())]
                shell: String,
            },
            /// Ship the store to S3-compatible object storage (or a directory), continuously or --once.
            #[command(after_help = crate::replicate::REPLICATE_HELP)]
            Replicate(ReplicateArgs),
            /// Create DIR/.cairn from an archive, at its newest head or at a point.
            #[command(after_help = crate::replicate::RESTORE_HELP)]
            Restore(RestoreArgs),
            /// Look at archives: `cairn archive list URL`.
            #[command(subcommand)]
            Archive(ArchiveCommand),
        }
    };
}

subcommands! {
    /// Every subcommand. Each one's flags are built only when it is the
    /// one run or its help is shown (`defer`): building all of them was a
    /// third of the start of every command. A deferred command's flags
    /// struct (and `HooksAction`) sets the summary of its own `--help`,
    /// so each is documented with the words of its variant, which
    /// `cairn --help` lists (the tests check that they agree).
    #[derive(Debug, Subcommand)]
    #[command(defer = true)]
    pub enum Command
}

subcommands! {
    /// [`Command`] with every command's flags built at once, as the shell
    /// completions need them: built from the deferred enum, each
    /// command's own flags would follow the global ones, and `cairn help
    /// hooks` would lose its subcommands. Only ever parsed by
    /// `completions` and the tests.
    #[derive(Debug, Subcommand)]
    #[allow(dead_code)]
    pub enum EagerCommand
}

/// Ship the store to S3-compatible object storage (or a directory), continuously or --once.
#[derive(Debug, Args)]
pub struct ReplicateArgs {
    /// Where to: s3://bucket/prefix or file:///dir.
    pub url: String,
    /// Ship what is there now and exit.
    #[arg(long)]
    pub once: bool,
    /// The longest a committed record waits before it is shipped, in ms.
    #[arg(long, value_name = "MS", default_value_t = cairn::replicate::DEFAULT_MAX_LAG_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub max_lag_ms: u64,
    /// After shipping, delete what no manifest of the newest generation
    /// needs: older generations, and pieces only they name.
    #[arg(long)]
    pub prune: bool,
    /// Print one JSON object per round.
    #[arg(long)]
    pub json: bool,
}

/// Create DIR/.cairn from an archive, at its newest head or at a point.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The archive: s3://bucket/prefix or file:///dir.
    pub url: String,
    /// The workspace to restore the store for (DIR/.cairn is created).
    pub dir: PathBuf,
    /// A point: @LSN, a checkpoint (c12), a time (ISO-8601) or head.
    #[arg(long, value_name = "POINT")]
    pub at: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `cairn archive`.
#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// The stores archived under a prefix: workspace, sessions, head, bytes, last upload.
    List {
        /// s3://bucket/prefix or file:///dir.
        url: String,
        /// Print as JSON lines.
        #[arg(long)]
        json: bool,
    },
}

/// Record canonical JSONL events from stdin (or --file), each as it arrives.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Read from this file instead of stdin.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Print one line per input line, in input order: a recorded line's
    /// LSN as soon as it is durable (with --durability interval or never:
    /// as soon as it is appended, not yet durable; a note on stderr says
    /// so), a rejected line as `{"line":N,"error":"REASON"}` (N counts from
    /// 1, blank lines too; a blank line gets no answer).
    #[arg(long)]
    pub ack: bool,
    /// Print each record, as soon as it is acknowledged (as --ack), on stdout as canonical
    /// JSONL (as `cairn log --json` prints it: with lsn, ts and hash), and
    /// a rejected line as `{"line":N,"error":"REASON"}` (no `lsn`), in input
    /// order; with --in-memory, the only copy of what was recorded. Not
    /// with --ack or --json, which print other lines on stdout.
    #[arg(long, conflicts_with_all = ["ack", "json"])]
    pub echo: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Filters shared by `log` and `export`.
#[derive(Debug, Args, Default, Clone)]
pub struct FilterArgs {
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only this run.
    #[arg(long)]
    pub run: Option<String>,
    /// Only this phase.
    #[arg(long)]
    pub phase: Option<String>,
    /// Only this kind (prompt, reply, tool_call, file.write, checkpoint.create, ...).
    #[arg(long, value_parser = kinds())]
    pub kind: Option<String>,
    /// Only this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Only records that succeeded (`true`) or failed (`false`).
    #[arg(long)]
    pub ok: Option<bool>,
    /// Only records that touch this path, or a path under it (`--path src` selects src/main.rs).
    #[arg(long)]
    pub path: Option<String>,
    /// From this time, inclusive: ISO-8601 (2023-11-14T22:13:20Z; a date
    /// 2023-11-14, month 2023-11 or year 2023 means its start, UTC) or
    /// epoch milliseconds (1699999999999; a bare number before 1980 other
    /// than 0 is refused as a likely mistake); or from a record: `@LSN` or
    /// a checkpoint id (`c12`), inclusive.
    #[arg(long)]
    pub since: Option<String>,
    /// Up to this time, inclusive: ISO-8601 (a date 2023-11-14, month
    /// 2023-11 or year 2023 covers the whole day, month or year, UTC) or
    /// epoch milliseconds, as for --since; or up to a record: `@LSN` or a
    /// checkpoint id (`c12`: the log as it was at that checkpoint),
    /// inclusive.
    #[arg(long)]
    pub until: Option<String>,
    /// At most this many records.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Newest first.
    #[arg(long)]
    pub newest_first: bool,
}

/// List records: a table, or canonical JSONL with --json.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Canonical JSONL instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Check every frame, checksum, footer, blob and the hash chain.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Also check that the chain reaches this head hash (detects truncation).
    #[arg(long, value_name = "HASH")]
    pub head: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `cairn blob`.
#[derive(Debug, Subcommand)]
pub enum BlobCommand {
    /// Store files; print each one's hash. Record the event that names a
    /// blob (`before`, `after`, `diff`) before the next `cairn gc`, which
    /// collects every blob no record or checkpoint names.
    Put {
        /// Files to store (`-` reads stdin).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write a blob's bytes to stdout.
    Get {
        /// The blob's hash (64 hex digits).
        hash: String,
    },
}

/// Who and what the records of `checkpoint` and `rollback` belong to,
/// besides the session: one definition, so the two commands take the same
/// flags with the same meaning.
#[derive(Debug, Args, Default, Clone)]
pub struct StampArgs {
    /// Run id, recorded on what this command writes (`cairn log --run` finds it).
    #[arg(long)]
    pub run: Option<String>,
    /// Phase id, recorded on what this command writes.
    #[arg(long)]
    pub phase: Option<String>,
    /// Agent name, recorded on what this command writes.
    #[arg(long)]
    pub agent: Option<String>,
    /// Model name, recorded on what this command writes (`cairn blame` shows it).
    #[arg(long)]
    pub model: Option<String>,
}

/// Start, stop or ask about the store's watcher: a process whose
/// journal of changed paths lets every checkpoint re-read only what changed.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Start the watcher (returns once it watches; does nothing if one runs).
    #[arg(long, conflicts_with_all = ["stop", "status", "foreground"])]
    pub daemon: bool,
    /// Stop the watcher.
    #[arg(long, conflicts_with_all = ["status", "foreground"])]
    pub stop: bool,
    /// Say whether a watcher runs, and since when (also what `cairn
    /// watch` alone does).
    #[arg(long, conflicts_with = "foreground")]
    pub status: bool,
    /// Be the watcher process itself (what `--daemon` starts).
    #[arg(long, hide = true)]
    pub foreground: bool,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Checkpoint the workspace.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// A label, e.g. "Before turn 3".
    #[arg(long)]
    pub label: Option<String>,
    /// Session id (default: `default`).
    #[arg(long)]
    pub session: Option<String>,
    /// Run, phase, agent and model.
    #[command(flatten)]
    pub stamp: StampArgs,
    /// A file whose bytes become the checkpoint's application state (the
    /// agent's memory epoch; `-` reads stdin): `cairn rollback` to the
    /// checkpoint gives its hash, `cairn blob get HASH` its bytes.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Capture only tracked paths (fast), instead of scanning the workspace.
    #[arg(long)]
    pub tracked_only: bool,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Roll the workspace back (or forward) to a checkpoint.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The checkpoint to restore (e.g. c12).
    pub id: String,
    /// Only these paths (files or directories); repeatable.
    #[arg(long = "path")]
    pub paths: Vec<String>,
    /// List what would change, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Session id recorded on the rollback (default: `default`).
    #[arg(long)]
    pub session: Option<String>,
    /// Run, phase, agent and model of the rollback record and its undo point.
    #[command(flatten)]
    pub stamp: StampArgs,
    /// A file whose bytes become the undo point's application state (the
    /// agent's memory epoch now; `-` reads stdin): rolling back to the undo
    /// point gives it back (its hash in `--json`'s `state`). A dry run
    /// records nothing.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Print as JSON (with `state`: the hash of the target's application
    /// state, or null).
    #[arg(long)]
    pub json: bool,
}

/// Apply retention (evict old checkpoints) and collect unreferenced blobs.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep at most N checkpoints per session, the newest; never fewer than
    /// one: the newest checkpoint of each session is always kept, so every
    /// session can be rolled back to its last state.
    #[arg(long)]
    pub keep_per_session: Option<usize>,
    /// Keep at most B bytes of checkpoint contents (uncompressed) in total,
    /// evicting the oldest checkpoints first, and only while that frees
    /// bytes (a checkpoint whose contents are all in a newer one is kept);
    /// the newest checkpoint of each session is kept even when it alone is
    /// over the budget, and the summary then says "budget not met". The
    /// blob store on disk is held to B bytes too: while it is over, gc
    /// also rewrites packs holding unreferenced blobs that it would leave,
    /// and says by how much it is still over when that is not enough.
    #[arg(long)]
    pub max_bytes: Option<u64>,
    /// Remove every unreferenced blob now: rewrite every blob pack holding
    /// one, however little of the pack is dead, so nothing an evicted
    /// checkpoint alone held (a secret captured by accident) can be read
    /// back. Copies the live blobs of those packs, so it takes longer.
    #[arg(long)]
    pub compact: bool,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Export the log as JSONL: cairn's canonical schema or a reference shape.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// jsonl (cairn's canonical schema), cortexide or comma.
    #[arg(long, default_value = "jsonl", value_parser = formats())]
    pub format: String,
    /// Keep printing new records as they are committed, until interrupted.
    #[arg(long)]
    pub follow: bool,
    /// Write to this file instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Filters.
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// Run a scripted agent session on a generated workspace (or a copy of DIR) and explore it.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Work on a copy of this directory instead of a generated workspace.
    pub dir: Option<PathBuf>,
    /// Where to put the demo workspace (default: a new directory under the system temp dir).
    #[arg(long)]
    pub into: Option<PathBuf>,
    /// Work on DIR itself, not on a copy: it is checkpointed, and at the end rolled back to its first checkpoint (your files as before the demo).
    #[arg(long)]
    pub in_place: bool,
}

/// Write one self-contained page of the history: a timeline per
/// session with its checkpoints, rollbacks and diffs (HTML, or Markdown
/// with `--format md`).
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The file to write (`-` or none: standard output).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only these sessions (repeat for more; default: every session).
    #[arg(long, value_name = "S")]
    pub session: Vec<String>,
    /// From this point on (`@LSN`, `c12`, a time).
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
    /// Up to this point.
    #[arg(long, value_name = "POINT")]
    pub until: Option<String>,
    /// `html` (default) or `md`.
    #[arg(long, value_enum, default_value_t = ReportFormat::Html, value_name = "FORMAT")]
    pub format: ReportFormat,
}

/// `report --format`: what the page is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One self-contained HTML page.
    Html,
    /// Markdown: the sessions table and the timeline.
    Md,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// What `cairn PATH.. FLAG` prints (FLAG: `--help` or `-h`), parsed
    /// with the subcommands of `C`.
    fn help_of<C: Subcommand + std::fmt::Debug>(path: &[String], flag: &str) -> String {
        let args = std::iter::once("cairn")
            .chain(path.iter().map(String::as_str))
            .chain([flag]);
        match Cli::<C>::try_parse_from(args) {
            Ok(cli) => panic!("{path:?} {flag} parsed as {cli:?}"),
            Err(e) => {
                assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{path:?}");
                e.to_string()
            }
        }
    }

    /// Every command and subcommand, as the words that name it (clap's
    /// own `help` left out).
    fn command_paths() -> Vec<Vec<String>> {
        fn walk(c: &clap::Command, at: &[String], out: &mut Vec<Vec<String>>) {
            for sc in c.get_subcommands().filter(|sc| sc.get_name() != "help") {
                let mut p = at.to_vec();
                p.push(sc.get_name().to_string());
                out.push(p.clone());
                walk(sc, &p, out);
            }
        }
        let mut out = Vec::new();
        walk(&Cli::<EagerCommand>::command(), &[], &mut out);
        out
    }

    /// The `Commands:` list of a help text: each name and its summary.
    fn listed(help: &str) -> Vec<(String, String)> {
        help.lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let l = l.trim_start();
                let (name, summary) = l.split_once("  ").unwrap_or((l, ""));
                (name.to_string(), summary.trim_start().to_string())
            })
            .filter(|(name, _)| name != "help")
            .collect()
    }

    /// Regression (issue 33): with the flags of each command deferred,
    /// the doc comment of its flags struct became the summary of its own
    /// `--help` (and of the completions), while `cairn --help` listed
    /// the variant's. Each listed summary is the first line of that
    /// command's own help.
    #[test]
    fn each_summary_listed_is_the_first_line_of_the_commands_help() {
        let mut parents = vec![Vec::new()];
        parents.extend(command_paths());
        let mut checked = 0;
        for parent in parents {
            for (name, summary) in listed(&help_of::<Command>(&parent, "--help")) {
                let mut path = parent.clone();
                path.push(name);
                // `-h` prints the summary; `--help` the long text when
                // there is one, whose first sentence keeps its period.
                for flag in ["-h", "--help"] {
                    let own = help_of::<Command>(&path, flag);
                    let first = own.lines().next().unwrap_or_default();
                    let long = flag == "--help" && first.strip_suffix('.') == Some(&summary);
                    assert!(
                        first == summary || long,
                        "`cairn {} {flag}` starts with {first:?}, not with the summary \
                         `cairn {}--help` lists, {summary:?}",
                        path.join(" "),
                        parent.iter().map(|p| format!("{p} ")).collect::<String>()
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} commands listed");
    }

    /// A command's flags are built only when it runs (`defer`): the
    /// command as parsed for any other holds none of them yet, and the
    /// eager enum of the completions holds them all.
    #[test]
    fn each_commands_flags_wait_until_it_runs() {
        let deferred = Cli::<Command>::command();
        let eager = Cli::<EagerCommand>::command();
        for name in ["log", "history", "checkpoints", "show", "import", "gc"] {
            let flags = |c: &clap::Command| {
                c.find_subcommand(name)
                    .unwrap_or_else(|| panic!("no command {name}"))
                    .get_arguments()
                    .count()
            };
            assert_eq!(
                flags(&deferred),
                0,
                "{name}'s flags were built at the start"
            );
            assert!(flags(&eager) > 0, "{name} has no flags");
        }
    }

    /// clap's own checks of every command's flags (conflicts, requires,
    /// names), which a deferred command would otherwise run only when used.
    #[test]
    fn every_command_passes_claps_checks() {
        Cli::<Command>::command().debug_assert();
        Cli::<EagerCommand>::command().debug_assert();
    }

    /// Deferring the flags changes no help text: each command's
    /// `--help` and `-h` are those of the eager enum (what the shell
    /// completions are written from), and so is `cairn --help`.
    #[test]
    fn deferred_help_is_the_eager_help() {
        let mut paths = vec![Vec::new()];
        paths.extend(command_paths());
        assert!(paths.len() >= 30, "{paths:?}");
        for p in &paths {
            for flag in ["--help", "-h"] {
                assert_eq!(
                    help_of::<Command>(p, flag),
                    help_of::<EagerCommand>(p, flag),
                    "cairn {} {flag}",
                    p.join(" ")
                );
            }
        }
    }
}
