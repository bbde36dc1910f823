//! JSON kept as written: a raw value (a tool call's input, byte for byte) and the unknown keys
//! of an object (written back in their order).

use super::*;
use crate::format::cold::Cold;

/// A JSON value kept as its exact text (a tool call's `input`, a boundary's payload).
#[derive(Clone)]
pub struct RawJson(pub(super) Box<RawValue>);

impl RawJson {
    /// The compact text of a value.
    pub fn from_value(v: &Value) -> RawJson {
        // A `Value` always serializes.
        RawJson(serde_json::value::to_raw_value(v).unwrap_or_else(|_| null_raw()))
    }

    /// Text that must be valid JSON; `None` when it is not.
    pub fn from_text(text: &str) -> Option<RawJson> {
        RawValue::from_string(text.to_string()).ok().map(RawJson)
    }

    /// The text as stored.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value the text holds.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

pub(super) fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_string()).expect("`null` is JSON")
}

impl Default for RawJson {
    fn default() -> RawJson {
        RawJson(null_raw())
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(RawJson)
    }
}

/// The fields of an object that its type does not know, in order, written back unchanged.
///
/// Almost always empty: then it holds no map, only a null pointer (an empty `Map` takes 72
/// bytes, and a large transcript has one per record, message and content item). Fields read
/// from a transcript line are kept as the compact text of an object holding them (read as
/// values first, so that a line is checked as before), and made a map only when asked
/// for: real transcripts carry a few on every record (`cwd`, `version`, …), which as maps
/// took some 700 bytes a record.
#[derive(Clone, Default)]
pub struct Extra(Option<Box<ExtraFields>>);

#[derive(Clone)]
struct ExtraFields {
    /// `{"key":value,…}`, compact, until a map is asked for (moved to a mount's store of
    /// cold bytes for a large transcript, see [`crate::format::cold`]).
    text: Option<Cold>,
    /// Boxed: unmade on almost every record.
    map: std::sync::OnceLock<Box<Map<String, Value>>>,
}

impl Extra {
    /// Whether there is no unknown field (a deref of an empty `Extra` is the empty map).
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            None => true,
            Some(f) => f.text.is_none() && f.map.get().is_none_or(|m| m.is_empty()),
        }
    }
}

/// The unknown fields of an object being read, gathered as text (see [`Extra`]).
#[derive(Default)]
pub(super) struct ExtraText(Vec<u8>);

impl ExtraText {
    /// Add a field.
    pub(super) fn push(&mut self, key: &str, value: &Value) {
        self.0.push(if self.0.is_empty() { b'{' } else { b',' });
        // Writing a string or a value to a vector cannot fail.
        let _ = serde_json::to_writer(&mut self.0, key);
        self.0.push(b':');
        let _ = serde_json::to_writer(&mut self.0, value);
    }

    pub(super) fn finish(mut self) -> Extra {
        if self.0.is_empty() {
            return Extra::default();
        }
        self.0.push(b'}');
        Extra(Some(Box::new(ExtraFields {
            text: Some(Cold::Mem(self.0.into_boxed_slice())),
            map: std::sync::OnceLock::new(),
        })))
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl From<Map<String, Value>> for Extra {
    fn from(m: Map<String, Value>) -> Extra {
        Extra((!m.is_empty()).then(|| {
            Box::new(ExtraFields {
                text: None,
                map: std::sync::OnceLock::from(Box::new(m)),
            })
        }))
    }
}

impl std::ops::Deref for Extra {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        match &self.0 {
            Some(f) => f.map.get_or_init(|| {
                // The text was read as JSON values under escaped keys: it parses.
                Box::new(parse_text(f.text.as_ref()))
            }),
            None => EMPTY.get_or_init(Map::new),
        }
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        let map = std::mem::take(&mut *self).into_map();
        let f = self.0.insert(Box::new(ExtraFields {
            text: None,
            map: std::sync::OnceLock::from(Box::new(map)),
        }));
        f.map.get_mut().expect("the map was set just above")
    }
}

impl Extra {
    fn into_map(self) -> Map<String, Value> {
        match self.0 {
            None => Map::new(),
            Some(f) => {
                let f = *f;
                match f.map.into_inner() {
                    Some(m) => *m,
                    None => parse_text(f.text.as_ref()),
                }
            }
        }
    }
}

impl Extra {
    /// The unknown fields' text while no map was made of it: what a store of cold bytes
    /// may take.
    pub(crate) fn cold_mut(&mut self) -> Option<&mut Cold> {
        let f = self.0.as_deref_mut()?;
        if f.map.get().is_some() {
            return None;
        }
        f.text.as_mut()
    }
}

/// The map of an `Extra`'s text.
fn parse_text(text: Option<&Cold>) -> Map<String, Value> {
    text.and_then(|t| serde_json::from_slice(&t.bytes()).ok())
        .unwrap_or_default()
}

impl PartialEq for Extra {
    fn eq(&self, other: &Extra) -> bool {
        **self == **other
    }
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Map::deserialize(d).map(Extra::from)
    }
}
