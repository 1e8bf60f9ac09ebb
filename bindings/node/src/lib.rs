//! The native addon behind the Node package in `bindings/node`: cairn's
//! embedded store from JavaScript and TypeScript, with every guarantee of
//! the Rust library.
//!
//! The recording calls (`prompt`, `reply`, `toolCall`, `record`,
//! `recordBatch`) go to the store's committer thread (the `committer` module),
//! which appends every call pending at once as one batch with one sync;
//! every other call that touches the store runs on libuv's thread pool
//! (an N-API async work item, [`Job`]). Each resolves a promise: I/O never
//! blocks Node's event loop. `index.js` wraps this addon: it turns errors into
//! `Error` subclasses by the family tag at the start of their message
//! (`[LockedError] ...`) and makes `events()`/`follow()` async iterators.

mod committer;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cairn::json::Value;
use cairn::{Event, EventKind, Filter, Point, ScanMode};
use cairn_bindings_common as common;
use committer::{Committer, JsPromise, Work};
use common::{BindError, SessionSpec, Shared};
use napi::bindgen_prelude::{AsyncTask, Buffer, BufferSlice, ToNapiValue, TypeName};
use napi::{Env, Status, Task};
use napi_derive::napi;
use std::sync::Mutex;

/// The longest a follower's `next` waits in one async work item: a
/// libuv pool thread (4 by default) is not held for longer, so a few
/// idle followers cannot starve the pool the other calls run on.
const FOLLOW_MAX_WAIT: Duration = Duration::from_millis(500);

/// A cairn error as a JS error: its family in brackets first, which
/// `index.js` turns into the matching `Error` subclass.
fn js_err(e: BindError) -> napi::Error {
    napi::Error::new(
        Status::GenericFailure,
        format!("[{}] {}", e.kind.class_name(), e.message),
    )
}

/// A call run off the event loop: `work` on a libuv pool thread, then
/// `done` on the JS thread to make its JS value.
pub struct Job<O: Send + 'static, J> {
    work: Option<Box<dyn FnOnce() -> common::Result<O> + Send>>,
    done: fn(O) -> napi::Result<J>,
}

impl<O: Send + 'static, J> Job<O, J> {
    fn new(
        work: impl FnOnce() -> common::Result<O> + Send + 'static,
        done: fn(O) -> napi::Result<J>,
    ) -> AsyncTask<Job<O, J>>
    where
        J: ToNapiValue + TypeName,
    {
        AsyncTask::new(Job {
            work: Some(Box::new(work)),
            done,
        })
    }
}

impl<O: Send + 'static, J: ToNapiValue + TypeName> Task for Job<O, J> {
    type Output = O;
    type JsValue = J;

    fn compute(&mut self) -> napi::Result<O> {
        match self.work.take() {
            Some(f) => f().map_err(js_err),
            None => Err(napi::Error::new(
                Status::GenericFailure,
                "[Error] this call already ran",
            )),
        }
    }

    fn resolve(&mut self, _env: Env, output: O) -> napi::Result<J> {
        (self.done)(output)
    }
}

/// A call resolving to a JSON value (a JS object, array, number, ...).
pub type JsonJob = Job<Value, Json>;
/// A call resolving to nothing.
pub type UnitJob = Job<(), ()>;
/// A call resolving to a Buffer.
pub type BytesJob = Job<Vec<u8>, Buffer>;
/// `Store.open`.
pub type StoreJob = Job<Store, Store>;
/// A call resolving to a string.
pub type StringJob = Job<String, String>;
/// `store.followCursor`.
pub type FollowJob = Job<FollowCursor, FollowCursor>;
/// `session.rollback`.
pub type RollbackJob = Job<RolledBack, RollbackResult>;

/// A JSON value as the JS value it reads as (serde_json's `Value` has no
/// N-API type name of its own, which a promise's value needs).
pub struct Json(pub Value);

impl TypeName for Json {
    fn type_name() -> &'static str {
        "any"
    }

    fn value_type() -> napi::ValueType {
        napi::ValueType::Unknown
    }
}

impl ToNapiValue for Json {
    unsafe fn to_napi_value(
        env: napi::sys::napi_env,
        val: Json,
    ) -> napi::Result<napi::sys::napi_value> {
        // SAFETY: called by napi with the env of the call it answers, as
        // `Value`'s own conversion requires.
        unsafe { Value::to_napi_value(env, val.0) }
    }
}

