//! Reading state.json as the runtime's Go decoder does: the input it accepts that serde_json
//! does not (invalid UTF-8, lone surrogates), and decoding into existing values (case-folded
//! keys, wrong types reported by key path).

use super::*;

// ---- input accepted by Go but not by serde_json ----

/// The text Go's decoder would see: inside strings, Go turns each byte of invalid UTF-8 and
/// each lone surrogate escape into U+FFFD; serde_json refuses both. Copies only when needed.
pub(super) fn go_tolerant(bytes: &[u8]) -> Cow<'_, [u8]> {
    let mut text = match std::str::from_utf8(bytes) {
        Ok(_) => Cow::Borrowed(bytes),
        Err(_) => Cow::Owned(replace_invalid_utf8(bytes)),
    };
    let lone = lone_surrogate_escapes(&text);
    if !lone.is_empty() {
        let owned = text.to_mut();
        for at in lone {
            // `\uXXXX` and `\ufffd` have the same length.
            if let Some(escape) = owned.get_mut(at..at + 6) {
                escape.copy_from_slice(b"\\ufffd");
            }
        }
    }
    text
}

/// Each invalid byte becomes U+FFFD on its own, as Go's `utf8.DecodeRune` reads it. (Outside
/// strings such a byte is a syntax error for Go, and U+FFFD is one for serde_json.)
pub(super) fn replace_invalid_utf8(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rest.len() + 16);
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.extend_from_slice(valid.as_bytes());
                return out;
            }
            Err(e) => {
                let (valid, bad) = rest.split_at(e.valid_up_to());
                out.extend_from_slice(valid);
                out.extend_from_slice("\u{fffd}".as_bytes());
                rest = bad.get(1..).unwrap_or_default();
            }
        }
    }
}

/// Offsets of the `\uXXXX` escapes inside strings that are a surrogate without its partner.
pub(super) fn lone_surrogate_escapes(b: &[u8]) -> Vec<usize> {
    let is_high = |u: u32| (0xd800..0xdc00).contains(&u);
    let is_low = |u: u32| (0xdc00..0xe000).contains(&u);
    let mut found = Vec::new();
    let mut i = 0;
    'strings: while let Some(open) = b.get(i..).and_then(|rest| memchr::memchr(b'"', rest)) {
        i += open + 1;
        loop {
            let Some(j) = b
                .get(i..)
                .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
            else {
                break 'strings;
            };
            i += j;
            if b[i] == b'"' {
                i += 1;
                continue 'strings;
            }
            match unicode_escape(b, i) {
                Some(u) if is_high(u) && unicode_escape(b, i + 6).is_some_and(is_low) => i += 12,
                Some(u) if is_high(u) || is_low(u) => {
                    found.push(i);
                    i += 6;
                }
                Some(_) => i += 6,
                None => i += 2,
            }
        }
    }
    found
}

/// The code unit of a `\uXXXX` escape starting at `at`.
pub(super) fn unicode_escape(b: &[u8], at: usize) -> Option<u32> {
    let escape = b.get(at..at + 6)?;
    if &escape[..2] != b"\\u" {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u32::from_str_radix(hex, 16).ok()
}

// ---- decoding into existing values, as Go's decoder does ----

/// Where a value sits in the file, for error messages: `blocks[2].tier`.
#[derive(Clone, Copy)]
pub(super) enum KeyPath<'a> {
    Root,
    Key(&'a KeyPath<'a>, &'a str),
    Index(&'a KeyPath<'a>, usize),
}

impl fmt::Display for KeyPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPath::Root => f.write_str("the top level"),
            KeyPath::Key(KeyPath::Root, k) => f.write_str(k),
            KeyPath::Key(parent, k) => write!(f, "{parent}.{k}"),
            KeyPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// A value that one JSON value decodes into, over what it already holds.
pub(super) trait Slot {
    fn decode<'de, D: Deserializer<'de>>(
        &mut self,
        d: D,
        path: KeyPath<'_>,
    ) -> Result<(), D::Error>;
}

/// One JSON value decoding into `slot`; `path` names it in error messages. As a seed it
/// decodes a map value or an element; as a visitor it is what each [`Slot`] type accepts.
pub(super) struct Fill<'s, 'p, T> {
    pub(super) slot: &'s mut T,
    pub(super) path: KeyPath<'p>,
}

impl<'de, T: Slot> DeserializeSeed<'de> for Fill<'_, '_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.slot.decode(d, self.path)
    }
}

