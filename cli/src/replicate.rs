//! `cairn replicate`, `cairn restore` and `cairn archive list`: the CLI
//! over [`cairn::replicate`].

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use cairn::replicate::{Archive, ReplicateError, Replicator, RoundReport};
use cairn::Timestamp;

use crate::args::{ArchiveCommand, ReplicateArgs, RestoreArgs};
use crate::Settings;

/// `cairn replicate --help`, after the flags.
pub const REPLICATE_HELP: &str = "Objects are immutable and named by the blake3 of their bytes; a manifest naming them is written last, so an archive never names an object it lacks. A run that is stopped or loses the server leaves nothing a reader would trust, and the next run sends nothing twice.\n\nS3 is configured from the standard AWS variables: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL (an S3-compatible server) and AWS_ALLOW_HTTP=true (one over plain HTTP). TLS by default.\n\nExample:\n  cairn replicate s3://backups/agents/laptop --once\n  cairn replicate file:///mnt/backup/myproject --max-lag-ms 500   # until Ctrl-C";

/// `cairn restore --help`, after the flags.
pub const RESTORE_HELP: &str = "Every object is checked against its name as it is read; the restored store's head is compared with the archive's and the store verified. `cairn rollback` to any of its checkpoints then rebuilds that workspace.\n\nExample:\n  cairn restore s3://backups/agents/laptop ~/src/myproject\n  cairn restore file:///mnt/backup/myproject /tmp/then --at c12";

/// Set by SIGINT and SIGTERM: a continuous run finishes its round and exits.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn open(url: &str) -> Result<Archive> {
    let a = Archive::open(url)?;
    // A test knob: fail every write after this many, as a lost server
    // would, to check that an interrupted run leaves a sound archive.
    if let Some(n) = std::env::var("CAIRN_TEST_FAIL_AFTER_PUTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        a.fail_after_puts(n);
    }
    Ok(a)
}

