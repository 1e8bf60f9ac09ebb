//! # cairn-codec
//!
//! The pure (no I/O) vocabulary of cairn: typed ids, the agent event model,
//! the on-disk record frame, segment header and footer, zstd dictionary
//! files, and the canonical
//! JSON projection of events.
//!
//! Everything that is written to disk is encoded and decoded here, so every
//! decoder can be property-tested and fuzzed without touching a file system.
//!
//! ```
//! use cairn_codec::{Event, EventKind, Lsn, ChainHash, frame};
//!
//! let event = Event::new(EventKind::Prompt, "thread-1").with_text("fix the build");
//! let body = event.encode_body().unwrap();
//! let mut buf = Vec::new();
//! let chain = frame::encode(&mut buf, Lsn(1), frame::RecordKind::Event, 0, &body, ChainHash::ZERO).unwrap();
//! let decoded = frame::decode(&buf).unwrap();
//! assert_eq!(decoded.lsn, Lsn(1));
//! assert_eq!(decoded.chain, chain);
//! assert_eq!(Event::decode_body(&decoded.body().unwrap()).unwrap(), event);
//! ```

pub mod body;
pub mod bytes;
pub mod error;
pub mod event;
pub mod event_ref;
pub mod frame;
pub mod ids;
pub mod json;
pub mod json_line;
pub mod paths;
pub mod segment;
pub mod time;
pub mod zdict;

pub use error::CodecError;
pub use event::{CheckpointCounts, DiffStats, Event, EventKind};
pub use event_ref::{EventRef, MetaRef};
pub use ids::{BlobHash, ChainHash, CheckpointId, Lsn};
pub use time::Timestamp;
