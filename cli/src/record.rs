//! `cairn record`: append canonical JSONL events as they arrive.
//!
//! Lines are appended one by one as they are read, so a live pipe from an
//! agent is recorded as it happens. Durability is per burst: when no further
//! complete line is already waiting in the input buffer, everything appended
//! so far is made durable with one fsync and only then acknowledged
//! (`--ack` prints the LSNs, `--echo` the records). Under a fast producer this is group commit for
//! a single stream; under a slow one, every line is durable on its own.
//!
//! `--ack` and `--echo` answer every input line but blank ones, in input
//! order, so a producer can pair answer n with its n-th line: a rejected
//! line's answer is `{"line":N,"error":"REASON"}`, printed after the
//! answers of the lines before it (the same line and reason as on stderr).
//!
//! A live pipe can last as long as the agent, and other commands need the
//! store's writer lock meanwhile (`checkpoint` and `track` between turns,
//! a second `record`). So once its input has been idle for
//! [`RELEASE_LOCK_AFTER_IDLE`] with everything acknowledged, `record`
//! closes the store, releasing the lock, and opens it again for the next
//! line, waiting for the lock as long as another writer holds it.
//!
//! A busy pipe (a line every 0.1 s) is never idle that long, so `record`
//! also takes turns ([`super::turns`]): when another CLI writer announces
//! that it waits for the lock, `record` acknowledges what it appended,
//! closes the store, lets the waiter in, and waits for the lock itself
//! before it appends its next line. Lines arriving meanwhile wait in the
//! pipe, in order; none is dropped.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::jsonl::read_bounded_line;
use cairn::jsonl::write_json_line;
use cairn::jsonl::{parse_event, MAX_JSON_LINE_BYTES};
use cairn::Durability;
use cairn::EventRef;
use cairn::{Lsn, Store};

use super::args::RecordArgs;
use super::turns::Watch;
use super::{Settings, EXIT_REJECTED};

/// How long the input of `record` must stay idle, with every record
/// acknowledged, before it releases the store's writer lock: long enough
/// that a steady stream (or a file) never pays for reopening the store,
/// short enough that a `cairn checkpoint` between an agent's turns does
/// not wait for the lock (it waits up to 3 s).
pub const RELEASE_LOCK_AFTER_IDLE: std::time::Duration = std::time::Duration::from_millis(200);

/// What `record` has done so far, for its `--json` summary.
#[derive(Default)]
struct Tally {
    first: Option<Lsn>,
    last: Option<Lsn>,
    count: u64,
    rejected: u64,
}

impl Tally {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "first_lsn": self.first.map(|l| l.0),
            "last_lsn": self.last.map(|l| l.0),
            "count": self.count,
            "rejected": self.rejected,
        })
    }
}

/// Runs `cairn record`. With `--json`, a failure that stops it (a store
/// that cannot be opened, an input that cannot be read) still prints the
/// summary object, with an `error` field, so a script always gets one.
pub fn run(settings: &Settings, args: RecordArgs) -> Result<ExitCode> {
    let json = args.json;
    let mut tally = Tally::default();
    let got = run_counting(settings, args, &mut tally);
    if let (Err(e), true) = (&got, json) {
        let mut v = tally.json();
        v["error"] = super::describe(e).into();
        outln!("{v}");
    }
    got
}

