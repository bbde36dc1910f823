//! Noa `state.json` v1 (SPEC 2.3): read as the runtime reads it, written as the runtime writes
//! it, with every key the runtime does not know kept.
//!
//! Reading follows Go's `json.Unmarshal` into the runtime's file struct:
//!
//! - keys match fields case-insensitively (Go's folding: ASCII case, and U+212A KELVIN SIGN and
//!   U+017F LATIN SMALL LETTER LONG S fold to `K` and `S`); a key that matches no field is kept
//!   in the `extra` of its object (Go drops it; normafs writes it back);
//! - a missing key or `null` leaves the zero value (`null` resets a list or map to empty, and
//!   `blocks` to `None`); a value of another JSON type, a fraction or an out-of-range number
//!   where an integer belongs is an error naming the key, and fails the whole load;
//! - a key given twice decodes into what the first one left, as Go's decoder does (objects
//!   merge, maps gain entries, lists are overwritten element by element);
//! - inside strings, invalid UTF-8 and lone UTF-16 surrogate escapes become U+FFFD, where
//!   serde_json alone would refuse the file;
//! - `version != 1` (a missing version is 0) is [`StateLoadError::Version`]; values are kept as
//!   read otherwise (`nextBlockId` below 1 included: the core reads it as 1).
//!
//! Differences that remain: serde_json nests at most 128 levels (Go 10,000), refuses numbers
//! beyond the float64 range inside unknown values, and parses `-0` as a float, so `-0` where an
//! integer belongs is refused (Go reads 0). Each of them fails the load, never panics.
//!
//! The decoder is a hand-written [`DeserializeSeed`] that fills the typed fields in one
//! streaming pass: a 100,000-entry `byRaw` costs its strings and no intermediate `Value` tree.
//! Only unknown keys are held as [`Value`]s.
//!
//! Writing ([`State::to_json`]) is Go's `json.MarshalIndent(file, "", "  ")` of the runtime's
//! struct (field order, `omitempty`, sorted map keys, HTML-safe escaping, no trailing newline),
//! followed in each object by its unknown keys in the order they were read. Unknown values are
//! written with [`gojson`]: numbers that serde_json holds as floats print as Go prints a float64
//! (`1.0` as `1`, `1e21` as `1e+21`); everything else comes back as read.

mod decode;
use decode::*;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_json::{Map, Value};

use crate::fasthash::FastMap;
use crate::format::gojson::{self, Layout, Members};

/// The whole `state.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub version: i64,
    pub session_id: String,
    pub next_block_id: i64,
    /// `None`: `"blocks": null` or absent (the runtime writes null when it has no blocks).
    pub blocks: Option<Vec<Block>>,
    pub message_refs: MessageRefs,
    pub token_snapshot: FastMap<String, i64>,
    pub nudge: NudgeState,
    pub stats: Stats,
    pub derived_from: String,
    /// Unknown top-level keys, in file order (kept and written back after the known ones).
    /// After parsing it never holds a key that names a field (Go matches those
    /// case-insensitively); [`State::to_json`] writes whatever it holds.
    pub extra: Map<String, Value>,
}

/// One compression block. `Default` is Go's zero value (what `null` in `blocks` decodes to).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    pub block_id: String,
    pub tier: i64,
    pub topic: String,
    pub summary: String,
    pub direct_message_ids: Vec<String>,
    pub effective_message_ids: Vec<String>,
    pub direct_block_ids: Vec<String>,
    pub archive_path: String,
    pub archive_rel: String,
    pub compressed_tokens: i64,
    pub start_ref: String,
    pub end_ref: String,
    /// Unix seconds.
    pub created_at: i64,
    pub active: bool,
    pub compress_call_id: String,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageRefs {
    /// Raw (content) id → ref, or `"BLOCKED"` for hard-protected content.
    pub by_raw: RefMap,
    /// Ref → raw id.
    pub by_ref: RefMap,
    pub extra: Map<String, Value>,
}

/// What the ref maps record for hard-protected content: no number.
pub const BLOCKED: &str = "BLOCKED";
/// The highest ref number (five digits).
pub const MAX_REF: u32 = 99_999;

