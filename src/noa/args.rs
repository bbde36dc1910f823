//! The Compress tool's arguments, read as leniently as the runtime reads them (SPEC 4.5):
//! a JSON string holding the object, a Markdown fence around it, trailing commas, raw
//! newlines in strings, `content` as an encoded string (even one missing its last brace), a
//! cut-off call salvaged entry by entry, and the field aliases.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

/// One requested range.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub start: String,
    pub end: String,
    pub summary: String,
    pub topic: String,
    pub summary_max_chars: Option<i64>,
}

/// How the arguments arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseKind {
    Ok,
    EmptyInput,
    MissingContent,
    ContentNotList,
    NoValidRanges,
    Truncated,
    MalformedJson,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub ranges: Vec<Range>,
    /// Usable ranges were recovered (or a well-formed call asked for none).
    pub ok: bool,
    pub kind: ParseKind,
    pub invalid_reasons: Vec<String>,
    pub salvaged: bool,
    pub tail_repaired: bool,
    /// The input's first 800 bytes, for messages.
    pub raw_prefix: String,
}

impl Parsed {
    /// The error message for arguments that gave no range (the runtime's wording of the
    /// shape it expected).
    pub fn error_message(&self) -> String {
        let mut s = match self.kind {
            ParseKind::EmptyInput => "Compress received no arguments.",
            ParseKind::MissingContent => "Compress arguments have no `content` field.",
            ParseKind::ContentNotList => {
                "Compress `content` is neither an array of ranges nor a JSON-encoded one."
            }
            ParseKind::NoValidRanges => {
                "No usable ranges: every entry was missing startId, endId or summary."
            }
            ParseKind::Truncated => {
                "The arguments were cut off mid-object and could not be salvaged."
            }
            ParseKind::Ok | ParseKind::MalformedJson => {
                "Compress arguments could not be parsed as JSON."
            }
        }
        .to_string();
        s.push_str(
            r#" Expected shape: { "content": [{ "startId": "m00012", "endId": "m00045", "summary": "..." }] }"#,
        );
        let n = self.invalid_reasons.len();
        if n > 0 {
            let what = if n == 1 { "y was" } else { "ies were" };
            s.push_str(&format!(
                "\n{n} entr{what} dropped: {}",
                self.invalid_reasons.join("; ")
            ));
        }
        s
    }
}

const RAW_PREFIX_LEN: usize = 800;

fn fence() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?s)^\s*```[a-zA-Z0-9]*\s*\n(.*?)\n?\s*```\s*$").expect("a valid pattern")
    })
}

fn content_key() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r#""content"\s*:\s*\["#).expect("a valid pattern"))
}

fn strip_fence(s: &str) -> &str {
    match fence().captures(s).and_then(|c| c.get(1)) {
        Some(m) => m.as_str().trim(),
        None => s,
    }
}

