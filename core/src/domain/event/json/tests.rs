//! The fast writer writes exactly serde_json's bytes: every escape, a special byte at every
//! offset of the eight-byte scan, serde's data model, arbitrary JSON values and whole events.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;
use serde_json::{Number, Value};

use super::*;
use crate::domain::event::{Event, EventKind, RedriveTarget, RemovalReason, RemovedBy};
use crate::domain::model::{ErrorType, FailureDetail, Redrive, RedriveState, WorktreeArtifacts};

/// The fast writer's bytes.
fn fast<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Unsupported> {
    let mut out = b"kept".to_vec();
    write(&value, &mut out)?;
    assert_eq!(out.drain(..4).as_slice(), b"kept", "appends");
    Ok(out)
}

/// The fast writer's output, and serde_json's (as text, to read in a failure).
fn both<T: Serialize + ?Sized>(value: &T) -> (Result<String, Unsupported>, String) {
    let text = |bytes| String::from_utf8(bytes).unwrap();
    (
        fast(value).map(text),
        text(serde_json::to_vec(value).unwrap()),
    )
}

/// Asserts the fast writer writes `value` exactly as serde_json does.
fn same<T: Serialize + ?Sized>(value: &T) {
    let (fast, slow) = both(value);
    assert_eq!(fast.unwrap(), slow);
}

#[test]
fn each_escape_is_serde_jsons() {
    let text = "\"\\/\u{8}\t\n\u{b}\u{c}\r\u{0}\u{1}\u{1a}\u{1f} \u{7f}\u{80}é€😀";
    let mut out = Vec::new();
    write_str(&mut out, text);
    let expected =
        r#""\"\\/\b\t\n\u000b\f\r\u0000\u0001\u001a\u001f "#.to_owned() + "\u{7f}\u{80}é€😀\"";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    for byte in 0..=0x7f_u8 {
        same(&char::from(byte).to_string());
        same(&char::from(byte));
    }
}

#[test]
fn a_special_byte_is_escaped_at_each_position() {
    for special in [
        '"', '\\', '\n', '\t', '\u{0}', '\u{1f}', '\u{7f}', 'é', '😀',
    ] {
        for at in 0..17 {
            for tail in 0..10 {
                let text: String = "a".repeat(at) + &special.to_string() + &"b".repeat(tail);
                same(&text);
            }
        }
    }
}

#[test]
fn specials_marks_exactly_the_first_byte_to_escape() {
    let escaped = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    for (a, b) in (0..=255_u8).flat_map(|a| (0..=255_u8).map(move |b| (a, b))) {
        for (i, j, fill) in [(0, 1, b'x'), (3, 4, 0xff), (6, 7, b' '), (1, 5, b'!')] {
            let mut word = [fill; 8];
            (word[i], word[j]) = (a, b);
            let first = word.iter().position(|&c| escaped(c));
            let found = specials(u64::from_le_bytes(word));
            let marked = (found != 0).then(|| (found.trailing_zeros() / 8) as usize);
            assert_eq!(marked, first, "{word:?}");
        }
    }
}

#[derive(Serialize)]
enum Shapes {
    Unit,
    Newtype(Option<i8>),
    Tuple(u8, char),
    Struct {
        a: (),
        b: Vec<u8>,
        c: Option<&'static str>,
    },
    Empty {},
    EmptyTuple(),
}

#[derive(Serialize)]
struct UnitStruct;

#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Left,
}

