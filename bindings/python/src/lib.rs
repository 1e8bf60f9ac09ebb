//! The native module `cairn._cairn`, re-exported by the Python package
//! `cairn`: cairn's embedded store from Python, with every guarantee of
//! the Rust library (durable before acknowledged, group commit across
//! threads, exact rollback, clear errors).
//!
//! Every call converts its arguments with the GIL held, then runs cairn
//! with the GIL released (`py.allow_threads`), so Python threads that
//! append at once share fsyncs through cairn's group commit.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn::json::{Map, Number, Value};
use cairn::{CheckpointId, Filter, Point, ScanMode};
use cairn_bindings_common as common;
use common::{BindError, ErrorKind, SessionSpec, Shared};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

create_exception!(
    _cairn,
    Error,
    PyException,
    "Every error cairn raises; its message is cairn's, naming what and where."
);
create_exception!(
    _cairn,
    InvalidEventError,
    Error,
    "An event (or an import's line) was refused; nothing was appended."
);
create_exception!(
    _cairn,
    CorruptError,
    Error,
    "The store's data is damaged (a bad frame, checksum or blob)."
);
create_exception!(
    _cairn,
    LockedError,
    Error,
    "Another handle, in this process or another, holds the store's writer lock."
);
create_exception!(
    _cairn,
    NotFoundError,
    Error,
    "No such store, checkpoint, path, record or file."
);
create_exception!(
    _cairn,
    OutsideWorkspaceError,
    Error,
    "A path outside the workspace, under .git or .cairn, or through a symlink."
);

/// How long a follower waits in Rust before it comes back to check for
/// Ctrl-C (a signal is only seen with the GIL held).
const FOLLOW_SIGNAL_CHECK: Duration = Duration::from_millis(200);

fn py_err(e: BindError) -> PyErr {
    match e.kind {
        ErrorKind::InvalidEvent => InvalidEventError::new_err(e.message),
        ErrorKind::Corrupt => CorruptError::new_err(e.message),
        ErrorKind::Locked => LockedError::new_err(e.message),
        ErrorKind::NotFound => NotFoundError::new_err(e.message),
        ErrorKind::OutsideWorkspace => OutsideWorkspaceError::new_err(e.message),
        ErrorKind::Other => Error::new_err(e.message),
    }
}