impl From<Value> for Json {
    fn from(v: Value) -> Json {
        Json(v)
    }
}

/// The JS value of a job's output: the output itself, or its [`Json`] view.
fn same<O, J: From<O>>(v: O) -> napi::Result<J> {
    Ok(J::from(v))
}

fn lsn_value(l: cairn::Lsn) -> common::Result<Value> {
    Ok(Value::from(l.0))
}

fn to_buffer(v: Vec<u8>) -> napi::Result<Buffer> {
    Ok(Buffer::from(v))
}

/// A point from `head`, `@12`, `c42` or an ISO-8601 time.
fn point_arg(p: Option<String>) -> napi::Result<Point> {
    match p {
        Some(p) => common::point(&p).map_err(js_err),
        None => Ok(Point::Head),
    }
}

/// How `Store.open` opens.
#[napi(object)]
pub struct OpenOptions {
    /// Create the store if the workspace has none (default false: that is an error).
    pub create: Option<bool>,
    /// `always` (default), `never` or `interval:<ms>`.
    pub durability: Option<String>,
    /// Take no lock and refuse writes.
    pub read_only: Option<bool>,
}

/// The stamps of `store.session(id, {...})`.
#[napi(object)]
pub struct SessionOptions {
    /// Run id.
    pub run: Option<String>,
    /// Agent name.
    pub agent: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Phase id.
    pub phase: Option<String>,
}

/// Which records `store.events(filter)` yields.
#[napi(object)]
pub struct EventFilter {
    /// Only this session.
    pub session: Option<String>,
    /// Only this kind (`prompt`, `file.write`, ...).
    pub kind: Option<String>,
    /// Only records naming this path (or one under it).
    pub path: Option<String>,
    /// At or after this time (ISO-8601 or epoch milliseconds as text).
    pub since: Option<String>,
    /// At or before this time.
    pub until: Option<String>,
    /// At most this many.
    pub limit: Option<u32>,
    /// Only this run.
    pub run: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this model.
    pub model: Option<String>,
}

/// How `session.rollback` rolls back.
#[napi(object)]
pub struct RollbackOptions {
    /// Only these paths (files or directories).
    pub paths: Option<Vec<String>>,
    /// Only say what would change.
    pub dry_run: Option<bool>,
    /// The application state now, kept as the undo point's.
    pub state: Option<Buffer>,
}

/// How many stores hold a cleanup hook with Node: those that recorded
/// something and are still open, or were dropped unclosed (their hook
/// stops the committer when Node exits). A store closed with `close()`
/// gives its hook back once it is garbage-collected: a diagnostic for an
/// embedder that opens and closes many stores in one process.
#[napi]
pub fn live_cleanup_hooks() -> u32 {
    committer::live_cleanup_hooks() as u32
}

/// What the store's committer has appended: `batches` appends holding
/// `events` events (with durability `always`, one sync per batch).
#[napi(object)]
pub struct CommitStats {
    /// Appends the committer made (each one sync with durability `always`).
    pub batches: f64,
    /// Events in those appends.
    pub events: f64,
}

/// An open cairn store, holding its writer lock until closed.
#[napi]
pub struct Store {
    shared: Arc<Shared>,
    /// Started by the first session (it needs the JS thread's env).
    committer: OnceLock<Arc<Committer>>,
}

impl Store {
    fn committer(&self, env: &Env) -> napi::Result<Arc<Committer>> {
        if let Some(c) = self.committer.get() {
            return Ok(c.clone());
        }
        let c = Committer::start(env, self.shared.clone())?;
        Ok(self.committer.get_or_init(|| c).clone())
    }
}

#[napi]
impl Store {
    /// Opens the store of workspace `path` (`<path>/.cairn`).
    #[napi(ts_return_type = "Promise<Store>")]
    pub fn open(path: String, options: Option<OpenOptions>) -> napi::Result<AsyncTask<StoreJob>> {
        let o = options.unwrap_or(OpenOptions {
            create: None,
            durability: None,
            read_only: None,
        });
        let create = o.create.unwrap_or(false);
        let durability = o.durability.unwrap_or_else(|| "always".into());
        let read_only = o.read_only.unwrap_or(false);
        Ok(Job::new(
            move || {
                let s = Shared::open(path.as_ref(), create, &durability, read_only)?;
                Ok(Store {
                    shared: Arc::new(s),
                    committer: OnceLock::new(),
                })
            },
            same,
        ))
    }

