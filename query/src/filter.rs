//! Filters for listings and exports.

use cairn_codec::{Event, EventKind, EventRef, Lsn, Timestamp};

use crate::source::Record;
use crate::QueryError;

/// Which end of a time range a `--since`/`--until` value gives: it decides
/// what a date that is not a single instant (`2023`, `2023-11`,
/// `2023-11-14`) stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeBound {
    /// The start of a range: a date means its first millisecond.
    Since,
    /// The (inclusive) end of a range: a date means its last millisecond,
    /// so `--until 2023-11-14` covers that whole day.
    Until,
}

/// A bare number below this many epoch milliseconds (1980-01-01T00:00:00Z),
/// other than 0, is refused as a time bound: it is far more likely a date
/// typed without dashes (`20231114`) or a year than a time in the 1970s,
/// and reading it silently as epoch milliseconds selects nearly everything
/// (`--since`) or nothing (`--until`).
pub const MIN_PLAUSIBLE_EPOCH_MS: i64 = 315_532_800_000;

/// One UTC day in milliseconds (epoch time has no leap seconds).
const DAY_MS: i64 = 86_400_000;

/// Reads a `--since`/`--until` value.
///
/// Accepted forms:
/// - a year `YYYY` or a month `YYYY-MM` or a date `YYYY-MM-DD` (UTC): as
///   [`TimeBound::Since`] its first millisecond, as [`TimeBound::Until`]
///   its last, so the whole year, month or day is in the range;
/// - any other ISO-8601 / RFC 3339 time (`2023-11-14T22:13:20Z`, any
///   offset): that instant;
/// - a bare number of epoch milliseconds (`1699999999999`), which must be 0
///   or at least [`MIN_PLAUSIBLE_EPOCH_MS`] from the epoch either way.
pub fn parse_time_bound(text: &str, bound: TimeBound) -> Result<Timestamp, QueryError> {
    let t = text.trim();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let bad = |why: String| QueryError::Invalid(format!("`{text}`: {why}"));
    let parse = |s: &str| Timestamp::parse(s).map_err(|e| bad(e.to_string()));
    // The last millisecond before the start of the next period, or the last
    // time cairn holds when that period ends past it (year 9999).
    let end_before = |next: Result<Timestamp, QueryError>| {
        next.map_or(Timestamp::MAX, |n| Timestamp(n.0 - 1).min(Timestamp::MAX))
    };
    let b = t.as_bytes();
    if b.len() == 4 && digits(t) {
        let year: i64 = t.parse().map_err(|_| bad("not a year".into()))?;
        let start = parse(&format!("{t}-01-01"))?;
        return Ok(match bound {
            TimeBound::Since => start,
            TimeBound::Until => end_before(parse(&format!("{:04}-01-01", year + 1))),
        });
    }
    if b.len() == 7 && b[4] == b'-' && digits(&t[..4]) && digits(&t[5..]) {
        let (year, month): (i64, u32) = (
            t[..4].parse().map_err(|_| bad("not a year".into()))?,
            t[5..].parse().map_err(|_| bad("not a month".into()))?,
        );
        if !(1..=12).contains(&month) {
            return Err(bad(format!("month {month} is not 01 to 12")));
        }
        let start = parse(&format!("{t}-01"))?;
        let (ny, nm) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        return Ok(match bound {
            TimeBound::Since => start,
            TimeBound::Until => end_before(parse(&format!("{ny:04}-{nm:02}-01"))),
        });
    }
    if b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && digits(&t[..4])
        && digits(&t[5..7])
        && digits(&t[8..])
    {
        let start = parse(t)?;
        return Ok(match bound {
            TimeBound::Since => start,
            TimeBound::Until => Timestamp(start.0.saturating_add(DAY_MS - 1)).min(Timestamp::MAX),
        });
    }
    let unsigned = t.strip_prefix('-').unwrap_or(t);
    if digits(unsigned) {
        let ms: i64 = t
            .parse()
            .map_err(|_| bad("not a number of epoch milliseconds".into()))?;
        if ms != 0 && ms.unsigned_abs() < MIN_PLAUSIBLE_EPOCH_MS.unsigned_abs() {
            let when = Timestamp::from_millis(ms)
                .map(Timestamp::to_iso)
                .unwrap_or_default();
            return Err(bad(format!(
                "a bare number is epoch milliseconds, and {ms} ms is {when}, too close to 1970 to be meant; \
                 write a date or time in ISO-8601 (2023, 2023-11, 2023-11-14, 2023-11-14T22:13:20Z) \
                 or a full number of epoch milliseconds (1699999999999)"
            )));
        }
        return Timestamp::from_millis(ms).map_err(|e| bad(e.to_string()));
    }
    parse(t)
}

