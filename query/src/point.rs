//! Points in history: an LSN (`@1234`), a checkpoint (`c42`), a time
//! (ISO-8601) or the head (`head`).

use std::fmt;
use std::str::FromStr;

use cairn_codec::{CheckpointId, Lsn, Timestamp};

use crate::error::QueryError;

/// A point in history. Every query takes points and resolves them to an LSN:
/// the state at a point is the fold of records `1..=lsn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Just after the record at this LSN (`@1234`); `@0` is the empty state.
    Lsn(Lsn),
    /// Just after a `checkpoint.create` record (`c42`).
    Checkpoint(CheckpointId),
    /// The last record committed at or before this time, in commit order:
    /// the longest prefix of the log none of whose records is later than it.
    ///
    /// A record's `ts` is its producer's, and `record` and `import` take
    /// any: the times in the log need not go forward (a clock stepped
    /// back, an import of older events). A time point is read against the
    /// running maximum of the times (as Kafka's time index reads one): the
    /// point is the record before the first one stamped later than the
    /// time, so it is always a prefix of the log, the same for every
    /// command, and a later time is never an earlier point. Records after
    /// the point stamped at or before the time are left out; how many is
    /// [`TimePoint::left_out`], and the CLI says so on stderr.
    Time(Timestamp),
    /// The last committed record (`head`).
    Head,
}

/// What a [`Point::Time`] resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimePoint {
    /// The time asked for.
    pub time: Timestamp,
    /// The point: the last record before the first one stamped later than
    /// `time` (0: the first record already is).
    pub lsn: Lsn,
    /// Records after `lsn` whose own `ts` is at or before `time`: they
    /// come after a record stamped later, where the log's times go
    /// backwards, and the point leaves them out. 0 where the times up to
    /// the point only go forward.
    pub left_out: u64,
}

impl TimePoint {
    /// A note for a reader when the point leaves records out (`None`
    /// otherwise): what the point is, and why those records are not in it.
    pub fn note(&self) -> Option<String> {
        (self.left_out > 0).then(|| {
            let n = self.left_out;
            let (records, are) = if n == 1 {
                ("record", "is")
            } else {
                ("records", "are")
            };
            let point = if self.lsn.0 == 0 {
                "@0, before the first record, which is stamped later".to_string()
            } else {
                format!(
                    "@{}, the last record before the first one stamped later",
                    self.lsn
                )
            };
            format!(
                "{} is {point}; the log's times go backwards after it, and {n} later {records} stamped at or before {} {are} not in it (use `@LSN` for an exact point)",
                self.time, self.time
            )
        })
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Point::Lsn(l) => write!(f, "@{l}"),
            Point::Checkpoint(c) => write!(f, "{c}"),
            Point::Time(t) => write!(f, "{t}"),
            Point::Head => f.write_str("head"),
        }
    }
}

impl FromStr for Point {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Point, QueryError> {
        let bad = |reason: String| QueryError::BadPoint {
            point: s.to_string(),
            reason,
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(bad(
                "empty; use `@LSN`, a checkpoint id like `c42`, an ISO-8601 time or `head`".into(),
            ));
        }
        if t.eq_ignore_ascii_case("head") {
            return Ok(Point::Head);
        }
        if let Some(digits) = t.strip_prefix('@') {
            return match digits.parse::<u64>() {
                Ok(n) if !digits.starts_with('+') => Ok(Point::Lsn(Lsn(n))),
                _ => Err(bad(format!(
                    "`@` must be followed by an LSN (a whole number, e.g. `@1234`), got `{digits}`"
                ))),
            };
        }
        if t.starts_with('c') {
            return t
                .parse::<CheckpointId>()
                .map(Point::Checkpoint)
                .map_err(|e| bad(e.to_string()));
        }
        if t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!(
                "a bare number is ambiguous: write `@{t}` for an LSN or an ISO-8601 time such as 2026-11-22T10:00:00Z"
            )));
        }
        // (Timestamp::parse's own error offers epoch milliseconds, which a
        // point does not take: see the bare-number case above.)
        Timestamp::parse(t).map(Point::Time).map_err(|_| {
            // A date at the edge of the range cairn holds (the last day of
            // year 9999, year 0) is named as out of range, not as malformed.
            let edge = (t.starts_with("9999-") || t.starts_with("0000-"))
                && t.as_bytes().get(7) == Some(&b'-');
            if edge {
                bad(format!(
                    "an ISO-8601 time outside the range cairn holds ({} to {})",
                    Timestamp::MIN,
                    Timestamp::MAX
                ))
            } else {
                bad("not `@LSN`, a checkpoint id (`c42`), `head`, nor an ISO-8601 time such as 2026-11-22T10:00:00Z".into())
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_time_past_the_range_or_a_huge_id_is_named_so() {
        let e = "9999-12-31T00:00:00Z"
            .parse::<Point>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the range cairn holds"), "{e}");
        let e = "2026-13-45".parse::<Point>().unwrap_err().to_string();
        assert!(e.contains("nor an ISO-8601 time"), "{e}");
        let e = "c99999999999999999999"
            .parse::<Point>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("too large to be a checkpoint id"), "{e}");
        let e = "cx".parse::<Point>().unwrap_err().to_string();
        assert!(e.contains("is not a checkpoint id"), "{e}");
    }

    #[test]
    fn parses_every_form() {
        assert_eq!("@1234".parse::<Point>().unwrap(), Point::Lsn(Lsn(1234)));
        assert_eq!("@0".parse::<Point>().unwrap(), Point::Lsn(Lsn(0)));
        assert_eq!(
            "c42".parse::<Point>().unwrap(),
            Point::Checkpoint(CheckpointId(Lsn(42)))
        );
        assert_eq!("head".parse::<Point>().unwrap(), Point::Head);
        assert_eq!("HEAD".parse::<Point>().unwrap(), Point::Head);
        assert_eq!(
            "2023-11-14T22:13:20.123Z".parse::<Point>().unwrap(),
            Point::Time(Timestamp(1_700_000_000_123))
        );
        assert_eq!(
            "1970-01-02".parse::<Point>().unwrap(),
            Point::Time(Timestamp(86_400_000))
        );
    }

    #[test]
    fn a_time_point_notes_only_the_records_it_leaves_out() {
        let t = Timestamp(1_700_000_000_000);
        let mut p = TimePoint {
            time: t,
            lsn: Lsn(3),
            left_out: 0,
        };
        assert_eq!(p.note(), None);
        p.left_out = 2;
        let n = p.note().unwrap();
        assert!(n.contains("@3") && n.contains("2 later records"), "{n}");
    }

    #[test]
    fn display_round_trips() {
        for p in [
            Point::Lsn(Lsn(7)),
            Point::Checkpoint(CheckpointId(Lsn(3))),
            Point::Head,
            Point::Time(Timestamp(1_700_000_000_123)),
        ] {
            assert_eq!(p.to_string().parse::<Point>().unwrap(), p);
        }
    }

    #[test]
    fn errors_are_clear() {
        let cases = [
            ("", "empty"),
            ("@", "must be followed by an LSN"),
            ("@x1", "must be followed by an LSN"),
            ("@-1", "must be followed by an LSN"),
            ("@+1", "must be followed by an LSN"),
            ("c0", "checkpoint id"),
            ("cx", "checkpoint id"),
            ("1234", "ambiguous"),
            ("yesterday", "not `@LSN`"),
        ];
        for (s, want) in cases {
            let e = s.parse::<Point>().unwrap_err().to_string();
            assert!(e.contains(want), "{s}: {e}");
            assert!(e.contains("bad point"), "{s}: {e}");
        }
    }
}
