//! Property tests for every codec decoder: the CI twins of the cargo-fuzz
//! targets in `fuzz/fuzz_targets/` (`frame_decode`, `event_body`,
//! `segment_header_footer`, `json_event`). Each decoder is fed random bytes
//! and damaged valid encodings (a flipped byte, a cut, a splice); the
//! properties are the fuzz targets' assertions: no panic, nothing damaged
//! validates, whatever decodes round-trips, and no allocation is driven by
//! a length read from the input (a counting allocator checks the largest
//! single allocation made while decoding).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cairn_codec::frame::{self, ChainForm, RecordKind, FLAG_BATCH_CONT, HEADER_LEN};
use cairn_codec::json::{parse_event, JsonRecord};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{BlobHash, ChainHash, Event, EventKind, Lsn, Timestamp};
use proptest::prelude::*;

/// The largest single allocation any decoder may make for an input of a few
/// KiB that is not a compressed frame. serde caps the capacity it
/// preallocates from a declared sequence length at 1 MiB, so a decoder that
/// trusts a declared length shows up as an allocation above this.
const MAX_DECODE_ALLOC_BYTES: usize = 2 * 1024 * 1024;

thread_local! {
    /// The largest allocation seen on this thread while tracking is on
    /// (usize::MAX: off). Const-initialised `Cell`, so using it inside the
    /// allocator never allocates.
    static LARGEST: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Forwards to the system allocator, recording the largest request made
/// on a thread that asked for tracking.
struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the bookkeeping only reads a `Layout` and touches a
// thread-local `Cell`, which cannot allocate or unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn note(size: usize) {
    let _ = LARGEST.try_with(|m| {
        if m.get() != usize::MAX && size > m.get() {
            m.set(size);
        }
    });
}

/// Runs `f` and returns the largest single allocation it made on this thread.
fn largest_alloc(f: impl FnOnce()) -> usize {
    LARGEST.with(|m| m.set(0));
    f();
    LARGEST.with(|m| m.replace(usize::MAX))
}

fn arb_opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[ -~]{0,24}")
}

fn arb_hash() -> impl Strategy<Value = Option<BlobHash>> {
    proptest::option::of(any::<[u8; 32]>().prop_map(BlobHash))
}

/// Events with every commonly used field varied (the codec's own full
/// generator is private to its unit tests).
fn arb_event() -> impl Strategy<Value = Event> {
    (
        0i64..4_000_000_000_000,
        "[a-z0-9-]{1,10}",
        0usize..EventKind::ALL.len(),
        (
            arb_opt_text(),
            proptest::option::of(REL_PATH),
            arb_opt_text(),
            arb_opt_text(),
        ),
        (any::<bool>(), proptest::option::of(any::<u64>())),
        proptest::collection::vec(REL_PATH, 0..3),
        (arb_hash(), arb_hash(), arb_hash()),
        proptest::collection::vec(any::<u64>().prop_map(Lsn), 0..3),
    )
        .prop_map(
            |(
                ts,
                session,
                kind,
                (text, path, tool, label),
                (ok, latency),
                files,
                (before, after, diff),
                parents,
            )| {
                let mut e = Event::new(EventKind::ALL[kind], session);
                e.ts = Timestamp::from_millis(ts).unwrap();
                e.text = text;
                e.path = path;
                e.tool = tool;
                e.label = label;
                e.ok = ok;
                e.latency_ms = latency;
                e.files = files;
                e.before = before;
                e.after = after;
                e.diff = diff;
                e.parents = parents;
                // File events name their files, as JSON input requires.
                let patch = e.kind == EventKind::FilePatch;
                if e.kind.is_file_op() && (!patch || e.files.is_empty()) {
                    e.path.get_or_insert_with(|| "src/lib.rs".into());
                }
                if e.kind == EventKind::FileMove {
                    e.to_path = Some("src/new.rs".into());
                }
                e
            },
        )
}

/// Workspace-relative paths, as JSON input requires.
const REL_PATH: &str = "[a-z0-9_-]{1,6}(/[a-z0-9_.-]{0,5}[a-z]){0,2}";

/// A damage to apply to a valid encoding.
#[derive(Clone, Debug)]
enum Damage {
    /// XOR one byte with a non-zero mask.
    Flip { at: usize, mask: u8 },
    /// Keep only a prefix.
    Cut { at: usize },
    /// Overwrite a run with other bytes.
    Splice { at: usize, bytes: Vec<u8> },
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        any::<usize>().prop_map(|at| Damage::Cut { at }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Damage::Splice { at, bytes }),
    ]
}

