//! The journal of changed paths that a `cairn watch --daemon` process
//! keeps for its workspace (see [`crate::watch_daemon`]), and how a
//! checkpoint in any process uses it: its on-disk format, its reader, and
//! the handshake with the daemon.
//!
//! # The safety rule
//!
//! A checkpoint re-reads only the journalled paths when, and only when,
//! the journal proves it saw every change since the tree it patches was
//! captured:
//!
//! 1. the checkpoint asks the daemon over its socket to **flush**: the
//!    daemon creates a barrier file, waits until the kernel hands its event
//!    back (inotify queues events in order, so every earlier change has
//!    been handed over too; a second barrier follows when a directory
//!    appeared, so the watch notify adds for it is in place), appends what
//!    it holds and a `flush` frame, and answers with its epoch and that
//!    frame's sequence number and end offset. No answer within
//!    [`FLUSH_TIMEOUT`]: full scan;
//! 2. the checkpoint reads the frames after the point the previous
//!    checkpoint consumed (the [`CONSUMED_FILE`]: epoch, sequence number,
//!    offset, and the tree that checkpoint produced), up to that flush:
//!    the epoch must be the daemon's (a restarted daemon starts a new
//!    one), the consumed tree must be the workspace's last captured tree,
//!    the sequence numbers must follow on without a gap and every frame's
//!    checksum must hold, and no `rescan` frame may lie between (a queue
//!    overflow, an ignore file or `.git` changed, a path that is not
//!    UTF-8, too many paths: see [`crate::watch_daemon`]);
//! 3. the capture re-reads those paths (after the flush, so it sees
//!    them as they are now) and records the new flush point with its tree.
//!
//! Any step that fails makes the checkpoint a full scan, and the
//! checkpoint says why ([`ScanReport`]). Every change lands either before
//! a flush's barrier (journalled up to that flush, re-read by the capture
//! after it) or after it (journalled after that flush, re-read by a later
//! checkpoint): a path absent from the journal since a flush is unchanged
//! since that flush, so its entry in the tree captured after the flush is
//! still right. A wrong "nothing changed" needs a lost event, and every
//! way to lose one (a dead or restarted daemon, an overflowed queue, a
//! torn or damaged journal) breaks one of the checks above.
//!
//! # On-disk format
//!
//! `watch-journal` in the workspace cache directory (`.cairn/snapshot/`):
//!
//! ```text
//! header  magic "CAIRNWJ1" (8) | epoch u64 LE | started_ns i64 LE | crc u32 LE
//! frame   len u32 LE | kind u8 | seq u64 LE | payload (len bytes) | crc u32 LE
//! ```
//!
//! The CRCs are CRC32 seeded with [`cairn_codec::frame::CRC_SEED`] over
//! every byte before them in the header or frame. Sequence numbers start
//! at 1 in each epoch and follow on. Kinds: [`KIND_PATHS`] (payload:
//! repeated `len u16 LE | UTF-8 workspace-relative path`), [`KIND_RESCAN`]
//! (payload: the reason, UTF-8), [`KIND_FLUSH`] (empty payload: a point a
//! checkpoint may consume up to). The `watch-consumed` file holds one
//! record, framed as the in-place record format frames it (`in_place.rs`) (written over itself,
//! never renamed):
//! magic "CAIRNWC1" | epoch u64 | seq u64 | offset u64 | root (32 bytes) |
//! crc u32, all little-endian.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_codec::bytes::crc32_seeded_parts;
use cairn_codec::BlobHash;
use serde::{Deserialize, Serialize};

/// The journal's file name in the workspace cache directory.
pub const JOURNAL_FILE: &str = "watch-journal";
/// The file naming the journal point the last checkpoint consumed.
pub const CONSUMED_FILE: &str = "watch-consumed";
/// The file the daemon holds an exclusive lock on while it runs: one
/// daemon per store, and its lock goes with it however it ends.
pub const LOCK_FILE: &str = "watch-lock";

const JOURNAL_MAGIC: &[u8; 8] = b"CAIRNWJ1";
const CONSUMED_MAGIC: &[u8; 8] = b"CAIRNWC1";
/// Bytes of the journal header.
pub const HEADER_BYTES: u64 = 28;
/// Bytes of a frame besides its payload (length, kind, seq, crc).
pub const FRAME_OVERHEAD: usize = 4 + 1 + 8 + 4;
const CONSUMED_BYTES: usize = 8 + 8 + 8 + 8 + 32 + 4;

