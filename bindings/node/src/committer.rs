//! The store's committer: one thread per open store that appends the
//! events of every pending call as one batch and resolves their promises.
//!
//! A recording call (`prompt`, `reply`, `toolCall`, `record`,
//! `recordBatch`) makes its promise on the JS thread, queues its event(s)
//! and returns. The committer thread takes everything queued, appends it
//! through [`cairn::Store::append_batch`] (one write, and with durability
//! `always` one sync for all of it) once the JS turn that queued them is
//! over (see [`Queue`]), and hands the outcomes back to the JS
//! thread through one N-API thread-safe function call per batch, which
//! resolves each promise with its LSN (or `[first, last]`). So every call
//! pending while a sync runs shares the next one, however many there are
//! (with libuv's thread pool, at most its 4 threads' events could).
//!
//! Guarantees kept: a promise resolves only after its event is appended
//! with the store's durability (durable, for `always`); LSNs are dense
//! and given in queue order, so one session's calls keep their order; an
//! event the store refuses fails only its own call (the others are
//! appended without it, as nothing of a refused batch is written); any
//! other error (I/O, a closed store) rejects every promise of that batch.
//! Closing the store first commits what is queued, then stops the thread;
//! a call made after that rejects with "the store ... is closed".

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use cairn::{Event, Lsn};
use cairn_bindings_common as common;
use common::{BindError, ErrorKind, SessionSpec, Shared};
use napi::bindgen_prelude::{ToNapiValue, TypeName};
use napi::{sys, Env, JsError, Status};

/// What one call queued: its events, ready or still as the JSON text of
/// an array (parsed on the committer thread, off the event loop).
pub enum Work {
    /// One event (a `prompt`, `reply`, `toolCall` or `record`): resolves to its LSN.
    One(Box<Event>),
    /// A `recordBatch` as the JSON text of its array (UTF-8 bytes), read
    /// with the session's stamps: resolves to `[first, last]` (null for none).
    Json(Vec<u8>, SessionSpec),
}

/// A promise's resolver, created and used only on the JS thread; the
/// committer thread only carries it from the queue to the delivery.
struct Deferred(sys::napi_deferred);

// SAFETY: the pointer is never dereferenced off the JS thread: the
// committer thread moves it from the queue into the delivery, which runs
// on the JS thread (the thread-safe function's `deliver`).
unsafe impl Send for Deferred {}

/// The thread-safe function that runs `deliver` on the JS thread.
#[derive(Clone, Copy)]
struct Tsfn(sys::napi_threadsafe_function);

// SAFETY: N-API's thread-safe functions are made to be called from any
// thread; ref/unref are only called on the JS thread (see `Inner::tsfn`).
unsafe impl Send for Tsfn {}
// SAFETY: as for Send.
unsafe impl Sync for Tsfn {}

/// A queued call.
struct Pending {
    work: Work,
    deferred: Deferred,
}

/// The outcome of one call: the LSNs of its events, or why it failed.
enum Outcome {
    /// A single event's LSN.
    Lsn(Lsn),
    /// A batch's first and last LSN (None: an empty batch).
    Range(Option<(Lsn, Lsn)>),
    /// The call failed; nothing of it was appended.
    Failed(BindError),
}

/// The queue the JS thread fills and the committer thread drains.
///
/// The committer takes the queue only once the JS thread's current turn
/// is over (`ready`), so that every call made in one turn shares one
/// append: callers that await each event all resume in the same turn
/// (the one that settled their promises), one after another, and a
/// committer woken by the first of them would append it alone and the
/// rest the next time. The first call of a turn schedules a flush, a
/// call of the thread-safe function from the JS thread itself, which
/// runs after the turn (after its microtasks) and sets `ready`.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// A flush is scheduled and has not run yet.
    flush_scheduled: bool,
    /// A flush ran since the committer last took the queue.
    ready: bool,
    /// Set by close (or when the last handle goes): the thread commits
    /// what is queued and stops; later calls are refused.
    closing: bool,
}

