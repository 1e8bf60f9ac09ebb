//! Workspace-relative paths: validation, normalisation and scoping.
//!
//! Inside cairn a workspace path is a `String` of `/`-separated components,
//! none of them empty, `.` or `..`, never starting with `/`. The workspace
//! root itself is the empty string. Everything that comes from outside (the
//! command line, an embedder, a manifest read back from the store) passes
//! through here before it touches the file system.

use std::path::{Component, Path};

use crate::error::{Result, SnapshotError};

/// cairn's own ignore file, read in every directory after `.gitignore`
/// (so it can also re-include what git ignores, with `!pattern`).
pub const CAIRNIGNORE: &str = ".cairnignore";

/// Directory names that cairn never captures, restores or deletes anywhere:
/// git's repository directory (the workspace's own and nested ones).
pub const GIT_DIR_NAME: &str = ".git";

/// cairn's own store directory at the workspace root: never captured.
pub const STORE_DIR_NAME: &str = ".cairn";

/// The longest path component accepted (Linux NAME_MAX).
pub const MAX_NAME_BYTES: usize = 255;

/// True if `name` is a valid single path component.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_NAME_BYTES
        && !name.contains('/')
        && !name.contains('\0')
}

/// Why a relative path must never be captured or touched, if it must not.
pub fn protected_reason(rel: &str) -> Option<&'static str> {
    if under_store_dir(rel) {
        // Its own, or a nested workspace's: a store is never workspace
        // content (restoring one would replace its log with an old copy).
        return Some("cairn never captures or restores a store directory `.cairn`");
    }
    if rel.split('/').any(|c| c == GIT_DIR_NAME) {
        return Some("cairn never captures or restores anything under a `.git` directory");
    }
    None
}

/// True if `rel` is the workspace's own store directory (`.cairn` at the
/// root) or lies under a directory named `.cairn` at any depth.
///
/// A path whose *last* component is `.cairn` below the root is not
/// protected by its name alone: it may be an ordinary file (`sub/.cairn`),
/// which is workspace content. Whether it is a directory (a nested store,
/// never captured) only the file system can say: see
/// [`is_store_dir_name`].
pub fn under_store_dir(rel: &str) -> bool {
    if rel == STORE_DIR_NAME {
        return true;
    }
    let mut comps = rel.split('/');
    comps.next_back();
    comps.any(|c| c == STORE_DIR_NAME)
}

/// True if the last component of `rel` is `.cairn`: a directory there is a
/// store (the workspace's own or a nested one) and is never captured or
/// replaced; a file there is ordinary content.
pub fn is_store_dir_name(rel: &str) -> bool {
    rel.rsplit('/').next() == Some(STORE_DIR_NAME)
}

/// Normalises a caller-given path to a workspace-relative path.
///
/// Accepts relative paths (`./a//b` becomes `a/b`) and absolute paths that
/// lie inside `root`; refuses a `..` that would leave the workspace,
/// absolute paths outside it, NUL bytes, non-UTF-8 text and anything under
/// `.git` or `.cairn`. `.` (the whole workspace) normalises to the empty
/// string. See [`normalize_for_reading`] for how `.` and `..` are read.
pub fn normalize(root: &Path, input: &str) -> Result<String> {
    let joined = normalize_for_reading(root, input)?;
    if let Some(why) = protected_reason(&joined) {
        return Err(SnapshotError::bad_path(input, why));
    }
    Ok(joined)
}

