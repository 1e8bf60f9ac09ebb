//! `cairn hooks claude-code` (record one hook payload) and `cairn hooks
//! install|uninstall claude-code` (add or remove those hooks in Claude
//! Code's settings).
//!
//! A hook runs inside the agent's loop: whatever goes wrong, it exits 0
//! and says one line on stderr, so a broken store never stops the agent.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cairn::import::claude_code::{before_prompt_label, relative, tool_file_event};
use cairn::Filter;
use cairn::Store;
use cairn::{Event, EventKind};
use clap::Subcommand;
use serde_json::{json, Map, Value};

/// Claude Code hooks: record one hook payload (`hooks claude-code`), or
/// add or remove cairn's hooks in Claude Code's settings.
#[derive(Debug, Subcommand)]
pub enum HooksAction {
    /// Record one Claude Code hook payload read from stdin, in the store of
    /// its `cwd` (created on first use). What the installed hooks run.
    #[command(name = "claude-code")]
    ClaudeCode,
    /// Add cairn's hooks to Claude Code's settings (keeping every other
    /// setting and hook; running it twice changes nothing).
    Install {
        /// The agent: claude-code.
        #[arg(value_parser = ["claude-code"])]
        agent: String,
        /// project: .claude/settings.json; local: .claude/settings.local.json;
        /// user: ~/.claude/settings.json.
        #[arg(long, default_value = "project", value_parser = ["project", "local", "user"])]
        scope: String,
    },
    /// Remove exactly the hooks `install` added.
    Uninstall {
        /// The agent: claude-code.
        #[arg(value_parser = ["claude-code"])]
        agent: String,
        /// As for install.
        #[arg(long, default_value = "project", value_parser = ["project", "local", "user"])]
        scope: String,
    },
}

/// The most bytes of a hook payload: a Write's payload holds the whole
/// file twice (input and response).
const MAX_HOOK_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// How long a hook waits for another writer (a hook of a parallel tool
/// call, a `cairn checkpoint`) to let go of the store, before it gives up
/// saying so: a hook must not hold up the agent.
const HOOK_LOCK_WAIT_MS: u64 = 2_000;

/// The tools whose calls write a file the payload names.
const FILE_TOOLS: [&str; 4] = ["Edit", "Write", "MultiEdit", "NotebookEdit"];

/// `cairn hooks ...`.
pub fn run(action: HooksAction) -> Result<ExitCode> {
    match action {
        HooksAction::ClaudeCode => {
            if let Err(e) = record_stdin() {
                eprintln!("cairn hooks claude-code: {}", one_line(&format!("{e:#}")));
            }
            Ok(ExitCode::SUCCESS)
        }
        HooksAction::Install { scope, .. } => install(&scope, true),
        HooksAction::Uninstall { scope, .. } => install(&scope, false),
    }
}

/// `s` on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads one payload from stdin and records it.
fn record_stdin() -> Result<()> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_HOOK_PAYLOAD_BYTES + 1)
        .read_to_string(&mut text)
        .context("read the payload from stdin")?;
    if text.len() as u64 > MAX_HOOK_PAYLOAD_BYTES {
        bail!("the payload is over {MAX_HOOK_PAYLOAD_BYTES} bytes; nothing recorded");
    }
    let p: Value = serde_json::from_str(&text).context("the payload is not JSON")?;
    let field = |k: &str| {
        p.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("the payload has no `{k}`"))
    };
    let cwd = field("cwd")?;
    let sid = field("session_id")?;
    let hook = field("hook_event_name")?;
    let store = open_waiting(Path::new(cwd))?;
    let got = record(&store, &p, cwd, sid, hook);
    if let Err(e) = &got {
        // Recorded where it can be: the store is open.
        let mut ev = Event::new(EventKind::Custom, sid);
        ev.label = Some("hook.failed".into());
        ev.ok = false;
        ev.text = Some(format!("{hook}: {e:#}"));
        let _ = store.append(&ev);
    }
    store.close()?;
    if matches!(hook, "SessionStart" | "UserPromptSubmit") {
        ensure_watcher(Path::new(cwd));
    }
    got
}