/// A ref, leniently: trimmed, lowercased, `m0*` + 1-5 digits, within 1..=99999.
pub fn parse_ref(s: &str) -> Option<u32> {
    // Read for every recorded ref at every view: no copy is made.
    let s = s.trim();
    let digits = s.strip_prefix(['m', 'M'])?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 5 {
        return None;
    }
    let n: u32 = if significant.is_empty() {
        0
    } else {
        significant.parse().ok()?
    };
    (1..=MAX_REF).contains(&n).then_some(n)
}

/// One of the ref maps: a long session's holds an entry per message, and copies of a state
/// share it until one of them changes it (a replay copies its state at every Compress call).
/// The highest ref number among its keys and among its values are kept once asked (each view
/// numbers from them).
#[derive(Debug, Default)]
pub struct RefMap {
    map: Arc<FastMap<String, String>>,
    /// [`RefMap::highest_ref`] and [`RefMap::highest_key_ref`], each [`UNKNOWN`] until asked
    /// after a change.
    highest: [AtomicU32; 2],
}

const UNKNOWN: u32 = u32::MAX;
const VALUES: usize = 0;
const KEYS: usize = 1;

impl RefMap {
    /// Adds or replaces an entry (this copy's own map from now on); the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let grown = |memo: &mut AtomicU32, added: &str| match *memo.get_mut() {
            UNKNOWN => UNKNOWN,
            h => h.max(ref_number(added).unwrap_or(0)),
        };
        let values = grown(&mut self.highest[VALUES], &value);
        let keys = grown(&mut self.highest[KEYS], &key);
        let before = Arc::make_mut(&mut self.map).insert(key, value);
        // A replaced value may have been the highest (the key is the same).
        *self.highest[VALUES].get_mut() = if before.is_some() { UNKNOWN } else { values };
        *self.highest[KEYS].get_mut() = keys;
        before
    }

    /// Removes an entry (this copy's own map from now on); its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        if !self.map.contains_key(key) {
            return None;
        }
        self.to_mut().remove(key)
    }

    /// The map, this copy's own.
    pub fn to_mut(&mut self) -> &mut FastMap<String, String> {
        for memo in &mut self.highest {
            *memo.get_mut() = UNKNOWN;
        }
        Arc::make_mut(&mut self.map)
    }

    /// The highest ref number among the values (`BLOCKED` and unparsable ones aside), 0 when
    /// none.
    pub fn highest_ref(&self) -> u32 {
        self.highest_of(VALUES, self.map.values())
    }

    /// The highest ref number among the keys, 0 when none.
    pub fn highest_key_ref(&self) -> u32 {
        self.highest_of(KEYS, self.map.keys())
    }

    fn highest_of<'s>(&self, which: usize, refs: impl Iterator<Item = &'s String>) -> u32 {
        match self.highest[which].load(Ordering::Relaxed) {
            UNKNOWN => {
                let h = refs.filter_map(|r| ref_number(r)).max().unwrap_or(0);
                self.highest[which].store(h, Ordering::Relaxed);
                h
            }
            h => h,
        }
    }
}

/// The number of a recorded ref (`BLOCKED` has none).
fn ref_number(r: &str) -> Option<u32> {
    (r != BLOCKED).then(|| parse_ref(r)).flatten()
}

impl Clone for RefMap {
    fn clone(&self) -> Self {
        let memo = |which: usize| AtomicU32::new(self.highest[which].load(Ordering::Relaxed));
        RefMap {
            map: Arc::clone(&self.map),
            highest: [memo(VALUES), memo(KEYS)],
        }
    }
}

impl PartialEq for RefMap {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl std::ops::Deref for RefMap {
    type Target = FastMap<String, String>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl FromIterator<(String, String)> for RefMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        RefMap {
            map: Arc::new(iter.into_iter().collect()),
            highest: [AtomicU32::new(UNKNOWN), AtomicU32::new(UNKNOWN)],
        }
    }
}