/// Bytes through `serialize_bytes`, as `serde_bytes` would.
struct Bytes(&'static [u8]);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[test]
fn serdes_data_model_is_written_as_serde_json_writes_it() {
    same(&[
        Shapes::Unit,
        Shapes::Newtype(Some(-3)),
        Shapes::Newtype(None),
    ]);
    same(&(
        Shapes::Tuple(7, '"'),
        Shapes::Empty {},
        Shapes::EmptyTuple(),
    ));
    same(&Shapes::Struct {
        a: (),
        b: vec![],
        c: Some("\n"),
    });
    same(&(UnitStruct, (), Some(()), Bytes(b""), Bytes(&[0, 7, 255])));
    same(&(
        i128::MIN,
        u128::MAX,
        i8::MIN,
        u16::MAX,
        -0.0_f32,
        1e-7_f32,
        f32::MAX,
        0.1_f32,
    ));
    same(&[
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e16,
        -1e-300,
        5e-324,
        0.3,
    ]);
    same(&[f32::NAN, f32::INFINITY, 1e30]);
    same(&(
        Vec::<u8>::new(),
        BTreeMap::<String, u8>::new(),
        [[(); 0]; 2],
    ));
    same(&BTreeMap::from([('k', 1), ('"', 2)]));
    same(&BTreeMap::from([(Key::Left, Some(Key::Left))]));
    same(&BTreeMap::from([(Some("x"), 1)]));
    same(&format_args!("{}\t{}", "a\"b", 7));
}

/// A struct serde_json treats as its own: `RawValue` (`raw_value`) is one.
struct Private;

impl Serialize for Private {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut s = s.serialize_struct("$serde_json::private::RawValue", 1)?;
        s.serialize_field("$serde_json::private::RawValue", "1")?;
        s.end()
    }
}

#[test]
fn what_cannot_be_written_exactly_is_unsupported() {
    use std::os::unix::ffi::OsStringExt;
    assert_eq!(fast(&BTreeMap::from([(1_u32, 2)])), Err(Unsupported));
    assert_eq!(fast(&BTreeMap::from([(true, 2)])), Err(Unsupported));
    assert_eq!(fast(&BTreeMap::from([(None::<&str>, 2)])), Err(Unsupported));
    assert_eq!(fast(&BTreeMap::from([((), 2)])), Err(Unsupported));
    assert_eq!(fast(&Private), Err(Unsupported));
    // A `Serialize` impl's own error: serde_json's fallback reports it.
    let invalid = std::path::PathBuf::from(std::ffi::OsString::from_vec(vec![0xff]));
    assert_eq!(fast(&[&invalid]), Err(Unsupported));
    assert!(serde_json::to_vec(&[&invalid]).is_err());
}

/// Text with the bytes JSON escapes, multi-byte characters, and runs across word bounds.
fn text() -> impl Strategy<Value = String> {
    let special = prop_oneof![
        Just('"'),
        Just('\\'),
        (0_u8..0x20).prop_map(char::from),
        Just('\u{7f}'),
        Just('é'),
        Just('€'),
        Just('😀'),
        proptest::char::range('a', 'z'),
        proptest::char::range('a', 'z'),
    ];
    prop_oneof![
        any::<String>(),
        vec(special, 0..40).prop_map(String::from_iter),
        ("[a-z]{0,1100}", "[\\x00-\\x7f]{0,3}").prop_map(|(a, b)| a + &b),
    ]
}

/// Floats, with the extremes and the values whose notation changes.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        -1e6..1e6_f64,
        prop::sample::select(vec![
            -0.0,
            5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            1e16,
            1e15,
            1e-7
        ]),
    ]
}

/// Nested JSON values of every kind.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX)].prop_map(Value::from),
        prop_oneof![any::<u64>(), Just(u64::MAX)].prop_map(Value::from),
        float().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(text(), inner, 0..6).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A failure whose texts are `t` (at least four).
fn failure(t: &[String], at: DateTime<Utc>, code: i32) -> FailureDetail {
    FailureDetail {
        attempt_number: code.unsigned_abs(),
        timestamp: at,
        error_type: if code % 2 == 0 {
            ErrorType::CommandFailed { exit_code: code }
        } else {
            ErrorType::Timeout
        },
        error_message: t[0].clone(),
        stack_trace: Some(t[1].clone()),
        agent_id: t[2].clone(),
        step_failed: t[3].clone(),
        duration_ms: u64::from(code.unsigned_abs()),
        json_log_location: None,
    }
}