/// The environment variable that keeps the hooks from starting a watcher
/// (`0`, `off`, `no` or `false`).
pub const HOOKS_WATCH_ENV: &str = "CAIRN_HOOKS_WATCH";

/// Starts `cairn watch --daemon` for the store of `cwd` if none runs, and
/// returns without waiting for it: the checkpoints the hooks take at each
/// prompt and after each Bash call then re-read only what changed. A
/// session's first prompt and one after the watcher stopped itself (an
/// hour without a checkpoint) start it again. A failure to start is in
/// the watcher's log (`.cairn/snapshot/watch.log`); the hook itself never
/// fails for it.
#[cfg(unix)]
fn ensure_watcher(cwd: &Path) {
    use std::process::{Command, Stdio};
    let off = std::env::var(HOOKS_WATCH_ENV).is_ok_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "0" | "off" | "no" | "false"
        )
    });
    let store = cwd.join(cairn::store_dir::STORE_DIR_NAME);
    if off || cairn::watcher::status(&store.join("snapshot")).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut cmd = Command::new(exe);
    cmd.arg("--store")
        .arg(&store)
        .arg("--workspace")
        .arg(cwd)
        .args(["--quiet", "watch", "--daemon"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // The starter outlives the hook (Claude Code may end the hook's
    // process group once it returns).
    super::watch::in_own_session(&mut cmd);
    // Reaped by init once this process exits; not waited for.
    let _ = cmd.spawn();
}

/// Elsewhere checkpoints always scan in full: there is no watcher to start.
#[cfg(not(unix))]
fn ensure_watcher(_cwd: &Path) {}

/// The store of `cwd`, waiting up to [`HOOK_LOCK_WAIT_MS`] for another
/// writer to let go of it.
fn open_waiting(cwd: &Path) -> Result<Store> {
    let start = Instant::now();
    loop {
        match Store::open(cwd) {
            Ok(s) => return Ok(s),
            Err(cairn::Error::Engine(cairn::EngineError::Locked { .. }))
                if start.elapsed() < Duration::from_millis(HOOK_LOCK_WAIT_MS) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("open the store of {}", cwd.display()))
            }
        }
    }
}

/// How many prompts session `sid` has recorded.
fn prompts(store: &Store, sid: &str) -> Result<usize> {
    let f = Filter {
        session: Some(sid.to_string()),
        kind: Some(EventKind::Prompt),
        ..Filter::all()
    };
    Ok(store.query(|q| q.list(&f))?.len())
}

/// Records one payload (see the module docs of `docs/CLI.md`, "Hooks").
fn record(store: &Store, p: &Value, cwd: &str, sid: &str, hook: &str) -> Result<()> {
    let s = store.session(sid);
    let pl = Payload::of(p, cwd, hook);
    let tool = pl.tool;
    match hook {
        "SessionStart" => {
            let mut e = s.event(EventKind::Custom).with_text("session start");
            e.label = Some("session.start".into());
            if let Some(t) = p.get("transcript_path").and_then(Value::as_str) {
                e = e.with_meta("transcript_path", t);
            }
            s.record(&pl.meta(e))?;
        }
        "UserPromptSubmit" => {
            let n = prompts(store, sid)? + 1;
            s.checkpoint(&before_prompt_label(n as u64))?;
            let text = p.get("prompt").and_then(Value::as_str).unwrap_or("");
            s.record(&pl.meta(s.event(EventKind::Prompt).with_text(text)))?;
        }
        "PreToolUse" if FILE_TOOLS.contains(&tool) => {
            if let Some(path) = pl.tool_path() {
                if cairn::paths::outside_workspace(&path).is_none() {
                    s.track(&path)?;
                }
            }
        }
        "PostToolUse" if FILE_TOOLS.contains(&tool) => record_file_tool(store, &s, &pl)?,
        "PostToolUse" if tool == "Bash" => {
            let mut e = s.event(EventKind::ToolCall);
            e.tool = Some("Bash".into());
            if let Some(c) = pl.input.get("command").and_then(Value::as_str) {
                e = e.with_meta("command", c);
            }
            s.record(&pl.meta(e))?;
            s.checkpoint("After Bash")?;
        }
        "Stop" => {
            let n = prompts(store, sid)?;
            s.checkpoint(&format!("After turn {n}"))?;
        }
        _ => {}
    }
    Ok(())
}