    /// Creates the store of `workspace` (and the directory); resolves to the store directory.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn init(workspace: String) -> AsyncTask<StringJob> {
        Job::new(
            move || common::init(workspace.as_ref()).map(|p| p.display().to_string()),
            same,
        )
    }

    /// Closes the store cleanly: commits the recording calls already
    /// made, syncs and releases the lock; calls made after it are
    /// refused. Twice is no error.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<UnitJob> {
        let shared = self.shared.clone();
        let committer = self.committer.get().cloned();
        if let Some(c) = &committer {
            c.refuse_new();
        }
        Job::new(
            move || {
                if let Some(c) = committer {
                    c.stop();
                }
                shared.close()
            },
            same,
        )
    }

    /// What the committer has appended so far (`{batches, events}`):
    /// with durability `always`, `batches` is the number of syncs the
    /// recording calls cost.
    #[napi]
    pub fn commit_stats(&self) -> CommitStats {
        let (batches, events) = self.committer.get().map_or((0, 0), |c| c.counts());
        CommitStats {
            batches: batches as f64,
            events: events as f64,
        }
    }

    /// True once closed.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// The workspace directory.
    #[napi(getter)]
    pub fn workspace(&self) -> String {
        self.shared.workspace().display().to_string()
    }

    /// The last committed record's LSN (0 for an empty store).
    #[napi(ts_return_type = "Promise<number>")]
    pub fn head(&self) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(
            move || shared.with(|s| Ok(Value::from(s.refresh()?.last_lsn.0))),
            same,
        )
    }

    /// A handle for recording into session `id`.
    #[napi]
    pub fn session(
        &self,
        env: &Env,
        id: String,
        options: Option<SessionOptions>,
    ) -> napi::Result<Session> {
        let o = options.unwrap_or(SessionOptions {
            run: None,
            agent: None,
            model: None,
            phase: None,
        });
        Ok(Session {
            shared: self.shared.clone(),
            committer: self.committer(env)?,
            spec: SessionSpec {
                id,
                run: o.run,
                phase: o.phase,
                agent: o.agent,
                model: o.model,
            },
        })
    }

    /// The native page-at-a-time reader behind `events()` (index.js).
    #[napi]
    pub fn events_cursor(&self, filter: Option<EventFilter>) -> napi::Result<EventCursor> {
        let f = filter.unwrap_or(EventFilter {
            session: None,
            kind: None,
            path: None,
            since: None,
            until: None,
            limit: None,
            run: None,
            agent: None,
            model: None,
        });
        let kind = f
            .kind
            .map(|k| common::kind(&k))
            .transpose()
            .map_err(js_err)?;
        let since = f
            .since
            .map(|t| common::time_bound(&t, true))
            .transpose()
            .map_err(js_err)?;
        let until = f
            .until
            .map(|t| common::time_bound(&t, false))
            .transpose()
            .map_err(js_err)?;
        let filter = Filter {
            session: f.session,
            kind,
            path: f.path,
            since,
            until,
            limit: f.limit.map(|l| l as usize),
            run: f.run,
            agent: f.agent,
            model: f.model,
            ..Filter::all()
        };
        Ok(EventCursor {
            shared: self.shared.clone(),
            cursor: Arc::new(Mutex::new(common::Cursor::new(filter))),
        })
    }

    /// The native waiting reader behind `follow()` (index.js): from LSN
    /// `from_lsn` on (none: from the records committed after now).
    #[napi(ts_return_type = "Promise<FollowCursor>")]
    pub fn follow_cursor(&self, from_lsn: Option<u32>) -> AsyncTask<FollowJob> {
        let shared = self.shared.clone();
        // "Now" is when follow() is called, not when the pool runs this
        // job: a recording call made meanwhile may already be committed
        // (the committer does not queue behind the pool). A writer's head
        // is in memory; a read-only handle's needs a refresh, in the job.
        let from = from_lsn.map(u64::from).or_else(|| {
            shared
                .try_with(|s| Ok((!s.is_read_only()).then(|| s.head().last_lsn.0 + 1)))
                .ok()
                .flatten()
        });
        Job::new(
            move || {
                let f = shared.try_with(|s| common::Follower::new(s, from))?;
                Ok(FollowCursor {
                    shared,
                    follower: Arc::new(Mutex::new(f)),
                })
            },
            same,
        )
    }

    /// The checkpoints (of one session, or all), oldest first.
    #[napi(ts_return_type = "Promise<Array<Record<string, any>>>")]
    pub fn checkpoints(&self, session: Option<String>) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(
            move || shared.try_with(|s| common::checkpoints_json(s, session.as_deref())),
            same,
        )
    }

    /// The contents of `path` at `point` (`head`, `@12`, `c42`, a time).
    #[napi(ts_return_type = "Promise<Buffer>")]
    pub fn show(&self, point: String, path: String) -> napi::Result<AsyncTask<BytesJob>> {
        let at = point_arg(Some(point))?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.with(|s| s.query(|q| q.file_at(at, &path))),
            to_buffer,
        ))
    }

    /// The tree at `point` (default head): `{path: {blob, mode, kind}}`.
    #[napi(ts_return_type = "Promise<Record<string, {blob: string, mode: number, kind: string}>>")]
    pub fn tree(&self, point: Option<String>) -> napi::Result<AsyncTask<JsonJob>> {
        let at = point_arg(point)?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.try_with(|s| common::tree_json(s, at)),
            same,
        ))
    }

    /// The files that differ between points `a` and `b` (default head).
    #[napi(
        ts_return_type = "Promise<Array<{path: string, status: string, unified: string | null}>>"
    )]
    pub fn diff(
        &self,
        a: String,
        b: Option<String>,
        paths: Option<Vec<String>>,
    ) -> napi::Result<AsyncTask<JsonJob>> {
        let a = point_arg(Some(a))?;
        let b = point_arg(b)?;
        let paths = paths.unwrap_or_default();
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.try_with(|s| common::diff_json(s, a, b, &paths)),
            same,
        ))
    }

    /// The records that changed `path`, oldest first.
    #[napi(ts_return_type = "Promise<Array<Record<string, any>>>")]
    pub fn history(&self, path: String) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(
            move || shared.try_with(|s| common::history_json(s, &path)),
            same,
        )
    }

    /// Each line of `path` at `point` with the record that last changed it.
    #[napi(ts_return_type = "Promise<Array<{line_no: number, text: string, lsn: number}>>")]
    pub fn blame(&self, point: String, path: String) -> napi::Result<AsyncTask<JsonJob>> {
        let at = point_arg(Some(point))?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.try_with(|s| common::blame_json(s, at, &path)),
            same,
        ))
    }

    /// With `id`, what continues from that checkpoint; without, every
    /// checkpoint and rollback with its parent.
    #[napi(ts_return_type = "Promise<Array<{lsn: number, kind: string, parent: number | null}>>")]
    pub fn branches(&self, id: Option<String>) -> napi::Result<AsyncTask<JsonJob>> {
        let of = id
            .map(|i| common::checkpoint_id(&i))
            .transpose()
            .map_err(js_err)?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.try_with(|s| common::branches_json(s, of)),
            same,
        ))
    }

    /// Exports every record in `format` (`jsonl`, `cortexide`, `comma`) to the file at `path`.
    #[napi(ts_return_type = "Promise<{written: number, records: number, bytes: number}>")]
    pub fn export(&self, path: String, format: Option<String>) -> napi::Result<AsyncTask<JsonJob>> {
        let fmt = common::format(format.as_deref().unwrap_or("jsonl")).map_err(js_err)?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || {
                shared.try_with(|s| common::export_to_path(s, &Filter::all(), fmt, path.as_ref()))
            },
            same,
        ))
    }

    /// Imports the file at `path` in `format`; resolves to `{first, last}`.
    #[napi(
        js_name = "import",
        ts_return_type = "Promise<{first: number | null, last: number | null}>"
    )]
    pub fn import_file(
        &self,
        path: String,
        format: Option<String>,
    ) -> napi::Result<AsyncTask<JsonJob>> {
        let fmt = common::format(format.as_deref().unwrap_or("jsonl")).map_err(js_err)?;
        let shared = self.shared.clone();
        Ok(Job::new(
            move || shared.try_with(|s| common::import_path(s, path.as_ref(), fmt)),
            same,
        ))
    }

    /// Checks the log and blobs: `{ok, records, problems, ...}`.
    #[napi(ts_return_type = "Promise<{ok: boolean, records: number, problems: string[]}>")]
    pub fn verify(&self) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(move || shared.try_with(common::verify_json), same)
    }

    /// Counts and sizes: `{head, log, blobs}`.
    #[napi(
        ts_return_type = "Promise<{head: {lsn: number, hash: string}, log: object, blobs: object}>"
    )]
    pub fn stats(&self) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(move || shared.try_with(|s| Ok(common::stats_json(s))), same)
    }

    /// Retention and blob collection.
    #[napi(ts_return_type = "Promise<{discarded: string[], retained: number}>")]
    pub fn gc(&self, keep_per_session: Option<u32>, max_bytes: Option<f64>) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        Job::new(
            move || {
                shared.try_with(|s| {
                    common::gc_json(
                        s,
                        keep_per_session.map(|k| k as usize),
                        max_bytes.map(|b| b as u64),
                    )
                })
            },
            same,
        )
    }
}

