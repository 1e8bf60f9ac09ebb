//! Store discovery: `--store DIR`, else `$CAIRN_STORE`, else the nearest
//! `.cairn` walking up from the current directory (as git finds `.git`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use cairn::store_dir::STORE_DIR_NAME;

/// Where the store is and how it was found.
#[derive(Debug, Clone)]
pub struct Found {
    /// The `.cairn` directory.
    pub store: PathBuf,
    /// The workspace (the directory that holds the store, unless overridden).
    pub workspace: PathBuf,
    /// What [`cairn::binding::bound_workspace`] gave, when [`find`] read
    /// it to find the workspace (no `--workspace`), an error as its
    /// message: `None` when it was not read. So a command reads the
    /// binding file once, to find the workspace, to warn, and for the
    /// store's open ([`cairn::StoreBuilder::binding_read`]).
    pub bound: Option<std::result::Result<Option<PathBuf>, String>>,
}

impl Found {
    /// Why the store's workspace binding cannot be trusted, if it cannot,
    /// read now unless [`find`] read it already.
    pub fn binding_problem(&self) -> Option<String> {
        match &self.bound {
            Some(read) => read.as_ref().err().cloned(),
            None => cairn::binding::bound_workspace(&self.store)
                .err()
                .map(|e| e.to_string()),
        }
    }
}

/// Finds the store for a command that needs an existing one.
pub fn find(store_flag: Option<&Path>, workspace_flag: Option<&Path>) -> Result<Found> {
    let cwd = std::env::current_dir()?;
    let store = if let Some(s) = store_flag {
        absolute(&cwd, s)
    } else if let Some(s) = std::env::var_os("CAIRN_STORE").filter(|s| !s.is_empty()) {
        absolute(&cwd, Path::new(&s))
    } else {
        let mut dir = Some(cwd.as_path());
        let mut found = None;
        while let Some(d) = dir {
            if d.join(STORE_DIR_NAME).join("log").is_dir() {
                found = Some(d.join(STORE_DIR_NAME));
                break;
            }
            dir = d.parent();
        }
        match found {
            Some(f) => f,
            None => bail!(
                "no cairn store found in {} or any parent directory: run `cairn init` here, or pass --store DIR / set CAIRN_STORE (or --in-memory, for a store that lasts one command)",
                cwd.display()
            ),
        }
    };
    if !store.join("log").is_dir() {
        // A workspace given where its store was meant.
        let inner = store.join(STORE_DIR_NAME);
        if inner.join("log").is_dir() {
            bail!(
                "{} is not a cairn store (no log/ inside), but it holds one: did you mean --store {}?",
                store.display(),
                inner.display()
            );
        }
        bail!(
            "{} is not a cairn store (no log/ inside): run `cairn init` to create one",
            store.display()
        );
    }
    // The workspace the store is bound to (see `cairn::binding`), else the
    // directory that holds it.
    let holder = || {
        store
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| cwd.clone())
    };
    let (workspace, bound) = match workspace_flag {
        Some(w) => (absolute(&cwd, w), None),
        None => {
            let bound = cairn::binding::bound_workspace(&store).map_err(|e| e.to_string());
            let workspace = match &bound {
                Ok(Some(w)) => w.clone(),
                _ => holder(),
            };
            (workspace, Some(bound))
        }
    };
    Ok(Found {
        store,
        workspace,
        bound,
    })
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_store_that_is_not_a_store_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let e = find(Some(tmp.path()), None).unwrap_err().to_string();
        assert!(
            e.contains("is not a cairn store") && e.contains("cairn init"),
            "{e}"
        );
    }

    #[test]
    fn a_workspace_given_as_the_store_is_pointed_at_its_store() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".cairn/log")).unwrap();
        let e = find(Some(tmp.path()), None).unwrap_err().to_string();
        assert!(
            e.contains("did you mean --store") && e.contains(".cairn"),
            "{e}"
        );
    }

    #[test]
    fn workspace_is_the_parent_of_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join(".cairn");
        std::fs::create_dir_all(store.join("log")).unwrap();
        let f = find(Some(&store), None).unwrap();
        assert_eq!(f.workspace, tmp.path());
    }
}
