//! `cairn hooks claude-code` fed payload sequences through the binary, as
//! Claude Code runs it, with a `sed -i` between two edits; and `cairn hooks
//! install|uninstall claude-code` on a settings file with the user's own.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::ok;
use serde_json::{json, Value};

/// Runs `cairn ARGS` in `dir` with `stdin` as its input.
fn cairn(dir: &Path, args: &[&str], stdin: &str) -> Output {
    common::cairn_stdin(dir, args, Some(stdin))
}

/// Runs the hook with `payload` (in the session `s`, cwd `ws`): it must
/// exit 0 and say nothing.
fn hook(ws: &Path, mut payload: Value) {
    payload["session_id"] = json!("s");
    payload["cwd"] = json!(ws.to_str().unwrap());
    payload["transcript_path"] = json!("/tmp/t.jsonl");
    let o = cairn(ws, &["hooks", "claude-code"], &payload.to_string());
    ok(&o);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An Edit of `a.txt` from `old` to `new`, as the agent makes it: the
/// hooks before and after, the file changed on disk between.
fn edit(ws: &Path, id: &str, old: &str, new: &str) {
    let file = ws.join("a.txt");
    let input = json!({"file_path": file, "old_string": old, "new_string": new});
    hook(
        ws,
        json!({"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": input, "tool_use_id": id}),
    );
    let before = std::fs::read_to_string(&file).unwrap();
    let after = before.replacen(old, new, 1);
    std::fs::write(&file, &after).unwrap();
    let response = json!({"filePath": file, "oldString": old, "newString": new, "originalFile": before, "replaceAll": false, "structuredPatch": [{"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1, "lines": [format!("-{}", before.trim_end()), format!("+{}", after.trim_end())]}]});
    hook(
        ws,
        json!({"hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_input": input, "tool_response": response, "tool_use_id": id}),
    );
}

#[test]
fn rollback_to_every_before_prompt_is_byte_exact_with_shell_edits() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::write(ws.join("a.txt"), "v0\n").unwrap();
    std::fs::write(ws.join("b.txt"), "b0\n").unwrap();
    hook(
        ws,
        json!({"hook_event_name": "SessionStart", "source": "startup"}),
    );
    let mut want = Vec::new();
    for (n, (old, new)) in [("v0", "v1"), ("v1-sed", "v2")].into_iter().enumerate() {
        want.push((
            std::fs::read(ws.join("a.txt")).unwrap(),
            std::fs::read(ws.join("b.txt")).unwrap(),
        ));
        hook(
            ws,
            json!({"hook_event_name": "UserPromptSubmit", "prompt": format!("prompt {}", n + 1)}),
        );
        edit(ws, &format!("t{n}"), old, new);
        // A shell edit between two edits, which no record names.
        let sed = Command::new("sed")
            .args(["-i", "s/v1$/v1-sed/; s/b0/b-sed/", "a.txt", "b.txt"])
            .current_dir(ws)
            .status()
            .unwrap();
        assert!(sed.success());
        hook(
            ws,
            json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "sed -i ..."}, "tool_response": {"stdout": ""}, "tool_use_id": format!("b{n}")}),
        );
        hook(ws, json!({"hook_event_name": "Stop"}));
    }
    let cps: Vec<Value> = ok(&cairn(ws, &["checkpoints", "--json"], ""))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let labels: Vec<&str> = cps.iter().filter_map(|c| c["label"].as_str()).collect();
    for l in [
        "Before prompt 1",
        "Before prompt 2",
        "After turn 1",
        "After turn 2",
    ] {
        assert!(labels.contains(&l), "{l}: {labels:?}");
    }
    // The edits are recorded with exact contents.
    let h: Vec<Value> = ok(&cairn(ws, &["history", "a.txt", "--json"], ""))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let edits: Vec<&Value> = h.iter().filter(|r| r["kind"] == "file.edit").collect();
    assert_eq!(edits.len(), 2);
    let at = format!("@{}:a.txt", edits[1]["lsn"]);
    assert_eq!(ok(&cairn(ws, &["show", &at], "")), "v2\n");
    // The session's transcript imported later adds the conversation, not
    // a second copy of the edits the hooks recorded (same tool_use_id).
    let file = ws.join("a.txt");
    let base = json!({"sessionId": "s", "cwd": ws, "timestamp": "2026-02-12T14:00:00.000Z"});
    let line = |extra: Value| {
        let mut o = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            o[k] = v.clone();
        }
        o.to_string()
    };
    let transcript = [
        line(json!({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "prompt 1"}})),
        line(json!({"type": "assistant", "uuid": "a1", "parentUuid": "u1", "message": {"id": "m1", "model": "m", "content": [{"type": "tool_use", "id": "t0", "name": "Edit", "input": {"file_path": file}}]}})),
        line(json!({"type": "user", "uuid": "r1", "parentUuid": "a1", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "ok"}]}, "toolUseResult": {"filePath": file, "oldString": "v0", "newString": "v1", "originalFile": "v0\n", "replaceAll": false, "structuredPatch": []}})),
        line(json!({"type": "user", "uuid": "u2", "parentUuid": "r1", "message": {"role": "user", "content": "prompt 2"}})),
    ]
    .join("\n");
    let t = tmp.path().join("t.jsonl");
    std::fs::write(&t, transcript + "\n").unwrap();
    ok(&cairn(
        ws,
        &["import", "--format", "claude-code", t.to_str().unwrap()],
        "",
    ));
    let again: Vec<Value> = ok(&cairn(ws, &["history", "a.txt", "--json"], ""))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = again.iter().filter(|r| r["kind"] == "file.edit").count();
    assert_eq!(n, 2, "no second copy of the hooked edit");
    let log = ok(&cairn(ws, &["log", "--json", "--kind", "tool_call"], ""));
    assert!(
        log.contains("\"Edit\""),
        "the conversation's call is added: {log}"
    );
    // The hooks' checkpoint before prompt 2, with the files, is the point
    // a user rewinds to: the import adds no tree-less second one (as it
    // would for a session the hooks did not see).
    let points = ok(&cairn(
        ws,
        &["log", "--json", "--kind", "checkpoint.create"],
        "",
    ));
    let before_2: Vec<&str> = points
        .lines()
        .filter(|l| l.contains("\"label\":\"Before prompt 2\""))
        .collect();
    assert_eq!(before_2.len(), 1, "{points}");
    assert!(before_2[0].contains("\"root\""), "{}", before_2[0]);
    for (n, (a, b)) in want.iter().enumerate() {
        let label = format!("Before prompt {}", n + 1);
        let id = cps.iter().find(|c| c["label"] == label.as_str()).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        ok(&cairn(ws, &["rollback", "-q", &id], ""));
        assert_eq!(&std::fs::read(ws.join("a.txt")).unwrap(), a, "{label}");
        assert_eq!(&std::fs::read(ws.join("b.txt")).unwrap(), b, "{label}");
    }
}

