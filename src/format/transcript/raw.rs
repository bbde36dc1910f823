//! JSON kept as written: a raw value (a tool call's input, byte for byte) and the unknown keys
//! of an object (written back in their order).

use super::*;

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
/// bytes, and a large transcript has one per record, message and content item).
#[derive(Debug, Clone, Default)]
pub struct Extra(Option<Box<Map<String, Value>>>);

impl Extra {
    /// Whether there is no unknown field (a deref of an empty `Extra` is the empty map).
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }
}

impl From<Map<String, Value>> for Extra {
    fn from(m: Map<String, Value>) -> Extra {
        Extra((!m.is_empty()).then(|| Box::new(m)))
    }
}

impl std::ops::Deref for Extra {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        match &self.0 {
            Some(m) => m,
            None => EMPTY.get_or_init(Map::new),
        }
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.0.get_or_insert_with(Box::default)
    }
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
