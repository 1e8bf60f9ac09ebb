//! An archive: a place in an object store (`s3://bucket/prefix`,
//! `file:///dir`) and the blocking calls cairn makes on it.
//!
//! `object_store` is async; the archive keeps a current-thread tokio
//! runtime of its own, driven by a thread of its own, and blocks on it, so
//! none of it leaks into cairn's synchronous API. Each call runs on the
//! caller's thread; a write started with [`Archive::start_put`] runs on
//! the runtime's thread while the caller goes on (reading and hashing the
//! next piece).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::ReplicateError;

/// A shared byte buffer that slices without copying: the `bytes` crate's
/// `Bytes`, which object_store writes from (named through `PutPayload`,
/// whose pieces it is, so cairn needs no dependency of its own on it).
pub(crate) type Bytes = <PutPayload as IntoIterator>::Item;

/// How long one request may take before it is retried (a stalled
/// connection to a killed server must not hang a replication round).
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// How long to try to connect before giving up on an attempt.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Retries of a failed request (object_store backs off between them).
pub const MAX_RETRIES: usize = 3;
/// The total time a request is retried for: a round that cannot reach
/// the server fails in about this long and the next one tries again.
pub const RETRY_TIMEOUT_MS: u64 = 15_000;
/// Writes [`Archive::put_many`] keeps in flight at once: enough to hide a
/// request's round trip and keep a local server's disk busy, few enough
/// that a round holds at most this many pieces being sent (with
/// [`super::MAX_PIECE_BYTES`] each) and a small server is not flooded.
pub const MAX_PUTS_IN_FLIGHT: usize = 8;
/// Reads [`Archive::get_each`] keeps in flight at once, for the same
/// reasons: a restore holds at most this many pieces read ahead.
pub const MAX_GETS_IN_FLIGHT: usize = 8;
/// Ranged reads [`Archive::get_ranges`] keeps in flight at once (a read
/// plan's, see [`super::ArchiveVfs`]): its ranges are small (a sparse-index
/// window of a few KiB; merged ones at most
/// [`super::MAX_PLANNED_RANGE_BYTES`]), so each costs its round trip
/// more than its bytes, and more in flight hide more of them: against a
/// local SeaweedFS on 2 shared cores, 32 took 0.70x the wall time of 8
/// for `history` of a path on every page (docs/BENCHMARKS.md). At most
/// 32 MiB in flight.
pub const MAX_RANGES_IN_FLIGHT: usize = 32;

/// `b` with what the AWS profile gives and the environment does not: a
/// variable set wins over the profile, as in the AWS CLI.
fn with_profile(
    mut b: object_store::aws::AmazonS3Builder,
) -> Result<object_store::aws::AmazonS3Builder, ReplicateError> {
    let Some(p) = super::aws_profile::load(&super::aws_profile::Sources::from_env())? else {
        return Ok(b);
    };
    let unset = |k: &str| std::env::var_os(k).is_none_or(|v| v.is_empty());
    if unset("AWS_ACCESS_KEY_ID") && unset("AWS_SECRET_ACCESS_KEY") {
        if let (Some(k), Some(s)) = (p.access_key_id, p.secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            if let Some(t) = p.session_token.filter(|_| unset("AWS_SESSION_TOKEN")) {
                b = b.with_token(t);
            }
        }
    }
    if let Some(r) = p
        .region
        .filter(|_| unset("AWS_REGION") && unset("AWS_DEFAULT_REGION"))
    {
        b = b.with_region(r);
    }
    if let Some(e) = p
        .endpoint_url
        .filter(|_| unset("AWS_ENDPOINT_URL") && unset("AWS_ENDPOINT"))
    {
        b = b.with_endpoint(e);
    }
    Ok(b)
}

/// A write under way ([`Archive::start_put`]).
#[derive(Debug)]
pub struct PutHandle {
    name: String,
    /// `None`: refused by the budget of [`Archive::fail_after_puts`].
    task: Option<tokio::task::JoinHandle<Result<(), object_store::Error>>>,
}

impl PutHandle {
    /// The object being written.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What [`Archive::list`] gives for one object.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Its name under the archive root (`objects/ab12...`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, milliseconds since the epoch.
    pub modified_ms: i64,
}