/// What the JS thread and the committer thread share.
struct Inner {
    shared: Arc<Shared>,
    queue: Mutex<Queue>,
    ready: Condvar,
    tsfn: OnceLock<Tsfn>,
    /// Calls queued whose promise is not settled yet. Changed only on the
    /// JS thread: the thread-safe function is ref'd (keeps Node running)
    /// while it is above zero and unref'd (lets Node exit) at zero.
    in_flight: AtomicUsize,
    /// Batches appended (each one append, so one sync with durability `always`).
    batches: AtomicU64,
    /// Events appended by those batches.
    events: AtomicU64,
}

/// A store's committer: queues calls from the JS thread; its thread
/// appends them. Dropping the last handle (the store and its sessions
/// gone) stops the thread once the queue is empty.
pub struct Committer {
    inner: Arc<Inner>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// The env's cleanup hook, if it was registered.
    hook: Option<Hook>,
}

/// What the env's cleanup hook needs to stop a committer whose store was
/// never closed when Node exits: the thread must finish (and release the
/// thread-safe function) before Node tears that function down, or it
/// would call into freed memory (a process left with an open store
/// aborted at exit). The hook holds the queue weakly, so a store dropped
/// before exit still closes then, not at exit.
///
/// The hook and the [`Committer`] share it: a committer stopped by a
/// close and then dropped on the JS thread removes the hook, so a process
/// that opens and closes stores keeps no hook per store until it exits.
struct Teardown {
    inner: std::sync::Weak<Inner>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Set by whichever of the hook and the committer's removal runs
    /// first (both on the JS thread); the other leaves the hook alone.
    done: AtomicBool,
}

/// Cleanup hooks registered and not yet run nor removed: one per store
/// that has committed and is open or not yet collected (see
/// [`live_cleanup_hooks`]).
static LIVE_HOOKS: AtomicUsize = AtomicUsize::new(0);

/// How many stores hold a cleanup hook with Node: those that recorded
/// something and are open, or closed but not yet garbage-collected. A
/// diagnostic for embedders (and the test) that a closed store leaves
/// nothing behind.
pub fn live_cleanup_hooks() -> usize {
    LIVE_HOOKS.load(Ordering::Relaxed)
}

/// The registered hook, removed by the committer's drop (see [`Teardown`]).
struct Hook {
    env: sys::napi_env,
    /// The committer's own reference to what the hook holds.
    state: Arc<Teardown>,
    /// The hook's argument: the hook's reference, released by whichever
    /// of the hook and the removal runs.
    arg: *const Teardown,
    /// The JS thread: the hook may be removed only there.
    js_thread: std::thread::ThreadId,
}

// SAFETY: `env` and `arg` are used only on `js_thread` (checked in
// `Committer::drop`); elsewhere the hook is carried, never touched.
unsafe impl Send for Hook {}
// SAFETY: as for Send.
unsafe impl Sync for Hook {}

/// The env's cleanup hook (see [`Teardown`]). Node runs cleanup hooks in
/// the reverse order of their registration, so this one, added after the
/// thread-safe function was created, runs before that function's own.
unsafe extern "C" fn teardown(arg: *mut c_void) {
    // SAFETY: `arg` is the `Arc` made in `Committer::start`, handed back
    // exactly once (Node runs each hook once; a removed hook never runs).
    let t = unsafe { Arc::from_raw(arg.cast::<Teardown>().cast_const()) };
    if t.done.swap(true, Ordering::SeqCst) {
        return;
    }
    LIVE_HOOKS.fetch_sub(1, Ordering::Relaxed);
    if let Some(inner) = t.inner.upgrade() {
        inner
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closing = true;
        inner.ready.notify_one();
    }
    let thread = t.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(thread) = thread {
        let _ = thread.join();
    }
}

