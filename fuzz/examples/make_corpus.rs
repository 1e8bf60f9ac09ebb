//! Writes seed inputs (valid encodings made by cairn itself) into
//! `corpus/<target>/`, so the fuzzers start past the checksums and explore
//! the decoders behind them:
//!
//! ```sh
//! cd fuzz && cargo run --example make_corpus
//! ```

use std::path::Path;
use std::sync::Arc;

use cairn_codec::frame::{self, RecordKind, FLAG_BATCH_CONT};
use cairn_codec::segment::{SegmentFooter, SegmentHeader};
use cairn_codec::{BlobHash, ChainHash, Event, EventKind, Lsn};
use cairn_engine::blob::index::INDEX_FILE;
use cairn_engine::blob::pack::PACK_HEADER_LEN;
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::vfs::{SimVfs, Vfs};
use cairn_snapshot::manifest::{Entry, EntryKind, Node};

fn save(target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)
}

fn events() -> Vec<Event> {
    let mut big = Event::new(EventKind::FileWrite, "s").with_path("src/main.rs");
    big.text = Some("fn main() { println!(\"hi\"); }\n".repeat(40));
    big.after = Some(BlobHash::of(b"x"));
    big.parents = vec![Lsn(1), Lsn(2)];
    vec![
        Event::new(EventKind::Prompt, "s").with_text("fix the build"),
        Event::new(EventKind::ToolCall, "t").with_path("a/b.rs"),
        big,
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Frames and bodies.
    let mut chain = ChainHash::ZERO;
    let mut all = Vec::new();
    for (i, e) in events().iter().enumerate() {
        let body = e.encode_body()?;
        save("event_body", &format!("seed{i}"), &body)?;
        let mut one = Vec::new();
        let flags = if i == 0 { FLAG_BATCH_CONT } else { 0 };
        chain = frame::encode(
            &mut one,
            Lsn(i as u64 + 1),
            RecordKind::Event,
            flags,
            &body,
            chain,
        )?;
        save("frame_decode", &format!("seed{i}"), &one)?;
        all.extend_from_slice(&one);
    }
    // Frames compressed with a dictionary (the one the target decodes with).
    let d = cairn_fuzz::frame_dict();
    for i in 0..3u64 {
        let body = cairn_fuzz::dict_event(1000 + i)
            .encode_body()
            .expect("body");
        let mut one = Vec::new();
        frame::encode_with(
            &mut one,
            Lsn(10 + i),
            RecordKind::Event,
            0,
            &body,
            ChainHash::ZERO,
            Some(d),
        )?;
        assert!(frame::decode(&one).expect("frame").flags & frame::FLAG_DICT != 0);
        save("frame_decode", &format!("dict{i}"), &one)?;
    }
    // Segment header, and a sealed segment file.
    let h = SegmentHeader {
        first_lsn: Lsn(1),
        prev_chain: ChainHash::ZERO,
        chain_form: frame::ChainForm::CURRENT,
    };
    save("segment_header_footer", "header", &h.encode())?;
    let mut file = h.encode().to_vec();
    file.extend_from_slice(&all);
    let f = SegmentFooter {
        record_count: 3,
        last_lsn: Lsn(3),
        last_chain: chain,
        frames_len: all.len() as u32,
    };
    file.extend_from_slice(&f.encode());
    save("segment_header_footer", "sealed", &file)?;
    save("segment_open", "sealed", &file)?;
    save("segment_open", "tail", &file[..file.len() - 64])?;

    // A real segment written by the log.
    let disk = SimVfs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    let dir = Path::new("/s/log");
    vfs.create_dir_all(dir)?;
    let log = Log::open(
        vfs.clone(),
        dir,
        LogOptions {
            segment_size_bytes: 600,
            durability: Durability::Never,
            ..LogOptions::default()
        },
    )?;
    for e in events().iter().cycle().take(6) {
        log.append(e)?;
    }
    log.close()?;
    if let Some(b) = disk.written_bytes(&dir.join("00000000000000000001.seg")) {
        save("segment_open", "from_log", &b)?;
    }

    // A real pack and index.
    let bdir = Path::new("/s/blobs");
    vfs.create_dir_all(bdir)?;
    let opts = BlobOptions {
        chunking_threshold_bytes: 4096,
        ..BlobOptions::default()
    };
    let store = BlobStore::open(vfs.clone(), bdir, opts)?;
    store.put(b"small")?;
    store.put(&b"compressible text\n".repeat(40))?;
    store.put(
        &(0..6000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<_>>(),
    )?;
    store.sync()?;
    store.persist_index()?;
    if let Some(p) = disk.written_bytes(&bdir.join("pack-00000001.pack")) {
        save("pack_entry", "pack", &p)?;
        save("pack_entry", "entry", &p[PACK_HEADER_LEN.min(p.len())..])?;
    }
    if let Some(i) = disk.written_bytes(&bdir.join(INDEX_FILE)) {
        save("blob_index", "index", &i)?;
    }

    // A manifest node.
    let node = Node {
        entries: vec![
            (
                "a.rs".into(),
                Entry {
                    kind: EntryKind::File,
                    mode: 0o644,
                    size: 5,
                    hash: BlobHash::of(b"a"),
                },
            ),
            (
                "src".into(),
                Entry {
                    kind: EntryKind::Dir,
                    mode: 0o755,
                    size: 9,
                    hash: BlobHash::of(b"d"),
                },
            ),
        ],
        missing: Vec::new(),
    };
    save("manifest_node", "node", &node.encode())?;
    println!("seed corpus written under corpus/");
    Ok(())
}