impl<'a> IntoIterator for &'a RefMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::hash_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NudgeState {
    pub last_per_message_nudge_tokens: i64,
    pub last_nudge_shown_tokens: i64,
    /// Keys as written in the file (the runtime writes a tier number in decimal).
    pub last_shown_by_tier: BTreeMap<String, i64>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub tokens_compressed: i64,
    pub compression_count: i64,
    pub extra: Map<String, Value>,
}

impl State {
    /// The state of a session that has none yet, as the runtime creates it: version 1,
    /// `nextBlockId` 1, no blocks (`null`), empty maps.
    pub fn initial(session_id: &str) -> State {
        State {
            version: 1,
            next_block_id: 1,
            session_id: session_id.to_string(),
            ..State::zero()
        }
    }

    /// Go's zero value of the file struct: what decoding starts from.
    fn zero() -> State {
        State {
            version: 0,
            session_id: String::new(),
            next_block_id: 0,
            blocks: None,
            message_refs: MessageRefs::default(),
            token_snapshot: FastMap::default(),
            nudge: NudgeState::default(),
            stats: Stats::default(),
            derived_from: String::new(),
            extra: Map::new(),
        }
    }

    /// The blocks; empty for `"blocks": null`.
    pub fn blocks(&self) -> &[Block] {
        self.blocks.as_deref().unwrap_or_default()
    }

    /// The bytes the runtime would write for this state (then the unknown keys, each after the
    /// known keys of its object).
    pub fn to_json(&self) -> String {
        let entries = self.message_refs.by_raw.len()
            + self.message_refs.by_ref.len()
            + self.token_snapshot.len();
        let mut out = String::with_capacity(1024 + 48 * entries + 1024 * self.blocks().len());
        let layout = Layout::indented(INDENT);
        let mut m = Members::object(&mut out, layout, 0);
        m.key(&mut out, "version");
        write_int(&mut out, self.version);
        m.key(&mut out, "sessionId");
        gojson::write_str(&mut out, &self.session_id);
        m.key(&mut out, "nextBlockId");
        write_int(&mut out, self.next_block_id);
        m.key(&mut out, "blocks");
        match &self.blocks {
            None => out.push_str("null"),
            Some(blocks) => {
                let mut list = Members::array(&mut out, layout, m.inner());
                for block in blocks {
                    list.element(&mut out);
                    block.write(&mut out, layout, list.inner());
                }
                list.close(&mut out);
            }
        }
        m.key(&mut out, "messageRefs");
        self.message_refs.write(&mut out, layout, m.inner());
        if !self.token_snapshot.is_empty() {
            m.key(&mut out, "tokenSnapshot");
            write_sorted(&mut out, &self.token_snapshot, layout, m.inner(), |o, v| {
                write_int(o, *v)
            });
        }
        m.key(&mut out, "nudge");
        self.nudge.write(&mut out, layout, m.inner());
        m.key(&mut out, "stats");
        self.stats.write(&mut out, layout, m.inner());
        if !self.derived_from.is_empty() {
            m.key(&mut out, "derivedFrom");
            gojson::write_str(&mut out, &self.derived_from);
        }
        write_extra(&mut out, &mut m, &self.extra);
        m.close(&mut out);
        out
    }

    /// The keys the runtime does not know, as paths: `foo`, `blocks[2].bar`,
    /// `messageRefs.x`, `nudge.baz`, `stats.y` (top level first, then in field order).
    pub fn unknown_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.extra.keys().cloned().collect();
        for (i, block) in self.blocks().iter().enumerate() {
            keys.extend(block.extra.keys().map(|k| format!("blocks[{i}].{k}")));
        }
        let nested = [
            ("messageRefs", &self.message_refs.extra),
            ("nudge", &self.nudge.extra),
            ("stats", &self.stats.extra),
        ];
        for (name, extra) in nested {
            keys.extend(extra.keys().map(|k| format!("{name}.{k}")));
        }
        keys
    }
}

/// The runtime's indentation unit.
const INDENT: &str = "  ";