/// Applies `d` to `buf`; returns false if it left `buf` unchanged.
fn apply(d: &Damage, buf: &mut Vec<u8>) -> bool {
    if buf.is_empty() {
        return false;
    }
    let before = buf.clone();
    match d {
        Damage::Flip { at, mask } => {
            let i = at % buf.len();
            buf[i] ^= mask;
        }
        Damage::Cut { at } => buf.truncate(at % buf.len()),
        Damage::Splice { at, bytes } => {
            let i = at % buf.len();
            let end = (i + bytes.len()).min(buf.len());
            buf[i..end].copy_from_slice(&bytes[..end - i]);
        }
    }
    *buf != before
}

/// Everything the log reader does with a candidate frame (the body of the
/// `frame_decode` fuzz target).
fn check_frame(data: &[u8]) {
    let Ok(f) = frame::decode(data) else {
        return;
    };
    assert!(f.len() <= data.len());
    let _ = f.chain_follows(ChainHash::ZERO, ChainForm::CURRENT);
    if let Ok(body) = f.body() {
        let _ = Event::decode_body(&body);
        let mut again = Vec::new();
        let flags = f.flags & FLAG_BATCH_CONT;
        if frame::encode(&mut again, f.lsn, f.kind, flags, &body, ChainHash::ZERO).is_ok() {
            let g = frame::decode(&again).unwrap();
            assert_eq!(&*g.body().unwrap(), &*body);
            assert_eq!(g.lsn, f.lsn);
        }
    }
}

/// The `event_body` fuzz target.
fn check_event_body(data: &[u8]) {
    if let Ok(e) = Event::decode_body(data) {
        let again = e.encode_body().unwrap();
        assert_eq!(Event::decode_body(&again).unwrap(), e);
    }
}

/// The `segment_header_footer` fuzz target.
fn check_segment(data: &[u8]) {
    if let Ok(h) = SegmentHeader::decode(data) {
        assert_eq!(&h.encode()[..], &data[..SEGMENT_HEADER_LEN]);
    }
    if let Ok(Some(f)) = SegmentFooter::decode_tail(data) {
        assert_eq!(&f.encode()[..], &data[data.len() - SEGMENT_FOOTER_LEN..]);
        assert_eq!(
            f.frames_len as usize + SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN,
            data.len()
        );
    }
}

/// The `json_event` fuzz target.
fn check_json(line: &str) {
    let Ok(e) = parse_event(line) else {
        return;
    };
    let mut out = Vec::new();
    JsonRecord::new(Lsn(1), ChainHash::ZERO, &e).write_line(&mut out);
    let text = std::str::from_utf8(&out).unwrap();
    let e2 = parse_event(text.trim_end()).unwrap();
    assert_eq!(
        e, e2,
        "export of a parsed line parses back the same: {text}"
    );
}

fn encode_frame(e: &Event, lsn: Lsn, flags: u8) -> Vec<u8> {
    let mut buf = Vec::new();
    frame::encode(
        &mut buf,
        lsn,
        RecordKind::Event,
        flags,
        &e.encode_body().unwrap(),
        ChainHash::ZERO,
    )
    .unwrap();
    buf
}

