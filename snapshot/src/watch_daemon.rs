//! The watcher process behind `cairn watch --daemon`: one per store. It
//! watches the workspace (inotify on Linux, through the `notify` crate),
//! appends the paths that change to the journal
//! ([`crate::watch_journal`], whose docs give the format and the safety
//! rule), and answers checkpoints that ask it to flush over a local
//! socket (an abstract socket on Linux, named after the cache directory).
//!
//! What it journals, and when it journals a `rescan` frame instead (the
//! next checkpoint then scans in full):
//!
//! - every path an event names, classified as the in-process watcher does
//!   ([`crate::watch`]): paths inside `.git/` and the store are dropped;
//! - the kernel's queue overflowed (notify's `Rescan` flag), a path is not
//!   UTF-8 or too long to journal, an ignore file or a `.git` changed
//!   (which paths a scan includes changed), or more than
//!   [`DaemonConfig::max_span_paths`] distinct paths changed between two
//!   flushes (a full scan is then cheaper, and memory stays bounded);
//! - a watcher error (for example the inotify watch limit reached on a new
//!   directory): a rescan frame, and the daemon stops, since it can no
//!   longer see everything.
//!
//! It stops when asked (`cairn watch --stop`), after [`IDLE_STOP`] without
//! a request, when its store is gone (checked every
//! [`STORE_CHECK_INTERVAL`]), or on a watcher error.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Result, SnapshotError};
use crate::watch::{barrier_number, changes_files, classify, may_add_dir, PathClass};
use crate::watch_journal::{
    encode_frame, encode_header, push_path, DaemonStatus, JournalPoint, FRAME_OVERHEAD,
    HEADER_BYTES, JOURNAL_FILE, KIND_FLUSH, KIND_PATHS, KIND_RESCAN, LOCK_FILE,
};

/// How long a flush waits for its barrier file's event before it answers
/// with an error (the checkpoint then scans in full). Shorter than
/// [`crate::watch_journal::FLUSH_TIMEOUT`], so the checkpoint hears why.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(2);

/// The daemon stops after this long without a request (a checkpoint, a
/// status): an abandoned workspace does not keep a process and its
/// inotify watches forever. The next checkpoint then scans in full, and
/// `cairn hooks install` or the user starts it again.
pub const IDLE_STOP: Duration = Duration::from_secs(60 * 60);

/// How often the daemon checks that its store still exists (and whether
/// it was asked to stop, or has been idle too long).
pub const STORE_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// The default of [`DaemonConfig::max_span_paths`]: past this many
/// distinct changed paths between two checkpoints (a branch switch, a
/// build writing into the tree) a full scan is cheaper than re-reading
/// path by path, and the daemon's memory stays bounded.
pub const MAX_SPAN_PATHS: usize = 100_000;

/// Past this size the journal starts over in a new epoch at the next
/// flush (the checkpoint after that scans in full once): a long-lived
/// daemon's journal stays bounded on disk.
pub const MAX_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// Pending paths are written as one frame once they take this many bytes
/// (and at every flush): few writes under a burst, small frames.
pub const FRAME_TARGET_BYTES: usize = 64 * 1024;

/// The name prefix of the daemon's barrier files in the cache directory.
const BARRIER_PREFIX: &str = "watchd-barrier-";

/// What the daemon watches, and its limits.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The workspace root.
    pub root: PathBuf,
    /// The workspace cache directory (journal, lock, barrier files).
    pub cache_dir: PathBuf,
    /// The store directory: the daemon stops when its `log/` is gone.
    pub store_dir: PathBuf,
    /// Distinct changed paths between two flushes before the span is
    /// journalled as a rescan (default [`MAX_SPAN_PATHS`]).
    pub max_span_paths: usize,
    /// See [`IDLE_STOP`].
    pub idle_stop: Duration,
}

impl DaemonConfig {
    /// The configuration with the documented defaults.
    pub fn new(root: &Path, cache_dir: &Path, store_dir: &Path) -> DaemonConfig {
        DaemonConfig {
            root: root.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            store_dir: store_dir.to_path_buf(),
            max_span_paths: MAX_SPAN_PATHS,
            idle_stop: IDLE_STOP,
        }
    }
}

/// Why a daemon stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// `cairn watch --stop`.
    Asked,
    /// No request for [`DaemonConfig::idle_stop`].
    Idle,
    /// The store's `log/` is gone.
    StoreGone,
    /// The watcher failed (it could no longer see every change).
    WatcherError(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Asked => f.write_str("asked to stop"),
            Stopped::Idle => f.write_str("idle"),
            Stopped::StoreGone => f.write_str("its store is gone"),
            Stopped::WatcherError(e) => write!(f, "watcher error: {e}"),
        }
    }
}

