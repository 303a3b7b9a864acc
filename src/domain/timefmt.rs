//! Decoding the timestamps dlq writes, fast.
//!
//! chrono's serde decoder parses every timestamp with its general RFC 3339 parser (about 1,900
//! instructions each); an event carries four or more. What dlq writes is always the same shape,
//! `2026-11-21T21:14:10.123456789Z` (0 to 9 fraction digits, UTC), which [`parse_utc`] reads
//! directly. Anything else (an offset, a leap second, a lowercase `t`) goes to chrono's parser,
//! so the accepted inputs and their values are exactly chrono's. Encoding stays chrono's.

use std::fmt;

use chrono::{DateTime, NaiveDate, Utc};
use serde::de::{self, Deserializer, Visitor};

/// Parses `YYYY-MM-DDTHH:MM:SS[.fffffffff]Z`; `None` for any other shape or an invalid date.
pub fn parse_utc(text: &str) -> Option<DateTime<Utc>> {
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
pub fn utc<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    deserializer.deserialize_str(TimeVisitor)
}

/// As [`utc`], for an `Option<DateTime<Utc>>` field (`null` is `None`; add `#[serde(default)]`
/// for a missing field).
pub fn utc_option<'de, D: Deserializer<'de>>(
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
