//! The storage trait: every byte the engine reads or writes goes through a
//! [`Vfs`], so the engine runs unchanged on the real file system
//! ([`RealVfs`]) and on a simulated disk for crash and fault tests.
//!
//! The contract mirrors what POSIX guarantees and no more: a write is
//! durable only after `sync_data` on its file; a create, rename or remove is
//! durable only after `sync_dir` on its directory.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

mod real;
pub mod sim;
pub use real::RealVfs;
pub use sim::{Fault, SimVfs};

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; create the file, failing if it exists.
    CreateNew,
    /// Read and write; create the file if missing, truncate it if present.
    CreateTruncate,
}

/// An open file: positional reads and writes, so it can be shared between threads.
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file ended early",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// True if the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Space reserved ahead at the end of the file, up to `capacity`
    /// bytes, for appends that need no system call each, or whose syncs
    /// need not write the file's metadata (see [`AppendSpace`]); `None`
    /// where the file system or the platform does not offer it, and the
    /// caller writes with [`VfsFile::write_all_at`] instead. The default is
    /// `None`: the simulated disk models every write.
    ///
    /// The space is written with zeros ahead of the appends, so it is in
    /// the page cache with its blocks reserved before any append reaches
    /// it, and a sync of the appends changes no extent or size. `synced`
    /// says every append will be fdatasynced (the `always` policy):
    /// appends are then positional writes into the space, so no
    /// memory-mapped page has to be write-protected and faulted again
    /// around each sync. Otherwise appends are copied into a shared memory
    /// map of it.
    fn append_space(
        &self,
        capacity: u64,
        synced: bool,
    ) -> io::Result<Option<Box<dyn AppendSpace>>> {
        let _ = (capacity, synced);
        Ok(None)
    }

    /// A read plan: the reader is about to read the byte ranges `ranges`
    /// (`(start, end)`, end exclusive, ascending), and only those, with
    /// [`VfsFile::read_at`]. A file whose reads cost a request each (an
    /// archive read in place) fetches them now, together, and serves the
    /// reads that follow from what it fetched; it returns `true`, and the
    /// reader then keeps each read inside a planned range (a read past
    /// one would cost a request of its own). The plan only says what is
    /// coming: it checks nothing, and the bytes are checked by the reader
    /// as any read's are; a range it could not fetch is fetched (and its
    /// error given) by the read of it. A new plan replaces the last.
    /// The default does nothing and returns `false`: reads cost what they
    /// cost, and the reader reads as it would without a plan.
    fn will_read(&self, ranges: &[(u64, u64)]) -> bool {
        let _ = ranges;
        false
    }
}

/// Space reserved at the end of a file for appends, and the way appends
/// reach it: copied into a shared memory map, or (when every append is
/// fdatasynced) positional writes into space already written with zeros.
/// Either way the bytes are in the page cache when
/// [`AppendSpace::write_at`] returns, exactly as after a `write`: another
/// process reading the file sees them, a crash of this process does not
/// lose them, and [`VfsFile::sync_data`] on the file makes them durable.
/// The file is grown with allocated (not sparse) space, or written zeros,
/// before any byte is put past its old end, so a full disk is an error
/// from [`AppendSpace::write_at`] rather than a fault on a page.
///
/// The file is longer than its data while the space is in use (zeros
/// after the last append, up to the allocated length); whoever owns it
/// truncates the file to its data when done with it.
pub trait AppendSpace: Send + fmt::Debug {
    /// The end of the reservable range: no write may reach past it.
    fn capacity(&self) -> u64;
    /// The file's length now (allocated space included).
    fn allocated(&self) -> u64;
    /// Makes sure the file is allocated up to at least `end` (at most
    /// [`AppendSpace::capacity`]); grows in steps, so most calls do nothing.
    /// `ErrorKind::Unsupported` if the file system cannot allocate space
    /// (the caller goes back to `write_all_at`; nothing was changed).
    fn reserve(&mut self, end: u64) -> io::Result<()>;
    /// Puts `buf` into the file at `offset`, reserving space first.
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
}

/// A read-only view of a whole file: a memory map on the real file system,
/// a shared copy on the simulated one.
pub enum Mapped {
    /// A memory map (real file system).
    Mmap(memmap2::Mmap),
    /// Bytes held in memory (simulated disk, or an empty file).
    Bytes(Arc<[u8]>),
}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Mmap(m) => m,
            Mapped::Bytes(b) => b,
        }
    }
}

impl fmt::Debug for Mapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapped({} bytes)", self.len())
    }
}

/// An exclusive lock held until dropped.
pub struct LockGuard(pub Box<dyn Send + Sync>);

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

/// A file system: the real one or a simulation.
pub trait Vfs: Send + Sync + fmt::Debug + 'static {
    /// Opens a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>>;
    /// Maps a whole file read-only. Only for files that no longer change
    /// (sealed segments, sealed packs).
    fn map(&self, path: &Path) -> io::Result<Mapped>;
    /// The names of the entries in `dir` (not `.`/`..`), unsorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `dir` and its parents (owner-only permissions on Unix).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Renames a file, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on `path` (created if missing) without
    /// blocking; `ErrorKind::WouldBlock` if another holder has it.
    fn lock_exclusive(&self, path: &Path) -> io::Result<LockGuard>;

    /// Whether [`Vfs::map`] is cheap: a memory map (the real file system)
    /// or bytes already in memory (the simulated disk), so a reader maps
    /// a sealed segment whole and reads its frames from the map. `false`
    /// where a map has to fetch the whole file first (an archive read in
    /// place): a reader then reads only the frames it needs, by
    /// [`VfsFile::read_at`] at offsets from the segment's sparse index,
    /// and maps a segment only for work that reads all of it (verify, an
    /// index rebuild). Default `true`.
    fn maps_cheaply(&self) -> bool {
        true
    }
}