/// A handle for recording into one session.
#[napi]
pub struct Session {
    shared: Arc<Shared>,
    committer: Arc<Committer>,
    spec: SessionSpec,
}

impl Session {
    /// A new event of `kind` with this session's id and stamps (as
    /// `cairn::Session::event` makes it).
    fn event(&self, kind: EventKind) -> Event {
        let id = if self.spec.id.is_empty() {
            cairn::DEFAULT_SESSION.to_owned()
        } else {
            self.spec.id.clone()
        };
        let mut e = Event::new(kind, id);
        e.run = self.spec.run.clone();
        e.phase = self.spec.phase.clone();
        e.agent = self.spec.agent.clone();
        e.model = self.spec.model.clone();
        e
    }

    /// Queues `e` on the committer; its promise resolves to its LSN.
    fn submit(&self, env: &Env, e: Event) -> napi::Result<JsPromise> {
        self.committer.submit(env, Work::One(Box::new(e)))
    }

    fn lsn_job(
        &self,
        f: impl FnOnce(&cairn::Session<'_>) -> cairn::Result<cairn::Lsn> + Send + 'static,
    ) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        let spec = self.spec.clone();
        Job::new(
            move || shared.try_with(|s| lsn_value(f(&spec.on(s))?)),
            same,
        )
    }
}

