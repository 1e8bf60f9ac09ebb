"""Type stubs of cairn's native module (re-exported by ``cairn``)."""

import os
from types import TracebackType
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Type, Union

Point = Union[str, int, "Checkpoint"]
"""``"head"``, ``"@12"`` (an LSN), ``"c42"`` (a checkpoint), an ISO-8601
time, an LSN as an int, or a :class:`Checkpoint`."""

PathArg = Union[str, "os.PathLike[str]"]
Event = Dict[str, Any]
"""A record as a dict with cairn's canonical JSON field names: ``lsn``,
``ts``, ``session``, ``kind``, ``text``, ``path``, ..., ``hash``."""

class Error(Exception):
    """Every error cairn raises; its message is cairn's, naming what and where."""

class InvalidEventError(Error):
    """An event (or an import's line) was refused; nothing was appended."""

class CorruptError(Error):
    """The store's data is damaged (a bad frame, checksum or blob)."""

class LockedError(Error):
    """Another handle, in this process or another, holds the store's writer lock."""

class NotFoundError(Error):
    """No such store, checkpoint, path, record or file."""

class OutsideWorkspaceError(Error):
    """A path outside the workspace, under .git or .cairn, or through a symlink."""

class Checkpoint:
    """A checkpoint: a point the workspace can be rolled back to."""

    id: str
    """Its id, ``c<lsn>``."""
    lsn: int
    ts: str
    session: str
    label: Optional[str]
    run: Optional[str]
    agent: Optional[str]
    model: Optional[str]
    root: str
    state: Optional[str]
    """The application-state blob's hash, if the checkpoint has state."""
    counts: Dict[str, Any]
    """``{"files", "changed", "skipped"}``: what the scan saw."""
    discarded: bool

class RollbackReport:
    """What a rollback did (or, for a dry run, would do)."""

    target: str
    source: Optional[str]
    """The undo point (roll back to it to undo this); None for a dry run."""
    lsn: Optional[int]
    dry_run: bool
    workspace: str
    written: List[str]
    deleted: List[str]
    created_dirs: List[str]
    removed_dirs: List[str]
    kept: List[Dict[str, str]]
    state: Optional[bytes]
    """The target checkpoint's application state."""

class Events(Iterator[Event]):
    """The lazy iterator :meth:`Store.events` returns."""

    def __iter__(self) -> "Events": ...
    def __next__(self) -> Event: ...

class Follow(Iterator[Event]):
    """The iterator :meth:`Store.follow` returns; it waits for new records."""

    def __iter__(self) -> "Follow": ...
    def __next__(self) -> Event: ...

class Session:
    """A handle for recording into one session (thread, conversation)."""

    @property
    def id(self) -> str: ...
    def prompt(self, text: str) -> int:
        """Records a prompt; returns its LSN once durable."""
    def reply(self, text: str) -> int:
        """Records a reply; returns its LSN."""
    def tool_call(self, name: str, ok: bool = True) -> int:
        """Records a tool call; returns its LSN."""
    def record(self, event: Dict[str, Any]) -> int:
        """Records an event dict (``kind`` required); returns its LSN."""
    def record_batch(self, events: Iterable[Dict[str, Any]]) -> Optional[Tuple[int, int]]:
        """Records events (a list, tuple or any iterable of dicts) atomically
        as one append; returns (first, last) LSNs, or None for none. A bad
        event raises InvalidEventError naming its index; nothing is appended.
        Dicts of plain fields (kind, text, tool, ok, latency_ms and the
        stamps) are read directly, the fastest shape."""
    def track(self, path: str) -> None:
        """Tells cairn this workspace path is about to be written."""
    def write_file(self, path: str, data: bytes) -> int:
        """Writes a workspace file, keeping what it replaces; returns the record's LSN."""
    def delete_file(self, path: str) -> int:
        """Deletes a workspace file, keeping its contents; returns the record's LSN."""
    def move_file(self, src: str, dst: str) -> int:
        """Moves a workspace file; returns the record's LSN."""
    def checkpoint(self, label: str, state: Optional[bytes] = None) -> Checkpoint:
        """Checkpoints the workspace, keeping ``state`` for a rollback to hand back."""
    def rollback(
        self,
        target: Union[str, Checkpoint],
        paths: Optional[List[str]] = None,
        dry_run: bool = False,
        state: Optional[bytes] = None,
    ) -> RollbackReport:
        """Rolls the workspace (or only ``paths``) back to a checkpoint."""

class Store:
    """An open cairn store; holds the writer lock until closed. A context manager."""

    @staticmethod
    def open(
        path: PathArg,
        create: bool = False,
        durability: str = "always",
        read_only: bool = False,
    ) -> "Store":
        """Opens the store of workspace ``path`` (``<path>/.cairn``)."""
    @staticmethod
    def init(workspace: PathArg) -> str:
        """Creates the store of ``workspace``; returns the store directory."""
    def __enter__(self) -> "Store": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def close(self) -> None:
        """Closes the store cleanly; closing twice is no error."""
    @property
    def closed(self) -> bool: ...
    @property
    def workspace(self) -> str: ...
    @property
    def head(self) -> int:
        """The last committed record's LSN (0 for an empty store)."""
    def sync(self) -> None: ...
    def session(
        self,
        id: str,
        run: Optional[str] = None,
        agent: Optional[str] = None,
        model: Optional[str] = None,
        phase: Optional[str] = None,
    ) -> Session: ...
    def events(
        self,
        session: Optional[str] = None,
        kind: Optional[str] = None,
        path: Optional[str] = None,
        since: Optional[Union[str, int]] = None,
        until: Optional[Union[str, int]] = None,
        limit: Optional[int] = None,
        run: Optional[str] = None,
        agent: Optional[str] = None,
        model: Optional[str] = None,
    ) -> Events:
        """A lazy iterator over the matching records, oldest first."""
    def follow(
        self, from_lsn: Optional[int] = None, idle_timeout: Optional[float] = None
    ) -> Follow:
        """Records from ``from_lsn`` on (None: from now), waiting for new ones."""
    def checkpoints(self, session: Optional[str] = None) -> List[Checkpoint]: ...
    def show(self, point: Point, path: str) -> bytes:
        """The contents of ``path`` at ``point``."""
    def tree(self, point: Optional[Point] = None) -> Dict[str, Dict[str, Any]]: ...
    def diff(
        self, a: Point, b: Optional[Point] = None, paths: Optional[List[str]] = None
    ) -> List[Dict[str, Any]]: ...
    def history(self, path: str) -> List[Event]: ...
    def blame(self, point: Point, path: str) -> List[Dict[str, Any]]: ...
    def branches(self, id: Optional[Union[str, Checkpoint]] = None) -> List[Dict[str, Any]]: ...
    def export(
        self,
        path_or_file: Union[PathArg, IO[Any]],
        format: str = "jsonl",
        session: Optional[str] = None,
        kind: Optional[str] = None,
    ) -> Dict[str, int]: ...
    def import_(self, path: PathArg, format: str = "jsonl") -> Dict[str, Optional[int]]: ...
    def verify(self) -> Dict[str, Any]: ...
    def stats(self) -> Dict[str, Any]: ...
    def gc(
        self, keep_per_session: Optional[int] = None, max_bytes: Optional[int] = None
    ) -> Dict[str, Any]: ...