/// Decodes the next map value into `slot`.
pub(super) fn next_into<'de, A: MapAccess<'de>, T: Slot>(
    map: &mut A,
    slot: &mut T,
    path: KeyPath<'_>,
) -> Result<(), A::Error> {
    map.next_value_seed(Fill { slot, path })
}

/// A string value in an error message, cut short: the message stays one short line.
pub(super) fn wrong_string<E: de::Error>(s: &str, expected: &dyn de::Expected) -> E {
    pub(super) const SHOWN: usize = 40;
    let mut shown: String = s.chars().take(SHOWN).collect();
    if s.chars().nth(SHOWN).is_some() {
        shown.push('…');
    }
    E::invalid_type(Unexpected::Str(&shown), expected)
}

/// Makes each listed type a [`Slot`] decoded by its [`Fill`], and that `Fill` a [`Visitor`]:
/// `[generics] Type, Type => "what it expects" { visit methods }`. Every visitor says what it
/// expects the same way, and the types of one entry share its visit methods.
macro_rules! slots {
    ($($generics:tt $($ty:ty),+ => $what:literal $visits:tt)*) => {
        $($(slots!(@one $generics $ty, $what, $visits);)+)*
    };
    (@one [$($generics:tt)*] $ty:ty, $what:literal, { $($visits:tt)* }) => {
        impl<'de, $($generics)*> Visitor<'de> for Fill<'_, '_, $ty> {
            type Value = ();

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($what, " for {}"), self.path)
            }

            $($visits)*
        }

        impl<$($generics)*> Slot for $ty {
            fn decode<'de, D: Deserializer<'de>>(
                &mut self,
                d: D,
                path: KeyPath<'_>,
            ) -> Result<(), D::Error> {
                d.deserialize_any(Fill { slot: self, path })
            }
        }
    };
}

slots! {
    [] i64 => "a 64-bit integer" {
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
            *self.slot = v;
            Ok(())
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
            match i64::try_from(v) {
                Ok(v) => {
                    *self.slot = v;
                    Ok(())
                }
                Err(_) => Err(E::invalid_value(Unexpected::Unsigned(v), &self)),
            }
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(wrong_string(v, &self))
        }
    }

    [] bool => "true or false" {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
            *self.slot = v;
            Ok(())
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(wrong_string(v, &self))
        }
    }

    [] String => "a string" {
        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            v.clone_into(self.slot);
            Ok(())
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
            *self.slot = v;
            Ok(())
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
    }

    // A Go slice: `None` is nil. Elements decode over the ones already there; the list ends
    // up as long as the JSON array.
    [T: Slot + Default] Option<Vec<T>> => "an array" {
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            *self.slot = None;
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let list = self.slot.get_or_insert_with(Vec::new);
            let mut index = 0;
            loop {
                let seed = ElementSeed {
                    list: &mut *list,
                    index,
                    path: KeyPath::Index(&self.path, index),
                };
                if seq.next_element_seed(seed)?.is_none() {
                    break;
                }
                index += 1;
            }
            list.truncate(index);
            Ok(())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(wrong_string(v, &self))
        }
    }

    // A Go map with string keys: `null` empties it; an object adds its entries, each value
    // decoded from zero (a `null` value stores the zero value).
    [V: Slot + Default] HashMap<String, V>, FastMap<String, V>, BTreeMap<String, V> => "an object" {
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            self.slot.clear();
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                let mut value = V::default();
                next_into(&mut map, &mut value, KeyPath::Key(&self.path, &key))?;
                self.slot.insert(key, value);
            }
            Ok(())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(wrong_string(v, &self))
        }
    }

    // Known keys decode into their fields, the others are kept as values. The top level
    // refuses `null` (Go would read it as an empty file of version 0).
    [R: Record] R => "an object" {
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            match self.path {
                KeyPath::Root => Err(E::invalid_type(Unexpected::Unit, &self)),
                _ => Ok(()),
            }
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match R::FIELDS.iter().find(|f| go_fold_eq(&key, f)) {
                    Some(field) => self
                        .slot
                        .field(field, &mut map, KeyPath::Key(&self.path, &key))?,
                    None => {
                        let value: Value = map.next_value()?;
                        self.slot.extra_mut().insert(key, value);
                    }
                }
            }
            Ok(())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(wrong_string(v, &self))
        }
    }
}