/// A frame of changed paths.
pub const KIND_PATHS: u8 = 1;
/// A frame that says the journal cannot be trusted up to the next flush
/// (its payload says why): the next checkpoint scans in full.
pub const KIND_RESCAN: u8 = 2;
/// A flush point: everything the kernel reported before it is in the frames before it.
pub const KIND_FLUSH: u8 = 3;

/// The largest frame payload: frames are written in batches well below
/// this, so a larger length is damage, refused before any allocation.
pub const MAX_FRAME_PAYLOAD_BYTES: usize = 1 << 20;

/// How long a checkpoint waits for the daemon's answer to a flush before
/// it scans in full. The barrier normally comes back in well under a
/// millisecond; the daemon itself gives up on its barrier after
/// [`crate::watch_daemon::BARRIER_TIMEOUT`], shorter than this.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// How a checkpoint found what changed, and, for a full scan that a
/// watcher could have spared, why it could not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanReport {
    /// `full` (the whole workspace walked), `journal` (the paths in the
    /// `cairn watch` journal re-read), `watched` (the paths this
    /// process's own watcher saw re-read) or `tracked` (only tracked
    /// paths re-read: `--tracked-only`).
    pub how: String,
    /// Why a full scan was needed: `null` for the other kinds.
    pub reason: Option<String>,
}

impl ScanReport {
    pub(crate) fn full(reason: impl Into<String>) -> ScanReport {
        ScanReport {
            how: SCAN_FULL.into(),
            reason: Some(reason.into()),
        }
    }
    pub(crate) fn kind(how: &str) -> ScanReport {
        ScanReport {
            how: how.into(),
            reason: None,
        }
    }
}

/// [`ScanReport::how`] of a full scan.
pub const SCAN_FULL: &str = "full";
/// [`ScanReport::how`] of a capture from the `cairn watch` journal.
pub const SCAN_JOURNAL: &str = "journal";
/// [`ScanReport::how`] of a capture from this process's own watcher.
pub const SCAN_WATCHED: &str = "watched";
/// [`ScanReport::how`] of a tracked-only capture.
pub const SCAN_TRACKED: &str = "tracked";

/// The reason given when no daemon answers.
pub const NO_WATCHER: &str = "no watcher running (`cairn watch --daemon` starts one)";

/// A point in one epoch's journal: the flush frame `seq`, which ends at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalPoint {
    /// The daemon run that wrote it.
    pub epoch: u64,
    /// The flush frame's sequence number.
    pub seq: u64,
    /// The byte offset just past that frame.
    pub offset: u64,
}

/// The point the last checkpoint consumed, and the tree it produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consumed {
    /// Where in the journal.
    pub point: JournalPoint,
    /// The tree of the checkpoint that consumed it.
    pub root: BlobHash,
}

// ------------------------------------------------------------------ encoding

