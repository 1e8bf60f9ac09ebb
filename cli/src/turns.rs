//! Taking turns at the store's writer lock between `cairn` processes.
//!
//! The lock (`.cairn/LOCK`, an flock) has no queue and no way to ask its
//! holder to let go, and a `cairn record` fed by a busy agent pipe (a line
//! every 0.1 s) would hold it for as long as the agent runs: its input never
//! goes idle for [`super::record::RELEASE_LOCK_AFTER_IDLE`]. So the CLI adds
//! a small protocol beside the lock:
//!
//! - A CLI writer that finds the lock taken announces that it waits, with
//!   the file `.cairn/LOCK.wanted` ([`Announcement`]), written again at each
//!   try (every 20 ms) and removed when it gets the lock or gives up. One
//!   file serves any number of waiters: when one of them removes it, the
//!   others write it again at their next try.
//! - A `cairn record` that holds the lock looks for a fresh announcement
//!   at most every [`CHECK_WANTED_EVERY`] ([`Watch::someone_waits`]: one
//!   `stat`), whether it is busy appending or waiting for its input. When it
//!   finds one it acknowledges what it appended (durable first, as always),
//!   closes the store, and before it waits for the lock again gives the
//!   waiter the chance to take it ([`Watch::let_in`]), so two busy pipes
//!   take turns and a `checkpoint` gets in well within its 3 s.
//!
//! A file is used rather than, say, a socket, because it needs no server:
//! any process that can take the lock can write beside it, and a waiter
//! killed before it could remove its file leaves something that goes
//! stale by itself ([`WANTED_FRESH_FOR`]). Only `cairn record` yields;
//! the other CLI write commands hold the lock for one short operation, and
//! a program that holds a `Store` open through the library neither
//! announces nor yields (CLI writers wait for it as before).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use cairn::store_dir::RealVfs;
use cairn::store_dir::{lock_holder, LOCK_FILE_NAME};

/// The name of the announcement file, beside the lock file in the store
/// directory.
pub const WANTED_FILE_NAME: &str = "LOCK.wanted";

/// How often a `record` holding the lock looks for an announcement. A look
/// is one `stat`, and a bulk pipe appends thousands of lines between two
/// looks, so its throughput does not change; and 50 ms is short against
/// the 3 s a `checkpoint` waits. It is also the least time a `record`
/// keeps the lock once it has it, so two busy pipes taking turns each get
/// their waiting lines appended in every turn rather than only reopening
/// the store.
pub const CHECK_WANTED_EVERY: Duration = Duration::from_millis(50);

/// How long an announcement counts after it was last written. Waiters
/// write it at every try, every 20 ms, so one not written for a second
/// was left by a waiter that was killed (or is stalled so long that
/// ignoring it only delays it); a `record` ignores it rather than yield to
/// nobody, over and over.
pub const WANTED_FRESH_FOR: Duration = Duration::from_secs(1);

/// How long a `record` that let go of the lock waits for a waiter to take
/// it before trying to take it back. A waiter tries every 20 ms, so it is
/// in long before this; the limit only matters when the waiter went away
/// meanwhile without removing its announcement, and then the pipe's lines
/// wait in the pipe (none is lost) for at most this long.
pub const LET_IN_AT_MOST: Duration = Duration::from_millis(500);

/// How often a `record` that let go looks whether a waiter has taken the
/// lock: short against a waiter's 20 ms between tries, so that the
/// `record` starts waiting (and announcing) itself soon after.
const LET_IN_POLL: Duration = Duration::from_millis(5);

/// The announcement file of the store directory `store_dir`.
fn wanted_file(store_dir: &Path) -> PathBuf {
    store_dir.join(WANTED_FILE_NAME)
}

/// Whether an announcement last written at `modified` still counts at
/// `now`. A time in the future (a clock stepped back, a file system with
/// another clock) counts: it was written recently as far as can be told.
pub fn is_fresh(modified: SystemTime, now: SystemTime) -> bool {
    now.duration_since(modified)
        .map_or(true, |age| age < WANTED_FRESH_FOR)
}