fn run_counting(settings: &Settings, args: RecordArgs, tally: &mut Tally) -> Result<ExitCode> {
    // Opened here, so a store that cannot be opened is reported before any
    // input is read; closed while the input is idle (see the module docs).
    let mut held = Held::open(settings, &args)?;
    print_notes(settings, &args, &held);
    let (input, name) = open_input(&args)?;
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut stdout = std::io::stdout().lock();
    // The answers not yet printed, in input order: a rejection waits
    // behind the records before it, which are answered once durable.
    let mut pending: Vec<Answer> = Vec::new();
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    loop {
        let line_buffered = reader.buffer().contains(&b'\n');
        held.let_go_if_due(line_buffered, &args, &mut pending, &mut stdout)?;
        let got = read_bounded_line(&mut reader, MAX_JSON_LINE_BYTES, &mut buf)
            .with_context(|| format!("read {name}"))?;
        let Some(got) = got else { break };
        line_no += 1;
        let Some(outcome) = parse_line(got, &buf) else {
            continue;
        };
        let outcome = match outcome {
            Err(reason) => Err(reason),
            Ok(event) => held.store()?.append(&event).map_err(|e| e.to_string()),
        };
        note_outcome(tally, &mut pending, &name, line_no, outcome);
        let more_waiting = reader.buffer().contains(&b'\n');
        if !more_waiting {
            held.acknowledge_burst(&args, &mut pending, &mut stdout)?;
        }
    }
    held.finish(&args, &mut pending, &mut stdout)?;
    print_summary(settings, &args, tally, &mut stdout)?;
    Ok(if tally.rejected > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The store as `record` holds it between lines: open, or closed while
/// the input is idle or another writer takes its turn, with what it
/// needs to open it again.
struct Held<'s> {
    settings: &'s Settings,
    /// The open store; `None` while `record` has let go of the lock.
    store: Option<Store>,
    /// Turn-taking with other writers; `None` for an in-memory store.
    turns: Option<Watch>,
    /// The durability asked for (`always` by default).
    policy: Durability,
    /// The durability the log is opened with.
    open_policy: Option<Durability>,
    /// Whether `record` syncs once per burst itself before acknowledging.
    burst_sync: bool,
    /// The input descriptor watched for idleness: only a pipe goes idle.
    idle_fd: Option<i32>,
}

impl<'s> Held<'s> {
    /// Opens the store for writing, waiting for the lock.
    fn open(settings: &'s Settings, args: &RecordArgs) -> Result<Self> {
        // With `always`, the log is opened without its own per-append fsync
        // and `record` syncs once per burst before acknowledging.
        let policy = settings.durability.unwrap_or(Durability::Always);
        let burst_sync = matches!(policy, Durability::Always);
        let open_policy = Some(if burst_sync {
            Durability::Never
        } else {
            policy
        });
        let store = settings.open_write_waiting(open_policy, true)?;
        // An in-memory store would be lost if closed, so it neither idles
        // out nor takes turns.
        let turns = (!settings.in_memory).then(|| Watch::new(store.root()));
        Ok(Held {
            settings,
            store: Some(store),
            turns,
            policy,
            open_policy,
            burst_sync,
            // Only a pipe goes idle.
            idle_fd: (args.file.is_none() && !settings.in_memory).then_some(0),
        })
    }

    /// The open store, opened again if `record` let go of it.
    fn store(&mut self) -> Result<&Store> {
        reopened(
            &mut self.store,
            &mut self.turns,
            self.settings,
            self.open_policy,
        )
    }

    /// Lets go of the lock if the input is idle or another writer waits,
    /// acknowledging everything appended first, and lets a waiter in.
    fn let_go_if_due(
        &mut self,
        line_buffered: bool,
        args: &RecordArgs,
        pending: &mut Vec<Answer>,
        stdout: &mut impl Write,
    ) -> Result<()> {
        let letting_go = match (&self.store, self.turns.as_mut()) {
            (Some(_), Some(t)) => let_go(t, self.idle_fd, line_buffered),
            _ => None,
        };
        let Some(why) = letting_go else {
            return Ok(());
        };
        if let Some(s) = self.store.take() {
            // Everything appended is acknowledged before the lock goes,
            // and, as always, only once it is durable.
            if has_records(pending) {
                if self.burst_sync {
                    s.sync().context("make records durable")?;
                }
                acknowledge(Some(&s), args, pending, stdout)?;
            }
            s.close().context(match why {
                LetGo::Idle => "close the store while the input is idle",
                LetGo::Wanted => "close the store for a waiting writer",
            })?;
        }
        if let (LetGo::Wanted, Some(t)) = (why, &self.turns) {
            t.let_in();
        }
        Ok(())
    }

    /// Answers the `pending` lines at the end of a burst: records once
    /// durable, rejections alone without opening the store.
    fn acknowledge_burst(
        &mut self,
        args: &RecordArgs,
        pending: &mut Vec<Answer>,
        stdout: &mut impl Write,
    ) -> Result<()> {
        if has_records(pending) {
            let burst_sync = self.burst_sync;
            let store = self.store()?;
            if burst_sync {
                store.sync().context("make records durable")?;
            }
            acknowledge(Some(store), args, pending, stdout)?;
        } else if !pending.is_empty() {
            // Only rejections: nothing to make durable, no store needed.
            acknowledge(None, args, pending, stdout)?;
        }
        Ok(())
    }

    /// At the end of the input: makes everything durable, answers what is
    /// left and closes the store.
    fn finish(
        self,
        args: &RecordArgs,
        pending: &mut Vec<Answer>,
        stdout: &mut impl Write,
    ) -> Result<()> {
        if let Some(store) = self.store {
            store.sync().context("make records durable")?;
            acknowledge(Some(&store), args, pending, stdout)?;
            store.close().context("close the store")?;
        } else {
            acknowledge(None, args, pending, stdout)?;
        }
        Ok(())
    }
}

/// The notes on stderr about what `--in-memory` and a durability weaker
/// than `always` mean for what is recorded.
fn print_notes(settings: &Settings, args: &RecordArgs, held: &Held<'_>) {
    if settings.in_memory && !args.echo && !settings.quiet {
        eprintln!(
            "note: --in-memory: what is recorded is gone when cairn exits; `record --echo` prints each record as canonical JSONL as it is recorded"
        );
    }
    if !held.burst_sync && !settings.quiet {
        eprintln!(
            "note: durability {}: a record is acknowledged once written, before it is on disk; a crash of the machine may lose the last ones (the default, always, loses none)",
            held.policy
        );
    }
}

/// The input `record` reads, `--file` or stdin, and its name in messages.
fn open_input(args: &RecordArgs) -> Result<(Box<dyn Read>, String)> {
    Ok(match &args.file {
        Some(p) => (
            Box::new(File::open(p).with_context(|| format!("open {}", p.display()))?),
            p.display().to_string(),
        ),
        None => (Box::new(std::io::stdin()), "stdin".to_string()),
    })
}

/// The event on one input line `buf`, or why it is rejected; `None` for a
/// blank line, which is no event. `got` is `Err(len)` for a line over
/// [`MAX_JSON_LINE_BYTES`].
fn parse_line(got: Result<(), usize>, buf: &[u8]) -> Option<Result<cairn::Event, String>> {
    Some(match got {
        Err(len) => Err(format!(
            "line is {len} bytes, over the limit of {MAX_JSON_LINE_BYTES}"
        )),
        Ok(()) => match std::str::from_utf8(buf) {
            Err(e) => Err(format!("not UTF-8: {e}")),
            Ok(text) if text.trim().is_empty() => return None,
            Ok(text) => parse_event(text).map_err(|e| e.to_string()),
        },
    })
}

/// Counts one line's outcome in `tally` and queues its answer; a
/// rejection is also reported on stderr as `NAME:LINE: rejected: REASON`.
fn note_outcome(
    tally: &mut Tally,
    pending: &mut Vec<Answer>,
    name: &str,
    line_no: u64,
    outcome: std::result::Result<Lsn, String>,
) {
    match outcome {
        Err(reason) => {
            tally.rejected += 1;
            eprintln!(
                "{name}:{line_no}: rejected: {}",
                super::output::escape_controls(&reason)
            );
            pending.push(Answer::Rejected {
                line: line_no,
                reason,
            });
        }
        Ok(lsn) => {
            tally.first.get_or_insert(lsn);
            tally.last = Some(lsn);
            tally.count += 1;
            pending.push(Answer::Recorded(lsn));
        }
    }
}

/// The closing summary: the `--json` object on stdout, or a line on
/// stderr unless `--quiet`.
fn print_summary(
    settings: &Settings,
    args: &RecordArgs,
    tally: &Tally,
    stdout: &mut impl Write,
) -> Result<()> {
    if args.json {
        writeln!(stdout, "{}", tally.json())?;
    } else if !settings.quiet {
        let (count, rejected) = (tally.count, tally.rejected);
        match (tally.first, tally.last) {
            (Some(f), Some(l)) if l.0 - f.0 + 1 == count => eprintln!(
                "recorded {} (LSN {f}..={l}), rejected {rejected}",
                super::output::count(count, "record")
            ),
            (Some(f), Some(l)) => eprintln!(
                "recorded {} (LSN {f} to {l}, between records of other writers), rejected {rejected}",
                super::output::count(count, "record")
            ),
            _ => eprintln!("recorded 0 records, rejected {rejected}"),
        }
    }
    Ok(())
}

/// The open store, opened again (waiting for the lock) if `record`
/// released it while its input was idle or for a waiting writer.
fn reopened<'s>(
    store: &'s mut Option<Store>,
    turns: &mut Option<Watch>,
    settings: &Settings,
    policy: Option<Durability>,
) -> Result<&'s Store> {
    if store.is_none() {
        *store = Some(settings.open_write_waiting(policy, true)?);
        if let Some(t) = turns {
            t.took_lock();
        }
    }
    store
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("internal error: the store is not open"))
}