/// The journal header of `epoch`.
pub fn encode_header(epoch: u64, started_ns: i64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_BYTES as usize);
    b.extend_from_slice(JOURNAL_MAGIC);
    b.extend_from_slice(&epoch.to_le_bytes());
    b.extend_from_slice(&started_ns.to_le_bytes());
    let crc = crc32_seeded_parts(&[&b]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a journal header: `(epoch, started_ns)`, or why not.
pub fn decode_header(b: &[u8]) -> Result<(u64, i64), String> {
    if b.len() < HEADER_BYTES as usize {
        return Err("the journal header is cut short".into());
    }
    if &b[..8] != JOURNAL_MAGIC {
        return Err("the journal does not start with its magic bytes".into());
    }
    let crc = u32::from_le_bytes(b[24..28].try_into().map_err(|_| "header")?);
    if crc != crc32_seeded_parts(&[&b[..24]]) {
        return Err("the journal header's checksum does not match".into());
    }
    let epoch = u64::from_le_bytes(b[8..16].try_into().map_err(|_| "header")?);
    let started = i64::from_le_bytes(b[16..24].try_into().map_err(|_| "header")?);
    Ok((epoch, started))
}

/// Appends one frame to `out`.
pub fn encode_frame(kind: u8, seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    assert!(
        payload.len() <= MAX_FRAME_PAYLOAD_BYTES,
        "journal frame payload of {} bytes",
        payload.len()
    );
    let len = (payload.len() as u32).to_le_bytes();
    let seqb = seq.to_le_bytes();
    let crc = crc32_seeded_parts(&[&len, &[kind], &seqb, payload]);
    out.extend_from_slice(&len);
    out.push(kind);
    out.extend_from_slice(&seqb);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Appends one path to a [`KIND_PATHS`] payload. Paths longer than a
/// `u16` length cannot be written: the caller journals a rescan instead.
pub fn push_path(payload: &mut Vec<u8>, rel: &str) -> bool {
    let Ok(n) = u16::try_from(rel.len()) else {
        return false;
    };
    payload.extend_from_slice(&n.to_le_bytes());
    payload.extend_from_slice(rel.as_bytes());
    true
}

/// The paths of a [`KIND_PATHS`] payload, or why it cannot be read.
pub fn decode_paths(mut p: &[u8]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    while !p.is_empty() {
        if p.len() < 2 {
            return Err("a path's length is cut short".into());
        }
        let n = u16::from_le_bytes([p[0], p[1]]) as usize;
        p = &p[2..];
        if p.len() < n {
            return Err("a path runs past its frame".into());
        }
        let s = std::str::from_utf8(&p[..n]).map_err(|_| "a path is not UTF-8".to_string())?;
        out.push(s.to_string());
        p = &p[n..];
    }
    Ok(out)
}

/// One decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its kind.
    pub kind: u8,
    /// Its sequence number.
    pub seq: u64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Reads the next frame from `r`: `Ok(None)` at a clean end of file,
/// `Err` for a frame cut short or damaged.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Frame>, String> {
    let mut head = [0u8; 13];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err("a frame header is cut short".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the journal: {e}")),
        }
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_FRAME_PAYLOAD_BYTES {
        return Err(format!("a frame claims {len} bytes, over the limit"));
    }
    let mut rest = vec![0u8; len + 4];
    r.read_exact(&mut rest)
        .map_err(|_| "a frame is cut short".to_string())?;
    let (payload, crc) = rest.split_at(len);
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc != crc32_seeded_parts(&[&head[..4], &head[4..5], &head[5..13], payload]) {
        return Err("a frame's checksum does not match".into());
    }
    let seq = u64::from_le_bytes(head[5..13].try_into().map_err(|_| "frame")?);
    rest.truncate(len);
    Ok(Some(Frame {
        kind: head[4],
        seq,
        payload: rest,
    }))
}

/// Encodes the consumed point.
pub fn encode_consumed(c: &Consumed) -> Vec<u8> {
    let mut b = Vec::with_capacity(CONSUMED_BYTES);
    b.extend_from_slice(CONSUMED_MAGIC);
    b.extend_from_slice(&c.point.epoch.to_le_bytes());
    b.extend_from_slice(&c.point.seq.to_le_bytes());
    b.extend_from_slice(&c.point.offset.to_le_bytes());
    b.extend_from_slice(c.root.as_bytes());
    let crc = crc32_seeded_parts(&[&b]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes the consumed point; `None` if it is not one (damaged, cut
/// short, another format): the next checkpoint then scans in full.
pub fn decode_consumed(b: &[u8]) -> Option<Consumed> {
    if b.len() != CONSUMED_BYTES || &b[..8] != CONSUMED_MAGIC {
        return None;
    }
    let body = &b[..CONSUMED_BYTES - 4];
    let crc = u32::from_le_bytes(b[CONSUMED_BYTES - 4..].try_into().ok()?);
    if crc != crc32_seeded_parts(&[body]) {
        return None;
    }
    let u = |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b[i..i + 8].try_into().ok()?)) };
    let root: [u8; 32] = b[32..64].try_into().ok()?;
    Some(Consumed {
        point: JournalPoint {
            epoch: u(8)?,
            seq: u(16)?,
            offset: u(24)?,
        },
        root: BlobHash(root),
    })
}

// ------------------------------------------------------------- the client

/// Why a checkpoint cannot use the journal (the reason it reports).
pub type Fallback = String;

/// The changed paths between two journal points.
#[derive(Debug)]
pub struct Span {
    /// Every path journalled in the span.
    pub paths: std::collections::BTreeSet<String>,
}

/// Reads the journal `path` from the consumed point `from` up to the
/// flush point `to` (both of the same epoch): the paths, or why the span
/// cannot be trusted.
pub fn read_span(path: &Path, from: &JournalPoint, to: &JournalPoint) -> Result<Span, Fallback> {
    if from.epoch != to.epoch {
        return Err("the watcher restarted since the last checkpoint".into());
    }
    // Every flush writes a new frame: a flush point that is not after the
    // last one consumed is not an answer to this checkpoint's flush.
    if from.seq >= to.seq || from.offset >= to.offset || from.offset < HEADER_BYTES {
        return Err(
            "the journal point of the last checkpoint is not before the watcher's flush point"
                .into(),
        );
    }
    let mut f =
        std::fs::File::open(path).map_err(|e| format!("the journal cannot be read: {e}"))?;
    let mut head = [0u8; HEADER_BYTES as usize];
    f.read_exact(&mut head)
        .map_err(|_| "the journal header is cut short".to_string())?;
    let (epoch, _) = decode_header(&head)?;
    if epoch != to.epoch {
        return Err("the journal on disk is another watcher run's".into());
    }
    f.seek(SeekFrom::Start(from.offset))
        .map_err(|e| format!("the journal cannot be read: {e}"))?;
    let mut r = std::io::BufReader::new(f).take(to.offset - from.offset);
    let mut paths = std::collections::BTreeSet::new();
    let mut expect = from.seq + 1;
    let mut rescan: Option<String> = None;
    loop {
        let fr = match read_frame(&mut r)? {
            Some(fr) => fr,
            None => return Err("the journal ends before the watcher's flush point".into()),
        };
        if fr.seq != expect {
            return Err(format!(
                "a gap in the journal (frame {} where {expect} was due)",
                fr.seq
            ));
        }
        expect += 1;
        match fr.kind {
            KIND_PATHS if rescan.is_none() => paths.extend(decode_paths(&fr.payload)?),
            KIND_PATHS => {}
            KIND_RESCAN => {
                let why = String::from_utf8_lossy(&fr.payload).into_owned();
                rescan.get_or_insert(why);
            }
            KIND_FLUSH => {
                if fr.seq == to.seq {
                    break;
                }
            }
            k => return Err(format!("a journal frame of unknown kind {k}")),
        }
    }
    match rescan {
        Some(why) => Err(why),
        None => Ok(Span { paths }),
    }
}

/// Loads the consumed point from the cache directory.
pub fn load_consumed(cache_dir: &Path) -> Option<Consumed> {
    let b = std::fs::read(cache_dir.join(CONSUMED_FILE)).ok()?;
    if !crate::in_place::is_record(&b) {
        // Written whole by an older version.
        return decode_consumed(&b);
    }
    decode_consumed(crate::in_place::decode(&b)?)
}

/// Saves the consumed point, in place (see [`crate::in_place`]; not
/// fsync'd: lost, old or half written after a crash, it no longer matches
/// the last tree or the running epoch, or reads as absent, and the next
/// checkpoint scans in full).
pub(crate) fn save_consumed(cache_dir: &Path, c: &Consumed) -> crate::error::Result<()> {
    crate::in_place::write(&cache_dir.join(CONSUMED_FILE), &encode_consumed(c))
}

/// The socket name the daemon of the cache directory `cache_dir` listens on.
pub fn socket_name(cache_dir: &Path) -> String {
    let canon = std::fs::canonicalize(cache_dir).unwrap_or_else(|_| cache_dir.to_path_buf());
    let h = blake3::hash(canon.as_os_str().as_encoded_bytes());
    format!("cairn-watch-{}", &h.to_hex()[..32])
}

/// What a running daemon says about itself (`cairn watch --status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// Its process id.
    pub pid: u32,
    /// The workspace it watches.
    pub root: PathBuf,
    /// When it started watching (ISO-8601).
    pub since: String,
    /// Its epoch.
    pub epoch: u64,
    /// The last journal sequence number it wrote.
    pub seq: u64,
}

