//! # cairn-engine
//!
//! The storage engine under cairn: the segmented append-only [`log`], the
//! blake3 content-addressed [`blob`] store, and the store directory with its
//! exclusive lock ([`store_dir`]). All file I/O goes through the [`vfs`]
//! trait, so the same code runs on the real file system and on a simulated
//! disk that drops unsynced writes on a simulated crash.

pub mod atomic;
pub mod blob;
pub mod dicts;
pub mod error;
pub mod log;
pub mod store_dir;
pub mod vfs;

pub use error::{EngineError, Result};
pub use store_dir::StoreDir;
pub use vfs::{AppendSpace, OpenMode, RealVfs, Vfs, VfsFile};
