//! Paths typed on the command line, read as git reads a pathspec: relative
//! to the current directory when that lies inside the workspace, so
//! `cairn history main.rs` in `src/` means `src/main.rs` and `../README.md`
//! climbs back to the root. From outside the workspace (`--store` from
//! elsewhere) a relative path is relative to the workspace root, as before.

use std::path::{Component, Path};

/// `typed` relative to the workspace root `root`, for a command run in
/// `cwd` (both canonical). Absolute paths, and any path when `cwd` is not
/// below `root`, are returned as typed (the library makes an absolute path
/// inside the workspace relative, and refuses one outside). A path that
/// climbs out of the workspace is returned absolute, so that it is refused
/// as lying outside. A trailing `/` (a directory) is kept; the root itself
/// is `.`.
pub fn from_cwd(typed: &str, root: &Path, cwd: &Path) -> String {
    let p = Path::new(typed);
    if typed.is_empty() || p.is_absolute() {
        return typed.to_string();
    }
    let in_workspace = cwd.starts_with(root);
    // From outside, only a path that climbs (`../proj/src`) can mean the
    // current directory's: taken so if it leads into the workspace.
    if !in_workspace && !matches!(p.components().next(), Some(Component::ParentDir)) {
        return typed.to_string();
    }
    let rel = lexical(&cwd.join(p)).and_then(|abs| {
        abs.strip_prefix(root)
            .ok()
            .map(|r| r.to_string_lossy().into_owned())
    });
    match rel {
        Some(r) if r.is_empty() => ".".into(),
        Some(mut r) => {
            if typed.ends_with('/') {
                r.push('/');
            }
            r
        }
        // Climbs out of the workspace: absolute, so that it is refused as
        // lying outside.
        None if in_workspace => cwd.join(p).to_string_lossy().into_owned(),
        None => typed.to_string(),
    }
}

/// `abs` with `.` and `..` resolved by name (no file system access);
/// `None` if it climbs above `/`.
fn lexical(abs: &Path) -> Option<std::path::PathBuf> {
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_from_the_current_directory_inside_the_workspace() {
        let root = Path::new("/w");
        let src = Path::new("/w/src");
        assert_eq!(from_cwd("main.rs", root, src), "src/main.rs");
        assert_eq!(from_cwd("./lib/", root, src), "src/lib/");
        assert_eq!(from_cwd("../README.md", root, src), "README.md");
        assert_eq!(from_cwd("..", root, src), ".");
        assert_eq!(from_cwd(".", root, src), "src");
        assert_eq!(
            from_cwd("../../etc/passwd", root, src),
            "/w/src/../../etc/passwd"
        );
        // At the root, `./` and `..` are resolved too.
        assert_eq!(from_cwd("src/main.rs", root, root), "src/main.rs");
        assert_eq!(from_cwd("./src//main.rs", root, root), "src/main.rs");
        assert_eq!(from_cwd("../x", root, root), "/w/../x");
        // Outside the workspace, or absolute: as typed.
        assert_eq!(
            from_cwd("src/main.rs", root, Path::new("/elsewhere")),
            "src/main.rs"
        );
        // ... unless it climbs from there into the workspace.
        assert_eq!(from_cwd("../w/src", root, Path::new("/elsewhere")), "src");
        assert_eq!(from_cwd("../w", root, Path::new("/elsewhere")), ".");
        assert_eq!(
            from_cwd("../x/src", root, Path::new("/elsewhere")),
            "../x/src"
        );
        assert_eq!(from_cwd("/w/src/a.rs", root, src), "/w/src/a.rs");
    }
}
