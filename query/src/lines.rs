//! Lines as `diff` and `blame` see them, and the limits of a line diff:
//! where a line ends, what counts as binary, how much is compared.

use similar::TextDiff;

/// A file is treated as binary when a NUL byte appears in its first this
/// many bytes (git's heuristic) or when it is not UTF-8.
pub const BINARY_SNIFF_BYTES: usize = 8000;

/// The largest file `diff` reads to compare line by line: past this, on
/// either side, the file is reported as changed without being read (two
/// versions of a large model or dataset would otherwise be held in memory
/// whole, for a line diff nobody reads).
pub const MAX_LINE_DIFF_BYTES: u64 = 16 << 20;

/// The longest a line diff (of `diff` or `blame`) searches for the
/// smallest edit: past it the diff is finished by approximation, still a
/// correct diff, only not minimal. Two wholly different files of a few
/// megabytes otherwise take minutes (the search is O(N·D)).
pub const LINE_DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The lines of `text` as `diff` compares them and `blame` numbers them,
/// each with its ending: split after each `\n` only, as git splits them.
/// A `\r\n` line is one line whose text ends in `\r`, and a lone `\r`
/// stays inside its line (the `similar` crate's own line split also ends
/// a line there, which shifted blame's line numbers and broke a unified
/// diff's lines apart). A last line without `\n` is a line too.
pub fn split_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The line diff of `old` and `new` (lines as [`split_lines`] gives them),
/// bounded by [`LINE_DIFF_TIMEOUT`].
pub fn line_diff<'a>(old: &'a [&'a str], new: &'a [&'a str]) -> TextDiff<'a, 'a, 'a, str> {
    TextDiff::configure()
        .timeout(LINE_DIFF_TIMEOUT)
        .diff_slices(old, new)
}

/// A line of [`split_lines`] without its ending: the `\n` or `\r\n` that
/// ends it, not a lone `\r` (which is text) nor a second `\r`.
pub fn line_text(line: &str) -> &str {
    line.strip_suffix('\n')
        .map_or(line, |l| l.strip_suffix('\r').unwrap_or(l))
}

/// True if `bytes` look binary (see [`BINARY_SNIFF_BYTES`]).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) || std::str::from_utf8(bytes).is_err()
}