/// Read the arguments of one Compress call.
pub fn parse(raw: &str) -> Parsed {
    let mut p = Parsed {
        ranges: Vec::new(),
        ok: false,
        kind: ParseKind::Ok,
        invalid_reasons: Vec::new(),
        salvaged: false,
        tail_repaired: false,
        raw_prefix: prefix(raw, RAW_PREFIX_LEN).to_string(),
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed == "null" {
        p.kind = ParseKind::EmptyInput;
        return p;
    }
    let unwrapped;
    let mut body = trimmed;
    if let Ok(Value::String(s)) = serde_json::from_str::<Value>(trimmed) {
        unwrapped = s;
        body = unwrapped.trim();
    }
    let body = strip_fence(body);
    let Some(obj) = lenient_object(body) else {
        if let Some(entries) = salvage(body) {
            p.salvaged = true;
            p.kind = ParseKind::Truncated;
            p.ranges = to_ranges(&entries, "", None, &mut p.invalid_reasons);
            p.ok = !p.ranges.is_empty();
            return p;
        }
        p.kind = ParseKind::MalformedJson;
        return p;
    };
    let topic = string_field(&obj, "topic");
    let max = int_field(&obj, "summaryMaxChars");
    let Some(content) = obj.get("content") else {
        p.kind = ParseKind::MissingContent;
        return p;
    };
    let entries = match content {
        Value::Array(items) => objects(items),
        Value::String(s) => {
            let s = strip_fence(s.trim());
            if let Some(items) = lenient_array(s) {
                objects(&items)
            } else if let Some(items) = tail_repair(s) {
                p.tail_repaired = true;
                objects(&items)
            } else if let Some(entries) = salvage(s) {
                p.salvaged = true;
                entries
            } else {
                p.kind = ParseKind::ContentNotList;
                return p;
            }
        }
        _ => {
            p.kind = ParseKind::ContentNotList;
            return p;
        }
    };
    p.ranges = to_ranges(&entries, &topic, max, &mut p.invalid_reasons);
    if p.ranges.is_empty() && !p.invalid_reasons.is_empty() {
        p.kind = ParseKind::NoValidRanges;
        return p;
    }
    p.kind = ParseKind::Ok;
    p.ok = true;
    p
}

fn prefix(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn objects(items: &[Value]) -> Vec<Map<String, Value>> {
    items
        .iter()
        .filter_map(|v| v.as_object().cloned())
        .collect()
}

/// An object (a JSON `null` reads as an empty one, as decoding into a Go map does), read
/// leniently and, failing that, with trailing commas dropped and raw newlines escaped both.
fn lenient_object(s: &str) -> Option<Map<String, Value>> {
    let object = |v| match v {
        Value::Object(m) => Some(m),
        _ => None,
    };
    lenient(s, object).or_else(|| read_as(&escape_raw_newlines(&strip_trailing_commas(s)), object))
}

/// An array (a JSON `null` reads as an empty one, as decoding into a Go slice does), read
/// leniently.
fn lenient_array(s: &str) -> Option<Vec<Value>> {
    lenient(s, |v| match v {
        Value::Array(a) => Some(a),
        _ => None,
    })
}

/// `s` read by [`read_as`], trying the raw text, then with trailing commas dropped, then with
/// raw newlines escaped.
fn lenient<T: Default>(s: &str, take: fn(Value) -> Option<T>) -> Option<T> {
    read_as(s, take)
        .or_else(|| read_as(&strip_trailing_commas(s), take))
        .or_else(|| read_as(&escape_raw_newlines(s), take))
}

/// The JSON value `t` as a `T` when `take` accepts it; `null` is an empty `T`.
fn read_as<T: Default>(t: &str, take: fn(Value) -> Option<T>) -> Option<T> {
    match serde_json::from_str::<Value>(t) {
        Ok(Value::Null) => Some(T::default()),
        Ok(v) => take(v),
        Err(_) => None,
    }
}

/// `…"]` where `…"}]` was meant: the last object lost its closing brace.
fn tail_repair(s: &str) -> Option<Vec<Value>> {
    let t = s.trim();
    let inner = t.strip_suffix(']')?.trim();
    if !inner.ends_with('"') {
        return None;
    }
    match serde_json::from_str::<Value>(&format!("{inner}}}]")) {
        Ok(Value::Array(a)) => Some(a),
        _ => None,
    }
}

/// What a character of JSON text is to a scan from its start.
#[derive(Clone, Copy, PartialEq)]
enum At {
    /// Outside strings.
    Code,
    /// Part of a string (its quotes and escaping backslashes included).
    Str,
    /// The character after a backslash in a string.
    Escaped,
}

/// Where a character-by-character scan of JSON text is: inside a string, after a backslash.
#[derive(Default)]
struct Scan {
    in_str: bool,
    esc: bool,
}

impl Scan {
    /// Steps over `c`, the next character: what it is.
    fn step(&mut self, c: char) -> At {
        if !self.in_str {
            self.in_str = c == '"';
            return if self.in_str { At::Str } else { At::Code };
        }
        if self.esc {
            self.esc = false;
            return At::Escaped;
        }
        match c {
            '\\' => self.esc = true,
            '"' => self.in_str = false,
            _ => {}
        }
        At::Str
    }
}

/// Whole objects of a cut-off array, matched brace by brace outside strings.
fn salvage(s: &str) -> Option<Vec<Map<String, Value>>> {
    let start = match content_key().find(s) {
        Some(m) => m.end(),
        None => s.find('[')? + 1,
    };
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let (mut depth, mut obj_start): (i64, Option<usize>) = (0, None);
    let mut scan = Scan::default();
    for i in start..bytes.len() {
        let c = bytes[i];
        if scan.step(char::from(c)) != At::Code {
            continue;
        }
        match c {
            b'{' => {
                if depth == 0 {
                    obj_start = Some(i);
                }
                depth += 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    if let Some(o) = obj_start.take() {
                        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&s[o..=i]) {
                            out.push(m);
                        }
                    }
                }
            }
            b']' if depth == 0 => break,
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

fn strip_trailing_commas(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut scan = Scan::default();
    for i in 0..b.len() {
        let c = b[i];
        if scan.step(char::from(c)) == At::Code && c == b',' {
            let next = b[i + 1..]
                .iter()
                .find(|&&x| !matches!(x, b' ' | b'\n' | b'\r' | b'\t'));
            if matches!(next, Some(b'}') | Some(b']')) {
                continue;
            }
        }
        out.push(c);
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn escape_raw_newlines(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    let mut scan = Scan::default();
    for c in s.chars() {
        match (scan.step(c), c) {
            (At::Str, '\n') => out.push_str("\\n"),
            (At::Str, '\r') => out.push_str("\\r"),
            (At::Str, '\t') => out.push_str("\\t"),
            _ => out.push(c),
        }
    }
    out
}

fn string_field(m: &Map<String, Value>, key: &str) -> String {
    m.get(key)
        .and_then(Value::as_str)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn int_field(m: &Map<String, Value>, key: &str) -> Option<i64> {
    let f = m.get(key)?.as_f64()?;
    f.is_finite()
        .then(|| f.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64)
}

fn to_ranges(
    entries: &[Map<String, Value>],
    topic: &str,
    max: Option<i64>,
    invalid: &mut Vec<String>,
) -> Vec<Range> {
    let first = |e: &Map<String, Value>, keys: &[&str]| {
        keys.iter()
            .map(|k| string_field(e, k))
            .find(|s| !s.is_empty())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for e in entries {
        let start = first(e, &["startId", "startRef", "messageId"]);
        let end = first(e, &["endId", "endRef", "messageId"]);
        let summary = string_field(e, "summary");
        let mut why = Vec::new();
        if start.is_empty() {
            why.push("missing startId");
        }
        if end.is_empty() {
            why.push("missing endId");
        }
        if summary.is_empty() {
            why.push("missing summary");
        }
        if !why.is_empty() {
            invalid.push(why.join(", "));
            continue;
        }
        let own = string_field(e, "topic");
        out.push(Range {
            start,
            end,
            summary,
            topic: if own.is_empty() {
                topic.to_string()
            } else {
                own
            },
            summary_max_chars: int_field(e, "summaryMaxChars").or(max),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(raw: &str) -> Parsed {
        parse(raw)
    }

    #[test]
    fn reads_the_plain_shape_and_the_aliases() {
        let p = one(r#"{"topic":"t","content":[{"startRef":"m1","endRef":"m2","summary":" s "}]}"#);
        assert!(p.ok);
        assert_eq!(p.ranges[0].start, "m1");
        assert_eq!(p.ranges[0].summary, "s");
        assert_eq!(p.ranges[0].topic, "t");
        let p = one(r#"{"content":[{"messageId":"m7","summary":"x"}]}"#);
        assert_eq!(
            (p.ranges[0].start.as_str(), p.ranges[0].end.as_str()),
            ("m7", "m7")
        );
    }

    #[test]
    fn reads_the_malformed_shapes() {
        let s = r#""{\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"x\"}]}""#;
        assert_eq!(one(s).ranges.len(), 1, "a JSON string");
        let f = "```json\n{\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"x\"},]}\n```";
        assert_eq!(one(f).ranges.len(), 1, "a fence and a trailing comma");
        let n = "{\"content\":[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"a\nb\"}]}";
        assert_eq!(one(n).ranges[0].summary, "a\nb", "a raw newline");
        let e = r#"{"content":"[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"x\"}]"}"#;
        assert_eq!(one(e).ranges.len(), 1, "content as a string");
        let r = r#"{"content":"[{\"startId\":\"m1\",\"endId\":\"m2\",\"summary\":\"x\"]"}"#;
        let p = one(r);
        assert!(p.tail_repaired && p.ranges.len() == 1, "{p:?}");
        let cut = r#"{"content":[{"startId":"m1","endId":"m2","summary":"x"},{"startId":"m3","en"#;
        let p = one(cut);
        assert!(p.salvaged && p.ok && p.ranges.len() == 1, "{p:?}");
        assert_eq!(p.kind, ParseKind::Truncated);
    }

    #[test]
    fn says_what_is_wrong() {
        assert_eq!(one("  ").kind, ParseKind::EmptyInput);
        assert_eq!(one("{}").kind, ParseKind::MissingContent);
        assert_eq!(one(r#"{"content":5}"#).kind, ParseKind::ContentNotList);
        let p = one(r#"{"content":[{"startId":"m1"}]}"#);
        assert_eq!(p.kind, ParseKind::NoValidRanges);
        assert!(!p.ok);
        assert!(p.error_message().contains("missing endId, missing summary"));
        let p = one(r#"{"content":[]}"#);
        assert!(p.ok && p.ranges.is_empty());
        assert_eq!(one("{nope").kind, ParseKind::MalformedJson);
    }
}