/// One hook payload, with what every record made of it needs.
struct Payload<'p> {
    /// The payload as the hook gave it.
    p: &'p Value,
    /// The workspace directory the hook ran in.
    cwd: &'p str,
    /// The hook's event name (`PostToolUse`, ...).
    hook: &'p str,
    /// The tool's name, empty for a hook about no tool.
    tool: &'p str,
    /// The tool's input, `null` for a hook about no tool.
    input: Value,
}

impl<'p> Payload<'p> {
    fn of(p: &'p Value, cwd: &'p str, hook: &'p str) -> Self {
        Payload {
            p,
            cwd,
            hook,
            tool: p.get("tool_name").and_then(Value::as_str).unwrap_or(""),
            input: p.get("tool_input").cloned().unwrap_or(Value::Null),
        }
    }

    /// The file the tool works on, relative to the workspace.
    fn tool_path(&self) -> Option<String> {
        self.input
            .get("file_path")
            .or_else(|| self.input.get("notebook_path"))
            .and_then(Value::as_str)
            .map(|f| relative(f, Some(self.cwd)))
    }

    /// `e` with the hook's name and the tool use's id in its meta.
    fn meta(&self, e: Event) -> Event {
        let mut e = e;
        if let Some(id) = self.p.get("tool_use_id").and_then(Value::as_str) {
            e = e.with_meta("tool_use_id", id);
        }
        e.with_meta("hook", self.hook)
    }
}

/// Records what a file tool wrote, with its contents when the response
/// holds them; a result that disagrees with its structuredPatch is
/// recorded without the new contents and reported as an error.
fn record_file_tool(store: &Store, s: &cairn::Session<'_>, pl: &Payload<'_>) -> Result<()> {
    let tool = pl.tool;
    let response = pl.p.get("tool_response").cloned().unwrap_or(Value::Null);
    let mut put = |b: &[u8]| store.put_blob(b);
    let (e, disagree) = tool_file_event(tool, &pl.input, &response, Some(pl.cwd), &mut put)?;
    let mut e = match e {
        Some(e) => e,
        // No contents in the response: the path, written.
        None => {
            let mut e = s.event(EventKind::FileWrite);
            e.path = pl.tool_path();
            e.tool = Some(tool.to_string());
            e.with_meta("contents", "not in the hook's payload")
        }
    };
    e.session = s.id().to_string();
    e.ts = cairn::Timestamp::now();
    if e.path.is_some() {
        s.record(&pl.meta(e))?;
    }
    if !disagree.is_empty() {
        bail!("{tool}: the result disagrees with its structuredPatch; recorded without the new contents");
    }
    Ok(())
}

/// The command the installed hooks run.
fn hook_command() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .filter(|p| !p.contains(['\'', '"', ' ', '\\', '$', '`']))
        .unwrap_or_else(|| "cairn".into());
    format!("{exe} hooks claude-code")
}

/// The hook events cairn installs, with the matcher of each (tool names).
const HOOK_EVENTS: [(&str, Option<&str>); 5] = [
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", Some("Edit|Write|MultiEdit|NotebookEdit")),
    (
        "PostToolUse",
        Some("Edit|Write|MultiEdit|NotebookEdit|Bash"),
    ),
    ("Stop", None),
];

/// The settings file of `scope`.
fn settings_file(scope: &str) -> Result<PathBuf> {
    Ok(match scope {
        "project" => std::env::current_dir()?.join(".claude/settings.json"),
        "local" => std::env::current_dir()?.join(".claude/settings.local.json"),
        _ => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?)
            .join(".claude/settings.json"),
    })
}

