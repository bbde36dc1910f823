//! Noa `state.json` v1 (SPEC 2.3): lossless round trips and the load rules.

use std::fs;
use std::path::{Path, PathBuf};

use normafs::format::state::{load_state, parse_state, BlockId, State, StateLoadError};
use serde_json::{json, Value};

fn example_state_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/example-root/noa/7f0c2a/state.json")
}

#[test]
fn example_state_round_trips() {
    let bytes = fs::read(example_state_path()).unwrap();
    let state = parse_state(&bytes).unwrap();
    assert_eq!(state.session_id, "7f0c2a");
    assert_eq!(state.next_block_id, 3);
    assert_eq!(state.blocks.len(), 2);
    assert_eq!(state.blocks[1].block_id, BlockId::Name("b2".to_string()));
    assert_eq!(state.blocks[0].archive_rel, "tier1/b1_m0001-m0006.md");
    assert_eq!(state.message_refs.by_ref.len(), 14);
    assert_eq!(state.stats.tokens_compressed, 136);

    // Same JSON value, and the very same bytes: normafs's pretty form only adds the final
    // newline that the runtime's file lacks.
    let original: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(serde_json::to_value(&state).unwrap(), original);
    let mut expected = String::from_utf8(bytes).unwrap();
    expected.push('\n');
    assert_eq!(state.to_pretty(), expected);

    // Compact canonical input serializes back to identical compact bytes.
    let compact = serde_json::to_string(&original).unwrap();
    let again = parse_state(compact.as_bytes()).unwrap();
    assert_eq!(serde_json::to_string(&again).unwrap(), compact);
}

/// A compact state with unknown fields at every level, each after the known fields (the
/// order normafs writes them back in).
const WITH_UNKNOWN: &str = concat!(
    r#"{"version":1,"sessionId":"s1","nextBlockId":4,"blocks":[{"blockId":"b1","tier":1,"#,
    r#""summary":"s","effectiveMessageIds":["u1"],"directBlockIds":[],"archivePath":"/a","#,
    r#""archiveRel":"tier1/b1_m0001-m0001.md","compressedTokens":5,"startRef":"m0001","#,
    r#""endRef":"m0001","createdAt":"t","active":true,"compressCallId":"c","#,
    r#""blockFuture":{"x":[1,2]}}],"#,
    r#""messageRefs":{"byRaw":{"u1":"m0001"},"byRef":{"m0001":"u1"},"refsFuture":"r"},"#,
    r#""tokenSnapshot":{"byRef":{"m0001":5},"snapFuture":true},"#,
    r#""nudge":{"lastPerMessageNudgeTokens":1,"lastNudgeShownTokens":2,"nudgeFuture":null},"#,
    r#""stats":{"tokensCompressed":5,"compressionCount":1,"statsFuture":7.5},"#,
    r#""rootFuture":{"nested":{"deep":["a"]}}}"#
);

#[test]
fn unknown_fields_survive_at_every_level() {
    let state = parse_state(WITH_UNKNOWN.as_bytes()).unwrap();
    assert_eq!(
        state.extra["rootFuture"],
        json!({"nested": {"deep": ["a"]}})
    );
    assert_eq!(state.blocks[0].extra["blockFuture"], json!({"x": [1, 2]}));
    assert_eq!(state.message_refs.extra["refsFuture"], json!("r"));
    assert_eq!(
        state.token_snapshot.as_ref().unwrap().extra["snapFuture"],
        json!(true)
    );
    assert_eq!(state.nudge.extra["nudgeFuture"], Value::Null);
    assert_eq!(state.stats.extra["statsFuture"], json!(7.5));
    assert_eq!(serde_json::to_string(&state).unwrap(), WITH_UNKNOWN);
}

#[test]
fn unknown_fields_in_any_position_keep_the_json_value() {
    // Unknown keys before known ones: the value survives even though the key order changes.
    let input = json!({
        "zFirst": 1, "version": 1, "sessionId": "s1",
        "blocks": [{"early": "e", "blockId": "b1", "tier": 2, "summary": "", "effectiveMessageIds": [],
                    "archiveRel": "r", "startRef": "m0001", "endRef": "m0002", "active": false}],
        "nudge": {"x": 1}
    });
    let state = parse_state(input.to_string().as_bytes()).unwrap();
    let back = serde_json::to_value(&state).unwrap();
    assert_eq!(back["zFirst"], json!(1));
    assert_eq!(back["blocks"][0]["early"], json!("e"));
    assert_eq!(back["nudge"]["x"], json!(1));
}

