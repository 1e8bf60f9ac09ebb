//! Which workspace a store belongs to.
//!
//! The first time a store is opened for writing with a workspace, the
//! binding is written to `<store>/workspace`. A later open with another
//! workspace (a mistyped `--workspace`, a `--store` whose parent directory
//! is not its workspace) can then be refused before anything is captured
//! or rolled back: checkpoints of the wrong tree would record every file
//! of the right one as deleted, and a rollback would rewrite the wrong
//! tree to the right one's checkpoint.
//!
//! A store directly inside its workspace (the usual `<workspace>/.cairn`)
//! is bound by its place in the tree, not by absolute path, so a project
//! moved or copied with its store keeps working. A store elsewhere (deeper
//! in the workspace, or outside it) is bound to the workspace's canonical
//! path.
//!
//! A store is data from outside until proven otherwise: a `.cairn` can
//! arrive with a cloned repository, an archive or a shared disk, and its
//! binding file could name any directory for a rollback to rewrite. So a
//! binding that names anything but the directory holding the store is
//! trusted only if it also records proof that it was made for this very
//! store directory: the directory's canonical path and its inode number
//! when it was bound (`BoundStore`). A copy, clone or extraction is a
//! new directory (another inode, usually another path) and its binding is
//! refused with the command that trusts it (`init --rebind`).
//!
//! The store directory itself may be a symbolic link: a repository could
//! ship `.cairn -> ~/other-project/.cairn`, another of this user's stores,
//! which passes every owner and mode check and would make cairn act on
//! that store's workspace. So a store reached through a link of its own
//! (the last component of its path; links above it are the user's layout)
//! is trusted only if its binding's proof also records that link's
//! location (`BoundStore::link`): written when the store is created
//! through the link, or by `cairn --store LINK init DIR --rebind`. Else it
//! is refused ([`UntrustedLink`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The binding's file name inside the store directory.
pub const BINDING_FILE: &str = "workspace";

/// Version of the binding file's shape.
const BINDING_VERSION: u32 = 1;

/// The largest binding file read: one holds two paths and a number (a
/// path is at most 4 KiB on Linux); anything bigger is not one, and is
/// not read whole.
const MAX_BINDING_BYTES: u64 = 64 * 1024;

/// The binding file's contents (JSON).
#[derive(Debug, Serialize, Deserialize)]
struct BindingFile {
    version: u32,
    /// The store's path relative to its workspace (`.cairn`), when the
    /// store lies inside the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    store_in_workspace: Option<String>,
    /// The workspace's canonical path, when the store lies outside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workspace: Option<String>,
    /// Proof that this binding was made for this store directory: needed
    /// by every binding but a store directly inside its workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bound_store: Option<BoundStore>,
}

/// The store directory a binding was made for, as it was when bound.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct BoundStore {
    /// Its canonical path.
    path: String,
    /// Its inode number. (Not the device number, which some systems
    /// renumber across reboots: a path and an inode a copy cannot choose
    /// are proof enough.)
    inode: u64,
    /// Where the symbolic link the store was reached by when bound lies
    /// (its canonical parent and its name), if it was reached by one: the
    /// only link through which the store may be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<String>,
}

impl BoundStore {
    /// The proof for the store directory whose canonical path is `store`,
    /// reached through the link at `link`, if any.
    fn of(store: &Path, link: Option<&Path>) -> Result<BoundStore> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(store)
            .map_err(|e| Error::Other(format!("read {}: {e}", store.display())))?;
        Ok(BoundStore {
            path: utf8(store)?.to_string(),
            inode: meta.ino(),
            link: link.map(utf8).transpose()?.map(str::to_string),
        })
    }
}

/// The symbolic link `store` is reached by: `Some` (the link's location,
/// its canonical parent joined with its name) when the last component of
/// the path `store` is itself a link. Links above it (a home directory on
/// another disk) are the user's own layout and resolve the same whichever
/// store is meant; a link that *is* the store directory can come with a
/// clone or an archive and choose which store, and so which workspace,
/// cairn acts on.
pub fn store_link(store: &Path) -> Option<PathBuf> {
    resolve(store).link
}