/// `cairn hooks install|uninstall claude-code --scope SCOPE`.
fn install(scope: &str, add: bool) -> Result<ExitCode> {
    let file = settings_file(scope)?;
    let mut settings: Map<String, Value> = match std::fs::read_to_string(&file) {
        Ok(t) if t.trim().is_empty() => Map::new(),
        Ok(t) => match serde_json::from_str(&t) {
            Ok(Value::Object(o)) => o,
            Ok(_) => bail!(
                "{}: the settings are not a JSON object; not changed",
                file.display()
            ),
            Err(e) => bail!("{}: not JSON ({e}); not changed", file.display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", file.display())),
    };
    let before = settings.clone();
    let cmd = hook_command();
    if add {
        add_hooks(&mut settings, &cmd)?;
    } else {
        remove_hooks(&mut settings);
    }
    if settings == before {
        eprintln!(
            "{}: {}",
            file.display(),
            if add {
                "cairn's hooks are installed already; nothing changed"
            } else {
                "no cairn hooks; nothing changed"
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&Value::Object(settings))? + "\n";
    // Whole or not at all, durably, and with the mode the user gave it
    // (a new file: readable by all, as an editor would make it, not the
    // private mode of the store's own files).
    let mode = std::fs::metadata(&file).map_or_else(
        |_| std::os::unix::fs::PermissionsExt::from_mode(0o644),
        |m| m.permissions(),
    );
    let opts = cairn::store_dir::AtomicOptions {
        durable: true,
        permissions: Some(mode),
    };
    cairn::store_dir::write_atomic(&cairn::store_dir::RealVfs, &file, text.as_bytes(), &opts)
        .with_context(|| format!("write {}", file.display()))?;
    eprintln!(
        "{}: cairn's hooks {} ({})",
        file.display(),
        if add { "added" } else { "removed" },
        HOOK_EVENTS.map(|(e, _)| e).join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// True if `h` is a hook cairn's install added (its command runs
/// `hooks claude-code` of a `cairn` binary).
fn is_ours(h: &Value) -> bool {
    h.get("command").and_then(Value::as_str).is_some_and(|c| {
        c.strip_suffix(" hooks claude-code")
            .is_some_and(|exe| Path::new(exe).file_name().is_some_and(|n| n == "cairn"))
    })
}

/// Adds cairn's hook to each event that lacks it.
fn add_hooks(settings: &mut Map<String, Value>, cmd: &str) -> Result<()> {
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        bail!("the settings' `hooks` is not an object; not changed");
    };
    for (event, matcher) in HOOK_EVENTS {
        let groups = hooks.entry(event).or_insert_with(|| json!([]));
        let Some(groups) = groups.as_array_mut() else {
            bail!("the settings' `hooks.{event}` is not a list; not changed");
        };
        let have = groups.iter().any(|g| {
            g.get("hooks")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(is_ours))
        });
        if !have {
            let mut g = json!({"hooks": [{"type": "command", "command": cmd}]});
            if let Some(m) = matcher {
                g["matcher"] = json!(m);
            }
            groups.push(g);
        }
    }
    Ok(())
}

/// Removes cairn's hooks, and the groups, event lists and `hooks` object
/// they leave empty.
fn remove_hooks(settings: &mut Map<String, Value>) {
    let Some(Value::Object(hooks)) = settings.get_mut("hooks") else {
        return;
    };
    for groups in hooks.values_mut() {
        let Some(groups) = groups.as_array_mut() else {
            continue;
        };
        groups.retain_mut(|g| {
            let Some(a) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
                return true;
            };
            let had = a.len();
            a.retain(|h| !is_ours(h));
            !(a.is_empty() && had > 0)
        });
    }
    hooks.retain(|_, g| !g.as_array().is_some_and(Vec::is_empty));
    if hooks.is_empty() {
        settings.remove("hooks");
    }
}
