//! Timestamps: milliseconds since the Unix epoch, UTC.
//!
//! Output is always ISO-8601 UTC with milliseconds (`2026-11-22T02:04:57.123Z`);
//! input accepts ISO-8601 / RFC 3339 with any offset, or epoch milliseconds.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use crate::CodecError;

/// Milliseconds since 1970-01-01T00:00:00Z.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

/// The earliest timestamp cairn accepts: year 0000 is outside ISO-8601's
/// common profile, so accept from 1970 minus a safety margin only.
const MIN_MS: i64 = -62_135_596_800_000; // 0001-01-01T00:00:00Z
/// The latest timestamp cairn accepts (9999-12-30T22:00:00.999Z): the
/// four-digit year of the output format never overflows, and it is the
/// last time the ISO parser (jiff, whose range ends there) reads back.
const MAX_MS: i64 = 253_402_207_200_999;

impl Timestamp {
    /// The earliest timestamp cairn holds (0001-01-01T00:00:00.000Z).
    pub const MIN: Timestamp = Timestamp(MIN_MS);
    /// The latest timestamp cairn holds (9999-12-30T22:00:00.999Z).
    pub const MAX: Timestamp = Timestamp(MAX_MS);

    /// The current time.
    pub fn now() -> Timestamp {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(d.as_millis() as i64)
    }

    /// Epoch milliseconds, checked to be in the representable range.
    pub fn from_millis(ms: i64) -> Result<Timestamp, CodecError> {
        if (MIN_MS..=MAX_MS).contains(&ms) {
            Ok(Timestamp(ms))
        } else {
            Err(CodecError::Invalid {
                what: format!(
                    "timestamp {ms} ms is outside 0001-01-01 ..= 9999-12-30T22:00:00.999Z"
                ),
            })
        }
    }

    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// Writes the ISO-8601 UTC form with milliseconds into `out`.
    pub fn write_iso(self, out: &mut String) {
        let buf = self.iso_bytes();
        // The buffer holds only ASCII digits and separators.
        out.push_str(std::str::from_utf8(&buf).unwrap_or("0000-00-00T00:00:00.000Z"));
    }

    /// The ISO-8601 UTC form with milliseconds as 24 ASCII bytes
    /// (`2026-11-22T05:30:00.000Z`), written without allocating.
    pub fn iso_bytes(self) -> [u8; 24] {
        self.iso_bytes_cached(&mut IsoDay::default())
    }

    /// [`Timestamp::iso_bytes`], reusing the date part `day` holds when
    /// this timestamp falls on the same day, and leaving this day there.
    /// A log's records come in time order, so an export computes the
    /// calendar date (divisions by 146,097, 36,524, 1,461, ...) about
    /// once per day of history instead of once per record.
    pub fn iso_bytes_cached(self, day: &mut IsoDay) -> [u8; 24] {
        let ms = self.0.clamp(MIN_MS, MAX_MS);
        let days = ms.div_euclid(86_400_000);
        let rem = ms.rem_euclid(86_400_000);
        let mut buf = [0u8; 24];
        if day.days != Some(days) {
            let (y, m, d) = civil_from_days(days);
            let date = &mut day.date;
            put(&mut date[0..4], y as u32);
            date[4] = b'-';
            put(&mut date[5..7], m);
            date[7] = b'-';
            put(&mut date[8..10], d);
            day.days = Some(days);
        }
        buf[..10].copy_from_slice(&day.date);
        let (h, mi, s, milli) = (
            rem / 3_600_000,
            rem / 60_000 % 60,
            rem / 1000 % 60,
            rem % 1000,
        );
        buf[10] = b'T';
        put(&mut buf[11..13], h as u32);
        buf[13] = b':';
        put(&mut buf[14..16], mi as u32);
        buf[16] = b':';
        put(&mut buf[17..19], s as u32);
        buf[19] = b'.';
        put(&mut buf[20..23], milli as u32);
        buf[23] = b'Z';
        buf
    }

