//! A compact JSON writer that writes the same bytes as `serde_json::to_writer`, faster.
//!
//! serde_json escapes strings one byte at a time through a lookup table; an event's strings
//! (a ~1 KiB `item_data` blob, failure texts) are nearly all plain. [`write`] tests eight bytes
//! at a time for a byte that needs escaping and copies clean runs whole. Numbers go through
//! the formatters serde_json itself uses: `itoa` for integers, `zmij` for floats (serde_json
//! 1.0.154 no longer uses `ryu`, whose exponents lack the `+`).
//!
//! What it cannot reproduce exactly it refuses with [`Unsupported`], and the caller encodes
//! with serde_json instead: map keys that are not strings, serde_json's private struct tokens
//! (`RawValue`, `arbitrary_precision` numbers), and any error a `Serialize` impl raises.

use std::fmt;

use serde::ser::{self, Serialize};

/// The value is not one [`write`] writes exactly as serde_json does: encode it with serde_json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not written by the fast JSON writer")]
pub(crate) struct Unsupported;

/// What the writer's methods return.
type Res<T = ()> = Result<T, Unsupported>;

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Unsupported
    }
}

/// Appends `value` to `out` as `serde_json::to_writer` would (compact). On `Unsupported`, `out`
/// holds a partial value: truncate it.
pub(crate) fn write(value: &impl Serialize, out: &mut Vec<u8>) -> Res {
    let mut writer = Writer(std::mem::take(out));
    let written = value.serialize(&mut writer);
    *out = writer.0;
    written
}

/// The serializer: the buffer being written.
struct Writer(Vec<u8>);

/// `0x01` in every byte of a word.
const ONES: u64 = u64::from_ne_bytes([1; 8]);
/// The high bit of every byte of a word.
const HIGH: u64 = ONES * 0x80;

/// The high bits of the bytes of `word` (little-endian) that a JSON string must escape:
/// `< 0x20`, `"` and `\`. Zero if none; otherwise the lowest set bit marks the first exactly
/// (the subtractions borrow upwards only, so a false mark lies above a true one).
fn specials(word: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    control | zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')))
}

/// The position of the first byte of `bytes` that a JSON string must escape, eight at a time.
fn find_special(bytes: &[u8]) -> Option<usize> {
    let first = |word: u64| match specials(word) {
        0 => None,
        found => Some((found.trailing_zeros() / 8) as usize),
    };
    let (words, tail) = bytes.as_chunks::<8>();
    for (index, word) in words.iter().enumerate() {
        if let Some(at) = first(u64::from_le_bytes(*word)) {
            return Some(index * 8 + at);
        }
    }
    // The tail (under eight bytes) in the low bytes of a word of spaces, which need no escape.
    let spaces = u64::from_le_bytes([b' '; 8]);
    let last = tail
        .iter()
        .rev()
        .fold(spaces, |word, &byte| word << 8 | u64::from(byte));
    first(last).map(|at| words.len() * 8 + at)
}

/// Appends `text` as a JSON string, escaped as serde_json escapes.
fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    match find_special(bytes) {
        None => out.extend_from_slice(bytes),
        Some(at) => write_escaped(out, bytes, at),
    }
    out.push(b'"');
}

/// Appends `rest`, whose first special byte is at `first`, escaped: runs without a special
/// byte are copied whole. Apart, so that the common path (nothing to escape) stays small.
#[inline(never)]
fn write_escaped(out: &mut Vec<u8>, mut rest: &[u8], first: usize) {
    let mut next = Some(first);
    while let Some((run, special)) = next.and_then(|at| rest.split_at_checked(at)) {
        let Some((&byte, after)) = special.split_first() else {
            break;
        };
        out.extend_from_slice(run);
        escape(out, byte);
        rest = after;
        next = find_special(rest);
    }
    out.extend_from_slice(rest);
}

/// Appends `byte` escaped as serde_json escapes it (any other byte as is).
fn escape(out: &mut Vec<u8>, byte: u8) {
    let short = match byte {
        b'"' | b'\\' => byte,
        0x08 => b'b',
        b'\t' => b't',
        b'\n' => b'n',
        0x0c => b'f',
        b'\r' => b'r',
        0x00..=0x1f => {
            // `\u00XX` in lowercase hex; the high digit is 0 or 1.
            let hex = |n: u8| n + if n < 10 { b'0' } else { b'a' - 10 };
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[hex(byte >> 4), hex(byte & 0xf)]);
            return;
        }
        _ => {
            out.push(byte);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

impl Writer {
    /// Appends `text` as is.
    fn raw(&mut self, text: &[u8]) -> Res {
        self.0.extend_from_slice(text);
        Ok(())
    }

    /// Appends an integer, formatted by `itoa` as serde_json does.
    fn integer(&mut self, value: impl itoa::Integer) -> Res {
        self.raw(itoa::Buffer::new().format(value).as_bytes())
    }

    /// Appends a float as serde_json does: `zmij` when finite, `null` otherwise.
    fn float(&mut self, value: impl zmij::Float, finite: bool) -> Res {
        if finite {
            self.raw(zmij::Buffer::new().format_finite(value).as_bytes())
        } else {
            self.raw(b"null")
        }
    }

    /// Opens an array or object (`open`); empty (`len == Some(0)`) closes it at once.
    fn open<'a>(&'a mut self, open: u8, close: u8, len: Option<usize>) -> Group<'a> {
        self.0.push(open);
        let state = match len {
            Some(0) => {
                self.0.push(close);
                State::Empty
            }
            _ => State::First,
        };
        Group { w: self, state }
    }

    /// Opens `{"variant":` around an enum variant's content.
    fn variant(&mut self, variant: &str) {
        self.0.push(b'{');
        write_str(&mut self.0, variant);
        self.0.push(b':');
    }
}

