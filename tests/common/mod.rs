//! Fixtures shared by the library's tests and the command line's (the
//! command line's `tests/common` includes this file).
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;

/// A history through `store` on workspace `ws` (session
/// `t`): c1 with `a.txt` = "one" and application state "epoch 1", a
/// change, a rollback to c1, then two more checkpoints, so that
/// `keep_per_session: 2` discards c1 while a rollback restored its tree.
/// Returns c1's id.
pub fn restored_checkpoint_with_state(store: &cairn::Store, ws: &Path) -> cairn::CheckpointId {
    let s = store.session("t");
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let c1 = s
        .checkpoint_with(
            "with state",
            cairn::ScanMode::Full,
            Some(b"epoch 1".to_vec()),
        )
        .unwrap();
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    s.checkpoint("two").unwrap();
    s.rollback(c1.id).unwrap();
    s.checkpoint("x").unwrap();
    s.checkpoint("y").unwrap();
    c1.id
}