/// The event kind `which` (0..12), its texts from `t` (eight) and its values `v` (two).
fn kind(which: usize, t: &[String], v: &[Value], at: DateTime<Utc>, n: u32) -> EventKind {
    let by = Some(RemovedBy {
        name: t[4].clone(),
        reason: Some(t[5].clone()),
    });
    let artifacts = WorktreeArtifacts {
        worktree_path: t[4].clone(),
        branch_name: t[5].clone(),
        uncommitted_changes: Some(t[6].clone()),
        error_logs: None,
    };
    let item_id = t[7].clone();
    match which {
        0 | 1 => {
            let mut item = crate::testing::item(&t[6], &t[7]);
            item.item_data = v[0].clone();
            item.failure_history = vec![failure(t, at, n as i32), failure(&t[4..], at, -1)];
            item.worktree_artifacts = (which == 1).then_some(artifacts);
            item.redrive = (which == 1).then(|| Redrive {
                generation: n,
                state: RedriveState::Failed,
                at,
                error: Some(t[3].clone()),
            });
            EventKind::DeadLettered { item: item.into() }
        }
        2 => EventKind::FailureAppended {
            item_id,
            failures: vec![failure(&t[2..], at, 4)],
            attempts: n,
            last_attempt: at,
            error_signature: t[0].clone(),
            error_pattern: t[1].clone(),
            reprocess_eligible: n.is_multiple_of(2),
            manual_review_required: true,
            worktree_artifacts: Some(artifacts),
        },
        3 => EventKind::ItemRemoved {
            item_id,
            reason: RemovalReason::Deleted,
            removed_by: by,
            generation: Some(n),
        },
        4 => EventKind::ItemRemoved {
            item_id,
            reason: RemovalReason::Resolved,
            removed_by: None,
            generation: None,
        },
        5 => EventKind::Redriven {
            item_id,
            generation: n,
            target: RedriveTarget::Runner,
            by,
        },
        6 => EventKind::RedriveFailed {
            item_id,
            generation: n,
            error: t[0].clone(),
        },
        7 => EventKind::ItemEdited {
            item_id,
            patch: v[0].clone(),
            previous: v[1].clone(),
            by,
        },
        8 => EventKind::FlagsUpdated {
            item_id,
            reprocess_eligible: Some(true),
            manual_review_required: None,
        },
        9 => EventKind::EmitFailed {
            failed_event_id: t[0].clone(),
            attempts: n,
            error: t[1].clone(),
        },
        10 => EventKind::Held {
            held_event_id: t[0].clone(),
            held_kind: t[1].clone(),
            item_id: Some(item_id),
            held_reason: t[2].clone(),
            size_bytes: u64::from(n),
        },
        _ => EventKind::Lost {
            lost_reason: t[0].clone(),
        },
    }
}

/// Events of every kind, with arbitrary texts and values.
fn event() -> impl Strategy<Value = Event> {
    let at = (0_i64..4_102_444_800, 0_u32..1_000_000_000)
        .prop_map(|(secs, nanos)| DateTime::from_timestamp(secs, nanos).unwrap());
    (
        0_usize..12,
        vec(text(), 12),
        vec(value(), 2),
        at,
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(which, t, v, at, n, seq)| Event {
            event_id: t[8].clone(),
            node_id: t[9].clone(),
            seq,
            epoch: (!n.is_multiple_of(3)).then(|| t[10].clone()),
            prev_epoch: n.is_multiple_of(5).then(|| t[11].clone()),
            prev_seq: n.is_multiple_of(2).then_some(seq / 2),
            timestamp: at,
            job_id: t[10].clone(),
            topic: t[11].clone(),
            kind: kind(which, &t, &v, at, n),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn values_are_written_as_serde_json_writes_them(value in value()) {
        let (fast, slow) = both(&value);
        prop_assert_eq!(fast, Ok(slow));
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them(
        numbers in (any::<f32>(), float(), any::<i128>(), any::<u128>(), any::<i64>(), any::<u8>()),
    ) {
        let (fast, slow) = both(&numbers);
        prop_assert_eq!(fast, Ok(slow));
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them(text in text()) {
        let (fast, slow) = both(&text);
        prop_assert_eq!(fast, Ok(slow));
    }

    #[test]
    fn events_are_written_as_serde_json_writes_them_and_read_back(event in event()) {
        let (fast, slow) = both(&event);
        prop_assert_eq!(fast, Ok(slow.clone()), "the fast writer, without the fallback");
        let json = event.to_json().unwrap();
        prop_assert_eq!(&json, slow.as_bytes());
        prop_assert_eq!(Event::from_json(&json).unwrap(), event);
    }
}