/// An archive: an object store and the prefix the archive lives under.
pub struct Archive {
    store: Arc<dyn ObjectStore>,
    root: ObjPath,
    url: String,
    /// The runtime's handle: its thread drives its I/O and timers and runs
    /// the writes started with [`Archive::start_put`].
    rt: tokio::runtime::Handle,
    /// Tells the runtime's thread to stop (dropped with the archive).
    _stop: tokio::sync::oneshot::Sender<()>,
    puts: Arc<AtomicU64>,
    put_budget: AtomicU64,
    gets: AtomicU64,
    bytes_read: AtomicU64,
    /// The most ranges one [`Archive::get_ranges`] call was given.
    largest_ranges_batch: AtomicU64,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("url", &self.url).finish()
    }
}

impl Archive {
    /// Opens the archive at `url`: `s3://bucket/prefix` (configured from
    /// the standard AWS variables, `AWS_ENDPOINT_URL` and
    /// `AWS_ALLOW_HTTP=true` for an S3-compatible server over plain HTTP,
    /// then from the AWS profile for what the variables leave unset: see
    /// [`super::aws_profile`])
    /// or `file:///absolute/dir` (created if missing).
    pub fn open(url: &str) -> Result<Archive, ReplicateError> {
        let bad = |detail: &str| ReplicateError::Url {
            url: url.to_string(),
            detail: detail.to_string(),
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket name after s3://"));
            }
            install_tls_provider();
            let retry = object_store::RetryConfig {
                max_retries: MAX_RETRIES,
                retry_timeout: Duration::from_millis(RETRY_TIMEOUT_MS),
                ..Default::default()
            };
            // The timeouts are set key by key: `with_client_options` would
            // replace what `from_env` read (AWS_ALLOW_HTTP among it).
            use object_store::aws::AmazonS3ConfigKey as Key;
            use object_store::ClientConfigKey as Client;
            let s3 = with_profile(object_store::aws::AmazonS3Builder::from_env())?
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_config(
                    Key::Client(Client::Timeout),
                    format!("{REQUEST_TIMEOUT_MS}ms"),
                )
                .with_config(
                    Key::Client(Client::ConnectTimeout),
                    format!("{CONNECT_TIMEOUT_MS}ms"),
                )
                .build()
                .map_err(|e| bad(&e.to_string()))?;
            Archive::with_store(Arc::new(s3), prefix, url)
        } else if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad("a file:// URL needs an absolute path (file:///dir)"));
            }
            std::fs::create_dir_all(path).map_err(|e| ReplicateError::Io {
                op: "create the archive directory",
                path: path.into(),
                source: e,
            })?;
            let fs = object_store::local::LocalFileSystem::new_with_prefix(path)
                .map_err(|e| bad(&e.to_string()))?;
            Archive::with_store(Arc::new(fs), "", url)
        } else {
            Err(bad("the URL must start with s3:// or file:///"))
        }
    }

    /// An archive under `prefix` of `store` (any `ObjectStore`: tests wrap
    /// one to count or fail requests). `url` names it in messages.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        url: &str,
    ) -> Result<Archive, ReplicateError> {
        let failed = |e| ReplicateError::Io {
            op: "start the replication runtime",
            path: url.into(),
            source: e,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(failed)?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The thread drives the runtime until the archive is dropped (the
        // sender with it); a write it runs then is abandoned, as a process
        // that exits abandons it.
        std::thread::Builder::new()
            .name("cairn-archive".into())
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })
            .map_err(failed)?;
        Ok(Archive {
            store,
            root: ObjPath::from(prefix.trim_matches('/')),
            url: url.to_string(),
            rt: handle,
            _stop: stop,
            puts: Arc::new(AtomicU64::new(0)),
            put_budget: AtomicU64::new(u64::MAX),
            gets: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            largest_ranges_batch: AtomicU64::new(0),
        })
    }

    /// The URL the archive was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Objects written by this handle so far.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
    }

    /// Objects (or ranges of objects) read by this handle so far.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// Bytes those reads returned.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// The most ranges one [`Archive::get_ranges`] call was given: what
    /// it may have under way at once (up to [`MAX_RANGES_IN_FLIGHT`]; how
    /// many actually overlap depends on how fast each returns).
    pub fn largest_ranges_batch(&self) -> u64 {
        self.largest_ranges_batch.load(Ordering::Relaxed)
    }

    fn count_read(&self, n: usize) {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// For fault tests: after `n` more writes, every write fails as a lost
    /// connection would (the replicator must then leave the archive as
    /// consistent as before the round).
    pub fn fail_after_puts(&self, n: u64) {
        self.put_budget.store(n, Ordering::Relaxed);
    }

    fn path(&self, name: &str) -> ObjPath {
        if self.root.as_ref().is_empty() {
            ObjPath::from(name)
        } else {
            ObjPath::from(format!("{}/{name}", self.root.as_ref()))
        }
    }

    fn err(&self, op: &'static str, name: &str, e: object_store::Error) -> ReplicateError {
        ReplicateError::Remote {
            op,
            object: format!("{}/{name}", self.url.trim_end_matches('/')),
            detail: e.to_string(),
        }
    }

    /// Takes one write from the budget set by [`Archive::fail_after_puts`]:
    /// false when it is spent (the write must fail as a lost connection
    /// would).
    fn take_put_budget(&self) -> bool {
        self.put_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| match left {
                0 => None,
                u64::MAX => Some(u64::MAX),
                n => Some(n - 1),
            })
            .is_ok()
    }

    fn budget_spent(name: &str) -> ReplicateError {
        ReplicateError::Remote {
            op: "write",
            object: name.to_string(),
            detail: "injected fault: the write budget set by fail_after_puts is spent".into(),
        }
    }

    /// Writes the object `name`.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), ReplicateError> {
        let h = self.start_put(name, bytes);
        self.finish_put(h)
    }

    /// Starts writing the object `name` on the archive's runtime and
    /// returns at once; [`Archive::finish_put`] waits for it and says how
    /// it went.
    pub fn start_put(&self, name: &str, bytes: impl Into<PutPayload>) -> PutHandle {
        if !self.take_put_budget() {
            return PutHandle {
                name: name.to_string(),
                task: None,
            };
        }
        let store = self.store.clone();
        let path = self.path(name);
        let puts = self.puts.clone();
        let payload: PutPayload = bytes.into();
        let task = self.rt.spawn(async move {
            store.put(&path, payload).await?;
            puts.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        PutHandle {
            name: name.to_string(),
            task: Some(task),
        }
    }

    /// Waits for the write `h` and returns its outcome.
    pub fn finish_put(&self, h: PutHandle) -> Result<(), ReplicateError> {
        let Some(task) = h.task else {
            return Err(Archive::budget_spent(&h.name));
        };
        match self.rt.block_on(task) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.err("write", &h.name, e)),
            Err(e) => Err(ReplicateError::Remote {
                op: "write",
                object: format!("{}/{}", self.url.trim_end_matches('/'), h.name),
                detail: format!("the write stopped: {e}"),
            }),
        }
    }

    /// Writes every object of `objects`, up to [`MAX_PUTS_IN_FLIGHT`] at
    /// a time, and returns each one's result in the order given: a
    /// failure does not stop the others (those written are there, and a
    /// caller can count them as sent).
    pub fn put_many(&self, objects: Vec<(String, Vec<u8>)>) -> Vec<Result<(), ReplicateError>> {
        let mut out = Vec::with_capacity(objects.len());
        let mut in_flight = std::collections::VecDeque::new();
        for (name, bytes) in objects {
            if in_flight.len() >= MAX_PUTS_IN_FLIGHT {
                if let Some(h) = in_flight.pop_front() {
                    out.push(self.finish_put(h));
                }
            }
            in_flight.push_back(self.start_put(&name, bytes));
        }
        out.extend(in_flight.into_iter().map(|h| self.finish_put(h)));
        out
    }

    /// Reads the object `name`; `None` if there is none.
    pub fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ReplicateError> {
        self.rt.block_on(self.get_async(name))
    }

    async fn get_async(&self, name: &str) -> Result<Option<Vec<u8>>, ReplicateError> {
        let path = self.path(name);
        let r = async {
            match self.store.get(&path).await {
                Ok(g) => g.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        }
        .await;
        let got = r
            .map(|b| b.map(|b| b.to_vec()))
            .map_err(|e| self.err("read", name, e))?;
        if let Some(b) = &got {
            self.count_read(b.len());
        }
        Ok(got)
    }

    /// Reads the objects `names`, up to [`MAX_GETS_IN_FLIGHT`] at a time,
    /// handing each to `each` in the order given as soon as it and those
    /// before it are read (so at most about that many are held at once);
    /// `None` for one that is not there. Stops at the first error, from
    /// the store or from `each`.
    pub fn get_each(
        &self,
        names: &[String],
        mut each: impl FnMut(usize, Option<Vec<u8>>) -> Result<(), ReplicateError>,
    ) -> Result<(), ReplicateError> {
        self.rt.block_on(async {
            let mut s = futures::stream::iter(names.iter())
                .map(|name| self.get_async(name))
                .buffered(MAX_GETS_IN_FLIGHT);
            let mut i = 0;
            while let Some(r) = s.next().await {
                each(i, r?)?;
                i += 1;
            }
            Ok(())
        })
    }

    /// Reads the bytes `range` of the object `name` (one ranged GET);
    /// `None` if there is no such object. A range past the object's end is
    /// an error from the store, and a short answer one from here: the
    /// caller asks only for ranges its manifest says are there.
    pub fn get_range(
        &self,
        name: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Option<Vec<u8>>, ReplicateError> {
        self.rt.block_on(self.get_range_async(name, range))
    }

    /// Reads the byte ranges `ranges` (object name, range), each as
    /// [`Archive::get_range`] reads one, up to [`MAX_RANGES_IN_FLIGHT`] at
    /// a time, and hands each result to `each` in the order given as
    /// soon as it and those before it are read. A failed read does not
    /// stop the others: each gets its own result.
    pub fn get_ranges(
        &self,
        ranges: &[(String, std::ops::Range<u64>)],
        mut each: impl FnMut(usize, Result<Option<Vec<u8>>, ReplicateError>),
    ) {
        self.largest_ranges_batch
            .fetch_max(ranges.len() as u64, Ordering::Relaxed);
        self.rt.block_on(async {
            let mut s = futures::stream::iter(ranges.iter())
                .map(|(name, range)| self.get_range_async(name, range.clone()))
                .buffered(MAX_RANGES_IN_FLIGHT)
                .enumerate();
            while let Some((i, r)) = s.next().await {
                each(i, r);
            }
        })
    }

    async fn get_range_async(
        &self,
        name: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Option<Vec<u8>>, ReplicateError> {
        let path = self.path(name);
        let want = range.end.saturating_sub(range.start);
        let r = self.store.get_range(&path, range.clone()).await;
        let bytes = match r {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => {
                // A range past the end of a truncated object fails as a
                // request; its size says which it was.
                if let Ok(meta) = self.store.head(&path).await {
                    if meta.size < range.end {
                        return Err(ReplicateError::Damaged {
                            object: name.to_string(),
                            detail: format!(
                                "{} bytes, but bytes up to {} were expected (truncated)",
                                meta.size, range.end
                            ),
                        });
                    }
                }
                return Err(self.err("read", name, e));
            }
        };
        self.count_read(bytes.len());
        if bytes.len() as u64 != want {
            return Err(ReplicateError::Damaged {
                object: name.to_string(),
                detail: format!(
                    "asked for bytes {}..{}, got {} bytes (the object is shorter than its manifest says)",
                    range.start,
                    range.end,
                    bytes.len()
                ),
            });
        }
        Ok(Some(bytes.to_vec()))
    }

    /// Whether the object `name` exists.
    pub fn exists(&self, name: &str) -> Result<bool, ReplicateError> {
        let path = self.path(name);
        match self.rt.block_on(self.store.head(&path)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("look up", name, e)),
        }
    }

    /// Deletes the object `name` (gone already is fine).
    pub fn delete(&self, name: &str) -> Result<(), ReplicateError> {
        let path = self.path(name);
        match self.rt.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("delete", name, e)),
        }
    }

    /// Every object whose name (under the archive root) starts with the
    /// folder `under` (`objects`, `manifests/<generation>`, or "" for all).
    pub fn list(&self, under: &str) -> Result<Vec<Listed>, ReplicateError> {
        let prefix = if under.is_empty() {
            self.root.clone()
        } else {
            self.path(under)
        };
        let root = self.root.as_ref().to_string();
        let prefix_opt = (!prefix.as_ref().is_empty()).then_some(&prefix);
        let found = self.rt.block_on(async {
            let mut out = Vec::new();
            let mut s = self.store.list(prefix_opt);
            while let Some(m) = s.next().await {
                let m = m?;
                let full = m.location.as_ref();
                let name = if root.is_empty() {
                    full.to_string()
                } else {
                    full.strip_prefix(&root)
                        .map(|s| s.trim_start_matches('/').to_string())
                        .unwrap_or_else(|| full.to_string())
                };
                out.push(Listed {
                    name,
                    size: m.size,
                    modified_ms: m.last_modified.timestamp_millis(),
                });
            }
            Ok::<_, object_store::Error>(out)
        });
        found.map_err(|e| self.err("list", under, e))
    }
}

/// reqwest is built without a TLS provider of its own (its default would
/// build aws-lc from C); ring is installed as the process's provider
/// before the first client is made. A provider already installed (by the
/// embedder) is kept.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