/// When the announcement `path` was last written, if it exists.
fn written_at(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A writer's announcement that it waits for the store lock: written by
/// [`Announcement::renew`] at each failed try, removed when dropped (the
/// writer got the lock, gave up, or failed).
pub struct Announcement {
    path: PathBuf,
    written: bool,
}

impl Announcement {
    /// An announcement for the store directory `store_dir`, not yet
    /// written.
    pub fn new(store_dir: &Path) -> Announcement {
        Announcement {
            path: wanted_file(store_dir),
            written: false,
        }
    }

    /// Writes the announcement (again): creates it if the holder or another
    /// waiter removed it, and keeps it fresh. It holds this process's id,
    /// for a human who finds it. A failure to write it (a store this user
    /// may only read) is ignored: the writer then waits as it did before
    /// there were announcements.
    pub fn renew(&mut self) {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let wrote = o.open(&self.path).and_then(|mut f| {
            std::io::Write::write_all(&mut f, format!("pid {}\n", std::process::id()).as_bytes())
        });
        self.written |= wrote.is_ok();
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        if self.written {
            // Another waiter's announcement goes with it; that one writes
            // it again at its next try.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What a `record` holding the lock uses to notice a waiting writer and
/// let it in.
pub struct Watch {
    wanted: PathBuf,
    lock_file: PathBuf,
    next_check: Instant,
}

impl Watch {
    /// A watch on the store directory `store_dir`, whose lock this process
    /// has just taken.
    pub fn new(store_dir: &Path) -> Watch {
        Watch {
            wanted: wanted_file(store_dir),
            lock_file: store_dir.join(LOCK_FILE_NAME),
            next_check: Instant::now() + CHECK_WANTED_EVERY,
        }
    }

    /// This process has taken the lock (again): the first look is
    /// [`CHECK_WANTED_EVERY`] from now.
    pub fn took_lock(&mut self) {
        self.next_check = Instant::now() + CHECK_WANTED_EVERY;
    }

    /// How long until [`Watch::someone_waits`] looks again.
    pub fn until_next_check(&self) -> Duration {
        self.next_check.saturating_duration_since(Instant::now())
    }

    /// Whether a fresh announcement says another writer waits for the
    /// lock; looks at most every [`CHECK_WANTED_EVERY`] and says no in
    /// between, so it can be called for every line.
    pub fn someone_waits(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_check {
            return false;
        }
        self.next_check = now + CHECK_WANTED_EVERY;
        written_at(&self.wanted).is_some_and(|t| is_fresh(t, SystemTime::now()))
    }

    /// After this process let go of the lock for a waiting writer: waits
    /// until the waiter has it (the lock file names another process, or the
    /// announcement is gone: the waiter got in, or gave up), for at most
    /// [`LET_IN_AT_MOST`], so that this process does not take the lock
    /// straight back. An announcement that nobody wrote again in all that
    /// time was left by a waiter that is gone, and is removed.
    pub fn let_in(&self) {
        let me = std::process::id();
        let seen = written_at(&self.wanted);
        let deadline = Instant::now() + LET_IN_AT_MOST;
        loop {
            let Some(now_written) = written_at(&self.wanted) else {
                return;
            };
            if lock_holder(&RealVfs, &self.lock_file).is_some_and(|pid| pid != me) {
                return;
            }
            if Instant::now() >= deadline {
                if Some(now_written) == seen {
                    let _ = std::fs::remove_file(&self.wanted);
                }
                return;
            }
            std::thread::sleep(LET_IN_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_counts_until_it_is_stale() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(is_fresh(t, t));
        assert!(is_fresh(t, t + WANTED_FRESH_FOR - Duration::from_millis(1)));
        assert!(!is_fresh(t, t + WANTED_FRESH_FOR));
        // Written "later" than now: a clock that stepped back.
        assert!(is_fresh(t + Duration::from_secs(5), t));
    }

    #[test]
    fn a_watch_sees_an_announcement_until_the_waiter_drops_it() {
        let tmp = tempfile::tempdir().unwrap();
        let mut watch = Watch::new(tmp.path());
        watch.next_check = Instant::now();
        assert!(!watch.someone_waits());
        let mut waiter = Announcement::new(tmp.path());
        waiter.renew();
        waiter.renew();
        // Looked just now: no second look before the interval.
        assert!(!watch.someone_waits());
        watch.next_check = Instant::now();
        assert!(watch.someone_waits());
        drop(waiter);
        assert!(!tmp.path().join(WANTED_FILE_NAME).exists());
        watch.next_check = Instant::now();
        assert!(!watch.someone_waits());
    }

    #[test]
    fn letting_in_a_waiter_that_is_gone_removes_its_announcement() {
        let tmp = tempfile::tempdir().unwrap();
        let watch = Watch::new(tmp.path());
        // Written, never renewed, never removed: a killed waiter's.
        let mut gone = Announcement::new(tmp.path());
        gone.renew();
        std::mem::forget(gone);
        let started = Instant::now();
        watch.let_in();
        assert!(started.elapsed() >= LET_IN_AT_MOST);
        assert!(!tmp.path().join(WANTED_FILE_NAME).exists());
    }

    #[test]
    fn letting_in_ends_when_another_process_holds_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let watch = Watch::new(tmp.path());
        let mut waiter = Announcement::new(tmp.path());
        waiter.renew();
        // The lock file names another process: the waiter got in.
        std::fs::write(tmp.path().join(LOCK_FILE_NAME), "pid 1\n").unwrap();
        let started = Instant::now();
        watch.let_in();
        assert!(started.elapsed() < LET_IN_AT_MOST);
        // Still written: the waiter removes its own.
        assert!(tmp.path().join(WANTED_FILE_NAME).exists());
    }
}
