//! `cairn watch --daemon | --stop | --status`: the store's one watcher
//! process, whose journal of changed paths lets a checkpoint from any
//! process re-read only what changed (see
//! `cairn_snapshot::watch_journal` for the safety rule and
//! `cairn_snapshot::watch_daemon` for the process).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn::watcher::DaemonStatus;
#[cfg(unix)]
use cairn::watcher::{self, DaemonConfig};

use super::args::WatchArgs;
use super::output::Style;
use super::Settings;

/// How long `cairn watch --daemon` waits for the watcher to say it
/// watches (the recursive watch of a large tree takes a while) before it
/// reports a failure; and how long `--stop` waits for it to be gone.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// See [`START_TIMEOUT`].
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable that lowers the daemon's
/// `max_span_paths` (tests force a journal overflow with it).
pub const MAX_SPAN_PATHS_ENV: &str = "CAIRN_WATCH_MAX_SPAN_PATHS";

/// The environment variable that shortens the daemon's idle stop, in
/// milliseconds (tests see it stop without waiting an hour).
pub const IDLE_STOP_MS_ENV: &str = "CAIRN_WATCH_IDLE_STOP_MS";

/// The daemon's log in the cache directory: why it stopped, or failed to start.
const LOG_FILE: &str = "watch.log";

/// Where the watcher of the store `settings` names lives.
struct Place {
    store: PathBuf,
    workspace: PathBuf,
    cache_dir: PathBuf,
}

fn place(settings: &Settings) -> Result<Place> {
    if settings.in_memory {
        bail!("an in-memory store has no workspace to watch: `cairn watch` needs a store on disk");
    }
    let found = super::discover::find(settings.store.as_deref(), settings.workspace.as_deref())?;
    Ok(Place {
        cache_dir: found.store.join("snapshot"),
        store: found.store,
        workspace: found.workspace,
    })
}

fn status_json(s: Option<&DaemonStatus>) -> serde_json::Value {
    match s {
        Some(s) => serde_json::json!({
            "watching": true,
            "pid": s.pid,
            "root": s.root,
            "since": s.since,
        }),
        None => serde_json::json!({ "watching": false }),
    }
}

/// `cairn watch` (Unix only: elsewhere it says so).
#[cfg(not(unix))]
pub fn run(_settings: &Settings, _a: WatchArgs) -> Result<ExitCode> {
    bail!("`cairn watch` runs on Unix only; checkpoints here always scan in full")
}