#[test]
fn a_bad_payload_exits_0_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    for bad in [
        "not json",
        "{}",
        r#"{"cwd":"/nonexistent/x","session_id":"s","hook_event_name":"Stop"}"#,
    ] {
        let o = cairn(tmp.path(), &["hooks", "claude-code"], bad);
        assert_eq!(o.status.code(), Some(0), "{bad}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{bad}: {err}");
        assert!(err.starts_with("cairn hooks claude-code: "), "{err}");
    }
}

#[test]
fn install_keeps_the_users_settings_and_uninstall_removes_exactly_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join(".claude")).unwrap();
    let mine = json!({
        "model": "opus",
        "hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "my-linter"}]}]}
    });
    let file = ws.join(".claude/settings.json");
    std::fs::write(&file, mine.to_string()).unwrap();
    // A private settings file stays private: the rewrite keeps its mode.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok(&cairn(ws, &["hooks", "install", "claude-code"], ""));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the settings file's mode is kept");
    let once = std::fs::read_to_string(&file).unwrap();
    let v: Value = serde_json::from_str(&once).unwrap();
    assert_eq!(v["model"], "opus");
    assert_eq!(
        v["hooks"]["PostToolUse"][0],
        mine["hooks"]["PostToolUse"][0]
    );
    for e in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
    ] {
        let cmds = v["hooks"][e].to_string();
        assert!(cmds.contains("hooks claude-code"), "{e}: {cmds}");
    }
    ok(&cairn(ws, &["hooks", "install", "claude-code"], ""));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        once,
        "twice changes nothing"
    );
    ok(&cairn(ws, &["hooks", "uninstall", "claude-code"], ""));
    let back: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(back, mine);
    // The local scope writes its own file.
    ok(&cairn(
        ws,
        &["hooks", "install", "claude-code", "--scope", "local"],
        "",
    ));
    assert!(ws.join(".claude/settings.local.json").exists());
}

/// Whether a watcher runs for the store of `ws` (`cairn watch --status --json`).
fn watching(ws: &Path) -> bool {
    let o = cairn(ws, &["watch", "--status", "--json"], "");
    let v: Value = serde_json::from_str(ok(&o).trim()).unwrap();
    v["watching"] == json!(true)
}

#[test]
fn session_start_starts_a_watcher_unless_told_not_to() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::write(ws.join("a.txt"), "v0\n").unwrap();
    // Told not to: the hook records and no watcher is started.
    let payload =
        json!({"hook_event_name": "SessionStart", "session_id": "s", "cwd": ws.to_str().unwrap()});
    let o = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["hooks", "claude-code"])
        .current_dir(ws)
        .env("CAIRN_HOOKS_WATCH", "off")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(payload.to_string().as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    ok(&o);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!watching(ws), "CAIRN_HOOKS_WATCH=off started a watcher");
    // By default: the session's start starts one, in the background.
    hook(ws, json!({"hook_event_name": "SessionStart"}));
    let mut waited = 0;
    while !watching(ws) {
        assert!(waited < 600, "no watcher 60 s after SessionStart");
        std::thread::sleep(std::time::Duration::from_millis(100));
        waited += 1;
    }
    // A prompt's checkpoint after the watcher's first is read from its
    // journal; the second prompt finds the watcher and starts no other.
    hook(
        ws,
        json!({"hook_event_name": "UserPromptSubmit", "prompt": "one"}),
    );
    std::fs::write(ws.join("a.txt"), "v1\n").unwrap();
    hook(
        ws,
        json!({"hook_event_name": "UserPromptSubmit", "prompt": "two"}),
    );
    assert!(watching(ws));
    ok(&cairn(ws, &["watch", "--stop"], ""));
    assert!(!watching(ws));
    // The checkpoint before prompt 2 holds the change made after prompt 1.
    let cps = ok(&cairn(ws, &["checkpoints", "--json"], ""));
    let id = cps
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|c| c["label"] == "Before prompt 2")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = ok(&cairn(ws, &["show", &format!("{id}:a.txt")], ""));
    assert_eq!(shown, "v1\n");
}
