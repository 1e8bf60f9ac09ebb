//! # cairn-query
//!
//! Replay, time-travel queries and JSONL export/import for cairn.
//!
//! Replay is a fold over the log ([`replay`]); the indexes ([`index`]) are
//! folds too, kept up to date on append and persisted, so that queries
//! ([`Query`]) never scan the whole log when an index can answer. Export is
//! a projection of records to JSONL ([`export`]); import reads the
//! reference shapes back ([`import`]).
//!
//! Sources are small traits ([`RecordSource`], [`BlobSource`],
//! [`ManifestSource`]) implemented for the engine's `Log`, a read-only
//! `LogReader` in another process ([`source::ReaderSource`]), the engine's
//! `BlobStore`, the snapshot crate's Merkle manifests
//! ([`source::SnapshotManifests`]) and in-memory stand-ins for tests.
//!
//! ```
//! use cairn_codec::{Event, EventKind, Lsn};
//! use cairn_query::{Filter, Point, Query, index::Index};
//! use cairn_query::source::{MemBlobs, MemLog, MemManifests};
//!
//! let log = MemLog::new();
//! let blobs = MemBlobs::new();
//! let manifests = MemManifests::new();
//! let mut write = Event::new(EventKind::FileWrite, "s1").with_path("a.txt");
//! write.after = Some(blobs.put(b"hello\n"));
//! log.append(write).unwrap();
//!
//! let index = Index::build(&log).unwrap();
//! let q = Query::new(&log, &blobs, &manifests, &index);
//! assert_eq!(q.file_at("head".parse().unwrap(), "a.txt").unwrap(), b"hello\n");
//! assert_eq!(q.history("a.txt").unwrap()[0].lsn, Lsn(1));
//! assert_eq!(q.list(&Filter { session: Some("s1".into()), ..Filter::all() }).unwrap().len(), 1);
//! ```

pub mod error;
pub mod export;
pub mod filter;
pub mod import;
pub mod index;
pub mod lines;
pub mod point;
pub mod query;
pub mod renames;
pub mod replay;
pub mod source;

pub use error::{QueryError, Result};
pub use export::Format;
pub use filter::Filter;
pub use point::Point;
pub use query::{BlameLine, Branch, DiffStatus, FileDiff, Query};
pub use replay::{SessionState, State};
pub use source::{
    BlobSource, EntryKind, Head, ManifestSource, Record, RecordSource, Tree, TreeEntry,
};
