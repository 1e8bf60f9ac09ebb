"""cairn: durable, tamper-evident history for AI coding agents, embedded.

Every agent action, checkpoint and rollback is a record in cairn's
append-only log, durable before the call returns; file contents are kept
in a content-addressed blob store; a rollback restores the workspace
exactly (and can itself be undone).

    import cairn

    with cairn.Store.open("/path/to/workspace", create=True) as store:
        s = store.session("thread-42", agent="coder", model="model-x")
        before = s.checkpoint("Before turn 1")
        s.prompt("make the tests pass")
        s.write_file("src/lib.rs", b"pub fn answer() -> u32 { 42 }\\n")
        s.reply("done")
        s.rollback(before.id)          # undo the turn (itself undoable)

Errors raise :class:`cairn.Error` or a subclass per family.
"""

from ._cairn import (
    Checkpoint,
    CorruptError,
    Error,
    Events,
    Follow,
    InvalidEventError,
    LockedError,
    NotFoundError,
    OutsideWorkspaceError,
    RollbackReport,
    Session,
    Store,
)

__all__ = [
    "Checkpoint",
    "CorruptError",
    "Error",
    "Events",
    "Follow",
    "InvalidEventError",
    "LockedError",
    "NotFoundError",
    "OutsideWorkspaceError",
    "RollbackReport",
    "Session",
    "Store",
]