/// `cairn watch`.
#[cfg(unix)]
pub fn run(settings: &Settings, a: WatchArgs) -> Result<ExitCode> {
    let p = place(settings)?;
    if a.foreground {
        return foreground(&p);
    }
    if a.stop {
        return stop(settings, &p, a.json);
    }
    if a.daemon {
        return start(settings, &p, a.json);
    }
    let s = watcher::status(&p.cache_dir);
    if a.json {
        outln!("{}", status_json(s.as_ref()));
    } else {
        match &s {
            Some(s) => outln!(
                "watching {} since {} (pid {})",
                s.root.display(),
                s.since,
                s.pid
            ),
            None => outln!(
                "not watching {} (`cairn watch --daemon` starts a watcher)",
                p.workspace.display()
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(unix)]
fn start(settings: &Settings, p: &Place, json: bool) -> Result<ExitCode> {
    let st = Style::stdout();
    if let Some(s) = watcher::status(&p.cache_dir) {
        if json {
            outln!("{}", status_json(Some(&s)));
        } else if !settings.quiet {
            outln!(
                "already watching {} since {} (pid {})",
                s.root.display(),
                s.since,
                s.pid
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let child = spawn_watcher(p)?;
    let s = watcher::status(&p.cache_dir);
    if json {
        outln!("{}", status_json(s.as_ref()));
    } else if !settings.quiet {
        outln!(
            "{} {} (pid {}); checkpoints now re-read only what changed",
            st.green("watching"),
            p.workspace.display(),
            s.map_or(child.id(), |s| s.pid)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts `cairn watch --foreground` for `p` in its own session, its
/// stderr appended to the watch log, and waits (at most
/// [`START_TIMEOUT`]) for it to say `ready`; one that does not is killed
/// and the last line of its log reported.
#[cfg(unix)]
fn spawn_watcher(p: &Place) -> Result<std::process::Child> {
    std::fs::create_dir_all(&p.cache_dir)
        .with_context(|| format!("create {}", p.cache_dir.display()))?;
    let exe = std::env::current_exe().context("find the cairn executable")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p.cache_dir.join(LOG_FILE))
        .with_context(|| format!("open {}", p.cache_dir.join(LOG_FILE).display()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--store")
        .arg(&p.store)
        .arg("--workspace")
        .arg(&p.workspace)
        .args(["watch", "--foreground"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // Its own session: a terminal closing or a Ctrl-C in the shell that
    // started it does not stop it.
    in_own_session(&mut cmd);
    let mut child = cmd.spawn().context("start the watcher process")?;
    let out = child.stdout.take().context("the watcher's output")?;
    // The child says `ready` once it watches, or ends (its error is in the log).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
    if line.trim_end() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(p.cache_dir.join(LOG_FILE)).unwrap_or_default();
        let last = log.lines().last().unwrap_or("no reason given");
        bail!(
            "the watcher for {} did not start: {last} (see {})",
            p.workspace.display(),
            p.cache_dir.join(LOG_FILE).display()
        );
    }
    Ok(child)
}

#[cfg(unix)]
fn stop(settings: &Settings, p: &Place, json: bool) -> Result<ExitCode> {
    let was = watcher::status(&p.cache_dir);
    if was.is_some() {
        let _ = watcher::request(&p.cache_dir, "stop");
        let deadline = Instant::now() + STOP_TIMEOUT;
        while watcher::is_locked(&p.cache_dir) {
            if Instant::now() >= deadline {
                bail!(
                    "the watcher for {} was asked to stop but still runs after {}s",
                    p.workspace.display(),
                    STOP_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if json {
        outln!(
            "{}",
            serde_json::json!({ "stopped": was.is_some(), "watching": false })
        );
    } else if !settings.quiet {
        match was {
            Some(s) => outln!("stopped watching {} (pid {})", s.root.display(), s.pid),
            None => outln!(
                "not watching {} (`cairn watch --daemon` starts a watcher)",
                p.workspace.display()
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The watcher process itself (`cairn watch --foreground`, which
/// `--daemon` starts): says `ready` on stdout once it watches, then runs
/// until it stops; why it stopped goes to stderr (the log).
#[cfg(unix)]
fn foreground(p: &Place) -> Result<ExitCode> {
    let mut cfg = DaemonConfig::new(&p.workspace, &p.cache_dir, &p.store);
    if let Some(n) = std::env::var(MAX_SPAN_PATHS_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        cfg.max_span_paths = n;
    }
    if let Some(ms) = std::env::var(IDLE_STOP_MS_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        cfg.idle_stop = Duration::from_millis(ms);
    }
    let started = watcher::run(cfg, |s| {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "ready");
        let _ = o.flush();
        eprintln!("{}: watching {} (pid {})", s.since, s.root.display(), s.pid);
    });
    match started {
        Ok(why) => {
            eprintln!("{}: stopped ({why})", cairn::Timestamp::now().to_iso());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}: {e}", cairn::Timestamp::now().to_iso());
            Err(e.into())
        }
    }
}

/// Makes the process `cmd` starts a session leader, so that whatever
/// ends its starter's session or process group (a closed terminal, a
/// Ctrl-C, a hook runner cleaning up) does not end it.
#[cfg(unix)]
pub fn in_own_session(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory of this
    // process; it only makes the child a session leader.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}