    /// The ISO-8601 UTC form with milliseconds.
    pub fn to_iso(self) -> String {
        let mut s = String::with_capacity(24);
        self.write_iso(&mut s);
        s
    }

    /// Parses ISO-8601 / RFC 3339 (any offset; a bare date means midnight UTC)
    /// or a decimal number of epoch milliseconds.
    pub fn parse(s: &str) -> Result<Timestamp, CodecError> {
        let t = s.trim();
        if !t.is_empty()
            && t.bytes().all(|b| b.is_ascii_digit() || b == b'-')
            && !t[1..].contains('-')
        {
            let ms: i64 = t.parse().map_err(|_| CodecError::Invalid {
                what: format!("timestamp `{s}` is not a number of epoch milliseconds"),
            })?;
            return Timestamp::from_millis(ms);
        }
        if let Some(e) = leap_second(s, t) {
            return Err(e);
        }
        let parsed = if let Ok(ts) = t.parse::<jiff::Timestamp>() {
            ts
        } else if let Ok(dt) = t.parse::<jiff::civil::DateTime>() {
            dt.to_zoned(jiff::tz::TimeZone::UTC)
                .map_err(|e| bad_ts(s, e))?
                .timestamp()
        } else {
            let d = t.parse::<jiff::civil::Date>().map_err(|e| bad_ts(s, e))?;
            d.to_zoned(jiff::tz::TimeZone::UTC)
                .map_err(|e| bad_ts(s, e))?
                .timestamp()
        };
        Timestamp::from_millis(parsed.as_millisecond())
    }
}

/// A time of day whose seconds are 60 (`23:59:60`, a leap second) is
/// refused: cairn's times are milliseconds since the epoch without leap
/// seconds (as POSIX time is), and the parser would otherwise take it as
/// `:59` without a word, putting the event a second early and out of order
/// with one stamped `23:59:59.500`. `t` is `s` trimmed.
fn leap_second(s: &str, t: &str) -> Option<CodecError> {
    let time = &t[t.find(['T', 't', ' '])? + 1..];
    // The seconds are the 5th and 6th digit of the time, with or without
    // colons (`23:59:60`, `235960`).
    let digits: Vec<u8> = time
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b':')
        .filter(u8::is_ascii_digit)
        .collect();
    (digits.get(4..6) == Some(b"60".as_slice())).then(|| CodecError::Invalid {
        what: format!(
            "timestamp `{s}` is a leap second (seconds 60): cairn's times leave leap seconds out, as POSIX time does; write the second before it (23:59:59.999) or the one after (00:00:00 of the next day)"
        ),
    })
}

fn bad_ts(s: &str, e: impl fmt::Display) -> CodecError {
    // The parser's own detail helps ("invalid month 13") unless it talks
    // about its own types (a time past its range).
    let detail = e.to_string();
    // Nor for text that is no date at all (`yesterday`): "failed to parse
    // four digit integer as year" says nothing useful there.
    let looks_like_a_date = s.trim().bytes().take(4).all(|b| b.is_ascii_digit());
    let detail = if detail.contains("jiff") || !looks_like_a_date {
        String::new()
    } else {
        format!(": {detail}")
    };
    CodecError::Invalid {
        what: format!("timestamp `{s}` is neither ISO-8601 between 0001-01-01 and 9999-12-30T22:00Z (e.g. 2026-11-22T10:00:00Z) nor epoch milliseconds{detail}"),
    }
}

fn put(dst: &mut [u8], mut v: u32) {
    for slot in dst.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// The last calendar day [`Timestamp::iso_bytes_cached`] formatted: its
/// number of days since the epoch and its `YYYY-MM-DD` bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct IsoDay {
    days: Option<i64>,
    date: [u8; 10],
}

impl IsoDay {
    /// No day formatted yet.
    pub const EMPTY: IsoDay = IsoDay {
        days: None,
        date: [0; 10],
    };
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (y, m, d).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_iso())
    }
}