/// An array or object being written.
struct Group<'a> {
    w: &'a mut Writer,
    state: State,
}

/// Where a [`Group`] is, as serde_json tracks it.
#[derive(PartialEq, Eq)]
enum State {
    /// Opened and closed at once (declared empty).
    Empty,
    /// Nothing written yet.
    First,
    /// Something written: the next entry needs a comma.
    Rest,
}

impl Group<'_> {
    /// The comma before any entry but the first.
    fn separate(&mut self) {
        if self.state != State::First {
            self.w.0.push(b',');
        }
        self.state = State::Rest;
    }

    /// An array element, or a struct's field `key` and its value.
    fn entry<T: Serialize + ?Sized>(&mut self, key: Option<&str>, value: &T) -> Res {
        self.separate();
        if let Some(key) = key {
            write_str(&mut self.w.0, key);
            self.w.0.push(b':');
        }
        value.serialize(&mut *self.w)
    }

    /// Closes with `close` unless already closed (declared empty), then writes `then`.
    fn close(self, close: u8, then: &[u8]) -> Res {
        if self.state != State::Empty {
            self.w.0.push(close);
        }
        self.w.0.extend_from_slice(then);
        Ok(())
    }
}

/// Implements a serde compound trait with [`Group`]: elements, or fields (`key`).
macro_rules! compound {
    ($trait:ident::$method:ident($($key:ident)?), $close:literal $then:literal) => {
        impl ser::$trait for Group<'_> {
            type Ok = ();
            type Error = Unsupported;

            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($key: &'static str,)?
                value: &T,
            ) -> Res {
                self.entry(None $(.or(Some($key)))?, value)
            }

            fn end(self) -> Res {
                self.close($close, $then)
            }
        }
    };
}

compound!(SerializeSeq::serialize_element(), b']' b"");
compound!(SerializeTuple::serialize_element(), b']' b"");
compound!(SerializeTupleStruct::serialize_field(), b']' b"");
compound!(SerializeTupleVariant::serialize_field(), b']' b"}");
compound!(SerializeStruct::serialize_field(key), b'}' b"");
compound!(SerializeStructVariant::serialize_field(key), b'}' b"}");

impl ser::SerializeMap for Group<'_> {
    type Ok = ();
    type Error = Unsupported;

    /// An object key: written by the value writer, and kept only if that wrote a string. A
    /// `Serialize` impl makes one call, and the only ones that write a string (`str`, `char`,
    /// unit variant, `collect_str`, through newtypes and `Some`) write the same as serde_json's
    /// key serializer; other keys it quotes or refuses, so they are `Unsupported`.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        self.separate();
        let start = self.w.0.len();
        key.serialize(&mut *self.w)?;
        match self.w.0.get(start) {
            Some(b'"') => {
                self.w.0.push(b':');
                Ok(())
            }
            _ => Err(Unsupported),
        }
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        value.serialize(&mut *self.w)
    }

    fn end(self) -> Res {
        self.close(b'}', b"")
    }
}

/// The `serialize_*` methods of integers: `itoa`, as serde_json writes them.
macro_rules! integers {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Res {
            self.integer(v)
        })*
    };
}

/// Each method writes what serde_json's `Serializer` with its `CompactFormatter` writes.
impl<'a> ser::Serializer for &'a mut Writer {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Group<'a>;
    type SerializeTuple = Group<'a>;
    type SerializeTupleStruct = Group<'a>;
    type SerializeTupleVariant = Group<'a>;
    type SerializeMap = Group<'a>;
    type SerializeStruct = Group<'a>;
    type SerializeStructVariant = Group<'a>;

    fn serialize_bool(self, v: bool) -> Res {
        self.raw(if v { b"true" } else { b"false" })
    }
    integers! {
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128,
    }
    fn serialize_f32(self, v: f32) -> Res {
        self.float(v, v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Res {
        self.float(v, v.is_finite())
    }
    fn serialize_char(self, v: char) -> Res {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Res {
        write_str(&mut self.0, v);
        Ok(())
    }
    /// An array of numbers, as serde_json's formatter writes bytes.
    fn serialize_bytes(self, v: &[u8]) -> Res {
        let mut array = self.open(b'[', b']', Some(v.len()));
        v.iter().try_for_each(|byte| array.entry(None, byte))?;
        array.close(b']', b"")
    }
    fn serialize_none(self) -> Res {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Res {
        self.raw(b"null")
    }
    fn serialize_unit_struct(self, _: &str) -> Res {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &str, _: u32, name: &str) -> Res {
        self.serialize_str(name)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &str, value: &T) -> Res {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: u32,
        name: &str,
        value: &T,
    ) -> Res {
        self.variant(name);
        value.serialize(&mut *self)?;
        self.0.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, len: Option<usize>) -> Res<Group<'a>> {
        Ok(self.open(b'[', b']', len))
    }
    fn serialize_tuple(self, len: usize) -> Res<Group<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &str, len: usize) -> Res<Group<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(self, _: &str, _: u32, name: &str, len: usize) -> Res<Group<'a>> {
        self.variant(name);
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, len: Option<usize>) -> Res<Group<'a>> {
        Ok(self.open(b'{', b'}', len))
    }
    /// serde_json's private tokens (`RawValue`, `arbitrary_precision` numbers) are refused.
    fn serialize_struct(self, name: &'static str, len: usize) -> Res<Group<'a>> {
        if name.starts_with("$serde_json") {
            return Err(Unsupported);
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(self, _: &str, _: u32, name: &str, len: usize) -> Res<Group<'a>> {
        self.variant(name);
        self.serialize_map(Some(len))
    }
}

#[cfg(test)]
mod tests;
