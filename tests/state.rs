//! `state.json` v1 against the runtime's own files: every one parses and re-serializes to its
//! exact bytes; unknown keys survive; the load rules fail where Go's decoder fails.

mod common;

use std::path::{Path, PathBuf};

use common::norma_data;
use normafs::format::state::{load_state, parse_state, Block, State, StateLoadError};
use proptest::prelude::*;

fn state_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            state_files(&path, found);
        } else if path.file_name().is_some_and(|n| n == "state.json") {
            found.push(path);
        }
    }
}

fn all_state_files() -> Vec<PathBuf> {
    let mut found = Vec::new();
    state_files(&norma_data(), &mut found);
    found.sort();
    found
}

fn parse(text: &str) -> Result<State, StateLoadError> {
    parse_state(text.as_bytes())
}

fn malformed(text: &str) -> String {
    match parse(text) {
        Err(StateLoadError::Malformed(m)) => m,
        other => panic!("expected Malformed for {text}, got {other:?}"),
    }
}

#[test]
fn every_runtime_state_file_round_trips_byte_for_byte() {
    let files = all_state_files();
    assert!(
        files.len() >= 15,
        "found only {} state.json files",
        files.len()
    );
    for path in &files {
        let bytes = std::fs::read(path).expect("readable");
        let state = parse_state(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(state.unknown_keys().is_empty(), "{}", path.display());
        let written = state.to_json();
        if written.as_bytes() != bytes.as_slice() {
            let at = written
                .bytes()
                .zip(bytes.iter())
                .position(|(a, b)| a != *b)
                .unwrap_or(written.len().min(bytes.len()));
            let from = at.saturating_sub(80);
            panic!(
                "{}: differs at byte {at}\nwritten: {:?}\nruntime: {:?}",
                path.display(),
                &written[from..(at + 80).min(written.len())],
                String::from_utf8_lossy(&bytes[from..(at + 80).min(bytes.len())]),
            );
        }
    }
}

#[test]
fn the_corpus_holds_what_the_model_expects() {
    let path = norma_data().join("corpus/noa/s3-tier2/state.json");
    let state = load_state(&path, "ignored");
    assert_eq!(state.error, None);
    assert!(state.exists);
    let state = state.state;
    assert_eq!(state.session_id, "s3-tier2");
    assert_eq!(state.next_block_id, 86);
    let b1 = &state.blocks()[0];
    assert_eq!(b1.block_id, "b1");
    assert_eq!(b1.tier, 1);
    assert_eq!(b1.start_ref, "m00004");
    assert_eq!(b1.created_at, 1796117656);
    assert!(!b1.active);
    assert!(state
        .blocks()
        .iter()
        .any(|b| b.tier == 2 && !b.direct_block_ids.is_empty()));
    assert!(state.message_refs.by_raw.values().any(|r| r == "BLOCKED"));
    assert!(state.message_refs.by_raw.len() > state.message_refs.by_ref.len());
}

#[test]
fn initial_state_is_the_rebuild_that_replayed_nothing() {
    let path = norma_data().join("oracle/s1-small/rebuild/state.json");
    let runtime = std::fs::read_to_string(path).expect("readable");
    let initial = State::initial("s1-small");
    assert_eq!(initial.to_json(), runtime);
    assert_eq!(parse(&runtime), Ok(initial.clone()));
    assert_eq!(initial.blocks, None);
    assert!(initial.blocks().is_empty());
}

#[test]
fn blocks_null_absent_and_empty() {
    let base = r#"{"version": 1, "blocks": BLOCKS}"#;
    let with = |b: &str| parse(&base.replace("BLOCKS", b)).expect("parses");
    assert_eq!(with("null").blocks, None);
    assert_eq!(parse(r#"{"version": 1}"#).expect("parses").blocks, None);
    let empty = with("[]");
    assert_eq!(empty.blocks, Some(vec![]));
    assert!(empty.to_json().contains("\"blocks\": [],"));
    assert!(with("null").to_json().contains("\"blocks\": null,"));
    // A null element is a zero block, as Go decodes it.
    assert_eq!(with("[null]").blocks, Some(vec![Block::default()]));
}

const WITH_UNKNOWN_KEYS: &str = r#"{
  "version": 1,
  "sessionId": "s",
  "nextBlockId": 2,
  "blocks": [
    {
      "blockId": "b1",
      "tier": 1,
      "summary": "x \u003c y",
      "compressedTokens": 3,
      "active": true,
      "bar": {
        "deep": [
          1,
          2.5,
          "\u0026"
        ],
        "empty": {}
      },
      "alpha": null
    }
  ],
  "messageRefs": {
    "byRaw": {
      "h_1": "m00001",
      "h_2": "BLOCKED"
    },
    "byRef": {
      "m00001": "h_1"
    },
    "zeta": [],
    "aleph": "a"
  },
  "tokenSnapshot": {
    "m00001": 12
  },
  "nudge": {
    "lastPerMessageNudgeTokens": 0,
    "lastNudgeShownTokens": 0,
    "lastShownByTier": {
      "1": 5,
      "2": 7
    },
    "baz": true
  },
  "stats": {
    "tokensCompressed": 3,
    "compressionCount": 1,
    "y": 1e+21
  },
  "derivedFrom": "parent",
  "foo": "kept",
  "another": -7
}"#;

#[test]
fn unknown_keys_at_every_level_round_trip_and_are_named() {
    let state = parse(WITH_UNKNOWN_KEYS).expect("parses");
    assert_eq!(state.to_json(), WITH_UNKNOWN_KEYS);
    assert_eq!(
        state.unknown_keys(),
        [
            "foo",
            "another",
            "blocks[0].bar",
            "blocks[0].alpha",
            "messageRefs.zeta",
            "messageRefs.aleph",
            "nudge.baz",
            "stats.y",
        ]
    );
    assert_eq!(state.derived_from, "parent");
    assert_eq!(state.blocks()[0].summary, "x < y");
}

#[test]
fn keys_match_fields_case_insensitively_as_in_go() {
    // Kelvin sign (U+212A) and long s (U+017F) fold to K and S in Go's matching.
    let state = parse(
        "{\"VERSION\": 1, \"\u{17f}essionid\": \"s\", \"blocks\": [{\"BlockID\": \"b1\", \"tier\": 1}], \
         \"stats\": {\"tokensCompre\u{17f}\u{17f}ed\": 4}, \"nudge\": {\"LASTNUDGESHOWNTOKENS\": 2}}",
    )
    .expect("parses");
    assert_eq!(state.session_id, "s");
    assert_eq!(state.blocks()[0].block_id, "b1");
    assert_eq!(state.stats.tokens_compressed, 4);
    assert_eq!(state.nudge.last_nudge_shown_tokens, 2);
    assert!(state.unknown_keys().is_empty());
    // Full Unicode case mapping is not Go's: "ß" is not "ss".
    let state = parse(r#"{"version": 1, "seßionId": "s"}"#).expect("parses");
    assert_eq!(state.session_id, "");
    assert_eq!(state.unknown_keys(), ["seßionId"]);
}

#[test]
fn wrong_types_are_malformed_and_name_the_key() {
    let cases = [
        (
            r#"{"version": 1, "blocks": [{"createdAt": "2026-01-01"}]}"#,
            "blocks[0].createdAt",
        ),
        (
            r#"{"version": 1, "blocks": [{}, {"tier": 1.5}]}"#,
            "blocks[1].tier",
        ),
        (
            r#"{"version": 1, "blocks": [{"tier": "1"}]}"#,
            "blocks[0].tier",
        ),
        (
            r#"{"version": 1, "blocks": [{"tier": 1e2}]}"#,
            "blocks[0].tier",
        ),
        (
            r#"{"version": 1, "blocks": [{"active": 1}]}"#,
            "blocks[0].active",
        ),
        (
            r#"{"version": 1, "blocks": [{"summary": 3}]}"#,
            "blocks[0].summary",
        ),
        (
            r#"{"version": 1, "blocks": [{"directMessageIds": [1]}]}"#,
            "blocks[0].directMessageIds[0]",
        ),
        (
            r#"{"version": 1, "blocks": [{"directBlockIds": "b1"}]}"#,
            "blocks[0].directBlockIds",
        ),
        (r#"{"version": 1, "blocks": ["b1"]}"#, "blocks[0]"),
        (r#"{"version": 1, "blocks": {}}"#, "blocks"),
        (r#"{"version": 1, "messageRefs": []}"#, "messageRefs"),
        (
            r#"{"version": 1, "messageRefs": {"byRaw": {"h_1": 5}}}"#,
            "messageRefs.byRaw.h_1",
        ),
        (
            r#"{"version": 1, "tokenSnapshot": {"m00001": "3"}}"#,
            "tokenSnapshot.m00001",
        ),
        (
            r#"{"version": 1, "nudge": {"lastShownByTier": {"1": true}}}"#,
            "nudge.lastShownByTier.1",
        ),
        (
            r#"{"version": 1, "stats": {"compressionCount": -1.0}}"#,
            "stats.compressionCount",
        ),
        (
            r#"{"version": 1, "nextBlockId": 9223372036854775808}"#,
            "nextBlockId",
        ),
        (r#"{"version": "1"}"#, "version"),
        (r#"{"version": 2, "sessionId": 5}"#, "sessionId"),
    ];
    for (text, key) in cases {
        let message = malformed(text);
        assert!(
            message.contains(key),
            "{text}: {message:?} does not name {key}"
        );
        assert!(!message.contains('\n'), "{message:?}");
    }
}

#[test]
fn a_long_wrong_string_is_cut_short_in_the_message() {
    let long = "x".repeat(10_000);
    let message = malformed(&format!(r#"{{"version": 1, "nextBlockId": "{long}"}}"#));
    assert!(message.len() < 200, "{message}");
    assert!(message.contains("nextBlockId"));
}

#[test]
fn version_other_than_one() {
    assert_eq!(parse(r#"{"version": 2}"#), Err(StateLoadError::Version(2)));
    assert_eq!(
        parse(r#"{"version": -1}"#),
        Err(StateLoadError::Version(-1))
    );
    // Missing or null: Go's zero value.
    assert_eq!(
        parse(r#"{"sessionId": "s"}"#),
        Err(StateLoadError::Version(0))
    );
    assert_eq!(
        parse(r#"{"version": null}"#),
        Err(StateLoadError::Version(0))
    );
    let message = StateLoadError::Version(2).to_string();
    assert!(message.contains("version 2"), "{message}");
}

#[test]
fn null_and_missing_give_zero_values() {
    let state = parse(
        r#"{"version": 1, "sessionId": null, "nextBlockId": null, "messageRefs": null,
            "tokenSnapshot": null, "nudge": {"lastShownByTier": null}, "stats": null,
            "blocks": [{"blockId": null, "tier": null, "directMessageIds": null, "active": null}]}"#,
    )
    .expect("parses");
    assert_eq!(state.session_id, "");
    assert_eq!(state.next_block_id, 0);
    assert!(state.message_refs.by_raw.is_empty());
    assert!(state.token_snapshot.is_empty());
    assert_eq!(state.blocks, Some(vec![Block::default()]));
    // A null map value stores the zero value.
    let state = parse(r#"{"version": 1, "messageRefs": {"byRaw": {"h": null}}}"#).expect("parses");
    assert_eq!(
        state.message_refs.by_raw.get("h").map(String::as_str),
        Some("")
    );
}

#[test]
fn next_block_id_below_one_is_kept_as_read() {
    for n in [0, -3] {
        let state = parse(&format!(r#"{{"version": 1, "nextBlockId": {n}}}"#)).expect("parses");
        assert_eq!(state.next_block_id, n);
        assert!(state.to_json().contains(&format!("\"nextBlockId\": {n},")));
    }
}

#[test]
fn not_an_object_or_not_json_is_malformed() {
    for text in [
        "",
        "null",
        "[]",
        "1",
        "\"s\"",
        "{",
        "{\"version\": 1,}",
        "{\"version\": 1} x",
        "\u{feff}{}",
    ] {
        malformed(text);
    }
    assert!(malformed("[]").contains("top level"));
}

#[test]
fn duplicate_keys_decode_like_go() {
    // Objects merge, maps gain entries, the last scalar wins; null leaves a scalar alone.
    let state = parse(
        r#"{"version": 1, "version": null, "stats": {"tokensCompressed": 1},
            "stats": {"compressionCount": 2},
            "messageRefs": {"byRaw": {"a": "1"}}, "messageRefs": {"byRaw": {"b": "2"}},
            "blocks": [{"blockId": "b1", "tier": 1}, {"blockId": "b2"}], "blocks": [{"tier": 2}]}"#,
    )
    .expect("parses");
    assert_eq!(state.version, 1);
    assert_eq!(
        (state.stats.tokens_compressed, state.stats.compression_count),
        (1, 2)
    );
    assert_eq!(state.message_refs.by_raw.len(), 2);
    let blocks = state.blocks();
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0].block_id.as_str(), blocks[0].tier), ("b1", 2));
}

#[test]
fn invalid_utf8_and_lone_surrogates_become_replacement_characters() {
    let mut bytes = br#"{"version": 1, "sessionId": "a"#.to_vec();
    bytes.extend_from_slice(&[0xe2, 0x82, b'b', 0xff]);
    bytes.extend_from_slice(br#"", "derivedFrom": "\ud800x\udc00\ud83d\ude00\\ud800"}"#);
    let state = parse_state(&bytes).expect("parses as Go does");
    assert_eq!(state.session_id, "a\u{fffd}\u{fffd}b\u{fffd}");
    assert_eq!(state.derived_from, "\u{fffd}x\u{fffd}😀\\ud800");
    // Outside a string, an invalid byte is still a syntax error.
    assert!(matches!(
        parse_state(b"{\"version\": 1}\xff"),
        Err(StateLoadError::Malformed(_))
    ));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let depth = 100_000;
    let text = format!(
        r#"{{"version": 1, "foo": {}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    malformed(&text);
    let text = format!("{}{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    malformed(&text);
}

#[test]
fn a_hundred_thousand_refs_load_and_write_fast() {
    let n = 100_000;
    let mut state = State::initial("big");
    for i in 0..n {
        let raw = format!("h_{i:016x}");
        let r = format!("m{i:05}");
        state.message_refs.by_raw.insert(raw.clone(), r.clone());
        state.message_refs.by_ref.insert(r.clone(), raw);
        state.token_snapshot.insert(r, i);
    }
    let started = std::time::Instant::now();
    let text = state.to_json();
    let back = parse(&text).expect("parses");
    assert_eq!(back, state);
    assert_eq!(back.to_json(), text);
    // Generous: a debug-ish test build on a shared machine; the real cost is well under this.
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn load_state_missing_malformed_and_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.json");
    let missing = load_state(&path, "s");
    assert_eq!((missing.exists, missing.error), (false, None));
    assert_eq!(missing.state, State::initial("s"));

    std::fs::write(&path, "{\"version\": 3}").expect("write");
    let bad = load_state(&path, "s");
    assert!(bad.exists);
    assert_eq!(bad.error, Some(StateLoadError::Version(3)));
    assert_eq!(bad.state, State::initial("s"));

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    let linked = load_state(&link, "s");
    assert!(
        matches!(linked.error, Some(StateLoadError::Io(_))),
        "{:?}",
        linked.error
    );
    assert_eq!(linked.state, State::initial("s"));

    std::fs::create_dir(dir.path().join("dir.json")).expect("mkdir");
    let not_a_file = load_state(&dir.path().join("dir.json"), "s");
    assert!(matches!(not_a_file.error, Some(StateLoadError::Io(_))));
}

fn text() -> impl Strategy<Value = String> {
    // Characters Go escapes, some it does not, and plain ones.
    proptest::collection::vec(
        prop_oneof![
            Just('<'),
            Just('>'),
            Just('&'),
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('\u{8}'),
            Just('\u{1f}'),
            Just('\u{7f}'),
            Just('\u{2028}'),
            Just('\u{2029}'),
            Just('é'),
            Just('😀'),
            Just(' '),
            proptest::char::range('a', 'z'),
        ],
        0..8,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn block() -> impl Strategy<Value = Block> {
    (
        (
            text(),
            any::<i64>(),
            text(),
            text(),
            proptest::collection::vec(text(), 0..3),
        ),
        (text(), any::<i64>(), any::<i64>(), any::<bool>(), text()),
    )
        .prop_map(
            |((block_id, tier, topic, summary, ids), (path, tokens, created, active, call))| {
                Block {
                    block_id,
                    tier,
                    topic,
                    summary,
                    direct_message_ids: ids.clone(),
                    effective_message_ids: ids,
                    archive_path: path,
                    compressed_tokens: tokens,
                    created_at: created,
                    active,
                    compress_call_id: call,
                    ..Block::default()
                }
            },
        )
}

fn state() -> impl Strategy<Value = State> {
    (
        text(),
        any::<i64>(),
        proptest::option::of(proptest::collection::vec(block(), 0..3)),
        proptest::collection::hash_map(text(), text(), 0..5),
        proptest::collection::hash_map(text(), any::<i64>(), 0..5),
        proptest::collection::btree_map(text(), any::<i64>(), 0..3),
        text(),
    )
        .prop_map(|(sid, next, blocks, by_raw, snapshot, by_tier, derived)| {
            let mut state = State::initial(&sid);
            state.next_block_id = next;
            state.blocks = blocks;
            state.message_refs.by_ref =
                by_raw.iter().map(|(k, v)| (v.clone(), k.clone())).collect();
            state.message_refs.by_raw = by_raw.into_iter().collect();
            state.token_snapshot = snapshot.into_iter().collect();
            state.nudge.last_shown_by_tier = by_tier;
            state.derived_from = derived;
            state
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn written_states_read_back_equal(state in state()) {
        let text = state.to_json();
        let back = parse(&text);
        prop_assert_eq!(back.as_ref(), Ok(&state));
        prop_assert!(!text.ends_with('\n'));
    }

    #[test]
    fn arbitrary_edits_never_panic(at in 0usize..4000, bytes in proptest::collection::vec(any::<u8>(), 0..6)) {
        let path = norma_data().join("corpus/noa/s2-tier1/state.json");
        let mut original = std::fs::read(path).expect("readable");
        let at = at.min(original.len());
        original.splice(at..at, bytes);
        if let Ok(state) = parse_state(&original) {
            // Whatever parsed writes and reads back the same.
            let back = parse(&state.to_json());
            prop_assert_eq!(back.as_ref(), Ok(&state));
        }
    }
}