#[napi]
impl Session {
    /// The session id (`default` for an empty one).
    #[napi(getter)]
    pub fn id(&self) -> String {
        if self.spec.id.is_empty() {
            cairn::DEFAULT_SESSION.to_owned()
        } else {
            self.spec.id.clone()
        }
    }

    /// Records a prompt; resolves to its LSN once durable.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn prompt(&self, env: &Env, text: String) -> napi::Result<JsPromise> {
        self.submit(env, self.event(EventKind::Prompt).with_text(text))
    }

    /// Records a reply; resolves to its LSN.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn reply(&self, env: &Env, text: String) -> napi::Result<JsPromise> {
        self.submit(env, self.event(EventKind::Reply).with_text(text))
    }

    /// Records a tool call; resolves to its LSN.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn tool_call(&self, env: &Env, name: String, ok: Option<bool>) -> napi::Result<JsPromise> {
        let mut e = self.event(EventKind::ToolCall);
        e.tool = Some(name);
        e.ok = ok.unwrap_or(true);
        self.submit(env, e)
    }

    /// Records an event object with cairn's canonical field names (`kind` required).
    #[napi(
        ts_args_type = "event: Record<string, unknown>",
        ts_return_type = "Promise<number>"
    )]
    pub fn record(&self, env: &Env, event: Value) -> napi::Result<JsPromise> {
        let e = self.spec.event_from_json(event).map_err(js_err)?;
        self.submit(env, e)
    }

    /// Records events atomically as one append; resolves to `[first, last]`
    /// (null for none). `array` is the JSON text of an array of event
    /// objects; the committer thread reads it off the event loop, each
    /// element once, and a bad one rejects the promise naming it, with
    /// nothing of the batch appended.
    #[napi(ts_return_type = "Promise<[number, number] | null>")]
    pub fn record_batch_json(&self, env: &Env, array: String) -> napi::Result<JsPromise> {
        self.committer
            .submit(env, Work::Json(array.into_bytes(), self.spec.clone()))
    }

    /// [`Session::record_batch_json`] with the text as UTF-8 bytes, what
    /// index.js's `recordBatch` passes: one `JSON.stringify` of the array
    /// (which V8 does far faster than the addon could read JS objects),
    /// encoded with `TextEncoder.encodeInto` into a reused buffer. Taking
    /// a JS string costs N-API two UTF-8 transcodings of it (its length,
    /// then its bytes), 10-20 times what the encoder and one copy cost.
    /// Bytes that are not UTF-8 reject the promise.
    #[napi(ts_return_type = "Promise<[number, number] | null>")]
    pub fn record_batch_utf8(&self, env: &Env, array: BufferSlice) -> napi::Result<JsPromise> {
        self.committer
            .submit(env, Work::Json(array.to_vec(), self.spec.clone()))
    }

    /// Tells cairn this workspace path is about to be written.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn track(&self, path: String) -> AsyncTask<UnitJob> {
        let shared = self.shared.clone();
        let spec = self.spec.clone();
        Job::new(move || shared.with(|s| spec.on(s).track(&path)), same)
    }

    /// Writes a workspace file, keeping what it replaces; resolves to the record's LSN.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn write_file(&self, path: String, data: Buffer) -> AsyncTask<JsonJob> {
        let data: Vec<u8> = data.to_vec();
        self.lsn_job(move |s| s.write_file(&path, &data))
    }

    /// Deletes a workspace file, keeping its contents.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn delete_file(&self, path: String) -> AsyncTask<JsonJob> {
        self.lsn_job(move |s| s.delete_file(&path))
    }

    /// Moves a workspace file.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn move_file(&self, src: String, dst: String) -> AsyncTask<JsonJob> {
        self.lsn_job(move |s| s.move_file(&src, &dst))
    }

    /// Checkpoints the workspace, keeping `state` for a rollback to hand back.
    #[napi(ts_return_type = "Promise<Record<string, any>>")]
    pub fn checkpoint(&self, label: String, state: Option<Buffer>) -> AsyncTask<JsonJob> {
        let state = state.map(|b| b.to_vec());
        let shared = self.shared.clone();
        let spec = self.spec.clone();
        Job::new(
            move || {
                shared.with(|s| {
                    let c = spec.on(s).checkpoint_with(&label, ScanMode::Full, state)?;
                    Ok(common::checkpoint_json(&c))
                })
            },
            same,
        )
    }

    /// Rolls the workspace (or only `paths`) back to checkpoint `id`.
    #[napi(ts_return_type = "Promise<RollbackResult>")]
    pub fn rollback(
        &self,
        id: String,
        options: Option<RollbackOptions>,
    ) -> napi::Result<AsyncTask<RollbackJob>> {
        let target = common::checkpoint_id(&id).map_err(js_err)?;
        let (paths, dry_run, state) = match options {
            Some(o) => (
                o.paths.unwrap_or_default(),
                o.dry_run.unwrap_or(false),
                o.state.map(|b| b.to_vec()),
            ),
            None => (Vec::new(), false, None),
        };
        let shared = self.shared.clone();
        let spec = self.spec.clone();
        Ok(Job::new(
            move || {
                shared.with(|st| {
                    let mut req = spec.on(st).rollback_request(target);
                    req.paths = paths;
                    req.dry_run = dry_run;
                    req.state = state;
                    let r = st.rollback(req)?;
                    Ok(RolledBack {
                        json: common::rollback_json(&r),
                        state: r.state,
                        dry_run,
                    })
                })
            },
            RollbackResult::from_rolled_back,
        ))
    }
}

