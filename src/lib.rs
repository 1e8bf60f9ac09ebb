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
//! The crates below the facade, re-exported here: [`codec`] (ids, events,
//! frames; no I/O), [`engine`] (log, blob store, store directory),
//! [`snapshot`] (workspace scanning, checkpoints, rollback) and [`query`]
//! (replay, indexes, time-travel queries, export and import). The types an
//! embedder meets every day are re-exported at the root as well
//! ([`Format`], [`Query`], [`Meta`], [`RetentionReport`], ...), and
//! `serde_json` as [`json`], so that metadata needs no dependency of its
//! own:
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

pub use cairn_codec as codec;
pub use cairn_engine as engine;
pub use cairn_query as query;
pub use cairn_snapshot as snapshot;
/// `serde_json`, the version cairn's [`Meta`] holds: for metadata values
/// (`cairn::json::json!({...})`) without a dependency of one's own.
pub use serde_json as json;

pub use cairn_codec::event::{Meta, DEFAULT_SESSION};
pub use cairn_codec::{
    BlobHash, ChainHash, CheckpointCounts, CheckpointId, DiffStats, Event, EventKind, Lsn,
    Timestamp,
};
pub use cairn_engine::log::{Durability, Head, Record};
pub use cairn_query::export::ExportStats;
pub use cairn_query::point::Point;
pub use cairn_query::{
    BlameLine, Branch, DiffStatus, FileDiff, Filter, Format, Query, SessionState, Tree, TreeEntry,
};
pub use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, GcSummary, RetentionPolicy, RetentionReport, RollbackReport,
    RollbackRequest, ScanMode, SnapshotError, SnapshotOptions, WatchStats,
};
pub use error::{Error, Result};
pub use import::{CollectedCheckpoint, CollectedCheckpoints, ImportOptions};
pub use queries::{StoreStats, StoreVerifyReport};
pub use session::{SafePoint, Session};
pub use store::{Store, StoreBuilder};
pub use verify_refs::{LostContent, LostContents};

/// The README's code examples, compiled and run as doctests so they never rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The library guide's code examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/LIBRARY.md")]
pub struct LibraryDoctests;