/// A promise made by [`Committer::submit`], as the value a `#[napi]`
/// method returns.
pub struct JsPromise(sys::napi_value);

impl TypeName for JsPromise {
    fn type_name() -> &'static str {
        "Promise"
    }

    fn value_type() -> napi::ValueType {
        napi::ValueType::Object
    }
}

impl ToNapiValue for JsPromise {
    unsafe fn to_napi_value(_env: sys::napi_env, val: JsPromise) -> napi::Result<sys::napi_value> {
        Ok(val.0)
    }
}

fn check(status: sys::napi_status, what: &str) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            Status::GenericFailure,
            format!("[Error] N-API call `{what}` failed (status {status})"),
        ))
    }
}

/// A cairn error as a JS error value, tagged with its family like every
/// other rejection of the addon (see `js_err` in lib.rs).
fn error_value(env: sys::napi_env, e: BindError) -> sys::napi_value {
    // SAFETY: `env` is the JS thread's env of the running callback.
    unsafe { JsError::from(crate::js_err(e)).into_value(env) }
}

impl Committer {
    /// Starts the committer of `shared` (on the JS thread of `env`).
    pub fn start(env: &Env, shared: Arc<Shared>) -> napi::Result<Arc<Committer>> {
        let inner = Arc::new(Inner {
            shared,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            tsfn: OnceLock::new(),
            in_flight: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            events: AtomicU64::new(0),
        });
        let raw = env.raw();
        let name = "cairn.commit";
        let mut js_name = ptr::null_mut();
        let mut tsfn = ptr::null_mut();
        // SAFETY: plain N-API calls on the JS thread with its env; `deliver`
        // matches napi_threadsafe_function_call_js and takes ownership of
        // the data pointers `run` sends.
        unsafe {
            check(
                sys::napi_create_string_utf8(
                    raw,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    &mut js_name,
                ),
                "napi_create_string_utf8",
            )?;
            check(
                sys::napi_create_threadsafe_function(
                    raw,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    js_name,
                    0,
                    1,
                    ptr::null_mut(),
                    None,
                    ptr::null_mut(),
                    Some(deliver),
                    &mut tsfn,
                ),
                "napi_create_threadsafe_function",
            )?;
            // Nothing is pending yet: an idle store does not keep Node running.
            check(
                sys::napi_unref_threadsafe_function(raw, tsfn),
                "napi_unref_threadsafe_function",
            )?;
        }
        let _ = inner.tsfn.set(Tsfn(tsfn));
        let for_thread = inner.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-commit".into())
            .spawn(move || run(for_thread))
            .map_err(|e| {
                napi::Error::new(
                    Status::GenericFailure,
                    format!("[Error] cannot start the store's committer thread: {e}"),
                )
            })?;
        let thread = Arc::new(Mutex::new(Some(thread)));
        let state = Arc::new(Teardown {
            inner: Arc::downgrade(&inner),
            thread: thread.clone(),
            done: AtomicBool::new(false),
        });
        let hook = Arc::into_raw(state.clone());
        // SAFETY: on the JS thread with its env; `teardown` takes the Arc
        // back when Node runs it, at the env's teardown, unless the
        // committer's drop removed it first.
        let status =
            unsafe { sys::napi_add_env_cleanup_hook(raw, Some(teardown), hook.cast_mut().cast()) };
        let hook = if status == sys::Status::napi_ok {
            LIVE_HOOKS.fetch_add(1, Ordering::Relaxed);
            Some(Hook {
                env: raw,
                state,
                arg: hook,
                js_thread: std::thread::current().id(),
            })
        } else {
            // SAFETY: not handed over.
            drop(unsafe { Arc::from_raw(hook) });
            None
        };
        Ok(Arc::new(Committer {
            inner,
            thread,
            hook,
        }))
    }