/// Connects to the daemon of `cache_dir`; `None` when none listens.
#[cfg(unix)]
pub fn connect(cache_dir: &Path) -> Option<std::os::unix::net::UnixStream> {
    let s = socket_addr(cache_dir).ok()?;
    let stream = std::os::unix::net::UnixStream::connect_addr(&s).ok()?;
    if !same_user(&stream) {
        // An abstract socket name can be taken by any local user: only a
        // watcher of this user is believed.
        return None;
    }
    let _ = stream.set_read_timeout(Some(FLUSH_TIMEOUT));
    let _ = stream.set_write_timeout(Some(FLUSH_TIMEOUT));
    Some(stream)
}

/// True when the process at the other end of `s` runs as this user.
#[cfg(target_os = "linux")]
fn same_user(s: &std::os::unix::net::UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a `ucred` of the length given; both point
    // to locals that outlive the call.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    r == 0 && cred.uid == unsafe { libc::geteuid() }
}

/// Elsewhere the socket is a file in the owner-only cache directory.
#[cfg(all(unix, not(target_os = "linux")))]
fn same_user(_s: &std::os::unix::net::UnixStream) -> bool {
    true
}

/// The socket address of the daemon of `cache_dir`: an abstract name on
/// Linux (no file to leave behind; it goes with the process), a socket
/// file in the cache directory elsewhere.
#[cfg(unix)]
pub fn socket_addr(cache_dir: &Path) -> std::io::Result<std::os::unix::net::SocketAddr> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(socket_name(cache_dir).as_bytes())
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::os::unix::net::SocketAddr::from_pathname(cache_dir.join("watch.sock"))
    }
}

