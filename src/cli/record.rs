//! `cairn record`: append canonical JSONL events as they arrive.
//!
//! Lines are appended one by one as they are read, so a live pipe from an
//! agent is recorded as it happens. Durability is per burst: when no further
//! complete line is already waiting in the input buffer, everything appended
//! so far is made durable with one fsync and only then acknowledged
//! (`--ack` prints the LSNs, `--echo` the records). Under a fast producer this is group commit for
//! a single stream; under a slow one, every line is durable on its own.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::codec::json::{parse_event, MAX_JSON_LINE_BYTES};
use cairn::codec::json_line::write_json_line;
use cairn::codec::EventRef;
use cairn::engine::log::Durability;
use cairn::query::import::read_bounded_line;
use cairn::{Lsn, Store};

use super::args::RecordArgs;
use super::{Settings, EXIT_REJECTED};

/// Runs `cairn record`.
pub fn run(settings: &Settings, args: RecordArgs) -> Result<ExitCode> {
    // With `always`, the log is opened without its own per-append fsync and
    // this loop syncs once per burst before acknowledging.
    let policy = settings.durability.unwrap_or(Durability::Always);
    let burst_sync = matches!(policy, Durability::Always);
    let store = settings.open_write_with(Some(if burst_sync {
        Durability::Never
    } else {
        policy
    }))?;
    if settings.in_memory && !args.echo && !settings.quiet {
        eprintln!(
            "note: --in-memory: what is recorded is gone when cairn exits; `record --echo` prints each record as canonical JSONL as it is recorded"
        );
    }
    if !burst_sync && !settings.quiet {
        eprintln!(
            "note: durability {policy}: a record is acknowledged once written, before it is on disk; a crash of the machine may lose the last ones (the default, always, loses none)"
        );
    }
    let (input, name): (Box<dyn Read>, String) = match &args.file {
        Some(p) => (
            Box::new(File::open(p).with_context(|| format!("open {}", p.display()))?),
            p.display().to_string(),
        ),
        None => (Box::new(std::io::stdin()), "stdin".to_string()),
    };
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut stdout = std::io::stdout().lock();
    let (mut first, mut last, mut count, mut rejected) = (None::<Lsn>, None::<Lsn>, 0u64, 0u64);
    let mut pending: Vec<Lsn> = Vec::new();
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    loop {
        let got = read_bounded_line(&mut reader, MAX_JSON_LINE_BYTES, &mut buf)
            .with_context(|| format!("read {name}"))?;
        let Some(got) = got else { break };
        line_no += 1;
        let outcome = match got {
            Err(len) => Err(format!(
                "line is {len} bytes, over the limit of {MAX_JSON_LINE_BYTES}"
            )),
            Ok(()) => match std::str::from_utf8(&buf) {
                Err(e) => Err(format!("not UTF-8: {e}")),
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => parse_event(text).map_err(|e| e.to_string()),
            },
        };
        match outcome {
            Err(reason) => {
                rejected += 1;
                eprintln!("{name}:{line_no}: rejected: {reason}");
            }
            Ok(event) => match store.append(&event) {
                Ok(lsn) => {
                    first.get_or_insert(lsn);
                    last = Some(lsn);
                    count += 1;
                    pending.push(lsn);
                }
                Err(e) => {
                    rejected += 1;
                    eprintln!("{name}:{line_no}: rejected: {e}");
                }
            },
        }
        let more_waiting = reader.buffer().contains(&b'\n');
        if !more_waiting && !pending.is_empty() {
            if burst_sync {
                store.sync().context("make records durable")?;
            }
            acknowledge(&store, &args, &mut pending, &mut stdout)?;
        }
    }
    store.sync().context("make records durable")?;
    acknowledge(&store, &args, &mut pending, &mut stdout)?;
    if args.json {
        let v = serde_json::json!({
            "first_lsn": first.map(|l| l.0),
            "last_lsn": last.map(|l| l.0),
            "count": count,
            "rejected": rejected,
        });
        writeln!(stdout, "{v}")?;
    } else if !settings.quiet {
        match (first, last) {
            (Some(f), Some(l)) => eprintln!(
                "recorded {} (LSN {f}..={l}), rejected {rejected}",
                super::output::count(count, "record")
            ),
            _ => eprintln!("recorded 0 records, rejected {rejected}"),
        }
    }
    store.close()?;
    Ok(if rejected > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Tells the caller about the `pending` records, now durable: their LSNs
/// with `--ack`, the records themselves with `--echo` (read back from the
/// log, so exactly what `cairn log --json` prints); then forgets them.
fn acknowledge(
    store: &Store,
    args: &RecordArgs,
    pending: &mut Vec<Lsn>,
    out: &mut impl Write,
) -> Result<()> {
    if args.ack {
        for lsn in pending.iter() {
            writeln!(out, "{lsn}")?;
        }
        out.flush()?;
    } else if args.echo && !pending.is_empty() {
        let mut buf = Vec::new();
        for lsn in pending.iter() {
            let r = store
                .record(*lsn)
                .with_context(|| format!("read back record {lsn}"))?;
            write_json_line(r.lsn, r.chain, &EventRef::of(&r.event), &mut buf)?;
        }
        out.write_all(&buf)?;
        out.flush()?;
    }
    pending.clear();
    Ok(())
}