impl Block {
    fn write(&self, out: &mut String, layout: Layout<'_>, depth: usize) {
        let mut m = Members::object(out, layout, depth);
        m.key(out, "blockId");
        gojson::write_str(out, &self.block_id);
        m.key(out, "tier");
        write_int(out, self.tier);
        write_str_omitempty(out, &mut m, "topic", &self.topic);
        m.key(out, "summary");
        gojson::write_str(out, &self.summary);
        write_list_omitempty(out, &mut m, "directMessageIds", &self.direct_message_ids);
        write_list_omitempty(
            out,
            &mut m,
            "effectiveMessageIds",
            &self.effective_message_ids,
        );
        write_list_omitempty(out, &mut m, "directBlockIds", &self.direct_block_ids);
        write_str_omitempty(out, &mut m, "archivePath", &self.archive_path);
        write_str_omitempty(out, &mut m, "archiveRel", &self.archive_rel);
        m.key(out, "compressedTokens");
        write_int(out, self.compressed_tokens);
        write_str_omitempty(out, &mut m, "startRef", &self.start_ref);
        write_str_omitempty(out, &mut m, "endRef", &self.end_ref);
        if self.created_at != 0 {
            m.key(out, "createdAt");
            write_int(out, self.created_at);
        }
        m.key(out, "active");
        out.push_str(if self.active { "true" } else { "false" });
        write_str_omitempty(out, &mut m, "compressCallId", &self.compress_call_id);
        write_extra(out, &mut m, &self.extra);
        m.close(out);
    }
}

impl MessageRefs {
    fn write(&self, out: &mut String, layout: Layout<'_>, depth: usize) {
        let mut m = Members::object(out, layout, depth);
        m.key(out, "byRaw");
        write_sorted(out, &self.by_raw, layout, m.inner(), |o, v| {
            gojson::write_str(o, v)
        });
        m.key(out, "byRef");
        write_sorted(out, &self.by_ref, layout, m.inner(), |o, v| {
            gojson::write_str(o, v)
        });
        write_extra(out, &mut m, &self.extra);
        m.close(out);
    }
}

impl NudgeState {
    fn write(&self, out: &mut String, layout: Layout<'_>, depth: usize) {
        let mut m = Members::object(out, layout, depth);
        m.key(out, "lastPerMessageNudgeTokens");
        write_int(out, self.last_per_message_nudge_tokens);
        m.key(out, "lastNudgeShownTokens");
        write_int(out, self.last_nudge_shown_tokens);
        if !self.last_shown_by_tier.is_empty() {
            m.key(out, "lastShownByTier");
            write_sorted(out, &self.last_shown_by_tier, layout, m.inner(), |o, v| {
                write_int(o, *v)
            });
        }
        write_extra(out, &mut m, &self.extra);
        m.close(out);
    }
}

impl Stats {
    fn write(&self, out: &mut String, layout: Layout<'_>, depth: usize) {
        let mut m = Members::object(out, layout, depth);
        m.key(out, "tokensCompressed");
        write_int(out, self.tokens_compressed);
        m.key(out, "compressionCount");
        write_int(out, self.compression_count);
        write_extra(out, &mut m, &self.extra);
        m.close(out);
    }
}

fn write_int(out: &mut String, n: i64) {
    out.push_str(&n.to_string());
}

fn write_str_omitempty(out: &mut String, m: &mut Members<'_>, key: &str, value: &str) {
    if !value.is_empty() {
        m.key(out, key);
        gojson::write_str(out, value);
    }
}

fn write_list_omitempty(out: &mut String, m: &mut Members<'_>, key: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    m.key(out, key);
    let mut list = Members::array(out, m.layout(), m.inner());
    for item in items {
        list.element(out);
        gojson::write_str(out, item);
    }
    list.close(out);
}

/// A Go map: keys sorted byte-wise (`String`'s order).
fn write_sorted<'a, V: 'a>(
    out: &mut String,
    map: impl IntoIterator<Item = (&'a String, &'a V)>,
    layout: Layout<'_>,
    depth: usize,
    write: impl Fn(&mut String, &V),
) {
    let mut entries: Vec<(&String, &V)> = map.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut m = Members::object(out, layout, depth);
    for (k, v) in entries {
        m.key(out, k);
        write(out, v);
    }
    m.close(out);
}

