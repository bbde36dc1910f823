//! Settings' values: what a source gave (a flag, an `-o` key, a TOML value), the kinds a key
//! takes, and the conversion of a value into each setting's type.

use super::*;

/// A value as a source gave it: its type is checked, its range is not yet.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    /// `min_benefit_tokens = "auto"`: the computed default.
    Auto,
    Word(String),
    List(Vec<String>),
}

/// The type of a key, which decides how its value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A non-negative integer.
    Count,
    /// A number; an integer is taken as one.
    Number,
    /// A count, or `auto` for the computed default.
    CountOrAuto,
    /// Names: a TOML array of strings; in `-o` and flags separated by `:` or repeated.
    List,
    /// One of a few words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// The placeholder shown in `--help`.
    pub fn value_name(self) -> String {
        match self {
            Kind::Count => "N".into(),
            Kind::Number => "X".into(),
            Kind::CountOrAuto => "N|auto".into(),
            Kind::List => "NAME[:NAME…]".into(),
            Kind::Choice(words) => words.join("|"),
        }
    }

    /// Whether values from one `-o`/flag source add up rather than replace each other.
    pub fn accumulates(self) -> bool {
        self == Kind::List
    }

    pub(super) fn expected(self) -> String {
        match self {
            Kind::Count => "an integer".into(),
            Kind::Number => "a number".into(),
            Kind::CountOrAuto => "an integer or \"auto\"".into(),
            Kind::List => "an array of strings".into(),
            Kind::Choice(words) => one_of(words),
        }
    }

    /// A value written as text, as `-o` and flags give it.
    pub fn parse(self, text: &str) -> Result<Value, TextValueError> {
        let t = text.trim();
        let bad = || TextValueError {
            text: t.to_string(),
            kind: self,
        };
        match self {
            Kind::Count => t.parse().map(Value::Int).map_err(|_| bad()),
            Kind::CountOrAuto if t == "auto" => Ok(Value::Auto),
            Kind::CountOrAuto => t.parse().map(Value::Int).map_err(|_| bad()),
            Kind::Number => t.parse().map(Value::Float).map_err(|_| bad()),
            Kind::List => Ok(Value::List(
                t.split(':')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            )),
            Kind::Choice(words) if words.contains(&t) => Ok(Value::Word(t.to_string())),
            Kind::Choice(_) => Err(bad()),
        }
    }

    pub(super) fn read_toml(self, v: &toml::Value) -> Result<Value, TomlValueError> {
        use toml::Value as T;
        let bad = || TomlValueError {
            kind: self,
            found: toml_type(v),
        };
        match (self, v) {
            (Kind::Count | Kind::CountOrAuto, T::Integer(i)) => Ok(Value::Int(*i)),
            (Kind::CountOrAuto, T::String(s)) if s == "auto" => Ok(Value::Auto),
            (Kind::Number, T::Float(x)) => Ok(Value::Float(*x)),
            (Kind::Number, T::Integer(i)) => Ok(Value::Float(*i as f64)),
            (Kind::List, T::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(String::from).ok_or_else(bad))
                .collect::<Result<_, _>>()
                .map(Value::List),
            (Kind::Choice(words), T::String(s)) if words.contains(&s.as_str()) => {
                Ok(Value::Word(s.clone()))
            }
            _ => Err(bad()),
        }
    }
}

pub(super) fn one_of(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    format!("one of {}", quoted.join(", "))
}

pub(super) fn toml_type(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("the string {s:?}"),
        toml::Value::Integer(i) => format!("the integer {i}"),
        toml::Value::Float(x) => format!("the number {x}"),
        other => format!("a {}", other.type_str()),
    }
}

/// A field type that settings can hold: its kind, how a checked value becomes it, how it shows.
pub(super) trait Setting: Sized {
    const KIND: Kind;
    /// `Err` says why the value is questionable; its type was checked when it was read.
    fn take(v: &Value) -> Result<Self, Questionable>;
    fn show(&self) -> Json;
}

pub(super) fn count_of<T: TryFrom<i64>>(v: &Value) -> Result<T, Questionable> {
    match v {
        Value::Int(i) if *i < 0 => Err(Questionable::Negative),
        Value::Int(i) => T::try_from(*i).map_err(|_| Questionable::TooLarge),
        _ => Err(Questionable::NotInteger),
    }
}

impl Setting for u64 {
    const KIND: Kind = Kind::Count;
    fn take(v: &Value) -> Result<Self, Questionable> {
        count_of(v)
    }
    fn show(&self) -> Json {
        json!(self)
    }
}

impl Setting for usize {
    const KIND: Kind = Kind::Count;
    fn take(v: &Value) -> Result<Self, Questionable> {
        count_of(v)
    }
    fn show(&self) -> Json {
        json!(self)
    }
}

impl Setting for u32 {
    const KIND: Kind = Kind::Count;
    fn take(v: &Value) -> Result<Self, Questionable> {
        count_of(v)
    }
    fn show(&self) -> Json {
        json!(self)
    }
}

impl Setting for f64 {
    const KIND: Kind = Kind::Number;
    fn take(v: &Value) -> Result<Self, Questionable> {
        match v {
            Value::Float(x) => Ok(*x),
            Value::Int(i) => Ok(*i as f64),
            _ => Err(Questionable::NotNumber),
        }
    }
    fn show(&self) -> Json {
        // serde_json writes a non-finite number as null; say what it was instead.
        if self.is_finite() {
            json!(self)
        } else {
            json!(self.to_string())
        }
    }
}

impl Setting for Option<u64> {
    const KIND: Kind = Kind::CountOrAuto;
    fn take(v: &Value) -> Result<Self, Questionable> {
        match v {
            Value::Auto => Ok(None),
            other => count_of(other).map(Some),
        }
    }
    fn show(&self) -> Json {
        match self {
            Some(n) => json!(n),
            None => json!("auto"),
        }
    }
}

impl Setting for Vec<String> {
    const KIND: Kind = Kind::List;
    fn take(v: &Value) -> Result<Self, Questionable> {
        match v {
            Value::List(items) => Ok(items.clone()),
            _ => Err(Questionable::NotList),
        }
    }
    fn show(&self) -> Json {
        json!(self)
    }
}

impl Setting for ArchivePaths {
    const KIND: Kind = Kind::Choice(ArchivePaths::WORDS);
    fn take(v: &Value) -> Result<Self, Questionable> {
        match v {
            Value::Word(w) => {
                ArchivePaths::from_word(w).ok_or(Questionable::NotOneOf(ArchivePaths::WORDS))
            }
            _ => Err(Questionable::NotWord),
        }
    }
    fn show(&self) -> Json {
        json!(self.as_str())
    }
}