/// The journal as the daemon writes it.
struct Journal {
    file: File,
    path: PathBuf,
    epoch: u64,
    seq: u64,
    offset: u64,
    /// A [`KIND_PATHS`] payload not yet written.
    pending: Vec<u8>,
    /// Paths journalled since the last flush (each is written once per span).
    span: HashSet<String>,
    /// A rescan frame was written since the last flush: nothing more to say.
    span_rescan: bool,
    max_span_paths: usize,
    /// A write failed or the watcher failed: the daemon stops.
    broken: Option<String>,
}

impl Journal {
    fn create(path: &Path, max_span_paths: usize) -> Result<Journal> {
        let file = File::create(path).map_err(|e| SnapshotError::io("create", path, e))?;
        let mut j = Journal {
            file,
            path: path.to_path_buf(),
            epoch: 0,
            seq: 0,
            offset: 0,
            pending: Vec::new(),
            span: HashSet::new(),
            span_rescan: false,
            max_span_paths,
            broken: None,
        };
        j.start_epoch()?;
        Ok(j)
    }

    /// Starts a new epoch: the file truncated, a new header.
    fn start_epoch(&mut self) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut h = blake3::Hasher::new();
        h.update(&now.to_le_bytes());
        h.update(&std::process::id().to_le_bytes());
        h.update(&self.epoch.to_le_bytes());
        h.update(self.path.as_os_str().as_encoded_bytes());
        let d = h.finalize();
        let mut e = [0u8; 8];
        e.copy_from_slice(&d.as_bytes()[..8]);
        self.epoch = u64::from_le_bytes(e);
        self.seq = 0;
        self.pending.clear();
        self.span.clear();
        self.span_rescan = false;
        let io = |e| SnapshotError::io("write the watch journal", &self.path, e);
        self.file.set_len(0).map_err(io)?;
        let header = encode_header(self.epoch, i64::try_from(now).unwrap_or(i64::MAX));
        std::io::Seek::seek(&mut self.file, std::io::SeekFrom::Start(0)).map_err(io)?;
        self.file.write_all(&header).map_err(io)?;
        self.offset = HEADER_BYTES;
        Ok(())
    }

    fn write(&mut self, kind: u8, payload: &[u8]) {
        if self.broken.is_some() {
            return;
        }
        self.seq += 1;
        let mut b = Vec::with_capacity(payload.len() + FRAME_OVERHEAD);
        encode_frame(kind, self.seq, payload, &mut b);
        match self.file.write_all(&b) {
            Ok(()) => self.offset += b.len() as u64,
            Err(e) => self.broken = Some(format!("writing the journal: {e}")),
        }
    }

    fn write_pending(&mut self) {
        if !self.pending.is_empty() {
            let p = std::mem::take(&mut self.pending);
            self.write(KIND_PATHS, &p);
        }
    }

    fn rescan(&mut self, why: &str) {
        if self.span_rescan {
            return;
        }
        self.pending.clear();
        self.span.clear();
        self.span_rescan = true;
        self.write(KIND_RESCAN, why.as_bytes());
    }

    fn add(&mut self, rel: &str) {
        if self.span_rescan || self.span.contains(rel) {
            return;
        }
        if self.span.len() >= self.max_span_paths {
            let why = format!(
                "more than {} paths changed since the last checkpoint",
                self.max_span_paths
            );
            return self.rescan(&why);
        }
        if !push_path(&mut self.pending, rel) {
            return self.rescan("a changed path is too long to journal");
        }
        self.span.insert(rel.to_string());
        if self.pending.len() >= FRAME_TARGET_BYTES {
            self.write_pending();
        }
    }

    /// Writes what is pending and a flush frame; rotates first when the
    /// journal is too large. The flush point, or why there is none.
    fn flush(&mut self) -> std::result::Result<JournalPoint, String> {
        if self.offset > MAX_JOURNAL_BYTES {
            if let Err(e) = self.start_epoch() {
                self.broken = Some(e.to_string());
            }
        } else {
            self.write_pending();
        }
        self.write(KIND_FLUSH, &[]);
        if let Some(b) = &self.broken {
            return Err(b.clone());
        }
        self.span.clear();
        self.span_rescan = false;
        Ok(JournalPoint {
            epoch: self.epoch,
            seq: self.seq,
            offset: self.offset,
        })
    }
}

/// What the event handler and the request thread share.
struct State {
    journal: Journal,
    barrier_seen: u64,
    dir_added: bool,
    last_request: Instant,
    stop: Option<Stopped>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    /// A daemon's state as it starts, writing to `journal`.
    fn new(journal: Journal) -> Shared {
        Shared {
            state: Mutex::new(State {
                journal,
                barrier_seen: 0,
                dir_added: false,
                last_request: Instant::now(),
                stop: None,
            }),
            changed: Condvar::new(),
        }
    }
}