/// One element of a Go slice: decodes over the element at `index`, or a new zero one past the
/// end.
pub(super) struct ElementSeed<'s, 'p, T> {
    pub(super) list: &'s mut Vec<T>,
    pub(super) index: usize,
    pub(super) path: KeyPath<'p>,
}

impl<'de, T: Slot + Default> DeserializeSeed<'de> for ElementSeed<'_, '_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.index >= self.list.len() {
            self.list.push(T::default());
        }
        match self.list.get_mut(self.index) {
            Some(element) => element.decode(d, self.path),
            None => Err(de::Error::custom("list index out of step")),
        }
    }
}

/// Nil and empty mean the same for these lists (`omitempty` writes neither).
impl<T: Slot + Default> Slot for Vec<T> {
    fn decode<'de, D: Deserializer<'de>>(
        &mut self,
        d: D,
        path: KeyPath<'_>,
    ) -> Result<(), D::Error> {
        let mut list = Some(std::mem::take(self));
        list.decode(d, path)?;
        *self = list.unwrap_or_default();
        Ok(())
    }
}

/// A Go struct with JSON field names, plus the unknown keys normafs keeps.
pub(super) trait Record {
    /// The JSON names of the fields, in the struct's order.
    const FIELDS: &'static [&'static str];
    fn extra_mut(&mut self) -> &mut Map<String, Value>;
    /// Decodes the next map value into the field named `field` (one of [`Record::FIELDS`]).
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        field: &str,
        map: &mut A,
        path: KeyPath<'_>,
    ) -> Result<(), A::Error>;
}

/// Whether Go's decoder matches the JSON key `key` to the field named `field` (ASCII): equal
/// after folding case, where U+212A and U+017F fold to `K` and `S`.
pub(super) fn go_fold_eq(key: &str, field: &str) -> bool {
    let mut chars = key.chars();
    for f in field.bytes() {
        let folded = match chars.next() {
            Some('\u{212a}') => b'K',
            Some('\u{17f}') => b'S',
            Some(c) if c.is_ascii() => (c as u8).to_ascii_uppercase(),
            _ => return false,
        };
        if folded != f.to_ascii_uppercase() {
            return false;
        }
    }
    chars.next().is_none()
}

/// A [`Record`] from its fields, each a JSON name and the Rust field it decodes into, in the
/// struct's order (the names and the decoding come from one list).
macro_rules! record {
    ($ty:ty { $($json:literal => $field:ident),+ $(,)? }) => {
        impl Record for $ty {
            const FIELDS: &'static [&'static str] = &[$($json),+];

            fn extra_mut(&mut self) -> &mut Map<String, Value> {
                &mut self.extra
            }

            fn field<'de, A: MapAccess<'de>>(
                &mut self,
                field: &str,
                map: &mut A,
                path: KeyPath<'_>,
            ) -> Result<(), A::Error> {
                match field {
                    $($json => next_into(map, &mut self.$field, path),)+
                    _ => map.next_value::<de::IgnoredAny>().map(drop),
                }
            }
        }
    };
}

record!(State {
    "version" => version,
    "sessionId" => session_id,
    "nextBlockId" => next_block_id,
    "blocks" => blocks,
    "messageRefs" => message_refs,
    "tokenSnapshot" => token_snapshot,
    "nudge" => nudge,
    "stats" => stats,
    "derivedFrom" => derived_from,
});

