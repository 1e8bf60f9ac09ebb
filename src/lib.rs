//! # cairn
//!
//! Durable, tamper-evident history for AI coding agents, embedded: every
//! agent action, checkpoint and rollback is a CRC-framed record in a
//! segmented append-only log; file contents live in a blake3
//! content-addressed blob store; checkpoints are log cursors plus blob
//! manifests; replay is a fold over the log; JSONL export is a projection.
//!
//! The main type is [`Store`]; most embedders use it through a [`Session`]:
//!
//! ```
//! use cairn::{Store, EventKind};
//!
//! let store = Store::in_memory()?;
//! let session = store.session("thread-42").with_agent("coder").with_model("model-x");
//! session.prompt("make the tests pass")?;
//! let mut call = session.event(EventKind::ToolCall);
//! call.tool = Some("bash".into());
//! call.latency_ms = Some(1200);
//! session.record(&call)?;
//! session.reply("done: 3 files changed")?;
//! assert_eq!(store.head().last_lsn.0, 3);
//! # Ok::<(), cairn::Error>(())
//! ```
//!
//! The types an embedder meets every day are at the root ([`Store`],
//! [`Session`], [`Event`], [`Query`], [`Format`], [`Meta`], ...). The rest
//! of the public API is grouped by the question it answers: [`jsonl`]
//! (events as JSON lines), [`diff`] (what changed between two points),
//! [`paths`] (workspace paths and how they are shown), [`checkpoint`]
//! (what a checkpoint captured and what retention kept), [`watcher`] (the
//! `cairn watch` daemon) and [`store_dir`] (the store directory on disk).
//! The crates below the facade (`cairn-codec`, `cairn-engine`,
//! `cairn-snapshot`, `cairn-query`) are its implementation, not its API.
//! `serde_json` is re-exported as [`json`], so that metadata needs no
//! dependency of its own:
//!
//! ```
//! use cairn::{json, EventKind, Meta, Store};
//!
//! let store = Store::in_memory()?;
//! let s = store.session("thread-42");
//! let mut call = s.event(EventKind::ToolCall).with_meta("cmd", "cargo test");
//! call.meta.get_or_insert_with(Meta::new).insert("args", json::json!(["--release"]));
//! s.record(&call)?;
//! # Ok::<(), cairn::Error>(())
//! ```

pub mod binding;
pub mod checkpoints;
pub mod error;
pub mod import;
pub mod queries;
pub mod repair;
#[cfg(feature = "replicate")]
pub mod replicate;
pub mod session;
pub mod store;
pub mod verify_refs;

/// `serde_json`, the version cairn's [`Meta`] holds: for metadata values
/// (`cairn::json::json!({...})`) without a dependency of one's own.
pub use serde_json as json;

pub use cairn_codec::event::{Meta, DEFAULT_SESSION};
pub use cairn_codec::{
    BlobHash, ChainHash, CheckpointCounts, CheckpointId, CodecError, DiffStats, Event, EventKind,
    EventRef, Lsn, Timestamp,
};
pub use cairn_engine::log::{Durability, Head, Record};
pub use cairn_engine::EngineError;
pub use cairn_query::export::ExportStats;
pub use cairn_query::filter::{parse_time_bound, TimeBound};
pub use cairn_query::point::Point;
pub use cairn_query::source::EntryKind;
pub use cairn_query::{
    BlameLine, Branch, DiffStatus, FileDiff, Filter, Format, Query, QueryError, SessionState, Tree,
    TreeEntry,
};
pub use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, GcSummary, RetentionPolicy, RetentionReport, RollbackReport,
    RollbackRequest, ScanMode, SnapshotError, SnapshotOptions, WatchStats,
};
pub use error::{Error, Result};
pub use import::{CollectedCheckpoint, CollectedCheckpoints, ImportOptions};
pub use queries::{CheckpointListing, StoreStats, StoreVerifyReport};
pub use session::{SafePoint, Session};
pub use store::{Store, StoreBuilder};
pub use verify_refs::{LostContent, LostContents};

/// Events as JSON lines: the canonical one-line JSON of an event, read and
/// written (docs/FORMAT.md).
pub mod jsonl {
    pub use cairn_codec::json::{
        parse_event, parse_event_with, EventDefaults, JsonRecord, MAX_JSON_LINE_BYTES,
    };
    pub use cairn_codec::json_line::write_json_line;
    pub use cairn_query::import::read_bounded_line;
    /// A record as a read yields it: its LSN and the event.
    pub use cairn_query::source::Record;
}

/// What changed between two points: per-file diffs, line utilities and the
/// bounds of rename detection.
pub mod diff {
    pub use cairn_query::lines::{line_text, split_lines, MAX_LINE_DIFF_BYTES};
    pub use cairn_query::renames::{too_many_to_compare, MAX_SIMILARITY_PAIRS};
    pub use cairn_query::{DiffStatus, FileDiff};
}

/// Workspace paths: which are outside the workspace (history only), how a
/// user's path is read, and how a path is shown without acting on a
/// terminal.
pub mod paths {
    pub use cairn_codec::paths::outside_workspace;
    pub use cairn_query::replay::{history_only, in_scope};
    pub use cairn_snapshot::relpath::{acts_on_a_terminal, escape_bytes, normalize_for_reading};
}

/// What a checkpoint captured, what it left out and why, and what
/// retention kept.
pub mod checkpoint {
    pub use cairn_engine::blob::DEFAULT_REWRITE_THRESHOLD;
    pub use cairn_snapshot::checkpoint::NotCaptured;
    pub use cairn_snapshot::collected_note;
    pub use cairn_snapshot::retention::BudgetOutcome;
    pub use cairn_snapshot::rollback_record::MAX_ROLLBACK_FILES_LISTED;
    /// Why a path was not captured: the words a checkpoint's
    /// `not_captured` list uses.
    pub use cairn_snapshot::scan::reason;
    pub use cairn_snapshot::scan::MAX_NOT_CAPTURED_NAMED;
    pub use cairn_snapshot::workspace::DEFAULT_MAX_FILE_BYTES;
}

/// The `cairn watch` daemon: one watcher per workspace whose journal of
/// changed paths any process's checkpoint uses (docs/FORMAT.md).
pub mod watcher {
    #[cfg(unix)]
    pub use cairn_snapshot::watch_daemon::{is_locked, run, DaemonConfig, Stopped};
    pub use cairn_snapshot::watch_journal::{request, status, DaemonStatus, NO_WATCHER};
}

/// The store directory on disk: its name, its lock, its owner and mode
/// checks, its dictionaries' file names and the atomic write every file
/// of it gets.
pub mod store_dir {
    pub use cairn_codec::zdict::file_name as dictionary_file_name;
    pub use cairn_engine::atomic::{write_atomic, AtomicOptions};
    pub use cairn_engine::store_dir::{
        check_owner_and_mode, lock_holder, LOCK_FILE_NAME, STORE_DIR_NAME,
    };
    pub use cairn_engine::RealVfs;
}

/// The README's code examples, compiled and run as doctests so they never rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The library guide's code examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/LIBRARY.md")]
pub struct LibraryDoctests;