struct Handler {
    shared: Arc<Shared>,
    root: PathBuf,
    cache_dir: PathBuf,
}

impl notify::EventHandler for Handler {
    fn handle_event(&mut self, event: notify::Result<notify::Event>) {
        let mut st = self.shared.state.lock();
        match event {
            Err(e) => {
                let why = format!("the watcher failed: {e}");
                st.journal.rescan(&why);
                st.journal.broken = Some(why.clone());
                st.stop.get_or_insert(Stopped::WatcherError(why));
            }
            Ok(ev) => {
                if ev.need_rescan() {
                    st.journal.rescan("the kernel's event queue overflowed");
                }
                let relevant = changes_files(&ev.kind);
                if may_add_dir(&ev.kind) {
                    st.dir_added = true;
                }
                for p in &ev.paths {
                    if let Some(n) = barrier_number(p, &self.cache_dir, BARRIER_PREFIX) {
                        st.barrier_seen = st.barrier_seen.max(n);
                        continue;
                    }
                    if !relevant {
                        continue;
                    }
                    let Ok(rel) = p.strip_prefix(&self.root) else {
                        continue;
                    };
                    let Some(rel) = rel.to_str() else {
                        st.journal.rescan("a changed path is not UTF-8");
                        continue;
                    };
                    match classify(rel) {
                        PathClass::Drop => {}
                        PathClass::Full => {
                            st.journal.rescan("an ignore file or a .git changed");
                        }
                        PathClass::Keep => st.journal.add(rel),
                    }
                }
            }
        }
        drop(st);
        self.shared.changed.notify_all();
    }
}

/// Takes the daemon lock of `cache_dir`: `None` if another daemon holds it.
#[cfg(unix)]
fn lock(cache_dir: &Path) -> Result<Option<File>> {
    use std::os::fd::AsRawFd;
    let p = cache_dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| SnapshotError::io("open", &p, e))?;
    // SAFETY: flock on a file descriptor this function owns; no memory is shared.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    Ok((r == 0).then_some(f))
}

/// True while a daemon holds the lock of `cache_dir`.
#[cfg(unix)]
pub fn is_locked(cache_dir: &Path) -> bool {
    if !cache_dir.join(LOCK_FILE).exists() {
        return false;
    }
    matches!(lock(cache_dir), Ok(None))
}

/// Runs the daemon until it stops (see the module docs). `ready` is
/// called once it watches the whole workspace and answers requests. An
/// error before that: it could not start (another daemon holds the
/// lock, the workspace cannot be watched).
#[cfg(unix)]
pub fn run(cfg: DaemonConfig, ready: impl FnOnce(&DaemonStatus)) -> Result<Stopped> {
    let canon = |p: &Path| std::fs::canonicalize(p).map_err(|e| SnapshotError::io("resolve", p, e));
    std::fs::create_dir_all(&cfg.cache_dir)
        .map_err(|e| SnapshotError::io("create", &cfg.cache_dir, e))?;
    let root = canon(&cfg.root)?;
    let cache_dir = canon(&cfg.cache_dir)?;
    let Some(_lock) = lock(&cache_dir)? else {
        return Err(SnapshotError::Invalid(format!(
            "a watcher already runs for {}",
            root.display()
        )));
    };
    let journal = Journal::create(&cache_dir.join(JOURNAL_FILE), cfg.max_span_paths)?;
    let shared = Arc::new(Shared::new(journal));
    let handler = Handler {
        shared: shared.clone(),
        root: root.clone(),
        cache_dir: cache_dir.clone(),
    };
    let watcher = crate::watch::watch_workspace(handler, &root, &cache_dir)?;
    let (listener, addr) = listen(&cache_dir)?;
    let since = cairn_codec::Timestamp::now().to_iso();
    let status = |st: &State| DaemonStatus {
        pid: std::process::id(),
        root: root.clone(),
        since: since.clone(),
        epoch: st.journal.epoch,
        seq: st.journal.seq,
    };
    ready(&status(&shared.state.lock()));

    let server = Server {
        shared: shared.clone(),
        root: root.clone(),
        cache_dir: cache_dir.clone(),
        next_barrier: std::sync::atomic::AtomicU64::new(1),
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for conn in listener.incoming() {
                if shared.state.lock().stop.is_some() {
                    break;
                }
                let Ok(conn) = conn else { continue };
                server.answer(conn, &status);
            }
        });
        let why = wait_for_stop(&shared, &cfg);
        // Wake the request thread so it sees the stop.
        let _ = std::os::unix::net::UnixStream::connect_addr(&addr);
        drop(watcher);
        #[cfg(not(target_os = "linux"))]
        let _ = std::fs::remove_file(cache_dir.join("watch.sock"));
        Ok(why)
    })
}

