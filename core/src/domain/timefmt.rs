//! Decoding and encoding the timestamps dlq writes, fast.
//!
//! chrono's serde decoder parses every timestamp with its general RFC 3339 parser (about 1,900
//! instructions each); an event carries four or more. What dlq writes is always the same shape,
//! `2026-11-21T21:14:10.123456789Z` (0 to 9 fraction digits, UTC), which `parse_utc` reads
//! directly. Anything else (an offset, a leap second, a lowercase `t`) goes to chrono's parser,
//! so the accepted inputs and their values are exactly chrono's.
//!
//! Encoding: chrono's serde encoder formats through `fmt::Display`, which serde_json escapes one
//! `char` at a time. `write_utc` writes the same bytes (years 0 to 9999, 0, 3, 6 or 9
//! fraction digits as chrono's `AutoSi` picks them, `Z`) from a stack buffer, and hands any
//! other instant (a leap second, a year outside 0..=9999) to chrono's encoder.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};
use serde::de::{self, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

/// Parses `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z`; `None` for any other shape or an invalid date.
pub(crate) fn parse_utc(text: &str) -> Option<DateTime<Utc>> {
    let b = text.as_bytes();
    if b.len() < 20 || b[b.len() - 1] != b'Z' {
        return None;
    }
    let digits = |from: usize, to: usize| -> Option<u32> {
        b.get(from..to)?.iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = i32::try_from(digits(0, 4)?).ok()?;
    let (month, day) = (digits(5, 7)?, digits(8, 10)?);
    let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=9).contains(&fraction.len()) => {
            let n = digits(20, 20 + fraction.len())?;
            n * 10u32.pow(9 - u32::try_from(fraction.len()).ok()?)
        }
        _ => return None,
    };
    if second > 59 {
        return None; // a leap second: chrono's parser knows how
    }
    let time =
        NaiveDate::from_ymd_opt(year, month, day)?.and_hms_nano_opt(hour, minute, second, nanos)?;
    Some(time.and_utc())
}

/// Parses any RFC 3339 timestamp chrono accepts, the common shape without chrono's parser.
pub fn parse(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    match parse_utc(text) {
        Some(time) => Ok(time),
        None => text.parse(),
    }
}

struct TimeVisitor;

impl Visitor<'_> for TimeVisitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        parse(text).map_err(E::custom)
    }
}

/// `#[serde(deserialize_with = "crate::domain::timefmt::utc")]` for a `DateTime<Utc>` field.
pub(crate) fn utc<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    deserializer.deserialize_str(TimeVisitor)
}

/// As [`utc`], for an `Option<DateTime<Utc>>` field (`null` is `None`; add `#[serde(default)]`
/// for a missing field).
pub(crate) fn utc_option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    struct OptionVisitor;
    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an RFC 3339 timestamp or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            utc(d).map(Some)
        }
    }
    deserializer.deserialize_option(OptionVisitor)
}

/// The longest timestamp [`format_utc`] writes: `YYYY-MM-DDTHH:MM:SS.fffffffffZ`.
const FORMATTED_MAX: usize = 30;

/// Writes `time` as chrono's serde encoder does into `out`; the length written, or `None` for
/// an instant it leaves to chrono (a leap second, a year outside 0..=9999).
fn format_utc(time: &DateTime<Utc>, out: &mut [u8; FORMATTED_MAX]) -> Option<usize> {
    let year = u32::try_from(time.year())
        .ok()
        .filter(|year| *year <= 9999)?;
    let nanos = time.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    let mut text = Text { out, len: 0 };
    text.digits(year, 4);
    text.byte(b'-');
    text.digits(time.month(), 2);
    text.byte(b'-');
    text.digits(time.day(), 2);
    text.byte(b'T');
    text.digits(time.hour(), 2);
    text.byte(b':');
    text.digits(time.minute(), 2);
    text.byte(b':');
    text.digits(time.second(), 2);
    // chrono's `AutoSi`: as few digits as show the fraction, in steps of three.
    let (fraction, width) = match nanos {
        0 => (0, 0),
        n if n % 1_000_000 == 0 => (n / 1_000_000, 3),
        n if n % 1_000 == 0 => (n / 1_000, 6),
        n => (n, 9),
    };
    if width > 0 {
        text.byte(b'.');
        text.digits(fraction, width);
    }
    text.byte(b'Z');
    Some(text.len)
}

/// A timestamp being written into a stack buffer.
struct Text<'a> {
    out: &'a mut [u8; FORMATTED_MAX],
    len: usize,
}

impl Text<'_> {
    fn byte(&mut self, byte: u8) {
        if let Some(slot) = self.out.get_mut(self.len) {
            *slot = byte;
        }
        self.len += 1;
    }

    /// `value` in exactly `width` decimal digits, zero-padded.
    fn digits(&mut self, value: u32, width: usize) {
        let mut rest = value;
        for at in (self.len..self.len + width).rev() {
            if let Some(slot) = self.out.get_mut(at) {
                *slot = b'0' + (rest % 10) as u8;
            }
            rest /= 10;
        }
        self.len += width;
    }
}

