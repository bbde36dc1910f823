//! [`ShortStr`]: a string held in place when it is short, as a record's uuid, parent and
//! timestamp are. A transcript of 100,000 records would otherwise make three small heap
//! strings per record (a quarter of a large session's memory besides its texts).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// Bytes a [`ShortStr`] holds in place (a uuid with dashes is 36).
const INLINE: usize = 38;

/// An immutable string, in place up to [`INLINE`] bytes, on the heap beyond.
#[derive(Clone)]
pub struct ShortStr(Repr);

#[derive(Clone)]
enum Repr {
    /// `buf[..len]` is valid UTF-8 (made only from a `&str`).
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    Heap(Box<str>),
}

impl ShortStr {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Valid by construction; an empty string would be a bug, not a panic.
            Repr::Inline { len, buf } => std::str::from_utf8(&buf[..*len as usize]).unwrap_or(""),
            Repr::Heap(s) => s,
        }
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> ShortStr {
        if s.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..s.len()].copy_from_slice(s.as_bytes());
            ShortStr(Repr::Inline {
                len: s.len() as u8,
                buf,
            })
        } else {
            ShortStr(Repr::Heap(s.into()))
        }
    }
}

impl From<String> for ShortStr {
    fn from(s: String) -> ShortStr {
        if s.len() <= INLINE {
            ShortStr::from(s.as_str())
        } else {
            ShortStr(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl Deref for ShortStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for ShortStr {
    fn eq(&self, other: &ShortStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ShortStr {}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for ShortStr {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ShortStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ShortStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ShortStr, D::Error> {
        d.deserialize_str(ShortVisitor)
    }
}

struct ShortVisitor;

impl Visitor<'_> for ShortVisitor {
    type Value = ShortStr;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    // A short string is copied in place from the parser's buffer: no allocation.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<ShortStr, E> {
        Ok(ShortStr::from(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<ShortStr, E> {
        Ok(ShortStr::from(v))
    }
}

#[cfg(test)]
mod tests {
    use super::ShortStr;

    #[test]
    fn short_and_long_strings_read_and_compare_as_written() {
        for s in [
            "",
            "a",
            "ü日本😀",
            &"x".repeat(38),
            &"y".repeat(39),
            &"é".repeat(40),
        ] {
            let v = ShortStr::from(s);
            assert_eq!(v.as_str(), s);
            assert_eq!(ShortStr::from(s.to_string()), v);
            let json = serde_json::to_string(&v).expect("serializes");
            assert_eq!(json, serde_json::to_string(s).expect("serializes"));
            let back: ShortStr = serde_json::from_str(&json).expect("reads back");
            assert_eq!(back, v);
        }
        let escaped: ShortStr = serde_json::from_str(r#""a\"b\u00e9""#).expect("reads");
        assert_eq!(escaped, "a\"bé");
        assert!(serde_json::from_str::<ShortStr>("17").is_err());
        assert!(std::mem::size_of::<Option<ShortStr>>() <= 40);
    }
}