/// [`normalize`] for a path only looked up in history (`show`, `diff`,
/// `blame`), not captured or restored: a path under `.git` or `.cairn` is
/// accepted, since a record may name one (an agent's tool wrote
/// `.git/hooks/pre-commit`) and `tree` lists what records name.
///
/// `.` and `..` are resolved by name, as git resolves them, without asking
/// the file system: `a/./b/../../c` is `c`, and `a2/../a` is `a`. A `..`
/// that stays inside the workspace is accepted wherever it is; one that
/// climbs out of it (`../x`, `a/../../x`) is refused, saying so. Reading
/// `..` by name is what cairn means by the path because cairn never follows
/// a symlink in a directory component (a checkpoint records a symlink as a
/// link, and tracking or writing a path under one is refused): `link/../x`
/// is `x` in the workspace whatever `link` points to, never the `x` beside
/// the link's target that the operating system would resolve it to, and the
/// normalised path is the only one cairn hands to the file system.
pub fn normalize_for_reading(root: &Path, input: &str) -> Result<String> {
    if input.is_empty() {
        return Err(SnapshotError::bad_path(input, "the path is empty"));
    }
    if input.contains('\0') {
        return Err(SnapshotError::bad_path(
            input,
            "the path contains a NUL byte",
        ));
    }
    let p = Path::new(input);
    for c in p.components() {
        if let Component::Normal(s) = c {
            let s = s
                .to_str()
                .ok_or_else(|| SnapshotError::bad_path(input, "the path is not valid UTF-8"))?;
            if !valid_name(s) {
                return Err(SnapshotError::bad_path(
                    input,
                    format!("bad component `{s}`"),
                ));
            }
        }
    }
    // A relative path is from the root; an absolute one replaces it. Its
    // `..` climb by name (above `/` they stay there, as the system's do).
    let joined = root.join(p);
    let mut full: Vec<Component<'_>> = Vec::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(full.last(), Some(Component::Normal(_))) {
                    full.pop();
                }
            }
            c => full.push(c),
        }
    }
    let full: std::path::PathBuf = full.iter().collect();
    match full.strip_prefix(root) {
        Ok(rel) => Ok(rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")),
        Err(_) if p.is_absolute() && !p.starts_with(root) => Err(SnapshotError::bad_path(
            input,
            format!("an absolute path outside the workspace {}", root.display()),
        )),
        Err(_) => Err(SnapshotError::bad_path(
            input,
            "`..` would leave the workspace; give paths inside it",
        )),
    }
}

/// Checks a path read from a manifest (already split into valid names, but
/// re-checked here because a manifest is input too).
pub fn check_manifest_path(rel: &str) -> Result<()> {
    if rel.is_empty() || !rel.split('/').all(valid_name) {
        return Err(SnapshotError::bad_path(
            rel,
            "not a valid workspace-relative path",
        ));
    }
    if let Some(why) = protected_reason(rel) {
        return Err(SnapshotError::bad_path(rel, why));
    }
    Ok(())
}

/// True if `path` equals one of `prefixes` or lies under one. An empty
/// prefix list, or the empty prefix, means everything.
pub fn in_scope(path: &str, prefixes: &[String]) -> bool {
    prefixes.is_empty() || prefixes.iter().any(|q| covers(q, path))
}

/// True if `path` is `q` or lies under it (`q` empty: the whole workspace).
pub fn covers(q: &str, path: &str) -> bool {
    q.is_empty()
        || path == q
        || (path.len() > q.len() && path.starts_with(q) && path.as_bytes()[q.len()] == b'/')
}

/// The parent of a relative path (`""` for a top-level name).
pub fn parent(rel: &str) -> &str {
    rel.rfind('/').map_or("", |i| &rel[..i])
}

/// The last component of a relative path.
pub fn file_name(rel: &str) -> &str {
    rel.rfind('/').map_or(rel, |i| &rel[i + 1..])
}

/// Joins a directory path and a name.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        let mut s = String::with_capacity(dir.len() + 1 + name.len());
        s.push_str(dir);
        s.push('/');
        s.push_str(name);
        s
    }
}