/// The store directory `store`, resolved once: its canonical path and the
/// link it is reached by (see [`store_link`]).
struct Resolved {
    /// What `store.canonicalize()` gives.
    canonical: std::io::Result<PathBuf>,
    /// The link the store is reached by, if its last component is one.
    link: Option<PathBuf>,
}

/// Resolves `store` with one walk of its parent's path: the parent's
/// canonical path joined with the store's name is the store's canonical
/// path unless that name is itself a link (then it is resolved too). Each
/// open resolved the same path three times over before (`readlink` of
/// every ancestor each time: the binding's holder, the link check, the
/// canonical store).
fn resolve(store: &Path) -> Resolved {
    let parent = match store.parent() {
        Some(p) if p.as_os_str().is_empty() => Some(Path::new(".")),
        p => p,
    };
    let (Some(name), Some(parent)) = (store.file_name(), parent) else {
        return Resolved {
            canonical: store.canonicalize(),
            link: None,
        };
    };
    let at = match parent.canonicalize() {
        Ok(p) => p.join(name),
        Err(e) => {
            return Resolved {
                canonical: Err(e),
                link: None,
            }
        }
    };
    match std::fs::symlink_metadata(&at) {
        Ok(m) if m.file_type().is_symlink() => Resolved {
            canonical: at.canonicalize(),
            link: Some(at),
        },
        Ok(_) => Resolved {
            canonical: Ok(at),
            link: None,
        },
        Err(e) => Resolved {
            canonical: Err(e),
            link: None,
        },
    }
}

/// A store directory reached through a symbolic link that its binding does
/// not record (see the module's documentation): the link may have come
/// with a clone or an archive and point at another of this user's stores.
/// Refused for writing and rolling back: it could make cairn act on that
/// store's workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UntrustedLink {
    /// Where the link lies (its canonical parent and its name).
    pub link: PathBuf,
    /// The store directory it leads to (canonical).
    pub store: PathBuf,
    /// The workspace that store's binding names, if it names one.
    pub claimed: Option<PathBuf>,
    /// Why the link is not taken as the store's: what the proof lacks.
    pub why: String,
}

impl UntrustedLink {
    /// The directory that holds the link: the workspace it is meant for
    /// when the user made it.
    pub fn holder(&self) -> PathBuf {
        self.link
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.link.clone())
    }
}

/// In the library's words and the command line's (as [`UntrustedBinding`]).
impl std::fmt::Display for UntrustedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holder = self.holder();
        write!(
            f,
            "the store directory {link} is a symbolic link to {store}, and that store's binding \
             does not record this link ({why}): a link that came with a cloned repository or an \
             archive may not choose which store cairn writes",
            link = self.link.display(),
            store = self.store.display(),
            why = self.why,
        )?;
        if let Some(c) = &self.claimed {
            write!(
                f,
                ", nor make it act on that store's workspace {}",
                c.display()
            )?;
        }
        write!(
            f,
            ". If you made this link, bind that store to this workspace with \
             `cairn --store {link} init {holder} --rebind`",
            link = self.link.display(),
            holder = holder.display(),
        )?;
        if let Some(c) = self.claimed.as_ref().filter(|c| **c != holder) {
            write!(
                f,
                " (the store then belongs to {}, no longer to {})",
                holder.display(),
                c.display()
            )?;
        }
        write!(
            f,
            "; otherwise remove the link: `rm {}` (in the library, bind with \
             `StoreBuilder::rebind_workspace(true)`)",
            self.link.display()
        )
    }
}

/// A binding that names a workspace other than the directory holding the
/// store, without proof that it was made for this store directory: the
/// store was copied, cloned or extracted from elsewhere (or bound by a
/// cairn that recorded no proof). Refused: it could make cairn write
/// anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UntrustedBinding {
    /// The store directory (canonical).
    pub store: PathBuf,
    /// The workspace its binding names.
    pub claimed: PathBuf,
    /// Why the binding is not taken as this store's: what the proof lacks.
    pub why: String,
}