fn json_line(e: &Event) -> String {
    let mut out = Vec::new();
    JsonRecord::new(Lsn(3), ChainHash([9; 32]), e).write_line(&mut out);
    String::from_utf8(out).unwrap().trim_end().to_string()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frame_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check_frame(&bytes);
    }

    #[test]
    fn frame_random_bytes_behind_a_valid_header(e in arb_event(), tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        // A real header followed by garbage: exercises the CRC path with
        // plausible lengths.
        let mut buf = encode_frame(&e, Lsn(5), 0);
        buf.truncate(HEADER_LEN);
        buf.extend_from_slice(&tail);
        check_frame(&buf);
    }

    #[test]
    fn damaged_frame_never_validates(e in arb_event(), d in arb_damage(), batch in any::<bool>()) {
        let good = encode_frame(&e, Lsn(42), if batch { FLAG_BATCH_CONT } else { 0 });
        let f = frame::decode(&good).unwrap();
        prop_assert_eq!(Event::decode_body(&f.body().unwrap()).unwrap(), e);
        let mut bad = good.clone();
        if apply(&d, &mut bad) {
            match frame::decode(&bad) {
                // A cut, or a length grown past the buffer, reads as a torn
                // tail (`Truncated`); anything else as damage. Never as data.
                Err(_) => {}
                Ok(f) => prop_assert!(false, "damaged frame {:?} validated as LSN {}", d, f.lsn),
            }
            check_frame(&bad);
        }
    }

    #[test]
    fn event_body_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let largest = largest_alloc(|| check_event_body(&bytes));
        prop_assert!(largest <= MAX_DECODE_ALLOC_BYTES, "decoding {} bytes allocated {largest}", bytes.len());
    }

    #[test]
    fn event_body_round_trip_and_damage(e in arb_event(), d in arb_damage()) {
        let body = e.encode_body().unwrap();
        prop_assert_eq!(Event::decode_body(&body).unwrap(), e);
        let mut bad = body;
        apply(&d, &mut bad);
        let largest = largest_alloc(|| check_event_body(&bad));
        prop_assert!(largest <= MAX_DECODE_ALLOC_BYTES, "decoding {} bytes allocated {largest}", bad.len());
    }

    #[test]
    fn segment_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_segment(&bytes);
    }

    #[test]
    fn segment_damage_detected(first in 1u64..u64::MAX, chain in any::<[u8; 32]>(), count in any::<u64>(),
                               frames in proptest::collection::vec(any::<u8>(), 0..100), d in arb_damage()) {
        let chain_form = if first % 2 == 0 { ChainForm::Prefixed } else { ChainForm::Keyed };
        let h = SegmentHeader { first_lsn: Lsn(first), prev_chain: ChainHash(chain), chain_form };
        let mut hb = h.encode().to_vec();
        prop_assert_eq!(SegmentHeader::decode(&hb).unwrap(), h);
        if apply(&d, &mut hb) {
            prop_assert!(SegmentHeader::decode(&hb).is_err(), "damaged header {:?} validated", d);
        }
        let f = SegmentFooter { record_count: count, last_lsn: Lsn(first), last_chain: ChainHash(chain), frames_len: frames.len() as u32 };
        let mut file = vec![0u8; SEGMENT_HEADER_LEN];
        file.extend_from_slice(&frames);
        let footer_at = file.len();
        file.extend_from_slice(&f.encode());
        prop_assert_eq!(SegmentFooter::decode_tail(&file).unwrap(), Some(f));
        // Damage confined to the footer never yields a (different) footer.
        let mut fb = f.encode().to_vec();
        if apply(&d, &mut fb) && fb.len() == SEGMENT_FOOTER_LEN {
            file.truncate(footer_at);
            file.extend_from_slice(&fb);
            prop_assert!(!matches!(SegmentFooter::decode_tail(&file), Ok(Some(_))), "damaged footer {:?} validated", d);
        }
        check_segment(&file);
    }

    #[test]
    fn json_random_text(s in "\\PC{0,200}") {
        let largest = largest_alloc(|| check_json(&s));
        prop_assert!(largest <= MAX_DECODE_ALLOC_BYTES);
    }

    #[test]
    fn json_round_trip_and_damage(e in arb_event(), d in arb_damage()) {
        let line = json_line(&e);
        prop_assert_eq!(&parse_event(&line).unwrap(), &e);
        check_json(&line);
        let mut bad = line.into_bytes();
        apply(&d, &mut bad);
        if let Ok(s) = std::str::from_utf8(&bad) {
            let largest = largest_alloc(|| check_json(s));
            prop_assert!(largest <= MAX_DECODE_ALLOC_BYTES);
        }
    }

    #[test]
    fn decompress_bounded_respects_its_bound(bytes in proptest::collection::vec(any::<u8>(), 0..400), max in 0usize..4096) {
        if let Ok(out) = frame::decompress_bounded(&bytes, max) {
            prop_assert!(out.len() <= max);
        }
    }

    /// Real zstd frames (not just random bytes), then one byte changed:
    /// the original decompresses to itself; a damaged one errs or stays
    /// within the bound, never panics.
    #[test]
    fn damaged_zstd_bodies_stay_within_the_bound(
        data in proptest::collection::vec(0u8..8, 0..3000),
        at in any::<proptest::sample::Index>(),
        xor in 1u8..=255,
        max in 0usize..4096,
    ) {
        let z = zstd::bulk::compress(&data, frame::BODY_ZSTD_LEVEL).unwrap();
        if data.len() <= max {
            prop_assert_eq!(frame::decompress_bounded(&z, max).unwrap(), data.clone());
        }
        let mut bad = z.clone();
        let i = at.index(bad.len());
        bad[i] ^= xor;
        if let Ok(out) = frame::decompress_bounded(&bad, max) {
            prop_assert!(out.len() <= max);
        }
    }

    /// Event bodies framed with a dictionary round-trip through it; the
    /// frame, damaged anywhere in its stored body (CRC made valid again),
    /// decodes with its dictionary to an error or to bytes within the
    /// bound, never panics; and it never decodes without its dictionary.
    #[test]
    fn dictionary_frames_round_trip_and_damage_stays_bounded(
        e in arb_event(),
        at in any::<proptest::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let d = std::sync::Arc::new(test_dict());
        let have = |id: u32| (id == d.id).then(|| d.clone());
        let body = e.encode_body().unwrap();
        let mut buf = Vec::new();
        frame::encode_with(&mut buf, Lsn(9), RecordKind::Event, 0, &body, ChainHash::ZERO, Some(&d)).unwrap();
        let f = frame::decode(&buf).unwrap();
        prop_assert_eq!(&*f.body_with(&have).unwrap(), &body[..]);
        if f.flags & frame::FLAG_DICT != 0 {
            prop_assert!(f.body().is_err());
        }
        if buf.len() > HEADER_LEN {
            let mut bad = buf.clone();
            let i = HEADER_LEN + at.index(bad.len() - HEADER_LEN);
            bad[i] ^= xor;
            let crc = {
                let mut c = crc32fast::Hasher::new_with_initial(frame::CRC_SEED);
                c.update(&bad[0..4]);
                c.update(&bad[8..]);
                c.finalize()
            };
            bad[4..8].copy_from_slice(&crc.to_le_bytes());
            let g = frame::decode(&bad).unwrap();
            if let Ok(out) = g.body_with(&have) {
                prop_assert!(out.len() <= cairn_codec::event::MAX_EVENT_BODY_BYTES);
            }
        }
    }
}