    /// Queues `work` and returns its promise (on the JS thread). A store
    /// that is closing or closed rejects it at once.
    pub fn submit(&self, env: &Env, work: Work) -> napi::Result<JsPromise> {
        let raw = env.raw();
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        // SAFETY: N-API call on the JS thread with its env.
        check(
            unsafe { sys::napi_create_promise(raw, &mut deferred, &mut promise) },
            "napi_create_promise",
        )?;
        let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.closing {
            drop(q);
            let e = BindError::invalid(format!(
                "the store of {} is closed",
                self.inner.shared.workspace().display()
            ));
            // SAFETY: as above; the deferred is settled exactly once.
            check(
                unsafe { sys::napi_reject_deferred(raw, deferred, error_value(raw, e)) },
                "napi_reject_deferred",
            )?;
            return Ok(JsPromise(promise));
        }
        q.pending.push(Pending {
            work,
            deferred: Deferred(deferred),
        });
        let flush = !q.flush_scheduled;
        q.flush_scheduled = true;
        drop(q);
        if flush {
            if let Some(t) = self.inner.tsfn.get() {
                let data = Box::into_raw(Box::new(Message::Flush(self.inner.clone())));
                // SAFETY: as in `run`; a refused call hands `data` back.
                let status = unsafe {
                    sys::napi_call_threadsafe_function(
                        t.0,
                        data.cast(),
                        sys::ThreadsafeFunctionCallMode::nonblocking,
                    )
                };
                if status != sys::Status::napi_ok {
                    // SAFETY: not handed over. Without a flush, wake the
                    // committer now rather than never.
                    drop(unsafe { Box::from_raw(data) });
                    self.inner.flushed();
                }
            }
        }
        if self.inner.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Some(t) = self.inner.tsfn.get() {
                // SAFETY: on the JS thread; the thread-safe function is not
                // released before the queue (holding this call) is empty.
                check(
                    unsafe { sys::napi_ref_threadsafe_function(raw, t.0) },
                    "napi_ref_threadsafe_function",
                )?;
            }
        }
        Ok(JsPromise(promise))
    }

    /// Refuses calls from now on; what is queued is still committed
    /// (called on the JS thread by `close`, so that a call made after it
    /// is refused whenever the close itself runs).
    pub fn refuse_new(&self) {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closing = true;
        self.inner.ready.notify_one();
    }

    /// Commits what is queued, then stops the thread (waits for it). Calls
    /// made from now on are refused; a second call does nothing.
    pub fn stop(&self) {
        self.refuse_new();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// `{batches, events}`: the appends the committer made and the events
    /// in them. With durability `always` each batch is one sync.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.inner.batches.load(Ordering::Relaxed),
            self.inner.events.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // The store and every session are gone: let the thread finish what
        // is queued and exit without waiting for it here (on the JS thread).
        self.refuse_new();
        self.remove_hook();
    }
}

impl Committer {
    /// Removes the env's cleanup hook once it has nothing left to do: the
    /// thread was stopped (a close) and this runs on the JS thread. A
    /// committer dropped unclosed, or off the JS thread (the last handle
    /// held by a close's worker), keeps its hook until Node exits.
    fn remove_hook(&mut self) {
        let Some(h) = &self.hook else { return };
        let stopped = self
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none();
        if !stopped || std::thread::current().id() != h.js_thread {
            return;
        }
        if h.state.done.swap(true, Ordering::SeqCst) {
            return;
        }
        LIVE_HOOKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the env is this thread's; the hook and its argument are
        // the ones registered in `start`, and it has not run (`done`).
        let status = unsafe {
            sys::napi_remove_env_cleanup_hook(h.env, Some(teardown), h.arg.cast_mut().cast())
        };
        if status == sys::Status::napi_ok {
            // SAFETY: the hook will not run, so its reference is ours to
            // release.
            drop(unsafe { Arc::from_raw(h.arg) });
        }
        self.hook = None;
    }
}