impl UntrustedBinding {
    /// The directory that holds the store: the workspace it may act on
    /// without a binding.
    pub fn holder(&self) -> PathBuf {
        self.store
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.store.clone())
    }
}

/// In the library's words and the command line's (the binding is read
/// before anything knows which is asking).
impl std::fmt::Display for UntrustedBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the store {store} names the workspace {claimed} in its binding file {store}/{BINDING_FILE}, \
             but this store's binding was not made here ({why}): a store copied, cloned or \
             extracted from elsewhere may not choose where cairn writes. If you trust it, bind it \
             to that workspace with `cairn --store {store} init {claimed} --rebind`; to use it with \
             the directory that holds it, `cairn --store {store} init {holder} --rebind` \
             (in the library: `StoreBuilder::rebind_workspace(true)`)",
            store = self.store.display(),
            claimed = self.claimed.display(),
            why = self.why,
            holder = self.holder().display(),
        )
    }
}

/// A store opened with a workspace it is not bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceMismatch {
    /// The store directory.
    pub store: PathBuf,
    /// The workspace the store is bound to.
    pub bound: PathBuf,
    /// The workspace it was opened with.
    pub given: PathBuf,
}

impl WorkspaceMismatch {
    /// True when the store lies inside the workspace it is bound to: it
    /// moves with it, so another workspace is a mistake, not a move.
    pub fn store_inside_bound(&self) -> bool {
        self.store.starts_with(&self.bound)
    }
}

/// In the library's words (the `cairn` command says the same with its
/// flags: `--workspace`, `--store`, `init --rebind`).
impl std::fmt::Display for WorkspaceMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.store_inside_bound() {
            return write!(
                f,
                "the store {} belongs to the workspace {} that holds it, not {}: check the workspace given to `StoreBuilder::workspace`",
                self.store.display(),
                self.bound.display(),
                self.given.display(),
            );
        }
        write!(
            f,
            "the store {} belongs to the workspace {}, not {}: check the workspace and the store \
             given to `StoreBuilder::workspace` and `StoreBuilder::store_dir`; if the workspace \
             really moved, bind the store to it by opening it with \
             `StoreBuilder::rebind_workspace(true)` (on the command line: \
             `cairn --store {} init {} --rebind`)",
            self.store.display(),
            self.bound.display(),
            self.given.display(),
            self.store.display(),
            self.given.display(),
        )
    }
}

/// The workspace `store` is bound to, if its binding file says so: a
/// canonical path. `None` for a store that has none yet (created before
/// bindings, or never opened for writing with a workspace). An error for a
/// damaged binding, and for one that names a workspace other than the
/// directory holding the store without proof that it was made for this
/// store directory (see [`UntrustedBinding`]).
pub fn bound_workspace(store: &Path) -> Result<Option<PathBuf>> {
    let resolved = resolve(store);
    let at = BindingAt::of(store, resolved.canonical.as_ref().ok());
    let link = resolved.link;
    let canonical_store = || {
        resolved
            .canonical
            .as_ref()
            .map(PathBuf::clone)
            .map_err(|e| Error::Other(format!("resolve {}: {e}", store.display())))
    };
    let Some(file) = at.read()? else {
        return match link {
            None => Ok(None),
            // Bound when created through the link (or rebound): a
            // store with no binding reached by one is another's.
            Some(link) => Err(Error::Other(
                UntrustedLink {
                    link,
                    store: canonical_store()?,
                    claimed: None,
                    why: "it has no binding file".to_string(),
                }
                .to_string(),
            )),
        };
    };
    let store = canonical_store()?;
    let claimed = match at.claimed_workspace(&file, &store)? {
        // The directory that holds the store: where it may act whatever
        // its binding says (reached through a link, the link must be
        // proven below).
        Claim::Holder(ws) if link.is_none() => return Ok(Some(ws)),
        Claim::Holder(ws) | Claim::Named(ws) => ws,
    };
    let here = BoundStore::of(&store, link.as_deref())?;
    let why = match link {
        Some(_) => unproven_link(file.bound_store.as_ref(), &here),
        None => unproven_binding(file.bound_store.as_ref(), &here),
    };
    let Some(why) = why else {
        return Ok(Some(claimed));
    };
    Err(Error::Other(match link {
        Some(link) => UntrustedLink {
            link,
            store,
            claimed: Some(claimed),
            why,
        }
        .to_string(),
        None => UntrustedBinding {
            store,
            claimed,
            why,
        }
        .to_string(),
    }))
}

