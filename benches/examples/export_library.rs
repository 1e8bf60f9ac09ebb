//! The library's export of a store on disk, as a whole process: opens the
//! log and blob store read-only and writes canonical JSONL to stdout
//! through the same scan `cairn export` uses. Paired with the binary on the
//! same store, it shows what the command line adds to the library's path:
//!
//! ```sh
//! cargo build --release && cargo build --release -p cairn-benches --example export_library
//! benches/scripts/export_cli.sh          # builds a store of 1,000,000 events, pairs the two
//! ```

use std::io::Write;
use std::sync::Arc;

use cairn_engine::blob::BlobStore;
use cairn_engine::log::LogReader;
use cairn_engine::RealVfs;
use cairn_query::export::{export_scan, Format};
use cairn_query::source::{ReaderSource, RecordSource};
use cairn_query::Filter;

fn main() {
    let store = std::env::args()
        .nth(1)
        .unwrap_or_else(|| ".cairn".to_string());
    let store = std::path::Path::new(&store);
    let vfs: Arc<RealVfs> = Arc::new(RealVfs);
    let reader = LogReader::open(vfs.clone(), &store.join("log")).expect("open the log");
    let blobs = BlobStore::open_read_only(vfs, &store.join("blobs")).expect("open the blobs");
    let src = ReaderSource::new(reader);
    let head = src.head().expect("head").last_lsn;
    let mut out = std::io::stdout().lock();
    let stats =
        export_scan(&src, &blobs, &Filter::all(), Format::Jsonl, head, &mut out).expect("export");
    out.flush().expect("flush");
    eprintln!("{} records", stats.records);
}