#[test]
fn numeric_block_id_reads_as_b_n_and_writes_back_as_number() {
    let input = WITH_UNKNOWN.replace(r#""blockId":"b1""#, r#""blockId":3"#);
    let state = parse_state(input.as_bytes()).unwrap();
    let block = &state.blocks[0];
    assert_eq!(block.block_id, BlockId::Number(3));
    assert_eq!(block.block_id.name(), "b3");
    assert_eq!(block.block_id.number(), Some(3));
    assert!(state.block(&BlockId::Name("b3".to_string())).is_some());
    assert_eq!(serde_json::to_string(&state).unwrap(), input);
}

#[test]
fn parse_errors_are_classified() {
    type Check = fn(&StateLoadError) -> bool;
    let cases: [(&str, Check); 7] = [
        ("{not json", |e| matches!(e, StateLoadError::Malformed(_))),
        ("", |e| matches!(e, StateLoadError::Malformed(_))),
        (
            "[1, 2]",
            |e| matches!(e, StateLoadError::Malformed(m) if m.contains("array")),
        ),
        (
            r#"{"sessionId":"s"}"#,
            |e| matches!(e, StateLoadError::Malformed(m) if m.contains("version")),
        ),
        // Version 2 in a shape v1 does not know: the version is what is reported.
        (r#"{"version":2,"blocks":"whatever"}"#, |e| {
            *e == StateLoadError::Version("2".to_string())
        }),
        (r#"{"version":"1"}"#, |e| {
            *e == StateLoadError::Version("\"1\"".to_string())
        }),
        // Version 1 with a wrong shape.
        (r#"{"version":1,"blocks":"whatever"}"#, |e| {
            matches!(e, StateLoadError::Malformed(_))
        }),
    ];
    for (input, ok) in cases {
        let err = parse_state(input.as_bytes()).unwrap_err();
        assert!(ok(&err), "{input:?} gave {err:?}");
        assert!(!err.to_string().is_empty());
    }
    let msg = StateLoadError::Version("2".to_string()).to_string();
    assert!(msg.contains('2') && msg.contains("expected 1"), "{msg}");
}

#[test]
fn minimal_state_gets_defaults() {
    let state = parse_state(br#"{"version":1}"#).unwrap();
    assert_eq!(state.next_block_id, 1);
    assert!(state.blocks.is_empty());
}

#[test]
fn load_missing_file_is_initial_state_without_error() {
    let tmp = tempfile::tempdir().unwrap();
    let load = load_state(&tmp.path().join("state.json"), "s9");
    assert!(!load.exists);
    assert_eq!(load.error, None);
    assert_eq!(load.state, State::initial("s9"));
    assert_eq!(load.state.next_block_id, 1);
}

#[test]
fn load_good_file() {
    let load = load_state(&example_state_path(), "7f0c2a");
    assert!(load.exists);
    assert_eq!(load.error, None);
    assert_eq!(load.state.blocks.len(), 2);
}

#[test]
fn load_failures_give_error_and_initial_state() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8]); 3] = [
        ("malformed", b"{\"version\": 1, \"blocks\": ["),
        ("array", b"[]"),
        ("v2", br#"{"version":2,"sessionId":"s1"}"#),
    ];
    for (name, bytes) in cases {
        let path = tmp.path().join(format!("{name}.json"));
        fs::write(&path, bytes).unwrap();
        let load = load_state(&path, "s1");
        assert!(load.exists, "{name}");
        assert!(load.error.is_some(), "{name}");
        assert_eq!(load.state, State::initial("s1"), "{name}");
    }
    let v2 = load_state(&tmp.path().join("v2.json"), "s1");
    assert_eq!(v2.error, Some(StateLoadError::Version("2".to_string())));

    // A directory where the file should be: an I/O error, not "missing".
    let dir = tmp.path().join("state.json");
    fs::create_dir(&dir).unwrap();
    let load = load_state(&dir, "s1");
    assert!(load.exists);
    assert!(
        matches!(load.error, Some(StateLoadError::Io(_))),
        "{:?}",
        load.error
    );
    assert_eq!(load.state, State::initial("s1"));
}