/// `cairn replicate URL [--once] [--max-lag-ms MS] [--prune]`.
pub fn replicate(settings: &Settings, a: ReplicateArgs) -> Result<ExitCode> {
    let found = crate::discover::find(settings.store.as_deref(), settings.workspace.as_deref())?;
    let archive = open(&a.url)?;
    let mut r =
        Replicator::new(archive, &found.store)?.workspace(found.workspace.display().to_string());
    if a.once {
        replicate_once(&mut r, &a)?;
    } else {
        replicate_until_stopped(&mut r, &a, settings.quiet, &found.store)?;
    }
    if a.prune {
        prune(r.archive(), a.json)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--once`: one round, its report printed even when it sent nothing.
fn replicate_once(r: &mut Replicator, a: &ReplicateArgs) -> Result<()> {
    let rep = r
        .round()
        .with_context(|| format!("replicate to {}", a.url))?;
    if a.json || rep.manifest.is_some() || rep.objects_uploaded > 0 {
        print_round(&rep, a.json, true)?;
    } else {
        outln!("up to date at LSN {}", rep.head_lsn);
    }
    Ok(())
}

/// Rounds at most `--max-lag-ms` apart until SIGINT or SIGTERM; a failed
/// round is reported once (until a different failure) and retried.
fn replicate_until_stopped(
    r: &mut Replicator,
    a: &ReplicateArgs,
    quiet: bool,
    store: &std::path::Path,
) -> Result<()> {
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    // Said once the signals are handled, so a Ctrl-C after it is clean.
    if !quiet {
        eprintln!(
            "replicating {} to {} (lag at most {} ms); Ctrl-C stops",
            store.display(),
            a.url,
            a.max_lag_ms
        );
    }
    let mut failure: Option<String> = None;
    let mut write_err: Option<anyhow::Error> = None;
    r.run(
        Duration::from_millis(a.max_lag_ms),
        &STOP,
        |res| match res {
            Ok(rep) => {
                if failure.take().is_some() {
                    eprintln!("note: replication resumed");
                }
                if let Err(e) = print_round(rep, a.json, false) {
                    write_err.get_or_insert(e);
                    STOP.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => {
                let text = e.to_string();
                if failure.as_deref() != Some(text.as_str()) {
                    eprintln!("warning: replication round failed, retrying: {text}");
                }
                failure = Some(text);
            }
        },
    );
    match write_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Prints what a round shipped; a round that sent nothing prints nothing
/// unless `always`.
fn print_round(rep: &RoundReport, json: bool, always: bool) -> Result<()> {
    if !always && rep.manifest.is_none() && rep.objects_uploaded == 0 {
        return Ok(());
    }
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "generation": rep.generation,
                "head_lsn": rep.head_lsn,
                "objects_uploaded": rep.objects_uploaded,
                "bytes_uploaded": rep.bytes_uploaded,
                "manifest": rep.manifest,
                "new_generation": rep.new_generation,
            })
        );
    } else {
        if let Some(why) = &rep.new_generation {
            eprintln!("note: new generation {} ({why})", rep.generation);
        }
        outln!(
            "shipped up to LSN {}: {} objects, {} bytes uploaded",
            rep.head_lsn,
            rep.objects_uploaded,
            rep.bytes_uploaded
        );
    }
    Ok(())
}

fn prune(archive: &Archive, json: bool) -> Result<()> {
    let p = cairn::replicate::prune(archive)?;
    if json {
        outln!(
            "{}",
            serde_json::json!({"pruned_manifests": p.manifests, "pruned_objects": p.objects})
        );
    } else {
        outln!(
            "pruned {} manifests and {} objects of older generations",
            p.manifests,
            p.objects
        );
    }
    Ok(())
}

/// `cairn restore URL DIR [--at POINT]`.
pub fn restore(a: RestoreArgs) -> Result<ExitCode> {
    let at =
        a.at.as_deref()
            .map(crate::hiargs::parse_point)
            .transpose()?;
    let archive = open(&a.url)?;
    let dir =
        std::path::absolute(&a.dir).with_context(|| format!("resolve {}", a.dir.display()))?;
    let rep = cairn::replicate::restore(&archive, &dir, at)
        .with_context(|| format!("restore {} into {}", a.url, dir.display()))?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "store": rep.store,
                "manifest": rep.manifest,
                "generation": rep.generation,
                "head_lsn": rep.head_lsn,
                "head_chain": rep.head_chain,
                "files": rep.files,
                "bytes": rep.bytes,
                "objects": rep.objects,
            })
        );
    } else {
        outln!(
            "restored {} at LSN {} (chain {}): {} files, {} bytes from {} objects; verified",
            rep.store.display(),
            rep.head_lsn,
            &rep.head_chain[..16],
            rep.files,
            rep.bytes,
            rep.objects
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn archive list URL`.
pub fn archive(c: ArchiveCommand) -> Result<ExitCode> {
    let ArchiveCommand::List { url, json } = c;
    let archive = open(&url)?;
    let list = cairn::replicate::list_archives(&archive)?;
    let base = url.trim_end_matches('/');
    for s in &list {
        let at = if s.prefix.is_empty() {
            base.to_string()
        } else {
            format!("{base}/{}", s.prefix)
        };
        let when = Timestamp::from_millis(s.last_upload_ms)
            .map(|t| t.to_iso())
            .unwrap_or_else(|_| s.last_upload_ms.to_string());
        if json {
            outln!(
                "{}",
                serde_json::json!({
                    "url": at,
                    "workspace": s.workspace,
                    "sessions": s.sessions,
                    "head_lsn": s.head_lsn,
                    "bytes": s.bytes,
                    "last_upload": when,
                    "generation": s.generation,
                })
            );
        } else {
            let sessions = s.sessions.map_or("?".to_string(), |n| n.to_string());
            outln!(
                "{at}\n  workspace {}  sessions {sessions}  head LSN {}  {} bytes  last upload {when}",
                s.workspace.as_deref().unwrap_or("?"),
                s.head_lsn,
                s.bytes
            );
        }
    }
    if list.is_empty() && !json {
        eprintln!("no archive under {url}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `e` says an archive object is damaged (exit 3, as corruption).
pub fn is_damaged_archive(e: &(dyn std::error::Error + 'static)) -> bool {
    let damaged = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<ReplicateError>(),
            Some(ReplicateError::Damaged { .. })
        )
    };
    // Read in place, a damaged piece reaches the engine as an I/O error
    // carrying the archive's error (whose `source` skips it).
    damaged(e)
        || e.downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| damaged(inner))
}

/// The environment variable naming the cache of `--store URL` reads
/// (default `$XDG_CACHE_HOME/cairn`, else `~/.cache/cairn`).
pub const CACHE_DIR_ENV: &str = "CAIRN_CACHE_DIR";
/// The environment variable bounding that cache, like `--cache-bytes`.
pub const CACHE_BYTES_ENV: &str = "CAIRN_CACHE_BYTES";

/// The archive URL `--store` (else `$CAIRN_STORE`) names, if it names one
/// (`s3://...`, `file://...`: anything with a scheme) rather than a
/// directory.
pub fn archive_url(store: Option<&std::path::Path>, in_memory: bool) -> Option<String> {
    let env = std::env::var_os("CAIRN_STORE").filter(|s| !s.is_empty() && !in_memory);
    let s = match store {
        Some(s) => s.as_os_str().to_owned(),
        None => env?,
    };
    let s = s.to_str()?;
    let (scheme, rest) = s.split_once("://")?;
    let plain = !scheme.is_empty() && scheme.bytes().all(|c| c.is_ascii_alphanumeric());
    (plain && !rest.is_empty()).then(|| s.to_string())
}

/// The cache bound for `--store URL`: `--cache-bytes`, else
/// `$CAIRN_CACHE_BYTES`, else the library's default.
pub fn cache_bytes(flag: Option<u64>) -> Result<u64> {
    if let Some(n) = flag {
        return Ok(n);
    }
    Ok(crate::bytes_from_env(CACHE_BYTES_ENV, 1_073_741_824)?
        .unwrap_or(cairn::replicate::DEFAULT_CACHE_BYTES))
}

/// Opens the store archived at `url` read-only, in place, its cache as
/// the settings say.
pub fn open_in_place(url: &str, cache_bytes: u64) -> Result<cairn::Store> {
    let mut opts = cairn::replicate::InPlaceOptions::default().cache_bytes(cache_bytes);
    if let Some(d) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        opts = opts.cache_dir(std::path::PathBuf::from(d));
    }
    cairn::replicate::open_read_only(url, &opts)
        .with_context(|| format!("open the archive {url} read-only"))
}

/// Why `command` cannot run on the archive `url` (`--store URL`), or
/// `None` when it can: the commands that only read the store run on it in
/// place; those that write the store or its workspace are refused, with
/// the way to a store that can be written.
pub fn refuse_on_archive(command: &crate::args::Command, url: &str) -> Option<String> {
    use crate::args::Command as C;
    let name = match command {
        C::Log(_)
        | C::Show { .. }
        | C::Tree { .. }
        | C::Diff { .. }
        | C::History { .. }
        | C::Blame { .. }
        | C::Export(_)
        | C::Verify(_)
        | C::Checkpoints { .. }
        | C::Stats { .. }
        | C::Branches { .. }
        | C::Report(_) => return None,
        // No store is opened: `--store` is not used.
        C::Hooks { .. } | C::Completions { .. } | C::Restore(_) | C::Archive(_) => return None,
        C::Init { .. } => "init",
        C::Record(_) => "record",
        C::Repair { .. } => "repair",
        C::Blob(_) => "blob",
        C::Track { .. } => "track",
        C::Checkpoint(_) => "checkpoint",
        C::Rollback(_) => "rollback",
        C::Gc(_) => "gc",
        C::Import { .. } => "import",
        C::Watch(_) => "watch",
        C::Demo(_) => "demo",
        C::Replicate(_) => "replicate",
    };
    Some(format!(
        "`cairn {name}` cannot run on the archive {url}: an archive is read-only; restore it first: cairn restore {url} DIR (the commands that read in place: log, show, tree, diff, history, blame, export, verify, checkpoints, stats, branches, report)"
    ))
}