fn write_extra(out: &mut String, m: &mut Members<'_>, extra: &Map<String, Value>) {
    for (k, v) in extra {
        m.key(out, k);
        gojson::write_value(out, v, m.layout(), m.inner());
    }
}

/// Why a `state.json` could not be used (SPEC 2.3 "Load"). Each message is one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateLoadError {
    /// Not JSON, not an object, or a value of the wrong type (the message names the key).
    #[error("malformed state.json: {0}")]
    Malformed(String),
    /// The file parsed, but its `version` is not 1 (0 when missing).
    #[error("state.json has version {0}, expected 1")]
    Version(i64),
    /// The file exists but cannot be read.
    #[error("cannot read state.json: {0}")]
    Io(String),
}

/// Parse `state.json` bytes with the runtime's rules (see the module documentation).
pub fn parse_state(bytes: &[u8]) -> Result<State, StateLoadError> {
    let text = go_tolerant(bytes);
    let mut state = State::zero();
    let mut de = serde_json::Deserializer::from_slice(&text);
    state
        .decode(&mut de, KeyPath::Root)
        .and_then(|()| de.end())
        .map_err(|e| StateLoadError::Malformed(e.to_string()))?;
    if state.version != 1 {
        return Err(StateLoadError::Version(state.version));
    }
    Ok(state)
}

/// [`parse_state`] for all but the ref maps, the token snapshot and the blocks' message
/// ids, topics and summaries, left empty (what a replay reads of a session's state: where
/// it keeps its blocks' archives). Those are read as JSON only: a file [`parse_state`]
/// refuses for what they hold is read for the rest.
pub fn parse_state_blocks(bytes: &[u8]) -> Result<State, StateLoadError> {
    let text = go_tolerant(bytes);
    let mut state = decode::BlocksOf(State::zero());
    let mut de = serde_json::Deserializer::from_slice(&text);
    state
        .decode(&mut de, KeyPath::Root)
        .and_then(|()| de.end())
        .map_err(|e| StateLoadError::Malformed(e.to_string()))?;
    if state.0.version != 1 {
        return Err(StateLoadError::Version(state.0.version));
    }
    Ok(state.0)
}

/// The outcome of loading a session's `state.json`: always a usable state.
#[derive(Debug, Clone, PartialEq)]
pub struct StateLoad {
    /// The loaded state, or [`State::initial`] when the file is missing or unusable.
    pub state: State,
    /// Why the file could not be used; `None` when loaded or missing.
    pub error: Option<StateLoadError>,
    /// Whether something exists at the path (a file, or anything that failed to read).
    pub exists: bool,
}

impl StateLoad {
    /// No `state.json`: the initial state of `session_id`, and no error.
    pub fn missing(session_id: &str) -> StateLoad {
        StateLoad {
            state: State::initial(session_id),
            error: None,
            exists: false,
        }
    }
}

/// Load `state.json`: a missing file gives the initial state and no error; a malformed file,
/// an I/O error or `version != 1` gives an error *and* the initial state of `session_id`.
/// Nothing is repaired or rebuilt here. A symbolic link is not followed (an I/O error).
pub fn load_state(path: &std::path::Path, session_id: &str) -> StateLoad {
    load_state_with(path, session_id, parse_state)
}

/// [`load_state`] by [`parse_state_blocks`].
pub fn load_state_blocks(path: &std::path::Path, session_id: &str) -> StateLoad {
    load_state_with(path, session_id, parse_state_blocks)
}