/// Which records a listing or export selects. Every field left `None`
/// selects everything; set fields must all match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this session.
    pub session: Option<String>,
    /// Only this run id.
    pub run: Option<String>,
    /// Only this phase id.
    pub phase: Option<String>,
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this model.
    pub model: Option<String>,
    /// Only successes (`true`) or failures (`false`).
    pub ok: Option<bool>,
    /// Only records naming this workspace path, or a path under it when it
    /// is a directory, as git reads a pathspec: `src` (or `src/`) selects
    /// `src/main.rs` and `src/a/b.rs`, not `srcfoo.rs`. Matched against
    /// `path`, `to_path` and `files`.
    pub path: Option<String>,
    /// Only records at or after this time.
    pub since: Option<Timestamp>,
    /// Only records at or before this time.
    pub until: Option<Timestamp>,
    /// Only records at or after this LSN (`--since @12`, `--since c12`).
    pub since_lsn: Option<Lsn>,
    /// Only records at or before this LSN (`--until c12`: the log as it
    /// was at checkpoint c12).
    pub until_lsn: Option<Lsn>,
    /// At most this many records.
    pub limit: Option<usize>,
    /// Newest first (default: oldest first, in LSN order).
    pub newest_first: bool,
}

impl Filter {
    /// A filter that selects everything, oldest first.
    pub fn all() -> Filter {
        Filter::default()
    }

    /// True if an index can narrow what this filter selects (session, run,
    /// kind, path or a time range), or its order needs one (newest first).
    /// Without, a query is one pass over the log and needs no index:
    /// [`crate::export::export_scan`].
    pub fn needs_index(&self) -> bool {
        self.session.is_some()
            || self.run.is_some()
            || self.kind.is_some()
            || self.path.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.newest_first
    }

    /// True if `event` passes every set condition (limit and order aside).
    pub fn matches_event(&self, e: &Event) -> bool {
        self.matches_ref(&EventRef::of(e))
    }

    /// True if the borrowed event `e` passes every set condition (limit and
    /// order aside).
    pub fn matches_ref(&self, e: &EventRef<'_>) -> bool {
        fn eq(want: &Option<String>, have: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| have == Some(w))
        }
        eq(&self.session, Some(e.session))
            && eq(&self.run, e.run)
            && eq(&self.phase, e.phase)
            && self.kind.is_none_or(|k| k == e.kind)
            && eq(&self.agent, e.agent)
            && eq(&self.model, e.model)
            && self.ok.is_none_or(|ok| ok == e.ok)
            && self.path.as_deref().is_none_or(|p| {
                let under = |have: &str| path_covers(p, have);
                e.path.is_some_and(under)
                    || e.to_path.is_some_and(under)
                    || e.files.iter().any(|f| under(f))
            })
            && self.since.is_none_or(|t| e.ts >= t)
            && self.until.is_none_or(|t| e.ts <= t)
    }

    /// True if `record` passes every set condition (limit and order aside).
    pub fn matches(&self, r: &Record) -> bool {
        self.lsn_in_range(r.lsn) && self.matches_event(&r.event)
    }

    /// The LSNs to read, from the first to the last, for a log whose head
    /// is `head`: [`Filter::since_lsn`] and [`Filter::until_lsn`] within
    /// `1..=head`; `None` when no record can lie between them.
    pub fn lsn_bounds(&self, head: Lsn) -> Option<(Lsn, Lsn)> {
        let first = self.since_lsn.unwrap_or(Lsn::FIRST).max(Lsn::FIRST);
        let last = self.until_lsn.map_or(head, |u| u.min(head));
        (first <= last).then_some((first, last))
    }

    /// True if the record at `lsn` lies within [`Filter::since_lsn`] and
    /// [`Filter::until_lsn`] (the conditions an event alone cannot tell).
    pub fn lsn_in_range(&self, lsn: Lsn) -> bool {
        self.since_lsn.is_none_or(|l| lsn >= l) && self.until_lsn.is_none_or(|l| lsn <= l)
    }

    /// True if no condition is set (limit and order aside).
    pub fn is_unconditional(&self) -> bool {
        let Filter {
            session,
            run,
            phase,
            kind,
            agent,
            model,
            ok,
            path,
            since,
            until,
            since_lsn,
            until_lsn,
            limit: _,
            newest_first: _,
        } = self;
        session.is_none()
            && run.is_none()
            && phase.is_none()
            && since_lsn.is_none()
            && until_lsn.is_none()
            && kind.is_none()
            && agent.is_none()
            && model.is_none()
            && ok.is_none()
            && path.is_none()
            && since.is_none()
            && until.is_none()
    }
}