impl Inner {
    /// The JS thread's turn is over: the committer may take the queue.
    fn flushed(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.flush_scheduled = false;
        q.ready = true;
        drop(q);
        self.ready.notify_one();
    }
}

/// What the thread-safe function carries to the JS thread.
enum Message {
    /// A batch's outcomes, to settle its promises.
    Settle(Delivery),
    /// The end of a JS turn that queued calls (see [`Queue`]).
    Flush(Arc<Inner>),
}

/// What one batch hands to the JS thread.
struct Delivery {
    inner: Arc<Inner>,
    settled: Vec<(Deferred, Outcome)>,
}

/// The committer thread: take everything queued, commit it, deliver.
fn run(inner: Arc<Inner>) {
    let tsfn = inner.tsfn.get().copied();
    loop {
        let batch = {
            let mut q = inner.queue.lock().unwrap_or_else(|p| p.into_inner());
            // Until a flush (or close) lets it take calls that are there.
            let take = |q: &Queue| q.closing || (q.ready && !q.pending.is_empty());
            while !take(&q) {
                q = inner.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            if q.pending.is_empty() {
                break;
            }
            q.ready = false;
            std::mem::take(&mut q.pending)
        };
        let (settled, events) = commit(&inner, batch);
        let Some(t) = tsfn else { continue };
        let data = Box::into_raw(Box::new(Message::Settle(Delivery {
            inner: inner.clone(),
            settled,
        })));
        // SAFETY: `t` is live until released below; `deliver` takes `data`
        // back. If Node is shutting down the call is refused and the data
        // is ours again to drop.
        let status = unsafe {
            sys::napi_call_threadsafe_function(
                t.0,
                data.cast(),
                sys::ThreadsafeFunctionCallMode::blocking,
            )
        };
        if status != sys::Status::napi_ok {
            // SAFETY: not handed over (see above).
            drop(unsafe { Box::from_raw(data) });
        }
        // Freed after the promises are on their way, not before: a batch
        // of 1,000 events takes a while to drop, and its caller need not
        // wait for that.
        drop(events);
    }
    if let Some(t) = tsfn {
        // SAFETY: this thread's one acquisition (initial_thread_count 1).
        unsafe {
            sys::napi_release_threadsafe_function(t.0, sys::ThreadsafeFunctionReleaseMode::release)
        };
    }
}

/// A call of a batch being committed: its resolver, whether it is a single
/// event (resolves to an LSN) or a batch (to `[first, last]`), and its
/// events' range in the batch's event list (or why it could not be read).
type Call = (Deferred, bool, Result<(usize, usize), BindError>);

/// Appends the events of `batch` and says how each call went. Calls whose
/// JSON does not read fail alone; the rest go in one append. If the store
/// refuses that append as a bad event (nothing of it is written), each
/// call is appended alone so that only the bad one fails. Also returns
/// the events, for the caller to free once the outcomes are delivered.
fn commit(inner: &Inner, batch: Vec<Pending>) -> (Vec<(Deferred, Outcome)>, Vec<Event>) {
    let mut events: Vec<Event> = Vec::new();
    // Per call: its deferred, and the events' range in `events` (or its error).
    let mut calls: Vec<Call> = Vec::with_capacity(batch.len());
    for p in batch {
        let start = events.len();
        match p.work {
            Work::One(e) => {
                events.push(*e);
                calls.push((p.deferred, true, Ok((start, start + 1))));
            }
            Work::Json(text, spec) => match crate::read_batch(&text, &spec, &mut events) {
                Ok(()) => calls.push((p.deferred, false, Ok((start, events.len())))),
                Err(e) => {
                    events.truncate(start);
                    calls.push((p.deferred, false, Err(e)));
                }
            },
        }
    }
    let first = append(inner, &events);
    let outcome = |single: bool, range: (usize, usize), first: Lsn| -> Outcome {
        let lsn = |i: usize| Lsn(first.0 + i as u64);
        if single {
            Outcome::Lsn(lsn(range.0))
        } else if range.0 == range.1 {
            Outcome::Range(None)
        } else {
            Outcome::Range(Some((lsn(range.0), lsn(range.1 - 1))))
        }
    };
    let settled = match first {
        Ok(first) => calls
            .into_iter()
            .map(|(d, single, r)| match r {
                Ok(range) => (d, outcome(single, range, first)),
                Err(e) => (d, Outcome::Failed(e)),
            })
            .collect(),
        Err(e) if e.kind == ErrorKind::InvalidEvent && calls.len() > 1 => calls
            .into_iter()
            .map(|(d, single, r)| {
                let o = r.and_then(|range| {
                    let first = append(inner, &events[range.0..range.1])?;
                    Ok(outcome(single, (0, range.1 - range.0), first))
                });
                (d, o.unwrap_or_else(Outcome::Failed))
            })
            .collect(),
        Err(e) => calls
            .into_iter()
            .map(|(d, _, r)| (d, Outcome::Failed(r.err().unwrap_or_else(|| e.clone()))))
            .collect(),
    };
    (settled, events)
}

/// Appends `events` as one batch; returns the first one's LSN (for none,
/// the LSN the next record would get, never used).
fn append(inner: &Inner, events: &[Event]) -> common::Result<Lsn> {
    if events.is_empty() {
        return Ok(Lsn(0));
    }
    let range = inner.shared.with(|s| s.append_batch(events))?;
    inner.batches.fetch_add(1, Ordering::Relaxed);
    inner
        .events
        .fetch_add(events.len() as u64, Ordering::Relaxed);
    Ok(range.map_or(Lsn(0), |(a, _)| a))
}

/// Runs on the JS thread: settles the promises of one batch.
unsafe extern "C" fn deliver(
    env: sys::napi_env,
    _js_callback: sys::napi_value,
    _context: *mut c_void,
    data: *mut c_void,
) {
    // SAFETY: `data` is the Box `run` or `submit` handed over, taken
    // back once here.
    let d = match *unsafe { Box::from_raw(data.cast::<Message>()) } {
        Message::Flush(inner) => return inner.flushed(),
        Message::Settle(d) => d,
    };
    if env.is_null() {
        // Node is tearing the thread-safe function down: nothing to settle.
        return;
    }
    let n = d.settled.len();
    for (deferred, outcome) in d.settled {
        // SAFETY: on the JS thread with its env; each deferred is settled
        // exactly once. A failing N-API call (the env going away) leaves
        // the promise pending, which nobody can observe any more.
        unsafe {
            match outcome {
                Outcome::Failed(e) => {
                    sys::napi_reject_deferred(env, deferred.0, error_value(env, e));
                }
                Outcome::Lsn(l) => {
                    let mut v = ptr::null_mut();
                    sys::napi_create_double(env, l.0 as f64, &mut v);
                    sys::napi_resolve_deferred(env, deferred.0, v);
                }
                Outcome::Range(r) => {
                    let mut v = ptr::null_mut();
                    match r {
                        None => {
                            sys::napi_get_null(env, &mut v);
                        }
                        Some((a, b)) => {
                            sys::napi_create_array_with_length(env, 2, &mut v);
                            for (i, l) in [a, b].into_iter().enumerate() {
                                let mut x = ptr::null_mut();
                                sys::napi_create_double(env, l.0 as f64, &mut x);
                                sys::napi_set_element(env, v, i as u32, x);
                            }
                        }
                    }
                    sys::napi_resolve_deferred(env, deferred.0, v);
                }
            }
        }
    }
    if d.inner.in_flight.fetch_sub(n, Ordering::Relaxed) == n {
        if let Some(t) = d.inner.tsfn.get() {
            // SAFETY: on the JS thread; the function is live while this
            // delivery of it runs.
            unsafe { sys::napi_unref_threadsafe_function(env, t.0) };
        }
    }
}