/// True for the characters a terminal could act on, or that make it show
/// text in another order than it has: control characters (C0, DEL, C1:
/// escape sequences, newlines, the bell) and the bidirectional formatting
/// characters. [`escape_bytes`] escapes them; so does the CLI when it
/// prints any path.
pub fn acts_on_a_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// A path (or name) that is not valid UTF-8, so not a workspace path (a
/// file named in Latin-1, say), as text that names it without loss: each
/// byte that is not part of valid UTF-8 as `\xNN` (two lowercase hex
/// digits), a backslash as `\\`, a double quote as `\"`, each character
/// that [`acts_on_a_terminal`] as the `\xNN` of its UTF-8 bytes, and every
/// other character as it is. `b"dir\xff/caf\xe9.txt"` is
/// `dir\xff/caf\xe9.txt`. The escapes can be undone, and the text is safe
/// to print, in double quotes as git quotes a path. How a checkpoint
/// names, in `meta.not_captured`, a path it cannot capture because its
/// name is not UTF-8 (`non_utf8_name`).
pub fn escape_bytes(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if acts_on_a_terminal(c) => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn normalizes_and_refuses() {
        let root = Path::new("/ws");
        assert_eq!(normalize(root, "./a//b/").unwrap(), "a/b");
        assert_eq!(normalize(root, "/ws/src/x.rs").unwrap(), "src/x.rs");
        assert_eq!(normalize(root, ".").unwrap(), "");
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "",
            ".git/config",
            "sub/.git/HEAD",
            ".cairn/log",
            "sub/.cairn/log/1.seg",
            "a\0b",
        ] {
            let e = normalize(root, bad).unwrap_err().to_string();
            assert!(e.contains("refusing path"), "{bad}: {e}");
        }
        // A `..` is read by name: one that stays inside the workspace is
        // resolved (as `track` resolved it, and git does), and only one
        // that climbs out is refused, saying so.
        for (given, is) in [
            ("a2/../a", "a"),
            ("a/./b/../../c", "c"),
            ("a2/b/../c", "a2/c"),
            ("a/..", ""),
            ("/ws/a/../b", "b"),
            ("/elsewhere/../ws/a", "a"),
            ("../ws/a", "a"),
            (".git/../a", "a"),
        ] {
            assert_eq!(normalize(root, given).unwrap(), is, "{given}");
        }
        for (bad, why) in [
            ("../x", "`..` would leave the workspace"),
            ("a/../../x", "`..` would leave the workspace"),
            ("/ws/../x", "`..` would leave the workspace"),
            ("..", "`..` would leave the workspace"),
            ("/etc/passwd", "an absolute path outside the workspace /ws"),
            ("a/../.git/config", "`.git`"),
            ("x/../.cairn/log", "`.cairn`"),
        ] {
            let e = normalize(root, bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(
            normalize_for_reading(root, "x/../.git/HEAD").unwrap(),
            ".git/HEAD"
        );
        // A path named `.cairn` below the root may be a plain file.
        assert_eq!(normalize(root, "sub/.cairn").unwrap(), "sub/.cairn");
        assert!(under_store_dir(".cairn") && under_store_dir("sub/.cairn/log"));
        assert!(!under_store_dir("sub/.cairn"));
    }

    #[test]
    fn scope() {
        let p = vec!["src".to_string()];
        assert!(in_scope("src", &p));
        assert!(in_scope("src/a.rs", &p));
        assert!(!in_scope("srcx/a.rs", &p));
        assert!(!in_scope("lib/a.rs", &p));
        assert!(in_scope("anything", &[]));
        assert_eq!(parent("a/b/c"), "a/b");
        assert_eq!(parent("a"), "");
        assert_eq!(file_name("a/b/c"), "c");
        assert_eq!(join("", "x"), "x");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped_readably_and_reversibly() {
        assert_eq!(escape_bytes(b"plain/name.txt"), "plain/name.txt");
        assert_eq!(
            escape_bytes(b"dir\xff/caf\xe9.txt"),
            "dir\\xff/caf\\xe9.txt"
        );
        // Valid UTF-8 stays as it is, around the bytes that are not.
        assert_eq!(
            escape_bytes("na\u{ef}ve\u{fe}".as_bytes()),
            "na\u{ef}ve\u{fe}"
        );
        assert_eq!(escape_bytes(b"na\xc3\xafve\xfe"), "na\u{ef}ve\\xfe");
        // A cut-short sequence is escaped byte by byte.
        assert_eq!(escape_bytes(b"a\xe2\x82b"), "a\\xe2\\x82b");
        // The escape characters, and what a terminal would act on.
        assert_eq!(escape_bytes(b"a\\x\"y"), "a\\\\x\\\"y");
        assert_eq!(escape_bytes(b"\x1b[2K\n"), "\\x1b[2K\\x0a");
        assert_eq!(escape_bytes("a\u{202e}b".as_bytes()), "a\\xe2\\x80\\xaeb");
        for b in [&b"\xff\x1b]0;x\x07"[..], b"\xc2\x9b2K\xfe"] {
            assert!(!escape_bytes(b).chars().any(acts_on_a_terminal), "{b:?}");
        }
    }

    #[test]
    fn manifest_paths() {
        assert!(check_manifest_path("a/b").is_ok());
        for bad in ["", "a//b", "../a", "a/.git/x", ".cairn"] {
            assert!(check_manifest_path(bad).is_err(), "{bad}");
        }
    }
}