/// A store's binding file, with what its "damaged" message names.
struct BindingAt<'s> {
    /// The binding file.
    path: PathBuf,
    /// The store, as given.
    store: &'s Path,
    /// The directory that holds the store, which a rebind binds it to.
    holder: PathBuf,
}

/// The workspace a binding file names.
enum Claim {
    /// The directory directly holding the store.
    Holder(PathBuf),
    /// Any other directory, which needs proof that the binding was made
    /// for this store directory.
    Named(PathBuf),
}

impl<'s> BindingAt<'s> {
    /// The binding of `store`, whose canonical path is `canonical` (if it
    /// could be resolved).
    fn of(store: &'s Path, canonical: Option<&PathBuf>) -> Self {
        let holder = canonical
            .map_or(store, PathBuf::as_path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        BindingAt {
            path: store.join(BINDING_FILE),
            store,
            holder,
        }
    }

    /// The error for a damaged binding file, saying `why` and how to bind
    /// the store again.
    fn damaged(&self, why: &str) -> Error {
        Error::Other(format!(
            "{} is damaged ({why}); bind the store again: `cairn --store {} init {} --rebind` \
             for the directory that holds it (in the library: `StoreBuilder::rebind_workspace(true)`)",
            self.path.display(),
            self.store.display(),
            self.holder.display(),
        ))
    }

    /// The binding file, `None` if there is none: a regular file of at
    /// most [`MAX_BINDING_BYTES`] in this version's format.
    fn read(&self) -> Result<Option<BindingFile>> {
        let path = &self.path;
        // Looked at before it is read: a link (to `/dev/zero`), a FIFO (which
        // would block) or a huge file is not a binding.
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::Other(format!("read {}: {e}", path.display()))),
        };
        if !meta.file_type().is_file() {
            return Err(self.damaged("it is not a regular file"));
        }
        if meta.len() > MAX_BINDING_BYTES {
            return Err(self.damaged(&format!(
                "{} bytes, more than a binding's {MAX_BINDING_BYTES}",
                meta.len()
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Other(format!("read {}: {e}", path.display())))?;
        let file: BindingFile =
            serde_json::from_slice(&bytes).map_err(|e| self.damaged(&e.to_string()))?;
        if file.version != BINDING_VERSION {
            return Err(self.damaged(&format!(
                "version {}, this cairn reads {BINDING_VERSION}",
                file.version
            )));
        }
        Ok(Some(file))
    }

    /// The workspace `file` names for the canonical `store`: its path in
    /// the workspace, or the workspace's absolute path.
    fn claimed_workspace(&self, file: &BindingFile, store: &Path) -> Result<Claim> {
        match (&file.store_in_workspace, &file.workspace) {
            (Some(rel), None) => self.workspace_holding(rel, store),
            (None, Some(abs)) => {
                let abs = PathBuf::from(abs);
                if !abs.is_absolute() {
                    return Err(self.damaged(&format!(
                        "workspace `{}` is not an absolute path",
                        abs.display()
                    )));
                }
                Ok(Claim::Named(abs))
            }
            _ => Err(self.damaged("it names no workspace")),
        }
    }

    /// The workspace that holds `store` at the relative path `rel`.
    fn workspace_holding(&self, rel: &str, store: &Path) -> Result<Claim> {
        // Plain names only: `..` or an absolute path would bind the
        // store to some other tree.
        let plain = Path::new(rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain || rel.is_empty() {
            return Err(self.damaged(&format!(
                "store_in_workspace `{rel}` is not a relative path of plain names"
            )));
        }
        let depth = Path::new(rel).components().count();
        let mut ws = store;
        for _ in 0..depth {
            ws = ws
                .parent()
                .ok_or_else(|| self.damaged("the store is not that deep in the tree"))?;
        }
        if depth == 1 {
            return Ok(Claim::Holder(ws.to_path_buf()));
        }
        if !store.ends_with(rel) {
            return Err(self.damaged(&format!(
                "store_in_workspace `{rel}` is not where the store {} is",
                store.display()
            )));
        }
        Ok(Claim::Named(ws.to_path_buf()))
    }
}

/// Why a binding's proof `bound` does not show that it was made for the
/// store `here` reached through its link, or `None` when it does.
fn unproven_link(bound: Option<&BoundStore>, here: &BoundStore) -> Option<String> {
    Some(match bound {
        None | Some(BoundStore { link: None, .. }) => "it records no link to it".to_string(),
        Some(b) if b.link != here.link => format!(
            "it records the link {}, not this one",
            b.link.as_deref().unwrap_or_default()
        ),
        Some(b) if b.path != here.path => format!("it was made for the store {}", b.path),
        Some(b) if b.inode != here.inode => format!(
            "it was made for another directory at {} (inode {}, this one is {}): a copy",
            b.path, b.inode, here.inode
        ),
        Some(_) => return None,
    })
}

/// Why a binding's proof `bound` does not show that it was made for the
/// store directory `here`, or `None` when it does.
fn unproven_binding(bound: Option<&BoundStore>, here: &BoundStore) -> Option<String> {
    Some(match bound {
        None => "it records no proof of the store directory it was made for".to_string(),
        Some(b) if b.path != here.path => format!("it was made for the store {}", b.path),
        Some(b) if b.inode != here.inode => format!(
            "it was made for another directory at this path (inode {}, this one is {}): a copy",
            b.inode, here.inode
        ),
        Some(_) => return None,
    })
}

/// Checks that `store` belongs to `workspace`: `Ok(None)` if it does, or
/// if the store has no binding yet and `record` is set (the binding is
/// then written); with `rebind`, a different binding is replaced. A store
/// with no binding and `record` unset stays unbound.
pub(crate) fn check(
    store: &Path,
    workspace: &Path,
    record: bool,
    rebind: bool,
) -> Result<Option<WorkspaceMismatch>> {
    check_bound(store, workspace, bound_workspace(store), record, rebind)
}

/// [`check`] given what [`bound_workspace`] gave for `store` (read by the
/// caller moments before).
pub(crate) fn check_bound(
    store: &Path,
    workspace: &Path,
    bound: Result<Option<PathBuf>>,
    record: bool,
    rebind: bool,
) -> Result<Option<WorkspaceMismatch>> {
    // An untrusted or damaged binding stands until it is replaced: only
    // `rebind` (the user's own `init --rebind`) replaces it.
    let bound = match bound {
        Ok(b) => b,
        Err(_) if rebind => None,
        Err(e) => return Err(e),
    };
    let given = match workspace.canonicalize() {
        Ok(g) => g,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(match bound {
                Some(b) if b == workspace => Error::WorkspaceGone {
                    store: store.to_path_buf(),
                    bound: b,
                },
                _ => Error::Other(format!(
                    "the workspace {} does not exist",
                    workspace.display()
                )),
            });
        }
        Err(e) => {
            return Err(Error::Other(format!(
                "resolve the workspace {}: {e}",
                workspace.display()
            )))
        }
    };
    match bound {
        Some(bound) if bound == given => Ok(None),
        Some(bound) if !rebind => Ok(Some(WorkspaceMismatch {
            store: canonical(store).unwrap_or_else(|_| store.to_path_buf()),
            bound,
            given,
        })),
        _ if record || rebind => {
            write(store, &given)?;
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Writes the binding of `store` to the canonical `workspace` (a temporary
/// file synced and renamed into place, so a crash leaves the old binding or
/// the new).
fn write(store: &Path, workspace: &Path) -> Result<()> {
    let store_c = canonical(store)?;
    let mut file = match store_c.strip_prefix(workspace) {
        Ok(rel) if !rel.as_os_str().is_empty() => BindingFile {
            version: BINDING_VERSION,
            store_in_workspace: Some(utf8(rel)?.to_string()),
            workspace: None,
            bound_store: None,
        },
        _ => BindingFile {
            version: BINDING_VERSION,
            store_in_workspace: None,
            workspace: Some(utf8(workspace)?.to_string()),
            bound_store: None,
        },
    };
    // Only the directory holding the store, reached by its own name, needs
    // no proof (see the module's documentation).
    let link = store_link(store);
    if store_c.parent() != Some(workspace) || link.is_some() {
        file.bound_store = Some(BoundStore::of(&store_c, link.as_deref())?);
    }
    let bytes = serde_json::to_vec(&file).map_err(|e| Error::Other(e.to_string()))?;
    let path = store.join(BINDING_FILE);
    // Synced before the rename: a crash never leaves an empty binding,
    // which would read as damaged; the rename durable with the directory.
    cairn_engine::atomic::write_atomic(
        &cairn_engine::RealVfs,
        &path,
        &bytes,
        &cairn_engine::atomic::AtomicOptions::durable(),
    )?;
    Ok(())
}

fn canonical(p: &Path) -> Result<PathBuf> {
    p.canonicalize()
        .map_err(|e| Error::Other(format!("resolve {}: {e}", p.display())))
}

fn utf8(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| {
        Error::Other(format!(
            "{} is not valid UTF-8: cairn cannot record it as the store's workspace",
            p.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A read-only open given the binding its caller read (the command
    /// line reads it to find the workspace) takes that, and does not read
    /// the file again: given as damaged, the workspace is unavailable with
    /// that reason though the file is sound; given as read, it opens.
    #[test]
    fn a_read_only_open_takes_the_binding_it_is_given() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        crate::Store::builder()
            .workspace(&ws)
            .open()
            .unwrap()
            .close()
            .unwrap();
        let store = ws.join(".cairn");
        let open = |read: std::result::Result<Option<PathBuf>, String>| {
            crate::Store::builder()
                .workspace(&ws)
                .store_dir(&store)
                .read_only()
                .binding_read(read)
                .open()
                .unwrap()
        };
        let s = open(Err("given: damaged".into()));
        assert_eq!(
            s.workspace_caches().unwrap_err().to_string(),
            "given: damaged"
        );
        let s = open(bound_workspace(&store).map_err(|e| e.to_string()));
        assert!(s.workspace_caches().is_ok());
    }

    /// One resolution of the store gives what `canonicalize` and the link
    /// check gave separately: for a plain store, a store under a linked
    /// directory, a store that is itself a link, a relative path, and a
    /// path that does not exist.
    #[test]
    fn resolving_the_store_once_gives_its_canonical_path_and_link() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join("real/ws/.cairn")).unwrap();
        std::os::unix::fs::symlink(top.join("real"), top.join("via")).unwrap();
        std::os::unix::fs::symlink(top.join("real/ws/.cairn"), top.join("real/ws/linked")).unwrap();
        let cases = [
            (top.join("real/ws/.cairn"), None),
            (top.join("via/ws/.cairn"), None),
            (top.join("via/ws/linked"), Some(top.join("real/ws/linked"))),
            (top.join("via/ws/./.cairn"), None),
            (top.join("real/ws/missing"), None),
        ];
        for (store, link) in cases {
            let r = resolve(&store);
            assert_eq!(r.link, link, "{}", store.display());
            match (r.canonical, store.canonicalize()) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", store.display()),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{}: {a:?} against {b:?}", store.display()),
            }
        }
        let cwd = std::env::current_dir().unwrap();
        let r = resolve(Path::new("Cargo.toml"));
        assert_eq!(
            r.canonical.unwrap(),
            cwd.join("Cargo.toml").canonicalize().unwrap()
        );
    }

    #[test]
    fn a_store_inside_its_workspace_follows_it_when_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        std::fs::create_dir_all(a.join(".cairn")).unwrap();
        assert_eq!(check(&a.join(".cairn"), &a, true, false).unwrap(), None);
        let b = tmp.path().join("b");
        std::fs::rename(&a, &b).unwrap();
        let b = b.canonicalize().unwrap();
        assert_eq!(bound_workspace(&b.join(".cairn")).unwrap(), Some(b.clone()));
        assert_eq!(check(&b.join(".cairn"), &b, true, false).unwrap(), None);
        // A subdirectory is another workspace.
        std::fs::create_dir(b.join("sub")).unwrap();
        let m = check(&b.join(".cairn"), &b.join("sub"), true, false)
            .unwrap()
            .unwrap();
        assert_eq!(m.bound, b);
        assert!(
            m.to_string().contains("that holds it")
                && m.to_string().contains("`StoreBuilder::workspace`")
                && !m.to_string().contains("--"),
            "{m}"
        );
    }

    #[test]
    fn a_store_outside_its_workspace_is_bound_by_path_and_can_be_rebound() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, w1, w2) = (
            tmp.path().join("s"),
            tmp.path().join("w1"),
            tmp.path().join("w2"),
        );
        for d in [&store, &w1, &w2] {
            std::fs::create_dir_all(d).unwrap();
        }
        // Not recorded unless asked.
        assert_eq!(check(&store, &w1, false, false).unwrap(), None);
        assert_eq!(bound_workspace(&store).unwrap(), None);
        assert_eq!(check(&store, &w1, true, false).unwrap(), None);
        let w1c = w1.canonicalize().unwrap();
        assert_eq!(bound_workspace(&store).unwrap(), Some(w1c.clone()));
        let m = check(&store, &w2, true, false).unwrap().unwrap();
        assert!(
            m.to_string()
                .contains("`StoreBuilder::rebind_workspace(true)`")
                && !m.to_string().contains("--workspace"),
            "{m}"
        );
        assert_eq!((m.bound, m.given), (w1c, w2.canonicalize().unwrap()));
        assert_eq!(check(&store, &w2, false, true).unwrap(), None);
        let w2c = w2.canonicalize().unwrap();
        assert_eq!(bound_workspace(&store).unwrap(), Some(w2c.clone()));
        // The bound workspace gone: the error says how to rebind.
        std::fs::remove_dir(&w2).unwrap();
        let e = check(&store, &w2c, true, false).unwrap_err().to_string();
        assert!(
            e.contains("does not exist") && e.contains("`StoreBuilder::rebind_workspace(true)`"),
            "{e}"
        );
    }

    #[test]
    fn a_binding_that_leads_out_of_the_tree_is_damaged() {
        let tmp = tempfile::tempdir().unwrap();
        for rel in ["../../etc", "/etc", "a/../..", ""] {
            let body = format!("{{\"version\":1,\"store_in_workspace\":\"{rel}\"}}");
            std::fs::write(tmp.path().join(BINDING_FILE), body).unwrap();
            let e = bound_workspace(tmp.path()).unwrap_err().to_string();
            assert!(e.contains("plain names"), "{rel}: {e}");
        }
    }

    /// Regression (issue 27): a binding that names a workspace other
    /// than the store's holder is trusted only with proof it was made for
    /// this store directory; a copy of the store is refused, and a rebind
    /// replaces the untrusted binding.
    #[test]
    fn a_binding_without_proof_for_this_store_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let (store, w) = (top.join("s"), top.join("w"));
        for d in [&store, &w] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(check(&store, &w, true, false).unwrap(), None);
        assert_eq!(bound_workspace(&store).unwrap(), Some(w.clone()));
        // A copy: another path (and inode).
        let copy = top.join("copy");
        std::fs::create_dir(&copy).unwrap();
        std::fs::copy(store.join(BINDING_FILE), copy.join(BINDING_FILE)).unwrap();
        let e = bound_workspace(&copy).unwrap_err().to_string();
        assert!(
            e.contains("was not made here")
                && e.contains(&format!("made for the store {}", store.display()))
                && e.contains(&format!(
                    "`cairn --store {} init {} --rebind`",
                    copy.display(),
                    w.display()
                )),
            "{e}"
        );
        assert!(check(&copy, &w, true, false).is_err());
        assert_eq!(check(&copy, &top, false, true).unwrap(), None);
        // Rebound to the directory that holds it: no proof needed.
        assert_eq!(bound_workspace(&copy).unwrap(), Some(top.clone()));
        // No proof at all (a hand-written or old binding).
        std::fs::write(
            copy.join(BINDING_FILE),
            format!(r#"{{"version":1,"workspace":"{}"}}"#, w.display()),
        )
        .unwrap();
        let e = bound_workspace(&copy).unwrap_err().to_string();
        assert!(e.contains("records no proof"), "{e}");
        // A depth-1 binding under any name is the holder, always trusted.
        std::fs::write(
            copy.join(BINDING_FILE),
            r#"{"version":1,"store_in_workspace":".cairn"}"#,
        )
        .unwrap();
        assert_eq!(bound_workspace(&copy).unwrap(), Some(top));
    }

    /// Only the store directory's own path being a link counts (a link
    /// a clone can ship); a link above it is the user's layout. Through an
    /// unrecorded link the binding of the store it leads to is refused,
    /// even one that binds that store to the directory holding it.
    #[test]
    fn only_the_store_directory_itself_counts_as_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let (other, proj) = (top.join("other"), top.join("proj"));
        for d in [other.join(".cairn"), proj.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(
            check(&other.join(".cairn"), &other, true, false).unwrap(),
            None
        );
        std::os::unix::fs::symlink(other.join(".cairn"), proj.join(".cairn")).unwrap();
        std::os::unix::fs::symlink(&other, top.join("up")).unwrap();
        assert_eq!(store_link(&other.join(".cairn")), None);
        assert_eq!(store_link(&top.join("up/.cairn")), None);
        assert_eq!(
            bound_workspace(&top.join("up/.cairn")).unwrap(),
            Some(other.clone())
        );
        assert_eq!(store_link(&proj.join(".cairn/")), Some(proj.join(".cairn")));
        let e = bound_workspace(&proj.join(".cairn"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("records no link to it") && e.contains(&other.display().to_string()),
            "{e}"
        );
        assert!(check(&proj.join(".cairn"), &proj, true, false).is_err());
        // Bound with the link: trusted through it, and by its own path.
        assert_eq!(
            check(&proj.join(".cairn"), &proj, true, true).unwrap(),
            None
        );
        assert_eq!(
            bound_workspace(&proj.join(".cairn")).unwrap(),
            Some(proj.clone())
        );
        assert_eq!(bound_workspace(&other.join(".cairn")).unwrap(), Some(proj));
    }

    #[test]
    fn a_damaged_binding_says_how_to_mend_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(BINDING_FILE), "{\"version\":1}").unwrap();
        let e = bound_workspace(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("damaged") && e.contains("names no workspace"),
            "{e}"
        );
        std::fs::write(tmp.path().join(BINDING_FILE), "not json").unwrap();
        assert!(bound_workspace(tmp.path()).is_err());
        // Regression (issue 27): a link to `/dev/zero` was read whole.
        std::fs::remove_file(tmp.path().join(BINDING_FILE)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join(BINDING_FILE)).unwrap();
        let e = bound_workspace(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") && e.contains("init") && e.contains("--rebind"),
            "{e}"
        );
    }
}