/// A dictionary trained on bodies of generated events, made once.
fn test_dict() -> cairn_codec::zdict::Dict {
    static BYTES: std::sync::OnceLock<(u32, Vec<u8>)> = std::sync::OnceLock::new();
    let (id, bytes) = BYTES.get_or_init(|| {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for i in 0..300u64 {
            let mut e = Event::new(
                EventKind::ALL[i as usize % EventKind::ALL.len()],
                format!("s{}", i % 4),
            );
            e.text = Some(
                format!("tool output line {i}: ok; see src/file_{}.rs", i % 9)
                    .repeat(1 + i as usize % 5),
            );
            let b = e.encode_body().unwrap();
            sizes.push(b.len());
            data.extend_from_slice(&b);
        }
        let d = cairn_codec::zdict::train(&data, &sizes, 8 * 1024).unwrap();
        (d.id, d.bytes)
    });
    cairn_codec::zdict::Dict::new(*id, bytes.clone())
}

#[test]
fn declared_lengths_do_not_drive_allocation() {
    // MessagePack arrays, maps and strings that declare 2^32-1 elements/bytes
    // in a 5-byte input.
    for prefix in [0xddu8, 0xdf, 0xdb, 0xc6] {
        let body = [prefix, 0xff, 0xff, 0xff, 0xff];
        let largest = largest_alloc(|| check_event_body(&body));
        assert!(largest <= MAX_DECODE_ALLOC_BYTES, "{prefix:#x}: {largest}");
        assert!(Event::decode_body(&body).is_err());
    }
    // A frame header claiming the largest allowed body, with none present.
    let mut buf = encode_frame(&Event::new(EventKind::Prompt, "s"), Lsn(1), 0);
    buf.truncate(HEADER_LEN);
    buf[0..4].copy_from_slice(&(frame::MAX_STORED_BODY_BYTES as u32).to_le_bytes());
    let largest = largest_alloc(|| assert!(frame::decode(&buf).is_err()));
    assert!(largest <= MAX_DECODE_ALLOC_BYTES, "{largest}");
}

#[test]
fn the_allocation_probe_can_fail() {
    // The probe must see a large allocation, or the bounds above prove nothing.
    let largest = largest_alloc(|| {
        let v: Vec<u8> = Vec::with_capacity(MAX_DECODE_ALLOC_BYTES + 1);
        std::hint::black_box(&v);
    });
    assert!(largest > MAX_DECODE_ALLOC_BYTES);
}

/// Found by the `segment_header_footer` fuzz target (seeded corpus): a
/// header whose reserved fields (bytes 12..16 and 56..60) are not zero, with
/// a CRC computed over them, decodes, so `decode` then `encode` does not
/// give back the input and a header from a future format that uses those
/// bytes would be misread silently. The frame decoder refuses its reserved
/// bytes; the segment header should too.
#[test]
fn segment_header_with_reserved_bytes_set_is_refused() {
    // The first 64 bytes of the fuzz artifact: a valid header for LSN 256
    // with byte 14 = 0x25 and byte 57 = 0x04, and a matching CRC.
    let mut b = [0u8; SEGMENT_HEADER_LEN];
    b[0..8].copy_from_slice(b"CAIRNLOG");
    b[8] = 1;
    b[14] = 0x25;
    b[17] = 1;
    b[57] = 0x04;
    b[60..64].copy_from_slice(&[0x70, 0xd3, 0x30, 0x78]);
    assert!(
        SegmentHeader::decode(&b).is_err(),
        "reserved bytes set, yet decoded"
    );
}
