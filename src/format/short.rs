//! [`InlineStr`]: a string held in place when it is short, as a record's uuid, parent and
//! timestamp are, and a content message's raw id. A session of 100,000 records would
//! otherwise make several small heap strings per record.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// A record's uuid (32 hex digits as the runtime writes them, 36 with dashes) or timestamp
/// (30 bytes with nanoseconds) in place: 40 bytes.
pub type ShortStr = InlineStr<38>;

/// An immutable string, in place up to `N` bytes (at most 255), on the heap beyond.
#[derive(Clone)]
pub struct InlineStr<const N: usize>(Repr<N>);

#[derive(Clone)]
enum Repr<const N: usize> {
    /// `buf[..len]` is valid UTF-8 (made only from a `&str`).
    Inline {
        len: u8,
        buf: [u8; N],
    },
    Heap(Box<str>),
}

impl<const N: usize> InlineStr<N> {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, buf } => {
                let bytes = buf.get(..*len as usize).unwrap_or_default();
                // SAFETY: `buf[..len]` was copied whole from a `&str` (`From<&str>`, the only
                // place an inline value is made) and is never written again, so it is UTF-8.
                // Checking it on every read cost several percent of a view (ids are read
                // in every pass).
                unsafe { std::str::from_utf8_unchecked(bytes) }
            }
            Repr::Heap(s) => s,
        }
    }
}

impl<const N: usize> From<&str> for InlineStr<N> {
    fn from(s: &str) -> InlineStr<N> {
        if s.len() <= N && s.len() <= usize::from(u8::MAX) {
            let mut buf = [0u8; N];
            buf[..s.len()].copy_from_slice(s.as_bytes());
            InlineStr(Repr::Inline {
                len: s.len() as u8,
                buf,
            })
        } else {
            InlineStr(Repr::Heap(s.into()))
        }
    }
}

impl<const N: usize> From<String> for InlineStr<N> {
    fn from(s: String) -> InlineStr<N> {
        if s.len() <= N {
            InlineStr::from(s.as_str())
        } else {
            InlineStr(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl<const N: usize> Deref for InlineStr<N> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for InlineStr<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> Borrow<str> for InlineStr<N> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> PartialEq for InlineStr<N> {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for InlineStr<N> {}

impl<const N: usize> PartialEq<str> for InlineStr<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for InlineStr<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<const N: usize> Hash for InlineStr<N> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> Serialize for InlineStr<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de, const N: usize> Deserialize<'de> for InlineStr<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<InlineStr<N>, D::Error> {
        d.deserialize_str(InlineVisitor::<N>)
    }
}

struct InlineVisitor<const N: usize>;

impl<const N: usize> Visitor<'_> for InlineVisitor<N> {
    type Value = InlineStr<N>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    // A short string is copied in place from the parser's buffer: no allocation.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<InlineStr<N>, E> {
        Ok(InlineStr::from(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<InlineStr<N>, E> {
        Ok(InlineStr::from(v))
    }
}

#[cfg(test)]
mod tests {
    use super::{InlineStr, ShortStr};

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
        assert_eq!(std::mem::size_of::<Option<ShortStr>>(), 40);
        assert_eq!(std::mem::size_of::<InlineStr<22>>(), 24);
        let long = "z".repeat(300);
        assert_eq!(InlineStr::<255>::from(long.as_str()).as_str(), long);
    }
}