/// Why `record`, holding the lock, lets go of it before its next line.
#[derive(Clone, Copy)]
enum LetGo {
    /// Its input has been idle for [`RELEASE_LOCK_AFTER_IDLE`].
    Idle,
    /// Another writer announced that it waits for the lock.
    Wanted,
}

/// Whether `record`, holding the lock, lets go of it now: when another
/// writer waits (looked for at most every [`super::turns::CHECK_WANTED_EVERY`], so a bulk
/// pipe pays nothing per line), or when its input, the pipe `idle_fd`
/// with no whole line already buffered, stays idle for
/// [`RELEASE_LOCK_AFTER_IDLE`]. While it waits for input it keeps looking
/// for a waiting writer, so one is let in within about
/// [`super::turns::CHECK_WANTED_EVERY`] however slowly the lines come.
fn let_go(turns: &mut Watch, idle_fd: Option<i32>, line_buffered: bool) -> Option<LetGo> {
    if turns.someone_waits() {
        return Some(LetGo::Wanted);
    }
    let fd = idle_fd.filter(|_| !line_buffered)?;
    let idle_at = std::time::Instant::now() + RELEASE_LOCK_AFTER_IDLE;
    loop {
        let left = idle_at.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Some(LetGo::Idle);
        }
        if readable_within(fd, left.min(turns.until_next_check())) {
            return None;
        }
        if turns.someone_waits() {
            return Some(LetGo::Wanted);
        }
    }
}

