//! JSON text byte-identical to Go's `encoding/json` output (`Marshal`, `MarshalIndent`).
//!
//! The runtime writes its files with Go's encoder; normafs rewrites them with this module so
//! that a file normafs writes is the file the runtime would have written. What Go does:
//!
//! - strings: `"` and `\` escaped with a backslash; `\b` `\f` `\n` `\r` `\t` by their short
//!   forms (Go 1.22 and later); every other byte below 0x20 as `\u00xx` (lowercase hex);
//!   `<` `>` `&` as `\u003c` `\u003e` `\u0026` and U+2028/U+2029 as `\u2028`/`\u2029` (the
//!   default HTML-safe escaping); everything else, DEL included, as is;
//! - numbers held as integers print as integers; a float64 prints its shortest round-trip
//!   digits in plain notation, or in exponent notation (`1e-7`, `1e+21`) when its magnitude is
//!   below 1e-6 or at least 1e21;
//! - `MarshalIndent` puts every member of a non-empty object or array on its own line, writes
//!   `": "` after keys, keeps `{}` and `[]` on one line and ends without a newline.
//!
//! [`Members`] is the one implementation of that layout; typed writers (the state file) use it
//! directly instead of building a [`Value`] first.

use serde_json::{Map, Number, Value};

/// `json.Marshal` of `v`: compact, object members in the map's order.
pub fn marshal(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v, Layout::COMPACT, 0);
    out
}

/// `json.MarshalIndent(v, "", indent)`.
pub fn marshal_indent(v: &Value, indent: &str) -> String {
    let mut out = String::new();
    write_value(&mut out, v, Layout::indented(indent), 0);
    out
}

/// What the runtime produces when it decodes JSON into Go's `map[string]any` and marshals it
/// again: every number becomes a float64 (so integers beyond 2^53 round, and 1e21 and up switch
/// to exponent notation) and every object's keys are sorted byte-wise, at every depth.
pub fn marshal_go_any(v: &Value) -> String {
    let mut out = String::new();
    write_value(
        &mut out,
        v,
        Layout {
            go_any: true,
            ..Layout::COMPACT
        },
        0,
    );
    out
}

/// How a value is laid out.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    /// `None`: compact (`Marshal`); `Some(unit)`: `MarshalIndent` with this indentation unit.
    pub indent: Option<&'a str>,
    /// Model a round trip through Go's `any`: numbers as float64, object keys sorted.
    pub go_any: bool,
}

impl<'a> Layout<'a> {
    pub const COMPACT: Layout<'static> = Layout {
        indent: None,
        go_any: false,
    };

    pub fn indented(unit: &'a str) -> Layout<'a> {
        Layout {
            indent: Some(unit),
            go_any: false,
        }
    }
}

/// The members of one object or array being written: separators, line breaks and
/// indentation as Go lays them out. `depth` is the nesting depth of the container itself.
#[derive(Debug)]
pub struct Members<'a> {
    layout: Layout<'a>,
    depth: usize,
    count: usize,
    close: char,
}

impl<'a> Members<'a> {
    /// Writes `{` and returns the writer of the object's members.
    pub fn object(out: &mut String, layout: Layout<'a>, depth: usize) -> Members<'a> {
        out.push('{');
        Members {
            layout,
            depth,
            count: 0,
            close: '}',
        }
    }

    /// Writes `[` and returns the writer of the array's elements.
    pub fn array(out: &mut String, layout: Layout<'a>, depth: usize) -> Members<'a> {
        out.push('[');
        Members {
            layout,
            depth,
            count: 0,
            close: ']',
        }
    }

    /// The depth to pass when writing a member's value.
    pub fn inner(&self) -> usize {
        self.depth + 1
    }

    pub fn layout(&self) -> Layout<'a> {
        self.layout
    }

    /// Starts the next array element (separator, line break, indentation).
    pub fn element(&mut self, out: &mut String) {
        if self.count > 0 {
            out.push(',');
        }
        self.count += 1;
        if let Some(unit) = self.layout.indent {
            newline(out, unit, self.depth + 1);
        }
    }

    /// Starts the next object member and writes its key; the value comes next.
    pub fn key(&mut self, out: &mut String, key: &str) {
        self.element(out);
        write_str(out, key);
        out.push(':');
        if self.layout.indent.is_some() {
            out.push(' ');
        }
    }

    /// Writes the closing bracket (on its own line unless the container is empty).
    pub fn close(self, out: &mut String) {
        if self.count > 0 {
            if let Some(unit) = self.layout.indent {
                newline(out, unit, self.depth);
            }
        }
        out.push(self.close);
    }
}

fn newline(out: &mut String, unit: &str, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str(unit);
    }
}

