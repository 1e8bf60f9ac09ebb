//! Human output: aligned tables, colours only on a terminal (and never
//! with `NO_COLOR`), relative times.

use std::borrow::Cow;
use std::io::IsTerminal;

use cairn::checkpoint::reason;
use cairn::checkpoint::NotCaptured;
use cairn::paths;
use cairn::Timestamp;

/// Whether to colour output written to stdout.
pub fn color_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// ANSI styles, or nothing when colour is off.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    on: bool,
}

impl Style {
    /// Styles for stdout.
    pub fn stdout() -> Style {
        Style {
            on: color_enabled(),
        }
    }
    /// Styles for stderr.
    pub fn stderr() -> Style {
        Style {
            on: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::io::stderr().is_terminal(),
        }
    }
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    /// Dim text.
    pub fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    /// Bold text.
    pub fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
    /// Green text.
    pub fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    /// Red text.
    pub fn red(&self, s: &str) -> String {
        self.wrap("31", s)
    }
    /// Yellow text.
    pub fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    /// Cyan text.
    pub fn cyan(&self, s: &str) -> String {
        self.wrap("36", s)
    }
}

/// A table: rows of cells, printed with aligned columns. Cells may hold
/// ANSI colour codes; widths are computed on the visible text.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

fn visible_len(s: &str) -> usize {
    let mut n = 0;
    let mut in_esc = false;
    for c in s.chars() {
        match (in_esc, c) {
            (false, '\x1b') => in_esc = true,
            (true, 'm') => in_esc = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

impl Table {
    /// A table with a header row.
    pub fn new(header: &[&str]) -> Table {
        let style = Style::stdout();
        Table {
            rows: vec![header.iter().map(|h| style.bold(h)).collect()],
        }
    }
    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
    /// A table without a header row: a later part of a streamed table
    /// (see [`Table::render_part`]).
    pub fn headless() -> Table {
        Table { rows: Vec::new() }
    }
    /// The number of rows (the header included).
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// True if the table has no row at all.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// Renders with two spaces between columns; the last column is not padded.
    pub fn render(&self) -> String {
        self.render_part(&mut Vec::new())
    }
    /// Renders one part of a table printed in parts as its rows arrive:
    /// each column is as wide as its widest cell in this part or any part
    /// before (`widths` carries them), so memory holds one part at a time.
    pub fn render_part(&self, widths: &mut Vec<usize>) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        if widths.len() < cols {
            widths.resize(cols, 0);
        }
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(visible_len(c));
            }
        }
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < r.len() {
                    line.push_str(&" ".repeat(widths[i] - visible_len(c) + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// True if standard output is a pipe whose reader has gone (`cairn export
/// --follow | head -1`): a follower that writes nothing new would otherwise
/// never learn of it and run on forever.
pub fn stdout_reader_gone() -> bool {
    #[cfg(unix)]
    {
        let mut p = libc::pollfd {
            fd: libc::STDOUT_FILENO,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout: poll only reads and writes it.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// `n` and the noun, plural unless `n` is 1: "1 record", "2 records".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// How many items a one-line list shows before it elides the middle: a
/// gc that evicts thousands of checkpoints prints one readable line
/// (`--json` keeps them all).
pub const LIST_MAX_ITEMS: usize = 10;

/// `items` joined by spaces, with at most [`LIST_MAX_ITEMS`] shown: the
/// first and last few, and how many were left out between them.
pub fn short_list(items: &[String]) -> String {
    if items.len() <= LIST_MAX_ITEMS {
        return items.join(" ");
    }
    let half = LIST_MAX_ITEMS / 2;
    format!(
        "{} … ({} more) … {}",
        items[..half].join(" "),
        items.len() - 2 * half,
        items[items.len() - half..].join(" ")
    )
}

/// "3s ago", "5m ago", "2h ago", "4d ago" (or "in 3s" for the future).
pub fn relative(ts: Timestamp, now: Timestamp) -> String {
    let d = now.0 - ts.0;
    let (abs, future) = (d.unsigned_abs() / 1000, d < 0);
    let s = match abs {
        0..=59 => format!("{abs}s"),
        60..=3599 => format!("{}m", abs / 60),
        3600..=86_399 => format!("{}h", abs / 3600),
        _ => format!("{}d", abs / 86_400),
    };
    if future {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

/// The most characters of a label, session or path a table shows (control
/// characters flattened); `--json` prints them whole.
pub const CELL_MAX_CHARS: usize = 60;

/// `s` fit for a table cell: one line, at most [`CELL_MAX_CHARS`].
pub fn cell(s: &str) -> String {
    one_line(s, CELL_MAX_CHARS)
}

/// Cuts `s` to at most `max` characters on one line, marking the cut with
/// `…` (control characters become spaces).
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut t: String = flat.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A message for the terminal with every control character but newline
/// and tab written as a JSON escape (`\u001b`): errors quote input (a bad
/// JSON line's unknown field or kind, a path), and input from another
/// tool's audit file must not be able to move the cursor, clear the
/// screen or hide text where the message is read. Bidirectional-text
/// controls are escaped too, as [`quote_path`] escapes them.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    use std::fmt::Write;
    let escaped = |c: char| paths::acts_on_a_terminal(c) && c != '\n' && c != '\t';
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if escaped(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A workspace path as every human-readable listing prints it (`tree`,
/// `diff`, `rollback`, `history`, `log`, a checkpoint's not-captured note):
/// as it is, unless it holds a character a terminal could act on or that
/// would make it ambiguous. Then it is quoted as git quotes a path: in
/// double quotes, with C escapes (`\n`, `\t`, `\a`, `\"`, `\\`, ...) and
/// every other such character as the octal of its UTF-8 bytes (`\033`).
/// A name chosen by an agent (or by whatever it downloaded) can then
/// neither move the cursor, erase a line, retitle the terminal, nor pass for
/// two paths. `--json` prints paths exactly (JSON escapes them).
pub fn quote_path(p: &str) -> Cow<'_, str> {
    if !p.chars().any(needs_quoting) {
        return Cow::Borrowed(p);
    }
    let mut out = String::with_capacity(p.len() + 8);
    out.push('"');
    for c in p.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0b}' => out.push_str("\\v"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if needs_quoting(c) => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push('\\');
                    for digit in [b >> 6, (b >> 3) & 7, b & 7] {
                        out.push(char::from(b'0' + digit));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// True for the characters [`quote_path`] escapes: control characters (C0,
/// DEL, C1: escape sequences, newlines, the bell), the quote and backslash
/// it escapes with, and the bidirectional formatting characters that make
/// a terminal show a name's text in another order than it has.
fn needs_quoting(c: char) -> bool {
    paths::acts_on_a_terminal(c) || matches!(c, '"' | '\\')
}

/// The path of a file a checkpoint did not capture, as every listing
/// prints it: as [`quote_path`] prints a path, but for a name that is not
/// UTF-8, whose record holds it escaped already (`dir\xff/a.txt`, see
/// `paths::escape_bytes`): in double quotes as it is, as git quotes such
/// a name (with hex escapes where git writes octal), not escaped twice.
pub fn quote_not_captured(n: &NotCaptured) -> Cow<'_, str> {
    let escaped = n.why == reason::NON_UTF8_NAME
        // Only what `escape_bytes` gives: nothing a terminal acts on.
        && !n.path.chars().any(paths::acts_on_a_terminal);
    if escaped {
        Cow::Owned(format!("\"{}\"", n.path))
    } else {
        quote_path(&n.path)
    }
}

/// A skip reason as the listings say it: `too large`, `unreadable`,
/// `name not UTF-8`.
pub fn reason_words(why: &str) -> String {
    if why == reason::NON_UTF8_NAME {
        "name not UTF-8".into()
    } else {
        why.replace('_', " ")
    }
}

/// Bytes in human units.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_visible_text() {
        let mut t = Table {
            rows: vec![vec!["a".into(), "b".into()]],
        };
        t.row(vec!["\x1b[31mlong\x1b[0m".into(), "x".into()]);
        let r = t.render();
        assert_eq!(r, "a     b\n\x1b[31mlong\x1b[0m  x\n");
    }

    #[test]
    fn cells_are_one_bounded_line() {
        assert_eq!(cell("two\nlines"), "two lines");
        let long = cell(&"x".repeat(100_000));
        assert_eq!(long.chars().count(), CELL_MAX_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn counts_are_plural_unless_one() {
        assert_eq!(count(1, "record"), "1 record");
        assert_eq!(count(0, "record"), "0 records");
        assert_eq!(count(2, "file"), "2 files");
    }

    #[test]
    fn long_lists_are_elided_in_the_middle() {
        let few: Vec<String> = (1..=3).map(|i| format!("c{i}")).collect();
        assert_eq!(short_list(&few), "c1 c2 c3");
        let many: Vec<String> = (1..=295).map(|i| format!("c{i}")).collect();
        assert_eq!(
            short_list(&many),
            "c1 c2 c3 c4 c5 … (285 more) … c291 c292 c293 c294 c295"
        );
    }

    #[test]
    fn relative_times() {
        assert_eq!(relative(Timestamp(0), Timestamp(5_000)), "5s ago");
        assert_eq!(relative(Timestamp(0), Timestamp(7_200_000)), "2h ago");
        assert_eq!(relative(Timestamp(60_000), Timestamp(0)), "in 1m");
    }

    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        assert!(matches!(quote_path("src/main.rs"), Cow::Borrowed(_)));
        assert_eq!(quote_path("naïve ünïcode/ok.rs"), "naïve ünïcode/ok.rs");
        assert_eq!(quote_path("nl\nname"), "\"nl\\nname\"");
        assert_eq!(quote_path("zz\x1b[1A\x1b[2K"), "\"zz\\033[1A\\033[2K\"");
        assert_eq!(
            quote_path("evil\x1b]0;pwned\x07name"),
            "\"evil\\033]0;pwned\\aname\""
        );
        assert_eq!(quote_path("a\"b\\c\t"), "\"a\\\"b\\\\c\\t\"");
        // C1 controls (U+009B is a one-character CSI) and a bidi override.
        assert_eq!(quote_path("x\u{9b}2K"), "\"x\\302\\2332K\"");
        assert_eq!(quote_path("a\u{202e}b"), "\"a\\342\\200\\256b\"");
        for p in ["a\u{7f}", "\r", "\u{0}"] {
            assert!(!quote_path(p).chars().any(char::is_control), "{p:?}");
        }
    }

    #[test]
    fn a_name_that_is_not_utf8_is_quoted_once() {
        let n = |path: &str, why: &str| NotCaptured {
            path: path.into(),
            why: why.into(),
        };
        let escaped = paths::escape_bytes(b"dir\xff/caf\xe9 \"x\".txt");
        assert_eq!(
            quote_not_captured(&n(&escaped, reason::NON_UTF8_NAME)),
            "\"dir\\xff/caf\\xe9 \\\"x\\\".txt\""
        );
        assert_eq!(
            quote_not_captured(&n("big.bin", reason::TOO_LARGE)),
            "big.bin"
        );
        // A backslash in a name that is UTF-8 is the name's own.
        assert_eq!(
            quote_not_captured(&n("a\\xff", reason::TOO_LARGE)),
            "\"a\\\\xff\""
        );
        // A record that was not written so (imported) is quoted as any path.
        assert_eq!(
            quote_not_captured(&n("evil\x1b[2K", reason::NON_UTF8_NAME)),
            "\"evil\\033[2K\""
        );
        assert_eq!(reason_words(reason::NON_UTF8_NAME), "name not UTF-8");
        assert_eq!(reason_words(reason::TOO_LARGE), "too large");
    }

    #[test]
    fn one_line_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