/// Whether input is ready on `fd` within `wait` (or the descriptor is
/// closed or in error, which the next read reports).
#[cfg(unix)]
fn readable_within(fd: i32, wait: std::time::Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up, so a wait under a millisecond is not a busy loop.
    let ms = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: poll on one valid, initialised pollfd; it writes only `revents`.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n != 0
}

/// Without `poll`, the input is never taken to be idle.
#[cfg(not(unix))]
fn readable_within(_fd: i32, _wait: std::time::Duration) -> bool {
    true
}

/// The answer `--ack` and `--echo` give one input line (a blank line is
/// no event and gets none).
enum Answer {
    /// The line was recorded as this LSN.
    Recorded(Lsn),
    /// The line was refused.
    Rejected {
        /// Its line number in the input, from 1 (blank lines count).
        line: u64,
        /// Why, as stderr says it.
        reason: String,
    },
}

/// Whether any of `answers` is a record, which must be durable before it
/// is answered.
fn has_records(answers: &[Answer]) -> bool {
    answers.iter().any(|a| matches!(a, Answer::Recorded(_)))
}

/// The line answering a rejected input line: a JSON object with the line
/// number and the reason, `{"line":3,"error":"..."}`, told apart from an
/// `--ack` LSN (a bare number) and from an `--echo` record (which always
/// has `lsn`) by its `error` field.
fn rejection_line(line: u64, reason: &str) -> String {
    // Written by hand so `line` comes first, as documented (a JSON map
    // would sort the keys); the reason is escaped as a JSON string.
    format!(
        "{{\"line\":{line},\"error\":{}}}",
        serde_json::Value::from(reason)
    )
}

/// Tells the caller about the `pending` answers, in input order, its
/// records now durable: an LSN with `--ack`, the record itself with
/// `--echo` (read back from the log, so exactly what `cairn log --json`
/// prints), and for a rejected line its [`rejection_line`]; then forgets
/// them. `store` may be `None` only when no answer is a record.
fn acknowledge(
    store: Option<&Store>,
    args: &RecordArgs,
    pending: &mut Vec<Answer>,
    out: &mut impl Write,
) -> Result<()> {
    if (args.ack || args.echo) && !pending.is_empty() {
        let mut buf = Vec::new();
        for answer in pending.iter() {
            match answer {
                Answer::Rejected { line, reason } => {
                    buf.extend_from_slice(rejection_line(*line, reason).as_bytes());
                    buf.push(b'\n');
                }
                Answer::Recorded(lsn) if args.ack => writeln!(buf, "{lsn}")?,
                Answer::Recorded(lsn) => {
                    let r = store
                        .ok_or_else(|| anyhow::anyhow!("internal error: the store is not open"))?
                        .record(*lsn)
                        .with_context(|| format!("read back record {lsn}"))?;
                    write_json_line(r.lsn, r.chain, &EventRef::of(&r.event), &mut buf)?;
                }
            }
        }
        out.write_all(&buf)?;
        out.flush()?;
    }
    pending.clear();
    Ok(())
}