/// Writes `v` at nesting depth `depth`.
pub fn write_value(out: &mut String, v: &Value, layout: Layout<'_>, depth: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n, layout.go_any),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            let mut m = Members::array(out, layout, depth);
            for item in items {
                m.element(out);
                write_value(out, item, layout, m.inner());
            }
            m.close(out);
        }
        Value::Object(map) => write_object(out, map, layout, depth),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>, layout: Layout<'_>, depth: usize) {
    let mut m = Members::object(out, layout, depth);
    if layout.go_any {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in entries {
            m.key(out, k);
            write_value(out, v, layout, m.inner());
        }
    } else {
        for (k, v) in map {
            m.key(out, k);
            write_value(out, v, layout, m.inner());
        }
    }
    m.close(out);
}

fn write_number(out: &mut String, n: &Number, as_float: bool) {
    if !as_float {
        if let Some(i) = n.as_i64() {
            out.push_str(&i.to_string());
            return;
        }
        if let Some(u) = n.as_u64() {
            out.push_str(&u.to_string());
            return;
        }
    }
    // A serde_json number is finite (it cannot hold NaN or infinities), as Go requires.
    out.push_str(&format_float(n.as_f64().unwrap_or(0.0)));
}

/// Go's text for a float64 (`encoding/json`'s float encoder).
pub fn format_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` gives the same shortest digits as Go's 'e' format; only the exponent
        // is spelled differently: Go always signs it (`e+21`), and after its clean-up of
        // `e-07` a negative exponent has no leading zero, as Rust writes it.
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => s,
        }
    } else {
        // Plain notation with the shortest round-trip digits, `-0` for negative zero, no `.0`.
        format!("{f}")
    }
}

/// Writes `s` as a quoted JSON string with Go's escaping.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escaped: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            b'<' => Some("\\u003c"),
            b'>' => Some("\\u003e"),
            b'&' => Some("\\u0026"),
            _ => None,
        };
        if let Some(e) = escaped {
            out.push_str(&s[start..i]);
            out.push_str(e);
            i += 1;
            start = i;
        } else if b < 0x20 {
            out.push_str(&s[start..i]);
            out.push_str(&format!("\\u{b:04x}"));
            i += 1;
            start = i;
        } else if b == 0xe2
            && bytes.get(i + 1) == Some(&0x80)
            && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9))
        {
            // U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR (E2 80 A8 / E2 80 A9).
            out.push_str(&s[start..i]);
            out.push_str(if bytes[i + 2] == 0xa8 {
                "\\u2028"
            } else {
                "\\u2029"
            });
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Go's `%q` (`strconv.Quote`) of a string: quoted, `"` and `\\` escaped, the named control
/// escapes, other control characters as `\xNN`, everything printable as it is.
pub fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\u{7}' => q.push_str("\\a"),
            '\u{8}' => q.push_str("\\b"),
            '\u{c}' => q.push_str("\\f"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            '\u{b}' => q.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                q.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_as_go_does() {
        assert_eq!(quote("m00001"), "\"m00001\"");
        assert_eq!(
            quote("a\"b\\c\n\u{1}\u{7f}é"),
            "\"a\\\"b\\\\c\\n\\x01\\x7fé\""
        );
    }
    use serde_json::json;

    fn num(f: f64) -> String {
        marshal(&json!(f))
    }

    #[test]
    fn strings_escape_like_go() {
        let s = "<b>&'\"\\\n\r\t\u{8}\u{c}\u{0}\u{1}\u{1f}\u{7f}\u{2028}\u{2029}é😀/";
        assert_eq!(
            marshal(&json!(s)),
            "\"\\u003cb\\u003e\\u0026'\\\"\\\\\\n\\r\\t\\b\\f\\u0000\\u0001\\u001f\u{7f}\\u2028\\u2029é😀/\""
        );
        // Keys escape the same way.
        assert_eq!(marshal(&json!({"a<b": 1})), "{\"a\\u003cb\":1}");
        // U+2027 and U+202A share the lead bytes but stay as they are.
        assert_eq!(marshal(&json!("\u{2027}\u{202a}")), "\"\u{2027}\u{202a}\"");
        assert_eq!(marshal(&json!("")), "\"\"");
    }

    #[test]
    fn integers_print_as_integers() {
        assert_eq!(marshal(&json!(0)), "0");
        assert_eq!(marshal(&json!(-5)), "-5");
        assert_eq!(marshal(&json!(i64::MIN)), "-9223372036854775808");
        assert_eq!(marshal(&json!(u64::MAX)), "18446744073709551615");
    }

    #[test]
    fn floats_print_like_go_float64() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(1.5), "1.5");
        assert_eq!(num(-0.0), "-0");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(num(123456789.123), "123456789.123");
        assert_eq!(num(1e20), "100000000000000000000");
        assert_eq!(num(1e21), "1e+21");
        assert_eq!(num(-1.5e300), "-1.5e+300");
        assert_eq!(num(0.000001), "0.000001");
        assert_eq!(num(1e-7), "1e-7");
        assert_eq!(num(-2.5e-7), "-2.5e-7");
        assert_eq!(num(1.5e-10), "1.5e-10");
        assert_eq!(num(1e-100), "1e-100");
        assert_eq!(num(5e-324), "5e-324");
        assert_eq!(num(f64::MAX), "1.7976931348623157e+308");
    }

    #[test]
    fn compact_keeps_member_order() {
        let v = json!({"b": [1, true, null, "x"], "a": {}, "c": []});
        assert_eq!(marshal(&v), r#"{"b":[1,true,null,"x"],"a":{},"c":[]}"#);
    }

    #[test]
    fn go_any_sorts_keys_and_floats_numbers() {
        let v: Value = serde_json::from_str(
            r#"{"b":1,"a":{"é":1.0,"z":2,"B":[3.0,12345678901234567890,100000000000000000000000]},"A":-0}"#,
        )
        .expect("valid JSON");
        assert_eq!(
            marshal_go_any(&v),
            r#"{"A":-0,"a":{"B":[3,12345678901234567000,1e+23],"z":2,"é":1},"b":1}"#
        );
        // Without Go-any semantics the integer stays exact and the order stays.
        assert_eq!(
            marshal(&json!({"b": 12345678901234567890u64, "a": 2})),
            r#"{"b":12345678901234567890,"a":2}"#
        );
    }

    #[test]
    fn indent_layout_matches_marshal_indent() {
        let v = json!({
            "a": 1,
            "e": {},
            "l": [],
            "n": {"x": [1, {"y": null}], "s": "<"},
        });
        let expected = "{\n  \"a\": 1,\n  \"e\": {},\n  \"l\": [],\n  \"n\": {\n    \"x\": [\n      1,\n      {\n        \"y\": null\n      }\n    ],\n    \"s\": \"\\u003c\"\n  }\n}";
        assert_eq!(marshal_indent(&v, "  "), expected);
        assert_eq!(marshal_indent(&json!({}), "  "), "{}");
        assert_eq!(marshal_indent(&json!([]), "  "), "[]");
        assert_eq!(marshal_indent(&json!("s"), "  "), "\"s\"");
        // An empty unit still breaks lines, as Go's does.
        assert_eq!(marshal_indent(&json!([1, 2]), ""), "[\n1,\n2\n]");
        assert_eq!(
            marshal_indent(&json!({"k": [1]}), "\t"),
            "{\n\t\"k\": [\n\t\t1\n\t]\n}"
        );
    }
}