/// A JSON value as a Python object (dict, list, str, int, float, bool, None).
fn to_py(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any().unbind()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any().unbind()
            } else {
                n.as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any().unbind(),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// Nesting past this depth in an event's dict is refused: a cycle (a dict
/// that holds itself) would otherwise recurse without end, and no event
/// field nests anywhere near it.
const MAX_NESTING: usize = 64;

/// A Python object as a JSON value: dict (str keys), list/tuple, str,
/// int, float, bool, None.
fn from_py(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_NESTING {
        return Err(InvalidEventError::new_err(format!(
            "an event nests deeper than {MAX_NESTING} levels (does a dict hold itself?)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(s) = obj.downcast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if obj.downcast::<PyInt>().is_ok() {
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        return Err(InvalidEventError::new_err(format!(
            "the integer {obj} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = obj.downcast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| InvalidEventError::new_err(format!("{f} is not a JSON number")));
    }
    if let Ok(d) = obj.downcast::<PyDict>() {
        let mut m = Map::new();
        for (k, x) in d.iter() {
            let key = k.downcast::<PyString>().map_err(|_| {
                InvalidEventError::new_err(format!("an event's keys are strings, not {k:?}"))
            })?;
            m.insert(key.to_cow()?.into_owned(), from_py(&x, depth + 1)?);
        }
        return Ok(Value::Object(m));
    }
    if let Ok(l) = obj.downcast::<PyList>() {
        return l
            .iter()
            .map(|x| from_py(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.downcast::<PyTuple>() {
        return t
            .iter()
            .map(|x| from_py(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    Err(InvalidEventError::new_err(format!(
        "an event holds JSON values (dict, list, str, int, float, bool, None), not {}",
        obj.get_type().name()?
    )))
}

/// The plain fields [`Converter::plain`] reads without a round trip
/// through JSON text, in the order of [`Converter::names`].
const PLAIN_FIELDS: [&str; 10] = [
    "kind",
    "ok",
    "latency_ms",
    "text",
    "tool",
    "session",
    "run",
    "phase",
    "agent",
    "model",
];

/// The index in [`PLAIN_FIELDS`] of the first string field (`text`); the
/// ones before it (`kind`, `ok`, `latency_ms`) are read apart.
const FIRST_TEXT_FIELD: usize = 3;

/// Kind strings one [`Converter`] remembers: one per event kind is all a
/// batch needs (a batch that spells a kind with many distinct str
/// objects just decodes the others, so the cache stays this small).
const KIND_CACHE: usize = cairn::EventKind::ALL.len();

/// A Python str's UTF-8 text, copied once into a `String`.
///
/// Outside Windows it reads the str's own UTF-8 form with
/// `PyUnicode_AsUTF8AndSize`, exported by every CPython 3 (in the limited
/// API only from 3.10, so PyO3's abi3-py39 build does not use it): for an
/// ASCII str that is the str's own buffer, where PyO3's abi3 path
/// (`to_cow`) makes a bytes object per str. On Windows the abi3 module
/// links python3.dll, which lacks it before 3.10, so it takes that path.
fn owned_text(s: &Bound<'_, PyString>) -> PyResult<String> {
    #[cfg(not(windows))]
    {
        extern "C" {
            fn PyUnicode_AsUTF8AndSize(
                unicode: *mut pyo3::ffi::PyObject,
                size: *mut pyo3::ffi::Py_ssize_t,
            ) -> *const std::os::raw::c_char;
        }
        let mut len: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live str and the GIL is held (a `Bound` proves
        // both); the call returns the str's UTF-8 form, owned by the str
        // and valid while it lives, or NULL with an exception set (a lone
        // surrogate).
        let p = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut len) };
        if p.is_null() {
            return Err(PyErr::fetch(s.py()));
        }
        let len = usize::try_from(len).map_err(|_| PyTypeError::new_err("negative str length"))?;
        // SAFETY: `p` points to `len` bytes owned by `s`, which outlives
        // this borrow; CPython's UTF-8 form is valid UTF-8.
        let text = unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(p.cast::<u8>(), len))
        };
        Ok(text.to_owned())
    }
    #[cfg(windows)]
    {
        Ok(s.to_cow()?.into_owned())
    }
}

/// Turns dicts into events for one call (`record`, or all of one
/// `record_batch`), holding what every event of the call shares: the
/// interned field names (a dict written as a literal has these very key
/// objects, so a key is found by identity, not by its text), the kind
/// strings already read, and a template event with the session's stamps
/// and the call's time (one clock read per call: the events of a batch
/// are appended at once).
struct Converter<'py> {
    spec: &'py SessionSpec,
    names: [Bound<'py, PyString>; 10],
    kinds: Vec<(Bound<'py, PyString>, cairn::EventKind)>,
    template: cairn::Event,
}

impl<'py> Converter<'py> {
    fn new(py: Python<'py>, spec: &'py SessionSpec) -> Converter<'py> {
        let names = PLAIN_FIELDS.map(|n| PyString::intern(py, n));
        let session = if spec.id.is_empty() {
            cairn::DEFAULT_SESSION.to_owned()
        } else {
            spec.id.clone()
        };
        let mut template = cairn::Event::new(cairn::EventKind::Prompt, session);
        template.run = spec.run.clone();
        template.phase = spec.phase.clone();
        template.agent = spec.agent.clone();
        template.model = spec.model.clone();
        Converter {
            spec,
            names,
            kinds: Vec::new(),
            template,
        }
    }

    /// Which plain field key `k` names (by identity, else by its text).
    fn field(&self, k: &Bound<'py, PyString>) -> PyResult<Option<usize>> {
        if let Some(i) = self.names.iter().position(|n| n.as_ptr() == k.as_ptr()) {
            return Ok(Some(i));
        }
        let k = k.to_cow()?;
        Ok(PLAIN_FIELDS.iter().position(|n| *n == k))
    }

    /// The kind `v` names, if it is one the plain path takes (not a file
    /// operation, whose paths the JSON path checks and names).
    fn kind(&mut self, v: &Bound<'py, PyString>) -> PyResult<Option<cairn::EventKind>> {
        if let Some((_, k)) = self.kinds.iter().find(|(s, _)| s.as_ptr() == v.as_ptr()) {
            return Ok(Some(*k));
        }
        let kind = match common::kind(&v.to_cow()?) {
            Ok(k) if !k.is_file_op() => k,
            _ => return Ok(None),
        };
        if self.kinds.len() < KIND_CACHE {
            // Holding the str keeps its address from being reused by another.
            self.kinds.push((v.clone(), kind));
        }
        Ok(Some(kind))
    }

    /// The event of a dict with only plain fields (`kind`, `text`, `tool`,
    /// `ok`, `latency_ms` and the stamps), built without a round trip
    /// through JSON text: the common case of `record_batch`, whose rate is
    /// the binding's. None when the dict has anything else (or a value of
    /// another type): the caller then reads it as JSON, which checks and
    /// names every field. Either way the store checks the event again
    /// (`Event::check`) before it appends it.
    fn plain(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Option<cairn::Event>> {
        let Ok(d) = obj.downcast::<PyDict>() else {
            return Ok(None);
        };
        let mut e = self.template.clone();
        let mut kind = None;
        for (k, v) in d.iter() {
            let Ok(k) = k.downcast::<PyString>() else {
                return Ok(None);
            };
            let Some(field) = self.field(k)? else {
                return Ok(None);
            };
            match field {
                0 => {
                    let Ok(v) = v.downcast::<PyString>() else {
                        return Ok(None);
                    };
                    match self.kind(v)? {
                        Some(k) => kind = Some(k),
                        None => return Ok(None),
                    }
                }
                1 => match v.downcast::<PyBool>() {
                    Ok(b) => e.ok = b.is_true(),
                    Err(_) => return Ok(None),
                },
                2 => match v.extract::<u64>() {
                    Ok(n) if v.downcast::<PyBool>().is_err() => e.latency_ms = Some(n),
                    _ => return Ok(None),
                },
                _ => {
                    let Ok(v) = v.downcast::<PyString>() else {
                        return Ok(None);
                    };
                    let text = owned_text(v).map_err(|e| {
                        InvalidEventError::new_err(format!(
                            "field `{}`: {}",
                            PLAIN_FIELDS[field],
                            e.value(obj.py())
                        ))
                    })?;
                    let slot = match field - FIRST_TEXT_FIELD {
                        0 => &mut e.text,
                        1 => &mut e.tool,
                        2 => {
                            if text.is_empty() {
                                return Ok(None);
                            }
                            e.session = text;
                            continue;
                        }
                        3 => &mut e.run,
                        4 => &mut e.phase,
                        5 => &mut e.agent,
                        _ => &mut e.model,
                    };
                    *slot = Some(text);
                }
            }
        }
        let Some(kind) = kind else { return Ok(None) };
        e.kind = kind;
        Ok(Some(e))
    }

    /// An event from a dict: [`Converter::plain`], else read as JSON.
    fn event(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<cairn::Event> {
        if let Some(e) = self.plain(obj)? {
            return Ok(e);
        }
        self.spec.event_from_json(from_py(obj, 0)?).map_err(py_err)
    }
}

/// A checkpoint id from `c42` or a `Checkpoint`.
fn checkpoint_arg(obj: &Bound<'_, PyAny>) -> PyResult<CheckpointId> {
    if let Ok(c) = obj.downcast::<Checkpoint>() {
        return common::checkpoint_id(&c.get().id).map_err(py_err);
    }
    if let Ok(s) = obj.extract::<String>() {
        return common::checkpoint_id(&s).map_err(py_err);
    }
    Err(PyTypeError::new_err(
        "a checkpoint is its id (\"c42\") or a Checkpoint",
    ))
}

/// A point from `head`, `@12`, `c42`, an ISO-8601 time, an int (an LSN) or a `Checkpoint`.
fn point_arg(obj: &Bound<'_, PyAny>) -> PyResult<Point> {
    if let Ok(c) = obj.downcast::<Checkpoint>() {
        return common::point(&c.get().id).map_err(py_err);
    }
    if obj.downcast::<PyInt>().is_ok() && obj.downcast::<PyBool>().is_err() {
        let lsn: u64 = obj.extract()?;
        return Ok(Point::Lsn(cairn::Lsn(lsn)));
    }
    if let Ok(s) = obj.extract::<String>() {
        return common::point(&s).map_err(py_err);
    }
    Err(PyTypeError::new_err(
        "a point is \"head\", \"@12\", \"c42\", an ISO-8601 time, an LSN (int) or a Checkpoint",
    ))
}

/// A time bound from an ISO-8601 text or epoch milliseconds (int).
fn time_arg(obj: Option<&Bound<'_, PyAny>>, since: bool) -> PyResult<Option<cairn::Timestamp>> {
    let Some(obj) = obj else { return Ok(None) };
    if obj.is_none() {
        return Ok(None);
    }
    let text = if let Ok(ms) = obj.extract::<i64>() {
        ms.to_string()
    } else {
        obj.extract::<String>().map_err(|_| {
            PyTypeError::new_err("a time is an ISO-8601 text or epoch milliseconds (int)")
        })?
    };
    common::time_bound(&text, since).map(Some).map_err(py_err)
}

/// A path argument: str or os.PathLike.
fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    obj.extract::<PathBuf>()
}

/// An open cairn store: the embedded engine behind one handle, holding the
/// store's writer lock until it is closed. A context manager.
#[pyclass(module = "cairn", frozen)]
struct Store {
    shared: Arc<Shared>,
}

#[pymethods]
impl Store {
    /// Opens the store of workspace `path` (at `<path>/.cairn`).
    ///
    /// Without `create`, a workspace that has no store is a NotFoundError.
    /// `durability`: "always" (every append durable before it returns;
    /// threads share fsyncs), "never" (left to the OS and close()), or
    /// "interval:<ms>". `read_only` takes no lock and refuses writes.
    #[staticmethod]
    #[pyo3(signature = (path, create=false, durability="always", read_only=false))]
    fn open(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        create: bool,
        durability: &str,
        read_only: bool,
    ) -> PyResult<Store> {
        let path = path_arg(path)?;
        let durability = durability.to_owned();
        let shared = py
            .allow_threads(|| Shared::open(&path, create, &durability, read_only))
            .map_err(py_err)?;
        Ok(Store {
            shared: Arc::new(shared),
        })
    }

    /// Creates the store of `workspace` (and the directory), as `cairn
    /// init` does, and closes it; returns the store directory.
    #[staticmethod]
    fn init(py: Python<'_>, workspace: &Bound<'_, PyAny>) -> PyResult<String> {
        let ws = path_arg(workspace)?;
        let root = py.allow_threads(|| common::init(&ws)).map_err(py_err)?;
        Ok(root.display().to_string())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.shared.is_closed() {
            " (closed)"
        } else {
            ""
        };
        format!(
            "cairn.Store({:?}){state}",
            self.shared.workspace().display().to_string()
        )
    }

    /// Closes the store cleanly (syncs, releases the lock). Closing twice is no error.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let shared = self.shared.clone();
        py.allow_threads(move || shared.close()).map_err(py_err)
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// The workspace directory.
    #[getter]
    fn workspace(&self) -> String {
        self.shared.workspace().display().to_string()
    }

    /// The last committed record's LSN (0 for an empty store).
    #[getter]
    fn head(&self, py: Python<'_>) -> PyResult<u64> {
        let shared = self.shared.clone();
        py.allow_threads(move || shared.with(|s| Ok(s.refresh()?.last_lsn.0)))
            .map_err(py_err)
    }

    /// Makes everything written so far durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let shared = self.shared.clone();
        py.allow_threads(move || shared.with(|s| s.sync()))
            .map_err(py_err)
    }

    /// A handle for recording into session `id`, stamping its events and
    /// checkpoints with `run`, `agent`, `model` and `phase`.
    #[pyo3(signature = (id, run=None, agent=None, model=None, phase=None))]
    fn session(
        &self,
        id: String,
        run: Option<String>,
        agent: Option<String>,
        model: Option<String>,
        phase: Option<String>,
    ) -> Session {
        Session {
            shared: self.shared.clone(),
            spec: SessionSpec {
                id,
                run,
                phase,
                agent,
                model,
            },
        }
    }

    /// A lazy iterator over the records that match, oldest first, each a
    /// dict with cairn's canonical JSON field names.
    #[pyo3(signature = (session=None, kind=None, path=None, since=None, until=None, limit=None, run=None, agent=None, model=None))]
    #[allow(clippy::too_many_arguments)]
    fn events(
        &self,
        session: Option<String>,
        kind: Option<String>,
        path: Option<String>,
        since: Option<&Bound<'_, PyAny>>,
        until: Option<&Bound<'_, PyAny>>,
        limit: Option<usize>,
        run: Option<String>,
        agent: Option<String>,
        model: Option<String>,
    ) -> PyResult<Events> {
        let kind = match kind {
            Some(k) => Some(common::kind(&k).map_err(py_err)?),
            None => None,
        };
        let filter = Filter {
            session,
            kind,
            path,
            since: time_arg(since, true)?,
            until: time_arg(until, false)?,
            limit,
            run,
            agent,
            model,
            ..Filter::all()
        };
        Ok(Events {
            shared: self.shared.clone(),
            cursor: common::Cursor::new(filter),
            page: VecDeque::new(),
        })
    }

    /// An iterator over the records committed from LSN `from_lsn` on (None:
    /// only those committed from now), waiting for new ones. With
    /// `idle_timeout` (seconds), it ends once none came for that long.
    #[pyo3(signature = (from_lsn=None, idle_timeout=None))]
    fn follow(
        &self,
        py: Python<'_>,
        from_lsn: Option<u64>,
        idle_timeout: Option<f64>,
    ) -> PyResult<Follow> {
        let shared = self.shared.clone();
        let follower = py
            .allow_threads(move || shared.try_with(|s| common::Follower::new(s, from_lsn)))
            .map_err(py_err)?;
        let idle = match idle_timeout {
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(Error::new_err(format!(
                    "idle_timeout must be a number of seconds, 0 or more, not {t}"
                )))
            }
            None => None,
        };
        Ok(Follow {
            shared: self.shared.clone(),
            follower,
            idle,
        })
    }

    /// The checkpoints (of one session, or all), oldest first.
    #[pyo3(signature = (session=None))]
    fn checkpoints(&self, py: Python<'_>, session: Option<String>) -> PyResult<Vec<Checkpoint>> {
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || {
                shared.try_with(|s| common::checkpoints_json(s, session.as_deref()))
            })
            .map_err(py_err)?;
        match v {
            Value::Array(items) => items.iter().map(|c| Checkpoint::from_json(py, c)).collect(),
            _ => Ok(Vec::new()),
        }
    }

    /// The contents of `path` at `point` ("head", "@12", "c42", a time, an LSN or a Checkpoint).
    fn show<'py>(
        &self,
        py: Python<'py>,
        point: &Bound<'py, PyAny>,
        path: String,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let at = point_arg(point)?;
        let shared = self.shared.clone();
        let bytes = py
            .allow_threads(move || shared.with(|s| s.query(|q| q.file_at(at, &path))))
            .map_err(py_err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The tree at `point`: `{path: {"blob", "mode", "kind"}}`.
    #[pyo3(signature = (point=None))]
    fn tree(&self, py: Python<'_>, point: Option<&Bound<'_, PyAny>>) -> PyResult<PyObject> {
        let at = point.map(point_arg).transpose()?.unwrap_or(Point::Head);
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::tree_json(s, at)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// The files that differ between points `a` and `b` (default head),
    /// optionally only under `paths`: a list of dicts with `path`,
    /// `status` and `unified`.
    #[pyo3(signature = (a, b=None, paths=None))]
    fn diff(
        &self,
        py: Python<'_>,
        a: &Bound<'_, PyAny>,
        b: Option<&Bound<'_, PyAny>>,
        paths: Option<Vec<String>>,
    ) -> PyResult<PyObject> {
        let a = point_arg(a)?;
        let b = b.map(point_arg).transpose()?.unwrap_or(Point::Head);
        let paths = paths.unwrap_or_default();
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::diff_json(s, a, b, &paths)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// The records that changed `path`, oldest first.
    fn history(&self, py: Python<'_>, path: String) -> PyResult<PyObject> {
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::history_json(s, &path)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// Each line of `path` at `point` with the record that last changed it.
    fn blame(&self, py: Python<'_>, point: &Bound<'_, PyAny>, path: String) -> PyResult<PyObject> {
        let at = point_arg(point)?;
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::blame_json(s, at, &path)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// The branch graph: with `id`, the checkpoints and rollbacks that
    /// continue from that checkpoint (what was tried from it); without,
    /// every checkpoint and rollback with its parent.
    #[pyo3(signature = (id=None))]
    fn branches(&self, py: Python<'_>, id: Option<&Bound<'_, PyAny>>) -> PyResult<PyObject> {
        let of = id.map(checkpoint_arg).transpose()?;
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::branches_json(s, of)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// Exports the records that match (all, by default) in `format`
    /// ("jsonl", "cortexide" or "comma") to a path or a writable file
    /// object; returns `{"written", "records", "bytes"}`.
    #[pyo3(signature = (path_or_file, format="jsonl", session=None, kind=None))]
    fn export(
        &self,
        py: Python<'_>,
        path_or_file: &Bound<'_, PyAny>,
        format: &str,
        session: Option<String>,
        kind: Option<String>,
    ) -> PyResult<PyObject> {
        let fmt = common::format(format).map_err(py_err)?;
        let kind = kind.map(|k| common::kind(&k)).transpose().map_err(py_err)?;
        let filter = Filter {
            session,
            kind,
            ..Filter::all()
        };
        let shared = self.shared.clone();
        if let Ok(path) = path_arg(path_or_file) {
            let v = py
                .allow_threads(move || {
                    shared.try_with(|s| common::export_to_path(s, &filter, fmt, &path))
                })
                .map_err(py_err)?;
            return to_py(py, &v);
        }
        if !path_or_file.hasattr("write")? {
            return Err(PyTypeError::new_err(
                "export writes to a path or a file object with write()",
            ));
        }
        let (bytes, v) = py
            .allow_threads(move || shared.try_with(|s| common::export_to_vec(s, &filter, fmt)))
            .map_err(py_err)?;
        // A binary file takes bytes; a text file (io.TextIOBase) takes str.
        let is_text = py
            .import("io")?
            .getattr("TextIOBase")
            .and_then(|t| path_or_file.is_instance(&t))?;
        if is_text {
            path_or_file.call_method1("write", (String::from_utf8_lossy(&bytes).into_owned(),))?;
        } else {
            path_or_file.call_method1("write", (PyBytes::new(py, &bytes),))?;
        }
        to_py(py, &v)
    }

    /// Imports the file at `path` in `format` ("jsonl", "cortexide" or
    /// "comma"); returns `{"first", "last"}`, the LSNs recorded. A file
    /// imported before is refused.
    #[pyo3(name = "import_", signature = (path, format="jsonl"))]
    fn import_(&self, py: Python<'_>, path: &Bound<'_, PyAny>, format: &str) -> PyResult<PyObject> {
        let path = path_arg(path)?;
        let fmt = common::format(format).map_err(py_err)?;
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| common::import_path(s, &path, fmt)))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// Checks every frame, checksum and the hash chain of the log and
    /// every blob: `{"ok", "records", "problems", ...}`. Damage is
    /// reported here, not raised.
    fn verify(&self, py: Python<'_>) -> PyResult<PyObject> {
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(common::verify_json))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// Counts and sizes: `{"head", "log", "blobs"}`.
    fn stats(&self, py: Python<'_>) -> PyResult<PyObject> {
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || shared.try_with(|s| Ok(common::stats_json(s))))
            .map_err(py_err)?;
        to_py(py, &v)
    }

    /// Retention and blob collection: keep at most `keep_per_session`
    /// checkpoints per session and/or file contents under `max_bytes`.
    #[pyo3(signature = (keep_per_session=None, max_bytes=None))]
    fn gc(
        &self,
        py: Python<'_>,
        keep_per_session: Option<usize>,
        max_bytes: Option<u64>,
    ) -> PyResult<PyObject> {
        let shared = self.shared.clone();
        let v = py
            .allow_threads(move || {
                shared.try_with(|s| common::gc_json(s, keep_per_session, max_bytes))
            })
            .map_err(py_err)?;
        to_py(py, &v)
    }
}

/// A handle for recording into one session (thread, conversation) of a store.
#[pyclass(module = "cairn", frozen)]
struct Session {
    shared: Arc<Shared>,
    spec: SessionSpec,
}

impl Session {
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&cairn::Session<'_>) -> cairn::Result<T> + Send,
    ) -> PyResult<T> {
        let shared = &self.shared;
        let spec = &self.spec;
        py.allow_threads(move || shared.with(|s| f(&spec.on(s))))
            .map_err(py_err)
    }
}

#[pymethods]
impl Session {
    /// The session id (`default` for an empty one).
    #[getter]
    fn id(&self) -> String {
        if self.spec.id.is_empty() {
            cairn::DEFAULT_SESSION.to_owned()
        } else {
            self.spec.id.clone()
        }
    }

    fn __repr__(&self) -> String {
        format!("cairn.Session({:?})", self.id())
    }

    /// Records a prompt; returns its LSN once durable (per the store's durability).
    fn prompt(&self, py: Python<'_>, text: &str) -> PyResult<u64> {
        self.run(py, |s| s.prompt(text)).map(|l| l.0)
    }

    /// Records a reply; returns its LSN.
    fn reply(&self, py: Python<'_>, text: &str) -> PyResult<u64> {
        self.run(py, |s| s.reply(text)).map(|l| l.0)
    }

    /// Records a call of tool `name`; returns its LSN.
    #[pyo3(signature = (name, ok=true))]
    fn tool_call(&self, py: Python<'_>, name: &str, ok: bool) -> PyResult<u64> {
        self.run(py, |s| s.tool_call(name, ok)).map(|l| l.0)
    }

    /// Records an event given as a dict with cairn's canonical field names
    /// (`kind` required; `session`, `run`, `agent`, `model` default to this
    /// session's); returns its LSN. A bad one raises InvalidEventError.
    fn record(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<u64> {
        let e = Converter::new(py, &self.spec).event(event)?;
        self.run(py, |s| s.record(&e)).map(|l| l.0)
    }

    /// Records events (a list, tuple or any iterable of dicts) atomically
    /// (after a crash, all of them or none), as one append; returns
    /// `(first, last)` LSNs, or None for none. A bad event raises
    /// InvalidEventError naming its index, and nothing is appended.
    fn record_batch(
        &self,
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(u64, u64)>> {
        let mut conv = Converter::new(py, &self.spec);
        // A list or tuple says how many it holds (and holds them already,
        // so the vector is no larger than memory allows); any other
        // iterable grows it.
        let known = match events.downcast::<PyList>() {
            Ok(l) => l.len(),
            Err(_) => events.downcast::<PyTuple>().map_or(0, |t| t.len()),
        };
        let mut batch = Vec::with_capacity(known);
        for (i, item) in events.try_iter()?.enumerate() {
            let e = conv.event(&item?).map_err(|e| {
                let msg = e.value(py).to_string();
                py_err(BindError::new(
                    ErrorKind::InvalidEvent,
                    format!("event {} of the batch: {msg}", i + 1),
                ))
            })?;
            batch.push(e);
        }
        let shared = &self.shared;
        py.allow_threads(move || shared.with(|s| s.append_batch(&batch)))
            .map(|r| r.map(|(a, b)| (a.0, b.0)))
            .map_err(py_err)
    }

    /// Tells cairn this workspace path is about to be written, so the next
    /// checkpoint captures it even if it is ignored.
    fn track(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.run(py, |s| s.track(path))
    }

    /// Writes `data` to workspace file `path` (atomically, durably),
    /// keeping what it replaces, and records `file.create`/`file.write`;
    /// returns the record's LSN.
    fn write_file(&self, py: Python<'_>, path: &str, data: &[u8]) -> PyResult<u64> {
        self.run(py, |s| s.write_file(path, data)).map(|l| l.0)
    }

    /// Deletes workspace file `path`, keeping its contents, and records `file.delete`.
    fn delete_file(&self, py: Python<'_>, path: &str) -> PyResult<u64> {
        self.run(py, |s| s.delete_file(path)).map(|l| l.0)
    }

    /// Moves workspace file `src` to `dst` and records `file.move`.
    fn move_file(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<u64> {
        self.run(py, |s| s.move_file(src, dst)).map(|l| l.0)
    }

    /// Checkpoints the workspace (a full scan) labelled `label`, keeping
    /// `state` (the agent's memory, handed back by a rollback to it).
    #[pyo3(signature = (label, state=None))]
    fn checkpoint(
        &self,
        py: Python<'_>,
        label: &str,
        state: Option<Vec<u8>>,
    ) -> PyResult<Checkpoint> {
        let info = self.run(py, |s| s.checkpoint_with(label, ScanMode::Full, state))?;
        Checkpoint::from_json(py, &common::checkpoint_json(&info))
    }

    /// Rolls the workspace (or only `paths`) back to checkpoint `target`
    /// ("c42" or a Checkpoint), checkpointing what is there first so the
    /// rollback can be undone; with `dry_run`, only says what it would
    /// do. `state` is kept as the undo point's application state.
    #[pyo3(signature = (target, paths=None, dry_run=false, state=None))]
    fn rollback(
        &self,
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        paths: Option<Vec<String>>,
        dry_run: bool,
        state: Option<Vec<u8>>,
    ) -> PyResult<RollbackReport> {
        let target = checkpoint_arg(target)?;
        let (shared, spec) = (&self.shared, &self.spec);
        let report = py
            .allow_threads(move || {
                shared.with(|st| {
                    let mut req = spec.on(st).rollback_request(target);
                    req.paths = paths.unwrap_or_default();
                    req.dry_run = dry_run;
                    req.state = state;
                    st.rollback(req)
                })
            })
            .map_err(py_err)?;
        RollbackReport::from_report(py, &report, dry_run)
    }
}

/// A checkpoint: a point the workspace can be rolled back to.
#[pyclass(module = "cairn", frozen, get_all)]
struct Checkpoint {
    /// Its id, `c<lsn>`.
    id: String,
    /// The LSN of its `checkpoint.create` record.
    lsn: u64,
    /// When it was taken (ISO-8601, UTC).
    ts: String,
    /// Its session.
    session: String,
    /// Its label.
    label: Option<String>,
    /// Run id.
    run: Option<String>,
    /// Agent.
    agent: Option<String>,
    /// Model.
    model: Option<String>,
    /// The manifest's root blob.
    root: String,
    /// The application-state blob's hash, if it has state.
    state: Option<String>,
    /// `{"files", "changed", "skipped"}`: what the scan saw.
    counts: PyObject,
    /// True once discarded (by gc or a record).
    discarded: bool,
}

impl Checkpoint {
    fn from_json(py: Python<'_>, v: &Value) -> PyResult<Checkpoint> {
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        Ok(Checkpoint {
            id: s("id").unwrap_or_default(),
            lsn: v["lsn"].as_u64().unwrap_or_default(),
            ts: s("ts").unwrap_or_default(),
            session: s("session").unwrap_or_default(),
            label: s("label"),
            run: s("run"),
            agent: s("agent"),
            model: s("model"),
            root: s("root").unwrap_or_default(),
            state: s("state"),
            counts: to_py(py, &v["counts"])?,
            discarded: v["discarded"].as_bool().unwrap_or(false),
        })
    }
}

#[pymethods]
impl Checkpoint {
    fn __repr__(&self) -> String {
        format!(
            "cairn.Checkpoint(id={:?}, label={:?}, session={:?})",
            self.id, self.label, self.session
        )
    }

    fn __str__(&self) -> String {
        self.id.clone()
    }
}

/// What a rollback did (or, for a dry run, would do).
#[pyclass(module = "cairn", frozen, get_all)]
struct RollbackReport {
    /// The checkpoint restored.
    target: String,
    /// The undo point (roll back to it to undo this); None for a dry run.
    source: Option<String>,
    /// The `rollback` record's LSN; None for a dry run.
    lsn: Option<u64>,
    /// True for a dry run.
    dry_run: bool,
    /// The workspace acted on.
    workspace: String,
    /// Files written.
    written: Vec<String>,
    /// Files deleted.
    deleted: Vec<String>,
    /// Directories created.
    created_dirs: Vec<String>,
    /// Directories removed.
    removed_dirs: Vec<String>,
    /// Paths left as they were, each `{"path", "why"}`.
    kept: PyObject,
    /// The target's application state, for the agent to rewind its memory.
    state: Option<PyObject>,
}

impl RollbackReport {
    fn from_report(
        py: Python<'_>,
        r: &cairn::RollbackReport,
        dry_run: bool,
    ) -> PyResult<RollbackReport> {
        let v = common::rollback_json(r);
        Ok(RollbackReport {
            target: r.target.to_string(),
            source: r.source.map(|c| c.to_string()),
            lsn: r.lsn.map(|l| l.0),
            dry_run,
            workspace: r.workspace.display().to_string(),
            written: r.written.clone(),
            deleted: r.deleted.clone(),
            created_dirs: r.created_dirs.clone(),
            removed_dirs: r.removed_dirs.clone(),
            kept: to_py(py, &v["kept"])?,
            state: r
                .state
                .as_ref()
                .map(|b| PyBytes::new(py, b).into_any().unbind()),
        })
    }
}

#[pymethods]
impl RollbackReport {
    fn __repr__(&self) -> String {
        format!(
            "cairn.RollbackReport(target={:?}, source={:?}, written={}, deleted={}, dry_run={})",
            self.target,
            self.source,
            self.written.len(),
            self.deleted.len(),
            if self.dry_run { "True" } else { "False" }
        )
    }
}

/// The lazy iterator `Store.events` returns.
#[pyclass(module = "cairn")]
struct Events {
    shared: Arc<Shared>,
    cursor: common::Cursor,
    page: VecDeque<Value>,
}

#[pymethods]
impl Events {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        if self.page.is_empty() {
            let shared = &self.shared;
            let cursor = &mut self.cursor;
            let page = py
                .allow_threads(move || shared.try_with(|s| cursor.next_page(s)))
                .map_err(py_err)?;
            self.page.extend(page);
        }
        match self.page.pop_front() {
            Some(v) => to_py(py, &v).map(Some),
            None => Ok(None),
        }
    }
}

/// The iterator `Store.follow` returns: waits for new records.
#[pyclass(module = "cairn")]
struct Follow {
    shared: Arc<Shared>,
    follower: common::Follower,
    idle: Option<Duration>,
}

#[pymethods]
impl Follow {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let mut waited = Duration::ZERO;
        loop {
            let step = match self.idle {
                Some(idle) => FOLLOW_SIGNAL_CHECK.min(idle.saturating_sub(waited)),
                None => FOLLOW_SIGNAL_CHECK,
            };
            let shared = &self.shared;
            let follower = &mut self.follower;
            let got = py
                .allow_threads(move || follower.wait(shared, step))
                .map_err(py_err)?;
            if let Some(v) = got {
                return to_py(py, &v).map(Some);
            }
            py.check_signals()?;
            waited += step;
            if self.idle.is_some_and(|idle| waited >= idle) {
                return Ok(None);
            }
        }
    }
}

/// The native module behind the package `cairn`.
#[pymodule]
fn _cairn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Store>()?;
    m.add_class::<Session>()?;
    m.add_class::<Checkpoint>()?;
    m.add_class::<RollbackReport>()?;
    m.add_class::<Events>()?;
    m.add_class::<Follow>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InvalidEventError", py.get_type::<InvalidEventError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("LockedError", py.get_type::<LockedError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add(
        "OutsideWorkspaceError",
        py.get_type::<OutsideWorkspaceError>(),
    )?;
    Ok(())
}