/// True if `have` is the path `want` or lies under it (`want` read as a
/// directory; a trailing `/` on it changes nothing, and an empty one is the
/// whole workspace).
pub fn path_covers(want: &str, have: &str) -> bool {
    cairn_snapshot::relpath::covers(want.trim_end_matches('/'), have)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_path_covers_itself_and_what_lies_under_it() {
        for (want, have, yes) in [
            ("src/main.rs", "src/main.rs", true),
            ("src", "src/main.rs", true),
            ("src/", "src/a/b.rs", true),
            ("src//", "src/a/b.rs", true),
            ("src", "src", true),
            ("src", "srcfoo.rs", false),
            ("src/main.rs", "src/main.rs.bak", false),
            ("src/a", "src/ab/c.rs", false),
            ("src/main.rs", "src", false),
            ("/", "anything/at/all", true),
            ("", "x", true),
        ] {
            assert_eq!(path_covers(want, have), yes, "{want:?} covers {have:?}");
        }
        let mut e = Event::new(EventKind::Apply, "s");
        e.files = vec!["docs/a.md".into(), "src/x/y.rs".into()];
        let under = |p: &str| Filter {
            path: Some(p.into()),
            ..Filter::all()
        };
        assert!(under("src/x").matches_event(&e));
        assert!(under("docs").matches_event(&e));
        assert!(!under("src/y").matches_event(&e));
    }

    fn ev() -> Event {
        let mut e = Event::new(EventKind::FileMove, "s1").with_path("a.rs");
        e.to_path = Some("b.rs".into());
        e.run = Some("r1".into());
        e.phase = Some("p1".into());
        e.agent = Some("coder".into());
        e.model = Some("m".into());
        e.ts = Timestamp(1000);
        e
    }

    #[test]
    fn each_condition_can_exclude() {
        let e = ev();
        assert!(Filter::all().matches_event(&e));
        assert!(Filter::all().is_unconditional());
        let yes = Filter {
            session: Some("s1".into()),
            run: Some("r1".into()),
            kind: Some(EventKind::FileMove),
            agent: Some("coder".into()),
            model: Some("m".into()),
            ok: Some(true),
            path: Some("b.rs".into()),
            since: Some(Timestamp(1000)),
            until: Some(Timestamp(1000)),
            phase: Some("p1".into()),
            since_lsn: None,
            until_lsn: None,
            limit: Some(1),
            newest_first: true,
        };
        assert!(yes.matches_event(&e));
        assert!(!yes.is_unconditional());
        let nos = [
            Filter {
                session: Some("s2".into()),
                ..Filter::all()
            },
            Filter {
                run: Some("r2".into()),
                ..Filter::all()
            },
            Filter {
                phase: Some("p2".into()),
                ..Filter::all()
            },
            Filter {
                kind: Some(EventKind::FileWrite),
                ..Filter::all()
            },
            Filter {
                agent: Some("x".into()),
                ..Filter::all()
            },
            Filter {
                model: Some("x".into()),
                ..Filter::all()
            },
            Filter {
                ok: Some(false),
                ..Filter::all()
            },
            Filter {
                path: Some("c.rs".into()),
                ..Filter::all()
            },
            Filter {
                since: Some(Timestamp(1001)),
                ..Filter::all()
            },
            Filter {
                until: Some(Timestamp(999)),
                ..Filter::all()
            },
        ];
        for f in nos {
            assert!(!f.matches_event(&e), "{f:?}");
        }
    }

    fn bound(s: &str, b: TimeBound) -> Timestamp {
        parse_time_bound(s, b).unwrap()
    }

    fn iso(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    #[test]
    fn a_year_or_month_is_a_date_not_epoch_ms() {
        use TimeBound::{Since, Until};
        assert_eq!(bound("2024", Since), iso("2024-01-01T00:00:00Z"));
        assert_eq!(bound("2024", Until), iso("2024-12-31T23:59:59.999Z"));
        assert_eq!(bound("2023-11", Since), iso("2023-11-01T00:00:00Z"));
        assert_eq!(bound("2023-11", Until), iso("2023-11-30T23:59:59.999Z"));
        assert_eq!(bound("2023-12", Until), iso("2023-12-31T23:59:59.999Z"));
        assert_eq!(bound("2024-02", Until), iso("2024-02-29T23:59:59.999Z"));
        assert_eq!(bound(" 2023-11 ", Since), iso("2023-11-01T00:00:00Z"));
        // The last year cairn holds ends at the last time it holds.
        assert_eq!(bound("9999", Until), Timestamp::MAX);
        assert_eq!(bound("9999-12", Until), Timestamp::MAX);
        assert!(parse_time_bound("2023-13", Since).is_err());
        assert!(parse_time_bound("2023-00", Until).is_err());
    }

    #[test]
    fn a_date_only_until_covers_the_whole_day() {
        use TimeBound::{Since, Until};
        assert_eq!(bound("2023-11-14", Since), iso("2023-11-14T00:00:00Z"));
        assert_eq!(bound("2023-11-14", Until), iso("2023-11-14T23:59:59.999Z"));
        assert_eq!(bound("9999-12-30", Until), Timestamp::MAX);
        // A record of that evening is inside `--until` that day.
        let f = Filter {
            until: Some(bound("2023-11-14", Until)),
            ..Filter::all()
        };
        let mut e = ev();
        e.ts = iso("2023-11-14T22:13:20Z");
        assert!(f.matches_event(&e));
        e.ts = iso("2023-11-15T00:00:00Z");
        assert!(!f.matches_event(&e));
    }

    #[test]
    fn instants_and_epoch_ms_are_unchanged() {
        for b in [TimeBound::Since, TimeBound::Until] {
            assert_eq!(
                bound("2023-11-14T22:13:20Z", b),
                Timestamp(1_700_000_000_000)
            );
            assert_eq!(
                bound("2023-11-14T23:13:20.5+01:00", b),
                Timestamp(1_700_000_000_500)
            );
            assert_eq!(bound("1700000000000", b), Timestamp(1_700_000_000_000));
            assert_eq!(bound("0", b), Timestamp(0));
            assert_eq!(bound("-1000000000000", b), Timestamp(-1_000_000_000_000));
        }
    }

    #[test]
    fn an_implausibly_small_bare_number_is_refused_naming_both_forms() {
        for s in ["1", "2024x", "20231114", "315532799999", "-5000", "99999"] {
            let e = parse_time_bound(s, TimeBound::Since)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("`{s}`")), "{e}");
            if s != "2024x" {
                assert!(e.contains("epoch milliseconds"), "{e}");
                assert!(e.contains("ISO-8601"), "{e}");
            }
        }
        assert_eq!(
            bound("315532800000", TimeBound::Since),
            iso("1980-01-01T00:00:00Z")
        );
    }
}