/// Sends one request line and reads the one-line answer.
#[cfg(unix)]
pub fn request(cache_dir: &Path, line: &str) -> Option<std::io::Result<String>> {
    use std::io::{BufRead, Write};
    let mut s = connect(cache_dir)?;
    let res = (|| {
        s.write_all(line.as_bytes())?;
        s.write_all(b"\n")?;
        let mut answer = String::new();
        std::io::BufReader::new(&s).read_line(&mut answer)?;
        if answer.is_empty() {
            return Err(std::io::Error::other("the watcher closed the connection"));
        }
        Ok(answer.trim_end().to_string())
    })();
    Some(res)
}

/// The daemon's status, if one runs for `cache_dir`.
#[cfg(unix)]
pub fn status(cache_dir: &Path) -> Option<DaemonStatus> {
    let a = request(cache_dir, "status")?.ok()?;
    serde_json::from_str(a.strip_prefix("ok ")?).ok()
}

/// The daemon's status (no daemon off unix).
#[cfg(not(unix))]
pub fn status(_cache_dir: &Path) -> Option<DaemonStatus> {
    None
}

/// Asks the daemon watching `root` to flush: its flush point, or why not.
#[cfg(unix)]
pub fn flush(cache_dir: &Path, root: &Path) -> Result<JournalPoint, Fallback> {
    let req = format!("flush {}", root.display());
    let answer = match request(cache_dir, &req) {
        None => return Err(NO_WATCHER.into()),
        Some(Err(e)) => return Err(format!("the watcher did not answer: {e}")),
        Some(Ok(a)) => a,
    };
    let Some(rest) = answer.strip_prefix("ok ") else {
        let why = answer.strip_prefix("err ").unwrap_or(&answer);
        return Err(format!("the watcher could not flush: {why}"));
    };
    let nums: Vec<u64> = rest
        .split(' ')
        .filter_map(|n| n.parse::<u64>().ok())
        .collect();
    match nums[..] {
        [epoch, seq, offset] => Ok(JournalPoint { epoch, seq, offset }),
        _ => Err(format!("the watcher's answer is not understood: {answer}")),
    }
}