/// Binds the daemon's socket for the workspace whose cache directory is
/// `cache_dir`.
#[cfg(unix)]
fn listen(
    cache_dir: &Path,
) -> Result<(
    std::os::unix::net::UnixListener,
    std::os::unix::net::SocketAddr,
)> {
    let addr = crate::watch_journal::socket_addr(cache_dir)
        .map_err(|e| SnapshotError::io("name the watcher socket", cache_dir, e))?;
    #[cfg(not(target_os = "linux"))]
    let _ = std::fs::remove_file(cache_dir.join("watch.sock"));
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)
        .map_err(|e| SnapshotError::io("listen on the watcher socket", cache_dir, e))?;
    Ok((listener, addr))
}

/// Waits until the daemon is told to stop, its store is gone, or no
/// request came for `cfg.idle_stop`; why it stops.
#[cfg(unix)]
fn wait_for_stop(shared: &Shared, cfg: &DaemonConfig) -> Stopped {
    loop {
        let mut st = shared.state.lock();
        if st.stop.is_none() {
            shared.changed.wait_for(&mut st, STORE_CHECK_INTERVAL);
        }
        if st.stop.is_none() && !cfg.store_dir.join("log").is_dir() {
            st.stop = Some(Stopped::StoreGone);
        }
        if st.stop.is_none() && st.last_request.elapsed() >= cfg.idle_stop {
            st.stop = Some(Stopped::Idle);
        }
        if let Some(w) = &st.stop {
            return w.clone();
        }
    }
}

struct Server {
    shared: Arc<Shared>,
    root: PathBuf,
    cache_dir: PathBuf,
    next_barrier: std::sync::atomic::AtomicU64,
}

impl Server {
    fn answer(
        &self,
        conn: std::os::unix::net::UnixStream,
        status: &dyn Fn(&State) -> DaemonStatus,
    ) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
        let mut line = String::new();
        if std::io::BufReader::new(&conn).take_line(&mut line).is_err() {
            return;
        }
        let line = line.trim_end();
        self.shared.state.lock().last_request = Instant::now();
        let answer = if line == "status" {
            let s = status(&self.shared.state.lock());
            format!("ok {}", serde_json::to_string(&s).unwrap_or_default())
        } else if line == "stop" {
            self.shared.state.lock().stop.get_or_insert(Stopped::Asked);
            self.shared.changed.notify_all();
            "ok stopping".to_string()
        } else if let Some(root) = line.strip_prefix("flush ") {
            let same = std::fs::canonicalize(root).is_ok_and(|r| r == self.root);
            if same {
                match self.flush() {
                    Ok(p) => format!("ok {} {} {}", p.epoch, p.seq, p.offset),
                    Err(e) => format!("err {e}"),
                }
            } else {
                format!("err this watcher watches {}", self.root.display())
            }
        } else {
            "err unknown request".to_string()
        };
        let mut w = &conn;
        let _ = w.write_all(answer.as_bytes());
        let _ = w.write_all(b"\n");
    }

    /// Makes a barrier file and waits until its event is seen.
    fn barrier(&self) -> std::result::Result<(), String> {
        let n = self
            .next_barrier
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = self.cache_dir.join(format!("{BARRIER_PREFIX}{n}"));
        File::create(&p).map_err(|e| format!("cannot make its barrier file: {e}"))?;
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        let mut st = self.shared.state.lock();
        let ok = loop {
            if st.barrier_seen >= n {
                break true;
            }
            if self
                .shared
                .changed
                .wait_until(&mut st, deadline)
                .timed_out()
            {
                break st.barrier_seen >= n;
            }
        };
        drop(st);
        let _ = std::fs::remove_file(&p);
        if ok {
            Ok(())
        } else {
            Err("its barrier event did not come back in time".into())
        }
    }

    fn flush(&self) -> std::result::Result<JournalPoint, String> {
        self.barrier()?;
        if std::mem::take(&mut self.shared.state.lock().dir_added) {
            // notify adds watches for a new directory after handing over
            // the batch that announced it: a second barrier comes after.
            self.barrier()?;
        }
        let mut st = self.shared.state.lock();
        if let Some(s) = &st.stop {
            return Err(format!("the watcher is stopping ({s})"));
        }
        st.journal.flush()
    }
}

/// Reads one line, at most [`MAX_REQUEST_BYTES`].
trait TakeLine {
    fn take_line(self, line: &mut String) -> std::io::Result<usize>;
}

impl<R: std::io::Read> TakeLine for std::io::BufReader<R> {
    fn take_line(self, line: &mut String) -> std::io::Result<usize> {
        use std::io::Read;
        std::io::BufReader::new(self.take(MAX_REQUEST_BYTES)).read_line(line)
    }
}

/// The longest request line read: a flush names the workspace root, and
/// paths are far shorter than this.
const MAX_REQUEST_BYTES: u64 = 64 * 1024;