impl FromStr for Timestamp {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, CodecError> {
        Timestamp::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The cached form equals the uncached one whatever day the cache
        /// last held: the same day, the day before, a far-off one.
        #[test]
        fn cached_iso_matches_uncached(ms in proptest::collection::vec(MIN_MS..=MAX_MS, 1..20),
                                      near in proptest::collection::vec(-2 * 86_400_000i64..2 * 86_400_000, 1..20)) {
            let mut day = IsoDay::EMPTY;
            let base = ms[0];
            for t in ms.iter().copied().chain(near.iter().map(|d| (base + d).clamp(MIN_MS, MAX_MS))) {
                let ts = Timestamp(t);
                prop_assert_eq!(ts.iso_bytes_cached(&mut day), ts.iso_bytes());
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(Timestamp(0).to_iso(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp(1_700_000_000_123).to_iso(),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(Timestamp(-1).to_iso(), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            Timestamp::parse("2023-11-14T22:13:20.123Z").unwrap(),
            Timestamp(1_700_000_000_123)
        );
        assert_eq!(
            Timestamp::parse("2023-11-14T23:13:20.123+01:00").unwrap(),
            Timestamp(1_700_000_000_123)
        );
        assert_eq!(
            Timestamp::parse("1700000000123").unwrap(),
            Timestamp(1_700_000_000_123)
        );
        assert_eq!(
            Timestamp::parse("1970-01-02").unwrap(),
            Timestamp(86_400_000)
        );
        assert_eq!(
            Timestamp::parse("1970-01-01T00:00:01").unwrap(),
            Timestamp(1000)
        );
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        for bad in [
            "",
            "yesterday",
            "2023-13-01T00:00:00Z",
            "99999999999999999999",
            "12-3",
        ] {
            let e = Timestamp::parse(bad).unwrap_err().to_string();
            assert!(e.contains("timestamp"), "{bad}: {e}");
            assert!(!e.contains("jiff"), "{bad}: {e}");
        }
    }

    /// A leap second was silently stored as `:59`: it is refused, saying
    /// why and what to write instead.
    #[test]
    fn a_leap_second_is_refused_not_stored_as_59() {
        for s in [
            "2016-12-31T23:59:60Z",
            "2016-12-31T23:59:60.500Z",
            "2016-12-31 23:59:60+00:00",
            "2016-12-31T235960Z",
        ] {
            let e = Timestamp::parse(s).unwrap_err().to_string();
            assert!(e.contains("leap second"), "{s}: {e}");
        }
        // Seconds 59, minutes 60 and hours 60 are other matters.
        assert!(Timestamp::parse("2016-12-31T23:59:59.999Z").is_ok());
        assert!(Timestamp::parse("2016-12-31T23:60:00Z").is_err());
        assert!(!Timestamp::parse("2016-12-31T23:60:00Z")
            .unwrap_err()
            .to_string()
            .contains("leap second"));
    }

    #[test]
    fn the_last_accepted_time_parses() {
        for t in ["9999-12-30T22:00:00.999Z", "0001-01-01T00:00:00.000Z"] {
            let ts = Timestamp::parse(t).unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(ts.to_iso(), t);
        }
        assert_eq!(
            Timestamp::parse("9999-12-30T22:00:00.999Z").unwrap().0,
            MAX_MS
        );
        let e = Timestamp::parse("9999-12-31T23:59:59Z")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("9999-12-30T22:00Z") && !e.contains("jiff"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(ms in MIN_MS..=MAX_MS) {
            let iso = Timestamp(ms).to_iso();
            prop_assert_eq!(iso.len(), 24);
            prop_assert_eq!(Timestamp::parse(&iso).unwrap(), Timestamp(ms));
            let j = jiff::Timestamp::from_millisecond(ms).unwrap();
            prop_assert_eq!(&iso[..19], &j.strftime("%Y-%m-%dT%H:%M:%S").to_string()[..]);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = Timestamp::parse(&s);
        }
    }
}