/// No daemon off unix.
#[cfg(not(unix))]
pub fn flush(_cache_dir: &Path, _root: &Path) -> Result<JournalPoint, Fallback> {
    Err(NO_WATCHER.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(frames: &[(u8, u64, Vec<u8>)]) -> (tempfile::TempDir, PathBuf, Vec<u64>) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(JOURNAL_FILE);
        let mut b = encode_header(7, 1);
        let mut ends = Vec::new();
        for (k, s, pl) in frames {
            encode_frame(*k, *s, pl, &mut b);
            ends.push(b.len() as u64);
        }
        std::fs::write(&p, &b).unwrap();
        (d, p, ends)
    }

    fn paths(ps: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        for p in ps {
            assert!(push_path(&mut b, p));
        }
        b
    }

    fn pt(seq: u64, offset: u64) -> JournalPoint {
        JournalPoint {
            epoch: 7,
            seq,
            offset,
        }
    }

    #[test]
    fn a_span_gives_the_paths_between_two_flushes() {
        let (_d, p, ends) = journal(&[
            (KIND_FLUSH, 1, vec![]),
            (KIND_PATHS, 2, paths(&["a.rs", "src/b.rs"])),
            (KIND_PATHS, 3, paths(&["a.rs"])),
            (KIND_FLUSH, 4, vec![]),
        ]);
        let s = read_span(&p, &pt(1, ends[0]), &pt(4, ends[3])).unwrap();
        assert_eq!(
            s.paths.into_iter().collect::<Vec<_>>(),
            vec!["a.rs".to_string(), "src/b.rs".into()]
        );
        // Nothing between two adjacent flushes.
        let (_d2, p2, e2) = journal(&[(KIND_FLUSH, 1, vec![]), (KIND_FLUSH, 2, vec![])]);
        assert!(read_span(&p2, &pt(1, e2[0]), &pt(2, e2[1]))
            .unwrap()
            .paths
            .is_empty());
    }

    #[test]
    fn a_rescan_frame_a_gap_a_damaged_frame_or_another_epoch_refuse_the_span() {
        let (_d, p, ends) = journal(&[
            (KIND_FLUSH, 1, vec![]),
            (KIND_RESCAN, 2, b"the queue overflowed".to_vec()),
            (KIND_FLUSH, 3, vec![]),
        ]);
        let e = read_span(&p, &pt(1, ends[0]), &pt(3, ends[2])).unwrap_err();
        assert!(e.contains("overflowed"), "{e}");

        let (_d, p, ends) = journal(&[(KIND_FLUSH, 1, vec![]), (KIND_FLUSH, 3, vec![])]);
        let e = read_span(&p, &pt(1, ends[0]), &pt(3, ends[1])).unwrap_err();
        assert!(e.contains("gap"), "{e}");

        let (_d, p, ends) = journal(&[
            (KIND_FLUSH, 1, vec![]),
            (KIND_PATHS, 2, paths(&["x"])),
            (KIND_FLUSH, 3, vec![]),
        ]);
        let mut b = std::fs::read(&p).unwrap();
        let i = ends[0] as usize + 14; // inside frame 2's payload
        b[i] ^= 0xff;
        std::fs::write(&p, &b).unwrap();
        let e = read_span(&p, &pt(1, ends[0]), &pt(3, ends[2])).unwrap_err();
        assert!(e.contains("checksum"), "{e}");

        let from = JournalPoint {
            epoch: 6,
            ..pt(1, ends[0])
        };
        let e = read_span(&p, &from, &pt(3, ends[2])).unwrap_err();
        assert!(e.contains("restarted"), "{e}");
    }

    #[test]
    fn a_flush_point_not_after_the_consumed_one_refuses_the_span() {
        // A stale or forged answer naming the point already consumed
        // would otherwise read as "nothing changed".
        let (_d, p, ends) = journal(&[(KIND_FLUSH, 1, vec![]), (KIND_FLUSH, 2, vec![])]);
        for to in [pt(1, ends[0]), pt(2, ends[0])] {
            let e = read_span(&p, &pt(1, ends[0]), &to).unwrap_err();
            assert!(e.contains("not before"), "{e}");
        }
    }

    #[test]
    fn a_journal_cut_before_the_flush_point_refuses_the_span() {
        let (_d, p, ends) = journal(&[(KIND_FLUSH, 1, vec![]), (KIND_PATHS, 2, paths(&["x"]))]);
        let e = read_span(&p, &pt(1, ends[0]), &pt(3, ends[1] + 30)).unwrap_err();
        assert!(e.contains("ends before"), "{e}");
    }

    #[test]
    fn header_and_consumed_round_trip_and_refuse_damage() {
        let h = encode_header(42, -5);
        assert_eq!(decode_header(&h).unwrap(), (42, -5));
        let mut bad = h.clone();
        bad[9] ^= 1;
        assert!(decode_header(&bad).is_err());
        let c = Consumed {
            point: pt(9, 99),
            root: BlobHash([3; 32]),
        };
        let b = encode_consumed(&c);
        assert_eq!(decode_consumed(&b), Some(c));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert_eq!(decode_consumed(&d), None, "byte {i}");
        }
        assert_eq!(decode_consumed(&b[..b.len() - 1]), None);
    }

    #[test]
    fn a_frame_longer_than_the_limit_is_refused_before_allocating() {
        let mut b = Vec::new();
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&[KIND_PATHS; 9]);
        let e = read_frame(&mut &b[..]).unwrap_err();
        assert!(e.contains("over the limit"), "{e}");
    }
}