/// A rollback's report before it becomes a JS object.
pub struct RolledBack {
    json: Value,
    state: Option<Vec<u8>>,
    dry_run: bool,
}

/// What a rollback did (or, for a dry run, would do).
#[napi(object)]
pub struct RollbackResult {
    /// The checkpoint restored.
    pub target: String,
    /// The undo point (roll back to it to undo this); null for a dry run.
    pub source: Option<String>,
    /// The `rollback` record's LSN; null for a dry run.
    pub lsn: Option<f64>,
    /// True for a dry run.
    pub dry_run: bool,
    /// The workspace acted on.
    pub workspace: String,
    /// Files written.
    pub written: Vec<String>,
    /// Files deleted.
    pub deleted: Vec<String>,
    /// Directories created.
    pub created_dirs: Vec<String>,
    /// Directories removed.
    pub removed_dirs: Vec<String>,
    /// The target's application state.
    pub state: Option<Buffer>,
}

impl RollbackResult {
    fn from_rolled_back(r: RolledBack) -> napi::Result<RollbackResult> {
        let strs = |k: &str| -> Vec<String> {
            r.json[k]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(RollbackResult {
            target: r.json["target"].as_str().unwrap_or_default().to_owned(),
            source: r.json["source"].as_str().map(str::to_owned),
            lsn: r.json["lsn"].as_u64().map(|l| l as f64),
            dry_run: r.dry_run,
            workspace: r.json["workspace"].as_str().unwrap_or_default().to_owned(),
            written: strs("written"),
            deleted: strs("deleted"),
            created_dirs: strs("created_dirs"),
            removed_dirs: strs("removed_dirs"),
            state: r.state.map(Buffer::from),
        })
    }
}

/// Reads the records a filter selects a page at a time (see `events()` in index.js).
#[napi]
pub struct EventCursor {
    shared: Arc<Shared>,
    cursor: Arc<Mutex<common::Cursor>>,
}

#[napi]
impl EventCursor {
    /// The next page of records (empty once the walk is over).
    #[napi(ts_return_type = "Promise<Array<Record<string, any>>>")]
    pub fn next_page(&self) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        let cursor = self.cursor.clone();
        Job::new(
            move || {
                let mut c = cursor
                    .lock()
                    .map_err(|_| BindError::invalid("an earlier page read panicked"))?;
                shared.try_with(|s| c.next_page(s)).map(Value::Array)
            },
            same,
        )
    }
}