fn load_state_with(
    path: &std::path::Path,
    session_id: &str,
    parse: fn(&[u8]) -> Result<State, StateLoadError>,
) -> StateLoad {
    let failed = |error: StateLoadError| StateLoad {
        state: State::initial(session_id),
        error: Some(error),
        exists: true,
    };
    match crate::format::read_no_follow(path) {
        Ok(bytes) => match parse(&bytes) {
            Ok(state) => StateLoad {
                state,
                error: None,
                exists: true,
            },
            Err(e) => failed(e),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateLoad::missing(session_id),
        Err(e) => failed(StateLoadError::Io(format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_read_for_its_blocks_places_is_the_state_without_its_lists() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/norma/corpus/noa");
        let mut read = 0;
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let Ok(bytes) = std::fs::read(entry.path().join("state.json")) else {
                continue;
            };
            let mut whole = parse_state(&bytes).unwrap();
            assert!(!whole.message_refs.by_raw.is_empty());
            whole.message_refs = MessageRefs::default();
            whole.token_snapshot.clear();
            for b in whole.blocks.iter_mut().flatten() {
                assert!(!b.effective_message_ids.is_empty());
                b.direct_message_ids.clear();
                b.effective_message_ids.clear();
                b.topic.clear();
                b.summary.clear();
            }
            assert_eq!(parse_state_blocks(&bytes).unwrap(), whole);
            read += 1;
        }
        assert!(read > 0, "no corpus state under {dir}");
        // Keys fold as Go folds them, and the version is checked.
        let odd = br#"{"VERSION":1,"BLOCKS":[{"blockid":"b1","EffectiveMessageIds":["a"]}],
            "messagerefs":{"byRaw":{"a":"m00001"}},"blocks":[{"archivePath":"/x"}]}"#;
        let s = parse_state_blocks(odd).unwrap();
        assert_eq!(s.blocks()[0].block_id, "b1");
        // A repeated key decodes over what came before, as Go does.
        assert_eq!(s.blocks()[0].archive_path, "/x");
        assert!(s.blocks()[0].effective_message_ids.is_empty());
        assert!(s.message_refs.by_raw.is_empty());
        assert!(matches!(
            parse_state_blocks(br#"{"version":2}"#),
            Err(StateLoadError::Version(2))
        ));
        assert!(parse_state_blocks(b"{").is_err());
    }

    #[test]
    fn a_ref_map_knows_its_highest_ref_through_changes_and_copies() {
        let mut m: RefMap = [("a", "m00003"), ("b", BLOCKED), ("c", "x")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(m.highest_ref(), 3);
        m.insert("d".into(), "m00007".into());
        assert_eq!(m.highest_ref(), 7);
        let copy = m.clone();
        // The highest replaced, then removed: found again from what is left.
        m.insert("d".into(), "m00002".into());
        assert_eq!(m.highest_ref(), 3);
        m.insert("e".into(), "m00009".into());
        assert_eq!(m.remove("e").as_deref(), Some("m00009"));
        assert_eq!(m.highest_ref(), 3);
        m.to_mut().clear();
        assert_eq!(m.highest_ref(), 0);
        assert_eq!(m.highest_key_ref(), 0);
        m.insert("m00012".into(), "a".into());
        assert_eq!((m.highest_key_ref(), m.highest_ref()), (12, 0));
        // A copy is its own map.
        assert_eq!(copy.highest_ref(), 7);
        assert_eq!(copy.get("d").map(String::as_str), Some("m00007"));
        assert_ne!(copy, m);
    }

    #[test]
    fn go_folding_matches_only_what_go_matches() {
        assert!(go_fold_eq("sessionId", "sessionId"));
        assert!(go_fold_eq("SESSIONID", "sessionId"));
        assert!(go_fold_eq("\u{17f}essionId", "sessionId"));
        assert!(go_fold_eq("bloc\u{212a}Id", "blockId"));
        assert!(!go_fold_eq("sessionI", "sessionId"));
        assert!(!go_fold_eq("sessionIdx", "sessionId"));
        assert!(!go_fold_eq("session_id", "sessionId"));
        assert!(!go_fold_eq("seßionId", "sessionId"));
        // Dotless i and dotted capital I are outside the fold sets of i and I.
        assert!(!go_fold_eq("t\u{131}er", "tier"));
        assert!(!go_fold_eq("t\u{130}er", "tier"));
    }

    #[test]
    fn invalid_utf8_is_replaced_byte_by_byte() {
        let fixed = replace_invalid_utf8(b"a\xe2\x82b\xf0\x9f\x98\xffc\xed\xa0\x80");
        assert_eq!(
            String::from_utf8(fixed).as_deref(),
            Ok("a\u{fffd}\u{fffd}b\u{fffd}\u{fffd}\u{fffd}\u{fffd}c\u{fffd}\u{fffd}\u{fffd}")
        );
        assert!(matches!(
            go_tolerant(b"{\"a\": \"\xc3\xa9\"}"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn lone_surrogates_are_found_inside_strings_only() {
        let text = br#"{"\ud800": "\ud83d\ude00 \udc00 \\ud800 \ud800\u0041 \ud800"#;
        assert_eq!(lone_surrogate_escapes(text), [2, 25, 40, 53]);
        // Truncated input and escapes at the very end do not panic.
        for cut in 0..text.len() {
            lone_surrogate_escapes(&text[..cut]);
        }
        assert!(lone_surrogate_escapes(br#"{"a": "\u00e9\"\ud83d\ude00"}"#).is_empty());
    }

    #[test]
    fn key_paths_read_like_the_file() {
        let blocks = KeyPath::Key(&KeyPath::Root, "blocks");
        let second = KeyPath::Index(&blocks, 2);
        assert_eq!(KeyPath::Key(&second, "tier").to_string(), "blocks[2].tier");
        assert_eq!(KeyPath::Root.to_string(), "the top level");
    }

    /// The writer spells the fields in the order and with the names the reader matches.
    #[test]
    fn writer_and_reader_agree_on_fields() {
        let block = Block {
            block_id: "b1".into(),
            tier: 1,
            topic: "t".into(),
            summary: "s".into(),
            direct_message_ids: vec!["h".into()],
            effective_message_ids: vec!["h".into()],
            direct_block_ids: vec!["b0".into()],
            archive_path: "/a".into(),
            archive_rel: "a".into(),
            compressed_tokens: 1,
            start_ref: "m00001".into(),
            end_ref: "m00002".into(),
            created_at: 1,
            active: true,
            compress_call_id: "c".into(),
            extra: Map::new(),
        };
        let mut state = State::initial("s");
        state.blocks = Some(vec![block]);
        state.token_snapshot.insert("m00001".into(), 1);
        state.nudge.last_shown_by_tier.insert("1".into(), 1);
        state.derived_from = "p".into();
        let value: Value = serde_json::from_str(&state.to_json()).expect("valid JSON");
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(keys(&value), State::FIELDS);
        assert_eq!(keys(&value["blocks"][0]), Block::FIELDS);
        assert_eq!(keys(&value["messageRefs"]), MessageRefs::FIELDS);
        assert_eq!(keys(&value["nudge"]), NudgeState::FIELDS);
        assert_eq!(keys(&value["stats"]), Stats::FIELDS);
    }

    #[test]
    fn omitempty_fields_are_left_out_when_zero() {
        let mut state = State::initial("s");
        state.blocks = Some(vec![Block::default()]);
        assert_eq!(
            state.to_json(),
            "{\n  \"version\": 1,\n  \"sessionId\": \"s\",\n  \"nextBlockId\": 1,\n  \"blocks\": [\n    {\n      \"blockId\": \"\",\n      \"tier\": 0,\n      \"summary\": \"\",\n      \"compressedTokens\": 0,\n      \"active\": false\n    }\n  ],\n  \"messageRefs\": {\n    \"byRaw\": {},\n    \"byRef\": {}\n  },\n  \"nudge\": {\n    \"lastPerMessageNudgeTokens\": 0,\n    \"lastNudgeShownTokens\": 0\n  },\n  \"stats\": {\n    \"tokensCompressed\": 0,\n    \"compressionCount\": 0\n  }\n}"
        );
    }

    #[test]
    fn map_keys_are_sorted_byte_wise() {
        let mut state = State::initial("s");
        for k in ["m2", "M1", "m10", "é", "m1"] {
            state.token_snapshot.insert(k.into(), 1);
        }
        let json = state.to_json();
        let order: Vec<usize> = ["\"M1\"", "\"m1\"", "\"m10\"", "\"m2\"", "\"é\""]
            .iter()
            .filter_map(|k| json.find(k))
            .collect();
        assert_eq!(order.len(), 5);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{json}");
    }
}
