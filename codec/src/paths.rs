//! Paths as events name them: which paths lie in the workspace, the
//! normal form cairn keeps them in, and why a path is refused. By name
//! only, never by asking the disk.

use std::borrow::Cow;

use crate::EventKind;

/// Whether an event of `kind` is about the workspace: its paths are then
/// workspace-relative. Every kind is but `prompt`, `reply`, `tool_call` and
/// `custom`, whose paths may lie anywhere (a file a tool read, say).
pub fn about_workspace(kind: EventKind) -> bool {
    use EventKind::*;
    !matches!(kind, Prompt | Reply | ToolCall | Custom)
}

/// `p` in the normal form cairn stores workspace paths in: `/` between
/// components, no empty or `.` component (`./src//a.rs/` is `src/a.rs`),
/// and a `..` taking back the component before it (`a/../b` is `b`), by
/// name, never by asking the disk (as `cairn show` reads a path: a symlink
/// `a` does not make `a/../b` another file). Borrowed when `p` is already
/// normal. Only for a path that [`outside_workspace`] passes: a `..` that
/// climbs above the workspace is left in place.
pub fn normal_path(p: &str) -> Cow<'_, str> {
    let odd = |c: &str| c.is_empty() || c == "." || c == "..";
    if !p.split('/').any(odd) {
        return Cow::Borrowed(p);
    }
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." if out.last().is_some_and(|l| *l != "..") => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out.join("/"))
}

/// Why `p` lies outside the workspace, if it does: it is absolute (`/x`,
/// `\\x`, `C:x`), or its `..` components climb above the workspace by
/// name (`../x`, `a/../../x`; `a/../b` is `b`, inside). An absolute path is
/// outside even when it names a file under the workspace's root: a record
/// keeps what the agent said, and is never resolved against the disk. Such
/// paths are recorded as history only: no workspace tree holds them.
pub fn outside_workspace(p: &str) -> Option<&'static str> {
    let b = p.as_bytes();
    if b.first().is_some_and(|c| *c == b'/' || *c == b'\\')
        || (b.len() >= 2 && b[1] == b':' && b[0].is_ascii_alphabetic())
    {
        return Some("is absolute");
    }
    let mut depth: usize = 0;
    for c in p.split(['/', '\\']) {
        match c {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Some("leaves the workspace (`..`)"),
            },
            _ => depth += 1,
        }
    }
    None
}

/// Why `p` is no path a record can name, if it is not: it holds a NUL
/// byte, or names the workspace itself (`.`, `a/..`). Empty paths are
/// refused before this is asked. The phrase completes "`p` ...".
pub(crate) fn not_a_path(p: &str) -> Option<&'static str> {
    if p.contains('\0') {
        Some("holds a NUL byte")
    } else if outside_workspace(p).is_none() && normal_path(p).is_empty() {
        Some("names the workspace itself, not a file in it")
    } else {
        None
    }
}

/// Why `p` is not a path in the workspace, if it is not: empty, outside it
/// ([`outside_workspace`]: absolute, or climbing out with `..`), holding a
/// NUL byte, or naming the workspace itself (`.`). The phrase completes
/// "`p` ...", as in "`/etc/passwd` is absolute".
pub fn not_workspace_relative(p: &str) -> Option<&'static str> {
    if p.is_empty() {
        Some("is empty")
    } else if let Some(why) = outside_workspace(p) {
        Some(why)
    } else {
        not_a_path(p)
    }
}