/// Waits for new records (see `follow()` in index.js).
#[napi]
pub struct FollowCursor {
    shared: Arc<Shared>,
    follower: Arc<Mutex<common::Follower>>,
}

#[napi]
impl FollowCursor {
    /// The next record, or null if none was committed within `timeout_ms`
    /// (at most 500 ms per call; ask again).
    #[napi(ts_return_type = "Promise<Record<string, any> | null>")]
    pub fn next(&self, timeout_ms: u32) -> AsyncTask<JsonJob> {
        let shared = self.shared.clone();
        let follower = self.follower.clone();
        let wait = Duration::from_millis(u64::from(timeout_ms)).min(FOLLOW_MAX_WAIT);
        Job::new(
            move || {
                let mut f = follower
                    .lock()
                    .map_err(|_| BindError::invalid("an earlier wait panicked"))?;
                Ok(f.wait(&shared, wait)?.unwrap_or(Value::Null))
            },
            same,
        )
    }
}

/// Reads the JSON text of an array of event objects (a `recordBatch`)
/// into `out`, with `spec`'s stamps as defaults; an element that does not
/// read fails the whole batch, naming it.
fn read_batch(text: &[u8], spec: &SessionSpec, out: &mut Vec<Event>) -> common::Result<()> {
    let text = std::str::from_utf8(text).map_err(|e| {
        BindError::new(
            common::ErrorKind::InvalidEvent,
            format!("a batch's JSON text is not UTF-8: {e}"),
        )
    })?;
    let items = array_items(text)?;
    out.reserve(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let e = spec.event_from_line(item).map_err(|e| {
            BindError::new(
                e.kind,
                format!("event {} of the batch: {}", i + 1, e.message),
            )
        })?;
        out.push(e);
    }
    Ok(())
}

/// The texts of the elements of a JSON array (`[{...},{...}]`), each to
/// be parsed on its own so an error names its element. The split is at
/// the commas between elements: those outside strings and not nested in
/// an element's own braces or brackets (every structural character is
/// ASCII, and no byte of a multi-byte UTF-8 character is ASCII, so bytes
/// are safe to scan). Text that is not an array is an error; an element
/// that is not JSON is left for the event parser to refuse by name.
fn array_items(text: &str) -> common::Result<Vec<&str>> {
    let not_array = || {
        BindError::new(
            common::ErrorKind::InvalidEvent,
            "a batch is a JSON array of event objects",
        )
    };
    let inner = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(not_array)?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    let bytes = inner.as_bytes();
    let mut items = Vec::new();
    let (mut depth, mut start, mut i) = (0usize, 0, 0);
    while let Some(&b) = bytes.get(i) {
        i += 1;
        match b {
            b'"' => {
                // Straight to the closing quote (most of a batch's bytes
                // are inside strings): an escape skips the byte after it.
                while let Some(&c) = bytes.get(i) {
                    i += 1;
                    match c {
                        b'"' => break,
                        b'\\' => i += 1,
                        _ => {}
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1).ok_or_else(not_array)?,
            b',' if depth == 0 => {
                items.push(&inner[start..i - 1]);
                start = i;
            }
            _ => {}
        }
    }
    items.push(inner.get(start..).unwrap_or_default());
    Ok(items)
}