/// A record decoded as the one it wraps, the fields named in `PAST` read past (as JSON
/// only), the others by [`ReadsPast::other_field`].
pub(super) trait ReadsPast {
    type Inner: Record;
    const PAST: &'static [&'static str];

    fn inner(&mut self) -> &mut Self::Inner;

    fn other_field<'de, A: MapAccess<'de>>(
        &mut self,
        field: &str,
        map: &mut A,
        path: KeyPath<'_>,
    ) -> Result<(), A::Error> {
        self.inner().field(field, map, path)
    }
}

impl<T: ReadsPast> Record for T {
    const FIELDS: &'static [&'static str] = T::Inner::FIELDS;

    fn extra_mut(&mut self) -> &mut Map<String, Value> {
        self.inner().extra_mut()
    }

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        field: &str,
        map: &mut A,
        path: KeyPath<'_>,
    ) -> Result<(), A::Error> {
        if T::PAST.contains(&field) {
            return map.next_value::<de::IgnoredAny>().map(drop);
        }
        self.other_field(field, map, path)
    }
}

/// A state decoded for where its blocks' archives are: its ref maps and token snapshot, and
/// its blocks' message ids, topics and summaries, are read past (a long session's maps hold
/// an entry per message and its blocks' lists as many, and a replay needs only where its
/// state keeps the blocks' archives).
pub(super) struct BlocksOf(pub(super) State);

impl ReadsPast for BlocksOf {
    type Inner = State;
    const PAST: &'static [&'static str] = &["messageRefs", "tokenSnapshot"];

    fn inner(&mut self) -> &mut State {
        &mut self.0
    }

    fn other_field<'de, A: MapAccess<'de>>(
        &mut self,
        field: &str,
        map: &mut A,
        path: KeyPath<'_>,
    ) -> Result<(), A::Error> {
        if field != "blocks" {
            return self.0.field(field, map, path);
        }
        // Over the blocks decoded so far, as Go decodes a repeated key.
        let blocks = self.0.blocks.take();
        let mut places: Option<Vec<PlaceOf>> = blocks.map(|b| b.into_iter().map(PlaceOf).collect());
        let decoded = next_into(map, &mut places, path);
        self.0.blocks = places.map(|p| p.into_iter().map(|p| p.0).collect());
        decoded
    }
}

/// A block decoded for its archive's place (see [`BlocksOf`]).
#[derive(Default)]
struct PlaceOf(Block);

impl ReadsPast for PlaceOf {
    type Inner = Block;
    const PAST: &'static [&'static str] = &[
        "directMessageIds",
        "effectiveMessageIds",
        "topic",
        "summary",
    ];

    fn inner(&mut self) -> &mut Block {
        &mut self.0
    }
}

record!(Block {
    "blockId" => block_id,
    "tier" => tier,
    "topic" => topic,
    "summary" => summary,
    "directMessageIds" => direct_message_ids,
    "effectiveMessageIds" => effective_message_ids,
    "directBlockIds" => direct_block_ids,
    "archivePath" => archive_path,
    "archiveRel" => archive_rel,
    "compressedTokens" => compressed_tokens,
    "startRef" => start_ref,
    "endRef" => end_ref,
    "createdAt" => created_at,
    "active" => active,
    "compressCallId" => compress_call_id,
});

record!(MessageRefs {
    "byRaw" => by_raw,
    "byRef" => by_ref,
});

record!(NudgeState {
    "lastPerMessageNudgeTokens" => last_per_message_nudge_tokens,
    "lastNudgeShownTokens" => last_nudge_shown_tokens,
    "lastShownByTier" => last_shown_by_tier,
});

record!(Stats {
    "tokensCompressed" => tokens_compressed,
    "compressionCount" => compression_count,
});

impl Slot for super::RefMap {
    fn decode<'de, D: Deserializer<'de>>(
        &mut self,
        d: D,
        path: KeyPath<'_>,
    ) -> Result<(), D::Error> {
        self.to_mut().decode(d, path)
    }
}
