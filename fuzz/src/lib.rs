//! What the fuzz targets and the corpus maker share.

use std::sync::{Arc, OnceLock};

use cairn_codec::zdict::{self, Dict};
use cairn_codec::{Event, EventKind};

/// A dictionary trained on small event bodies, as a log would train one
/// (training is deterministic, so the corpus maker's dictionary frames
/// name this one).
pub fn frame_dict() -> &'static Arc<Dict> {
    static DICT: OnceLock<Arc<Dict>> = OnceLock::new();
    DICT.get_or_init(|| {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for i in 0..300u64 {
            let b = dict_event(i).encode_body().expect("body");
            sizes.push(b.len());
            data.extend_from_slice(&b);
        }
        Arc::new(zdict::train(&data, &sizes, 4096).expect("train"))
    })
}

/// The `i`-th event of the kind [`frame_dict`] is trained on.
pub fn dict_event(i: u64) -> Event {
    Event::new(EventKind::ToolCall, format!("session-{}", i % 5)).with_text(format!(
        "cargo test -p crate{} -- module_{}::case_{} passed; 0 failed; \
         see the test log for the full output of every case that ran and the \
         time each one took, then rerun the failed cases with --nocapture \
         and --test-threads 1",
        i % 7,
        i % 11,
        i
    ))
}