/// `#[serde(serialize_with = "crate::domain::timefmt::write_utc")]` for a `DateTime<Utc>`
/// field: the bytes chrono's encoder writes, without its formatting machinery.
pub(crate) fn write_utc<S: Serializer>(
    time: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut buffer = [0u8; FORMATTED_MAX];
    let text = format_utc(time, &mut buffer)
        .and_then(|len| buffer.get(..len))
        .and_then(|bytes| std::str::from_utf8(bytes).ok());
    match text {
        Some(text) => serializer.serialize_str(text),
        None => time.serialize(serializer),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    proptest! {
        /// Whatever chrono writes, the fast path reads back to the same instant, and agrees
        /// with chrono's own parser.
        #[test]
        fn what_chrono_writes_is_read_by_the_fast_path(secs in 0i64..253_402_300_799, nanos in 0u32..1_000_000_000, round in 0usize..4) {
            let nanos = [nanos, nanos / 1000 * 1000, nanos / 1_000_000 * 1_000_000, 0][round];
            let time = Utc.timestamp_opt(secs, nanos).unwrap();
            let json = serde_json::to_string(&time).unwrap();
            let text: String = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(parse_utc(&text), Some(time));
            prop_assert_eq!(text.parse::<DateTime<Utc>>().unwrap(), time);
        }

        /// Any string: the fast path never accepts what chrono rejects, nor reads it differently.
        #[test]
        fn the_fast_path_never_disagrees_with_chrono(text in "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,10})?[Zz+]?") {
            if let Some(fast) = parse_utc(&text) {
                prop_assert_eq!(text.parse::<DateTime<Utc>>().ok(), Some(fast));
            }
        }
    }

    /// A field written by [`write_utc`].
    #[derive(serde::Serialize)]
    struct Written(#[serde(serialize_with = "write_utc")] DateTime<Utc>);

    proptest! {
        /// Byte for byte what chrono's encoder writes, for every instant from year -100 to
        /// 12,000 (chrono's own encoder past 9999 and before 0) and every fraction width.
        #[test]
        fn write_utc_writes_what_chrono_writes(secs in -65_000_000_000i64..316_000_000_000, nanos in 0u32..1_000_000_000, round in 0usize..4) {
            let nanos = [nanos, nanos / 1000 * 1000, nanos / 1_000_000 * 1_000_000, 0][round];
            let time = Utc.timestamp_opt(secs, nanos).unwrap();
            prop_assert_eq!(
                serde_json::to_string(&Written(time)).unwrap(),
                serde_json::to_string(&time).unwrap()
            );
        }
    }

    #[test]
    fn leap_seconds_and_far_years_are_written_by_chrono() {
        let cases = [
            Utc.timestamp_opt(1_483_228_799, 1_500_000_000).unwrap(), // 2016-12-31T23:59:60.5Z
            Utc.timestamp_opt(1_483_228_799, 1_000_000_000).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
        ];
        for time in cases {
            assert_eq!(
                serde_json::to_string(&Written(time)).unwrap(),
                serde_json::to_string(&time).unwrap()
            );
        }
        let mut buffer = [0u8; FORMATTED_MAX];
        assert_eq!(format_utc(&cases[0], &mut buffer), None);
        assert_eq!(format_utc(&cases[2], &mut buffer), None);
        assert_eq!(format_utc(&cases[5], &mut buffer), Some(20));
    }

    #[test]
    fn other_shapes_go_to_chrono_and_garbage_is_an_error() {
        let offset = parse("2026-11-21T23:14:10.5+02:00").unwrap();
        assert_eq!(offset, parse("2026-11-21T21:14:10.5Z").unwrap());
        assert!(parse_utc("2026-11-21T23:14:10+02:00").is_none());
        assert!(parse("2026-02-30T00:00:00Z").is_err());
        assert!(parse("yesterday").is_err());
        assert!(parse("2026-11-21T21:14:10.Z").is_err());
    }

    #[test]
    fn fields_decode_through_serde_including_null_and_escapes() {
        #[derive(serde::Deserialize)]
        struct Row {
            #[serde(deserialize_with = "utc")]
            at: DateTime<Utc>,
            #[serde(default, deserialize_with = "utc_option")]
            maybe: Option<DateTime<Utc>>,
        }
        let row: Row =
            serde_json::from_str(r#"{"at":"2026-11-21T21:14:10\u005a","maybe":null}"#).unwrap();
        assert_eq!(row.at, parse("2026-11-21T21:14:10Z").unwrap());
        assert_eq!(row.maybe, None);
        let row: Row = serde_json::from_str(r#"{"at":"2026-11-21T21:14:10Z"}"#).unwrap();
        assert_eq!(row.maybe, None);
        let row: Row =
            serde_json::from_str(r#"{"at":"2026-11-21T21:14:10Z","maybe":"2026-11-21T21:14:11Z"}"#)
                .unwrap();
        assert_eq!(row.maybe, Some(parse("2026-11-21T21:14:11Z").unwrap()));
        assert!(serde_json::from_str::<Row>(r#"{"at":17}"#).is_err());
    }
}
