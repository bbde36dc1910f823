//! Transcript records round-trip losslessly; the tolerant loader finds every record and problem,
//! incrementally exactly as in one pass; transcript files refresh by appending or reloading.

mod common;

use std::fs;
use std::path::PathBuf;

use common::append;
use normafs::format::loader::{Parser, Problem, ProblemKind, Severity, Transcript};
use normafs::format::transcript::{parse_line, Content, Record, ToolResultContent};
use normafs::store::transcripts::{sidechain_paths, Refresh, TranscriptFile};
use proptest::prelude::*;
use serde_json::{json, Value};

/// The runtime's corpus (SPEC 0): every transcript in it was written by the runtime itself.
fn example_root() -> PathBuf {
    common::norma_data().join("corpus")
}

/// The example: the corpus session with a subagent.
const SID: &str = "s4-subagent";

fn main_transcript() -> PathBuf {
    example_root().join(format!("transcripts/{SID}.jsonl"))
}

fn sidechain_transcript() -> PathBuf {
    example_root().join(format!("transcripts/{SID}/subagents/agent-a7f3c2.jsonl"))
}

/// Every transcript of the corpus, sidechains included.
fn corpus_transcripts() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(example_root().join("transcripts"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v.push(sidechain_transcript());
    v
}

/// Lines of a file without their newlines.
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if bytes.ends_with(b"\n") {
        v.pop();
    }
    v
}

/// Parse then serialize: the same JSON value, and for canonical input (compact, keys in the
/// runtime's order) the same bytes.
fn assert_round_trip(line: &str, canonical: bool) -> Record {
    let record = parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{e}: {line}"));
    let out = record.to_line();
    let input: Value = serde_json::from_str(line).unwrap();
    let output: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(input, output, "value changed: {line}");
    if canonical {
        assert_eq!(out, line, "bytes changed");
    }
    record
}

fn kinds(problems: &[Problem]) -> Vec<(ProblemKind, u64, u64)> {
    problems
        .iter()
        .map(|p| (p.kind, p.line, p.offset))
        .collect()
}

/// Two loads agree on everything a caller can see.
fn assert_same(a: &Transcript, b: &Transcript) {
    assert_eq!(a.records, b.records);
    assert_eq!(a.messages, b.messages);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.problems(), b.problems());
}

// ---------------------------------------------------------------- round trips

#[test]
fn example_records_round_trip_byte_for_byte() {
    let paths = corpus_transcripts();
    assert_eq!(paths.len(), 6);
    for path in paths {
        let bytes = fs::read(&path).unwrap();
        let lines = lines(&bytes);
        assert!(!lines.is_empty());
        for line in lines {
            let line = std::str::from_utf8(line).unwrap();
            assert_round_trip(line, true);
        }
    }
}

const HAND_WRITTEN: &[&str] = &[
    // text, minimal record
    r#"{"uuid":"u1","type":"message","message":{"role":"user","content":[{"type":"text","text":"héllo 日本 🎉"}]}}"#,
    // thinking with and without signature, tool_use with nested input, usage
    r#"{"uuid":"u2","parent_uuid":"u1","session_id":"s1","timestamp":"2026-10-02T09:00:11.000000001Z","type":"message","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"c2ln"},{"type":"thinking","thinking":"no signature"},{"type":"tool_use","id":"t1","name":"Edit","input":{"z":1,"a":[1,2.5,{"deep":{"deeper":[true,null,"x"]}}],"m":null}}]},"usage":{"input_tokens":10,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4}}"#,
    // tool_use with a non-object input
    r#"{"uuid":"u2b","type":"message","message":{"role":"assistant","content":[{"type":"tool_use","id":"t9","name":"Raw","input":"just a string"},{"type":"tool_use","id":"t8","name":"Arr","input":[1,[2,[3]]]}]}}"#,
    // tool_result: array content, string content with is_error, no content, nested unknown
    r#"{"uuid":"u3","type":"message","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"},{"type":"image","source":{"b":1}}]},{"type":"tool_result","tool_use_id":"t2","content":"plain string","is_error":true},{"type":"tool_result","tool_use_id":"t3","is_error":false}]}}"#,
    // compact_boundary with an object and with a bare integer
    r#"{"uuid":"u4","type":"message","message":{"role":"system","content":[{"type":"compact_boundary","input":{"trigger":"manual","pre_tokens":5,"messages_summarized":3,"active_skills":["rust"]}},{"type":"compact_boundary","input":151000}]}}"#,
    // skill with odd fields, an unknown type, an item without type, a known type that does not fit
    r#"{"uuid":"u5","type":"message","message":{"role":"user","content":[{"type":"skill","name":"rust","weird":[1,{"x":null}],"n":1.5,"nested":{"k":{"v":[]}}},{"type":"hologram","data":{"q":[1,2]}},{"no_type":1},{"type":"text","text":5},"bare string",7]}}"#,
    // unknown top-level fields and unknown nested fields
    r#"{"uuid":"u6","session_id":"s1","agent_id":"ag-1","is_sidechain":true,"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"x","citations":[{"url":"u"}]},{"type":"thinking","thinking":"t","signature":"s","redacted":false},{"type":"tool_use","id":"t4","name":"N","input":{},"cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"t4","content":[],"is_error":false,"meta":1}],"model":"m-1","stop_reason":"end"},"usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":0,"cache_write_tokens":0,"service_tier":"p"},"future_field":{"a":1},"another":[true]}"#,
    // message: null, usage: null
    r#"{"uuid":"u7","type":"message","message":null,"usage":null}"#,
    // a boundary record, with unknown boundary fields
    r#"{"uuid":"u8","parent_uuid":"u7","type":"boundary","boundary":{"trigger":"auto","pre_tokens":151000,"messages_summarized":12,"active_skills":["rust"],"reason":"x"}}"#,
    // boundary: null
    r#"{"uuid":"u9","type":"boundary","boundary":null}"#,
    // optional fields written as null: typed, and the nulls written back
    r#"{"uuid":"u13","type":"message","message":{"role":"user","content":[{"type":"thinking","thinking":"t","signature":null},{"type":"tool_result","tool_use_id":"t5","content":null,"is_error":null}]}}"#,
    // an unknown record type
    r#"{"uuid":"u10","type":"checkpoint","payload":{"k":[1,2,3]}}"#,
    // an `input` on kinds that have none of their own, kept in `extra` as written
    r#"{"uuid":"u5b","type":"message","message":{"role":"assistant","content":[{"type":"thinking","thinking":"","input":true},{"type":"text","text":"t","input":{"a":[1]}},{"type":"tool_result","tool_use_id":"t1","content":"r","input":"s"}]}}"#,
];

/// Value-equal after a round trip, not byte-equal.
const NON_CANONICAL: &[&str] = &[
    // unknown fields interleaved with known ones
    r#"{"zzz":1,"uuid":"u11","type":"message","aaa":2,"message":{"extra_first":true,"role":"user","content":[{"text":"t","type":"text"}]}}"#,
    // nulls for optional record fields and for message content
    r#"{"uuid":"u14","parent_uuid":null,"session_id":null,"agent_id":null,"is_sidechain":null,"timestamp":null,"type":"message","message":{"role":"user","content":null}}"#,
    // non-canonical spelling (whitespace, escapes): value-equal
    r#"{ "uuid" : "u12", "type":"message", "message": {"role":"user","content":[{"type":"text","text":"caf\u00e9 \n"}]} } "#,
];

#[test]
fn hand_written_records_round_trip() {
    for line in HAND_WRITTEN {
        assert_round_trip(line, true);
    }
    for line in NON_CANONICAL {
        assert_round_trip(line, false);
    }
}

/// Fields the model does not know are kept as read and given back in their order, as a map
/// when asked for; a known field twice is still an error, an unknown one twice keeps its first
/// place and its last value.
#[test]
fn unknown_fields_are_kept_and_read_back_in_order() {
    let line = r#"{"uuid":"a","cwd":"/home/dev","type":"message","version":"2.0.14","message":{"role":"user","content":[{"type":"text","text":"hi"}],"model":"m\u00e9","stop":null},"git_branch":"feat/세션","parent_uuid":null,"nested":{"z":[1,2.5e3,{"q":"\"x\""}],"a":true}}"#;
    let r = assert_round_trip(line, false);
    let keys: Vec<&str> = r.extra.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["cwd", "version", "git_branch", "parent_uuid", "nested"]
    );
    assert_eq!(r.extra["git_branch"], "feat/세션");
    assert_eq!(r.extra["nested"]["z"][2]["q"], "\"x\"");
    assert!(r.parent_uuid.is_none());
    let m = r.as_message().expect("a message");
    assert_eq!(m.extra["model"], "mé");
    assert!(m.extra["stop"].is_null());
    // Changed through the map, written back changed.
    let mut r2 = r.clone();
    r2.extra.insert("cwd".into(), json!("/tmp"));
    let v: Value = serde_json::from_str(&r2.to_line()).unwrap();
    assert_eq!(v["cwd"], "/tmp");
    assert_eq!(v["nested"]["a"], true);
    assert_ne!(r, r2);
    // Twice: a known optional field is an error (null or not); an unknown one is not.
    for twice in [
        r#"{"uuid":"a","type":"x","parent_uuid":null,"parent_uuid":null}"#,
        r#"{"uuid":"a","type":"x","timestamp":null,"timestamp":"t"}"#,
        r#"{"uuid":"a","type":"x","timestamp":"t","timestamp":null}"#,
    ] {
        assert!(parse_line(twice.as_bytes()).is_err(), "{twice}");
    }
    let r = parse_line(br#"{"uuid":"a","k":1,"type":"x","k":2}"#).expect("parses");
    assert_eq!(r.extra.len(), 1);
    assert_eq!(r.extra["k"], 2);
}

/// An unknown field is written back as serde_json writes the `Value` it reads, whatever the
/// value: strings with every kind of escape, numbers, literals and nesting, in a record and
/// in a message.
#[test]
fn unknown_fields_are_written_back_as_their_values_write() {
    let values = [
        r#""/home/dev/project""#,
        r#""caf\u00e9 \n \t \" \\ \/ \u0001 \u001f \u007f \u2028 \ud83c\udf89 세션""#,
        r#""""#,
        "0",
        "-0",
        "-5",
        "1E5",
        "2.5e3",
        "1.0",
        "0.1",
        "1e-7",
        "12345678901234567890",
        "-9223372036854775808",
        "true",
        "false",
        "null",
        "{}",
        "[]",
        r#"{"z":[1,2.5e3,{"q":"\"x\""}],"a":true,"n":null,"e":"\u00e9"}"#,
        r#"[[],[{}],"s",-1.5E-3]"#,
    ];
    for v in values {
        let want = serde_json::to_string(&serde_json::from_str::<Value>(v).expect(v)).expect(v);
        for line in [
            format!(r#"{{"uuid":"a","f":{v},"type":"x"}}"#),
            format!(
                r#"{{"uuid":"a","type":"message","message":{{"role":"user","f":{v},"content":[]}}}}"#
            ),
        ] {
            let r = parse_line(line.as_bytes()).expect(&line);
            let back = r.to_line();
            assert!(back.contains(&format!(r#""f":{want}"#)), "{line} -> {back}");
        }
    }
}

#[test]
fn hand_written_records_are_typed_as_expected() {
    let r = parse_line(HAND_WRITTEN[1].as_bytes()).unwrap();
    let msg = r.as_message().unwrap();
    assert!(
        matches!(&msg.content[0], Content::Thinking(t) if t.signature.as_ref().is_some_and(|s| s.get() == "c2ln"))
    );
    assert!(matches!(&msg.content[1], Content::Thinking(t) if t.signature.is_none()));
    assert!(
        matches!(&msg.content[2], Content::ToolUse(u) if u.input.to_value()["a"][2]["deep"]["deeper"][2] == "x")
    );

    let r = parse_line(HAND_WRITTEN[3].as_bytes()).unwrap();
    let c = &r.as_message().unwrap().content;
    let Content::ToolResult(first) = &c[0] else {
        panic!("not a tool_result: {:?}", c[0])
    };
    assert_eq!(first.items().len(), 2);
    assert_eq!(first.items()[1].type_name(), "image");
    let Content::ToolResult(second) = &c[1] else {
        panic!("not a tool_result")
    };
    assert!(second.is_error());
    assert_eq!(
        second.content,
        Some(ToolResultContent::Text("plain string".into()))
    );
    assert!(matches!(&c[2], Content::ToolResult(t) if t.content.is_none() && !t.is_error()));

    let r = parse_line(HAND_WRITTEN[4].as_bytes()).unwrap();
    let c = &r.as_message().unwrap().content;
    assert!(matches!(&c[0], Content::CompactBoundary(b) if b.input.to_value()["pre_tokens"] == 5));
    assert!(matches!(&c[1], Content::CompactBoundary(b) if b.input.to_value() == json!(151000)));

    let r = parse_line(HAND_WRITTEN[5].as_bytes()).unwrap();
    let c = &r.as_message().unwrap().content;
    let names: Vec<&str> = c.iter().map(|c| c.type_name()).collect();
    assert_eq!(names, ["skill", "hologram", "", "text", "", ""]);
    assert!(c.iter().all(|c| matches!(c, Content::Other(_))));

    let r = parse_line(HAND_WRITTEN[10].as_bytes()).unwrap();
    let c = &r.as_message().unwrap().content;
    assert!(matches!(&c[0], Content::Thinking(t) if t.signature.is_none()));
    assert!(matches!(&c[1], Content::ToolResult(t) if t.content.is_none() && t.is_error.is_none()));

    let r = parse_line(NON_CANONICAL[1].as_bytes()).unwrap();
    assert_eq!((&r.parent_uuid, r.is_sidechain), (&None, None));
    assert!(r.as_message().unwrap().content.is_empty());

    let r = parse_line(HAND_WRITTEN[7].as_bytes()).unwrap();
    assert_eq!(r.message, Some(None));
    assert!(r.as_message().is_none());
    assert!(r.usage().is_none());
}

// ---------------------------------------------------------------- loader on the example

#[test]
fn example_loads_without_problems() {
    let bytes = fs::read(main_transcript()).unwrap();
    let t = Transcript::parse(&bytes, Some(SID));
    assert_eq!(t.problems(), vec![]);
    // 44 records, every one a message (the runtime wrote no boundary record here).
    assert_eq!(t.records.len(), 44);
    assert_eq!(t.messages.len(), 44);
    assert!(t.records.iter().all(|l| l.record.kind == "message"));
    // The first record has no parent; every other names the previous one.
    assert_eq!(t.records[0].record.parent_uuid, None);
    for w in t.records.windows(2) {
        assert_eq!(
            w[1].record.parent_uuid.as_deref(),
            Some(w[0].record.uuid.as_str())
        );
        assert_eq!(w[1].record.uuid.len(), 32);
    }
    assert_eq!(
        (
            t.usage.input_tokens,
            t.usage.output_tokens,
            t.usage.cache_read_tokens,
            t.usage.cache_write_tokens
        ),
        (231_887, 1_564, 115_938, 0)
    );
    // Line numbers and offsets point at the lines.
    let mut offset = 0u64;
    for (i, (loaded, line)) in t.records.iter().zip(lines(&bytes)).enumerate() {
        assert_eq!(loaded.line, i as u64 + 1);
        assert_eq!(loaded.offset, offset);
        assert_eq!(loaded.record.to_line().as_bytes(), line);
        offset += line.len() as u64 + 1;
    }
    let first = t.iter_messages().next().unwrap().1;
    assert_eq!(first.role, "user");

    let bytes = fs::read(sidechain_transcript()).unwrap();
    let t = Transcript::parse(&bytes, Some(SID));
    assert_eq!(t.problems(), vec![]);
    assert_eq!(t.messages.len(), 4);
    assert!(t
        .records
        .iter()
        .all(|l| l.record.is_sidechain == Some(true)
            && l.record.agent_id.as_deref() == Some("a7f3c2")));
    assert_eq!(t.usage.total(), 3000 + 110);

    // Every transcript of the corpus loads without a problem.
    for path in corpus_transcripts() {
        let bytes = fs::read(&path).unwrap();
        let sid = if path == sidechain_transcript() {
            SID.to_string()
        } else {
            path.file_stem().unwrap().to_string_lossy().into_owned()
        };
        let t = Transcript::parse(&bytes, Some(&sid));
        assert_eq!(t.problems(), vec![], "{}", path.display());
    }
}

#[test]
fn example_with_another_session_reports_every_record() {
    let bytes = fs::read(sidechain_transcript()).unwrap();
    let t = Transcript::parse(&bytes, Some("other"));
    let problems = t.problems();
    assert_eq!(problems.len(), 4);
    assert!(problems
        .iter()
        .all(|p| p.kind == ProblemKind::SessionMismatch && p.message.contains("other")));
}

// ---------------------------------------------------------------- problems, one by one

fn msg(uuid: &str, parent: Option<&str>, role: &str, content: Value) -> String {
    let mut v = json!({"uuid": uuid});
    if let Some(p) = parent {
        v["parent_uuid"] = json!(p);
    }
    v["session_id"] = json!("s");
    v["type"] = json!("message");
    v["message"] = json!({"role": role, "content": content});
    serde_json::to_string(&v).unwrap()
}

fn text(uuid: &str, parent: Option<&str>, role: &str) -> String {
    msg(uuid, parent, role, json!([{"type": "text", "text": "hi"}]))
}

fn tool_use(uuid: &str, parent: Option<&str>, ids: &[&str]) -> String {
    let items: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {}}))
        .collect();
    msg(uuid, parent, "assistant", Value::Array(items))
}

fn tool_result(uuid: &str, parent: Option<&str>, id: &str) -> String {
    msg(
        uuid,
        parent,
        "user",
        json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "done"}]}]),
    )
}

/// Join lines with newlines; returns the bytes and each line's offset.
fn join(lines: &[String], final_newline: bool) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        offsets.push(bytes.len() as u64);
        bytes.extend_from_slice(l.as_bytes());
        if final_newline || i + 1 < lines.len() {
            bytes.push(b'\n');
        }
    }
    (bytes, offsets)
}

#[test]
fn malformed_lines_are_errors_with_line_and_offset() {
    let lines = vec![
        text("a", None, "user"),
        String::new(),
        "5".to_string(),
        "[]".to_string(),
        "{\"uuid\":5,\"type\":\"message\"}".to_string(),
        "{\"type\":\"message\"}".to_string(),
        "{\"uuid\":\"x\",\"type\":\"message\"".to_string(),
        "\0\0\0".to_string(),
        text("b", Some("a"), "assistant"),
        " \t ".to_string(),
    ];
    let (mut bytes, offsets) = join(&lines, true);
    // Invalid UTF-8 inside a string, as line 11.
    let bad_utf8_offset = bytes.len() as u64;
    bytes.extend_from_slice(b"{\"uuid\":\"c\xff\",\"type\":\"message\"}\n");
    bytes.extend_from_slice(text("d", Some("b"), "user").as_bytes());
    bytes.push(b'\n');

    let t = Transcript::parse(&bytes, Some("s"));
    let problems = t.problems();
    // Lines 2 and 10 are empty or blank: the runtime's loader skips them, so they are no
    // problem at all.
    assert_eq!(
        kinds(&problems),
        vec![
            (ProblemKind::MalformedLine, 3, offsets[2]),
            (ProblemKind::MalformedLine, 4, offsets[3]),
            (ProblemKind::MalformedLine, 5, offsets[4]),
            (ProblemKind::MalformedLine, 6, offsets[5]),
            (ProblemKind::MalformedLine, 7, offsets[6]),
            (ProblemKind::MalformedLine, 8, offsets[7]),
            (ProblemKind::MalformedLine, 11, bad_utf8_offset),
        ]
    );
    assert!(problems[0]
        .message
        .starts_with("not a JSON object: found a number"));
    assert!(problems[1]
        .message
        .starts_with("not a JSON object: found an array"));
    assert!(
        problems[2].message.contains("invalid type"),
        "{}",
        problems[2].message
    );
    assert!(problems[3].message.contains("missing field `uuid`"));
    assert!(
        problems[4].message.contains("EOF"),
        "{}",
        problems[4].message
    );
    // Each says what it costs: the runtime fails the whole load on one malformed line.
    assert!(problems
        .iter()
        .all(|p| p.message.contains("the runtime cannot resume this session")));
    assert!(problems
        .iter()
        .all(|p| p.severity() == Severity::Error && p.code() == "transcript.malformed-line"));
    let found: Vec<(u64, &str)> = t
        .records
        .iter()
        .map(|l| (l.line, l.record.uuid.as_str()))
        .collect();
    assert_eq!(found, vec![(1, "a"), (9, "b"), (12, "d")]);
}

/// Shapes the runtime cannot read (SPEC 9 `transcript.bad-shape`): a role other than
/// user/assistant, a tool_result whose content is a string, a known block with a field of
/// the wrong type. The record still loads.
#[test]
fn shapes_the_runtime_cannot_read_are_warnings() {
    let lines = vec![
        text("a", None, "user"),
        text("b", Some("a"), "system"),
        msg(
            "c",
            Some("b"),
            "user",
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "a string"}]),
        ),
        msg("d", Some("c"), "user", json!([{"type": "text", "text": 5}])),
        text("e", Some("d"), "assistant"),
    ];
    let (bytes, offsets) = join(&lines, true);
    let t = Transcript::parse(&bytes, None);
    let all = t.problems();
    let problems: Vec<&Problem> = all
        .iter()
        .filter(|p| p.kind == ProblemKind::BadShape)
        .collect();
    let at: Vec<(u64, u64)> = problems.iter().map(|p| (p.line, p.offset)).collect();
    assert_eq!(at, vec![(2, offsets[1]), (3, offsets[2]), (4, offsets[3])]);
    assert!(
        problems[0].message.contains("system"),
        "{}",
        problems[0].message
    );
    assert!(
        problems[1].message.contains("string"),
        "{}",
        problems[1].message
    );
    assert!(problems
        .iter()
        .all(|p| p.severity() == Severity::Warn && p.code() == "transcript.bad-shape"));
    assert_eq!(t.records.len(), 5);
}

#[test]
fn torn_tail_is_a_warning_and_a_parsable_tail_is_a_record() {
    let lines = vec![text("a", None, "user"), "{\"uuid\":\"b\",\"ty".to_string()];
    let (bytes, offsets) = join(&lines, false);
    let t = Transcript::parse(&bytes, None);
    let problems = t.problems();
    assert_eq!(
        kinds(&problems),
        vec![(ProblemKind::TornTail, 2, offsets[1])]
    );
    assert_eq!(problems[0].severity(), Severity::Warn);
    assert_eq!(problems[0].code(), "transcript.torn-tail");
    assert_eq!(t.records.len(), 1);

    // An unparsable non-object last line without newline is a torn tail too.
    let t = Transcript::parse(b"[1,2", None);
    assert_eq!(kinds(&t.problems()), vec![(ProblemKind::TornTail, 1, 0)]);

    let lines = vec![text("a", None, "user"), text("b", Some("a"), "assistant")];
    let (bytes, offsets) = join(&lines, false);
    let t = Transcript::parse(&bytes, None);
    assert_eq!(t.problems(), vec![]);
    assert_eq!(t.records.len(), 2);
    assert_eq!((t.records[1].line, t.records[1].offset), (2, offsets[1]));
}

#[test]
fn duplicate_uuid_names_the_first_line() {
    let lines = vec![
        text("a", None, "user"),
        text("b", Some("a"), "assistant"),
        text("a", Some("b"), "user"),
    ];
    let (bytes, offsets) = join(&lines, true);
    let problems = Transcript::parse(&bytes, None).problems();
    assert_eq!(
        kinds(&problems),
        vec![(ProblemKind::DuplicateUuid, 3, offsets[2])]
    );
    assert!(
        problems[0].message.contains("line 1"),
        "{}",
        problems[0].message
    );
    assert_eq!(problems[0].severity(), Severity::Error);
}

#[test]
fn parent_chain_breaks_are_reported() {
    let lines = vec![
        text("a", Some("ghost"), "user"),
        text("b", Some("a"), "assistant"),
        text("c", Some("a"), "user"),
        text("d", None, "assistant"),
        "garbage".to_string(),
        // The chain skips malformed lines: the previous parsed record is d.
        text("e", Some("d"), "user"),
    ];
    let (bytes, offsets) = join(&lines, true);
    let problems = Transcript::parse(&bytes, None).problems();
    assert_eq!(
        kinds(&problems),
        vec![
            (ProblemKind::ParentChain, 1, offsets[0]),
            (ProblemKind::ParentChain, 3, offsets[2]),
            (ProblemKind::ParentChain, 4, offsets[3]),
            (ProblemKind::MalformedLine, 5, offsets[4]),
        ]
    );
    assert!(problems[1].message.contains("b"));
    assert_eq!(problems[0].code(), "transcript.parent-chain");
    assert_eq!(problems[0].severity(), Severity::Warn);
}

#[test]
fn session_mismatch_only_when_a_session_is_expected() {
    let mut other =
        json!({"uuid": "b", "parent_uuid": "a", "session_id": "zz", "type": "boundary"});
    let lines = vec![
        text("a", None, "user"),
        serde_json::to_string(&other).unwrap(),
        {
            other = json!({"uuid": "c", "parent_uuid": "b", "type": "boundary"});
            serde_json::to_string(&other).unwrap()
        },
    ];
    let (bytes, offsets) = join(&lines, true);
    let problems = Transcript::parse(&bytes, Some("s")).problems();
    assert_eq!(
        kinds(&problems),
        vec![(ProblemKind::SessionMismatch, 2, offsets[1])]
    );
    assert_eq!(problems[0].code(), "transcript.session-mismatch");
    assert!(Transcript::parse(&bytes, None).problems().is_empty());
}

#[test]
fn tool_use_pairing_findings() {
    let lines = vec![
        tool_result("a", None, "early"), // 1: orphan (no earlier tool_use)
        tool_use("b", Some("a"), &["t1", "t2"]), // 2: t2 never answered
        tool_result("c", Some("b"), "t1"), // 3
        tool_use("d", Some("c"), &["t3"]), // 4: t3 answered below
        tool_result("e", Some("d"), "t3"), // 5
        tool_result("f", Some("e"), "t3"), // 6: a second result is not an orphan
        text("g", Some("f"), "user"),    // 7
        tool_use("h", Some("g"), &["early"]), // 8: answered before: still unanswered
        text("i", Some("h"), "assistant"), // 9: ends the trailing run
        tool_use("j", Some("i"), &["p1"]), // 10: pending
        tool_use("k", Some("j"), &["p2", "p3"]), // 11: pending
    ];
    let (bytes, offsets) = join(&lines, true);
    let problems = Transcript::parse(&bytes, None).problems();
    assert_eq!(
        kinds(&problems),
        vec![
            (ProblemKind::OrphanToolResult, 1, offsets[0]),
            (ProblemKind::UnansweredToolUse, 2, offsets[1]),
            (ProblemKind::UnansweredToolUse, 8, offsets[7]),
            (ProblemKind::PendingToolUse, 10, offsets[9]),
            (ProblemKind::PendingToolUse, 11, offsets[10]),
            (ProblemKind::PendingToolUse, 11, offsets[10]),
        ]
    );
    assert!(problems[1].message.contains("t2"));
    assert!(problems[4].message.contains("p2") && problems[5].message.contains("p3"));
    let codes: Vec<(&str, Severity)> = problems.iter().map(|p| (p.code(), p.severity())).collect();
    assert_eq!(
        codes[..2],
        [
            ("transcript.orphan-tool-result", Severity::Warn),
            ("transcript.unanswered-tool-use", Severity::Warn)
        ]
    );
    assert_eq!(codes[3], ("transcript.pending-tool-use", Severity::Info));
}

#[test]
fn a_partly_answered_tail_message_is_not_pending() {
    // The last assistant message has one answered (in the same message) and one open tool use.
    let lines = vec![
        text("a", None, "user"),
        msg(
            "b",
            Some("a"),
            "assistant",
            json!([
                {"type": "tool_use", "id": "t1", "name": "X", "input": {}},
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
                {"type": "tool_use", "id": "t2", "name": "X", "input": {}}
            ]),
        ),
    ];
    let (bytes, offsets) = join(&lines, true);
    let problems = Transcript::parse(&bytes, None).problems();
    assert_eq!(
        kinds(&problems),
        vec![(ProblemKind::UnansweredToolUse, 2, offsets[1])]
    );
}

#[test]
fn boundaries_and_null_messages_are_not_messages_but_usage_counts() {
    let lines = vec![
        r#"{"uuid":"a","type":"message","message":null,"usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4}}"#.to_string(),
        r#"{"uuid":"b","parent_uuid":"a","type":"boundary","message":{"role":"user","content":[]},"usage":{"input_tokens":10,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}}"#.to_string(),
        text("c", Some("b"), "user"),
    ];
    let (bytes, _) = join(&lines, true);
    let t = Transcript::parse(&bytes, None);
    assert_eq!(t.messages, vec![2]);
    assert_eq!(t.usage.input_tokens, 11);
    assert_eq!(t.usage.total(), 20);
}

// ---------------------------------------------------------------- incremental

#[test]
fn feeding_byte_by_byte_equals_one_pass() {
    let bytes = fs::read(main_transcript()).unwrap();
    let whole = Transcript::parse(&bytes, Some(SID));
    let mut parser = Parser::new(Some(SID));
    for (i, b) in bytes.iter().enumerate() {
        parser.feed(std::slice::from_ref(b));
        assert_eq!(parser.fed_len(), i as u64 + 1);
    }
    assert_same(parser.transcript(), &whole);
    assert_eq!(parser.committed_len(), bytes.len() as u64);
    assert!(parser.pending().is_empty());
}

#[test]
fn a_ten_megabyte_line_loads_whole_and_in_chunks() {
    let big = "é".repeat(5 << 20);
    let lines = vec![
        text("a", None, "user"),
        msg(
            "b",
            Some("a"),
            "assistant",
            json!([{"type": "text", "text": big}]),
        ),
        "x".repeat(10 << 20),
        text("c", Some("b"), "user"),
    ];
    let (bytes, offsets) = join(&lines, false);
    let whole = Transcript::parse(&bytes, None);
    assert_eq!(whole.records.len(), 3);
    assert_eq!(whole.records[2].offset, offsets[3]);
    assert_eq!(
        kinds(&whole.problems()),
        vec![(ProblemKind::MalformedLine, 3, offsets[2])]
    );
    let mut parser = Parser::new(None);
    for chunk in bytes.chunks(64 << 10) {
        parser.feed(chunk);
    }
    assert_same(parser.transcript(), &whole);
}

#[test]
fn a_large_feed_parsed_on_several_cores_equals_one_fed_a_few_lines_at_a_time() {
    // Over the size parsed on more than one core: damage of every kind, tool uses answered
    // across the places the feed is cut at, a parent chain broken here and there.
    let mut bytes = Vec::new();
    let mut prev = None;
    let mut i = 0;
    while bytes.len() < 3 << 20 {
        let (kind, a, b) = (
            (i * 7 % 8) as u8,
            (i * 13 % 251) as u8,
            (i * 29 % 253) as u8,
        );
        bytes.extend_from_slice(&incremental_line(kind, a, b, i, &mut prev));
        bytes.push(b'\n');
        i += 1;
    }
    let whole = Transcript::parse(&bytes, Some("s"));
    assert!(whole.records.len() > 10_000, "{}", whole.records.len());
    assert!(!whole.problems().is_empty());
    let mut parser = Parser::new(Some("s"));
    for chunk in bytes.chunks(4096) {
        parser.feed(chunk);
    }
    assert_same(parser.transcript(), &whole);
}

/// A large feed parsed on several cores moves its texts to a store of cold bytes, each piece
/// to a part of the store of its own, from the thread that parses it: what reads back is what
/// a parse that keeps everything in memory has, fed at once or 4 MiB at a time.
/// Unknown fields written back longer than they were read (`1E5` is `100000.0`) do not spill
/// into the next piece's part.
#[test]
fn a_large_feed_with_a_store_of_cold_bytes_reads_back_as_one_kept_in_memory() {
    let mut bytes = Vec::new();
    let mut prev: Option<String> = None;
    let mut i = 0;
    while bytes.len() < 5 << 20 {
        let uuid = format!("c{i}");
        let text = format!("{i}: {}", "결과 text ☃ ".repeat(i % 40 + 4));
        let mut v = match i % 4 {
            0 => json!({"type": "message", "message": {"role": "user", "content": [
                {"type": "text", "text": text}]}}),
            1 => json!({"type": "message", "message": {"role": "assistant", "content": [
                {"type": "thinking", "thinking": text, "signature": format!("sig{i}").repeat(20)},
                {"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"n": i}}]}}),
            2 => json!({"type": "message", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{}", i - 1),
                 "content": [{"type": "text", "text": text}]}]}}),
            _ => json!({"type": "note"}),
        };
        v["uuid"] = json!(uuid);
        if let Some(p) = &prev {
            v["parent_uuid"] = json!(p);
        }
        prev = Some(uuid);
        let mut line = serde_json::to_vec(&v).unwrap();
        if i % 4 == 3 {
            // Unknown fields only, each written back three times as long as it is read.
            line.pop();
            for f in 0..(i % 30 + 150) {
                line.extend_from_slice(format!(",\"f{f}\":1E5").as_bytes());
            }
            line.push(b'}');
        }
        bytes.extend_from_slice(&line);
        bytes.push(b'\n');
        i += 1;
    }
    let kept = Transcript::parse(&bytes, None);
    let dir = tempfile::tempdir().unwrap();
    for chunk in [bytes.len(), 4 << 20] {
        let mut parser = Parser::new(None);
        parser.store_cold_in(normafs::format::cold::ColdStore::new(dir.path()).unwrap());
        for part in bytes.chunks(chunk) {
            parser.feed(part);
        }
        let stored = parser.transcript();
        let texts: Vec<bool> = stored
            .records
            .iter()
            .filter_map(|r| r.record.as_message())
            .flat_map(|m| &m.content)
            .filter_map(|c| match c {
                Content::Text(t) => Some(t.text.in_memory().is_none()),
                _ => None,
            })
            .collect();
        let moved = texts.iter().filter(|m| **m).count();
        assert!(
            moved * 2 > texts.len(),
            "{moved} of {} texts moved",
            texts.len()
        );
        assert_same(stored, &kept);
    }
}

// ---------------------------------------------------------------- property tests

/// One line of a damaged transcript.
#[derive(Debug, Clone)]
enum Seg {
    Good,
    Garbage(Vec<u8>),
    /// A good line cut short (at this fraction, in 1/256).
    Cut(u8),
    /// A good line with an invalid UTF-8 byte inside its text.
    BadUtf8,
    Nul(usize),
    Empty,
    Huge,
}

fn seg() -> impl Strategy<Value = Seg> {
    prop_oneof![
        8 => Just(Seg::Good),
        2 => proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 1..40)
            .prop_map(Seg::Garbage),
        2 => any::<u8>().prop_map(Seg::Cut),
        1 => Just(Seg::BadUtf8),
        1 => (1usize..20).prop_map(Seg::Nul),
        1 => Just(Seg::Empty),
    ]
}

/// A well-formed record line number `i`, chained to the previous good one.
fn good_line(i: usize, parent: Option<&str>) -> String {
    let uuid = format!("u{i}");
    let body = format!("line {i}: naïve ☃ 🎉");
    msg(
        &uuid,
        parent,
        if i % 2 == 0 { "user" } else { "assistant" },
        json!([{"type": "text", "text": body}]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn damage_never_loses_an_intact_line(
        mut segs in proptest::collection::vec(seg(), 0..25),
        final_newline in any::<bool>(),
        // Rare, since each costs a 10 MB line.
        huge_at in proptest::option::weighted(0.1, any::<usize>()),
    ) {
        if let Some(at) = huge_at {
            segs.insert(at % (segs.len() + 1), Seg::Huge);
        }
        let mut bytes = Vec::new();
        let mut good = Vec::new(); // (line, offset, text)
        let mut damaged = Vec::new(); // (line, offset)
        let mut parent: Option<String> = None;
        for (i, s) in segs.iter().enumerate() {
            let line_no = i as u64 + 1;
            let offset = bytes.len() as u64;
            let line: Vec<u8> = match s {
                Seg::Good => {
                    let l = good_line(i, parent.as_deref());
                    parent = Some(format!("u{i}"));
                    good.push((line_no, offset, l.clone()));
                    l.into_bytes()
                }
                Seg::Garbage(g) => g.clone(),
                Seg::Cut(f) => {
                    let l = good_line(i, None).into_bytes();
                    let at = (l.len() * (*f as usize) / 256).max(1).min(l.len() - 1);
                    l[..at].to_vec()
                }
                Seg::BadUtf8 => good_line(i, None).replace("naïve", "na\u{1}ve").into_bytes()
                    .into_iter().map(|b| if b == 1 { 0xff } else { b }).collect(),
                Seg::Nul(n) => vec![0; *n],
                Seg::Empty => Vec::new(),
                Seg::Huge => vec![b'{'; 10 << 20],
            };
            let last = i + 1 == segs.len();
            // An empty last line without newline is no line at all; a blank line with its
            // newline is skipped, as the runtime skips it.
            let no_line = last && !final_newline && line.is_empty();
            let skipped = (final_newline || !last) && line.trim_ascii().is_empty();
            if !matches!(s, Seg::Good) && !no_line && !skipped {
                damaged.push((line_no, offset));
            }
            bytes.extend_from_slice(&line);
            if final_newline || !last {
                bytes.push(b'\n');
            }
        }
        let t = Transcript::parse(&bytes, Some("s"));
        let got: Vec<(u64, u64, String)> = t.records.iter().map(|l| (l.line, l.offset, l.record.to_line())).collect();
        prop_assert_eq!(got, good);
        let torn_at_end = !final_newline && matches!(segs.last(), Some(s) if !matches!(s, Seg::Good));
        let expected: Vec<(ProblemKind, u64, u64)> = damaged.iter().enumerate().map(|(k, &(line, offset))| {
            let kind = if torn_at_end && k + 1 == damaged.len() && line == segs.len() as u64 {
                ProblemKind::TornTail
            } else {
                ProblemKind::MalformedLine
            };
            (kind, line, offset)
        }).collect();
        prop_assert_eq!(kinds(&t.problems()), expected);
    }
}

/// One line of a transcript for the incremental test: a record with tools, or damage.
fn incremental_line(kind: u8, a: u8, b: u8, i: usize, prev: &mut Option<String>) -> Vec<u8> {
    let uuid = if b % 7 == 0 {
        format!("dup{}", a % 3)
    } else {
        format!("r{i}")
    };
    let parent = if b % 5 == 0 {
        Some("wrong".to_string())
    } else {
        prev.clone()
    };
    let id = format!("t{}", a % 3);
    let mut v = match kind % 8 {
        0 => {
            json!({"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": format!("ü{a}🎉")}]}})
        }
        1 | 2 => json!({"type": "message", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "…"},
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"n": b}}]},
            "usage": {"input_tokens": a, "output_tokens": b, "cache_read_tokens": 1, "cache_write_tokens": 0}}),
        3 => json!({"type": "message", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "ok ☃"}]}]}}),
        4 => json!({"type": "boundary", "boundary": {"pre_tokens": a}}),
        5 => json!({"type": "message", "message": null}),
        6 => return format!("garbage ☃ {a}").into_bytes(),
        _ => {
            return if a % 2 == 0 {
                Vec::new()
            } else {
                vec![b'{', 0xff, 0]
            }
        }
    };
    v["uuid"] = json!(uuid);
    if let Some(p) = parent {
        v["parent_uuid"] = json!(p);
    }
    v["session_id"] = json!(if b % 11 == 0 { "other" } else { "s" });
    *prev = Some(uuid);
    let mut line = serde_json::to_vec(&v).unwrap();
    if b % 13 == 0 {
        // Parses until its last bytes arrive: a tentative record that turns malformed.
        line.extend_from_slice(b" !");
    }
    line
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_one_pass(
        spec in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..16),
        final_newline in any::<bool>(),
        cuts in proptest::collection::vec(any::<u16>(), 0..12),
        // Cuts just before a line's newline or trailing bytes, where a tentative parse succeeds.
        end_cuts in proptest::collection::vec(any::<u8>(), 0..6),
    ) {
        let mut bytes = Vec::new();
        let mut prev = None;
        for (i, &(kind, a, b)) in spec.iter().enumerate() {
            bytes.extend_from_slice(&incremental_line(kind, a, b, i, &mut prev));
            if final_newline || i + 1 < spec.len() {
                bytes.push(b'\n');
            }
        }
        // Split points anywhere, including inside multi-byte characters.
        let mut points: Vec<usize> = cuts.iter().map(|&c| c as usize % (bytes.len() + 1)).collect();
        let ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c == b'}' && matches!(bytes.get(i + 1), None | Some(b'\n' | b' ')))
            .map(|(i, _)| i + 1)
            .collect();
        if !ends.is_empty() {
            points.extend(end_cuts.iter().map(|&c| ends[c as usize % ends.len()]));
        }
        points.push(bytes.len());
        points.sort_unstable();
        let mut parser = Parser::new(Some("s"));
        let mut at = 0;
        for p in points {
            parser.feed(&bytes[at..p]);
            at = p;
            assert_same(parser.transcript(), &Transcript::parse(&bytes[..p], Some("s")));
            prop_assert_eq!(parser.fed_len(), p as u64);
        }
    }
}

// ---------------------------------------------------------------- files

fn check_file(tf: &TranscriptFile) {
    let bytes = fs::read(tf.path()).unwrap_or_default();
    assert_same(tf.transcript(), &Transcript::parse(&bytes, Some("s")));
    assert_eq!(tf.len(), bytes.len() as u64);
}

#[test]
fn missing_file_is_empty_then_appends_are_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let mut tf = TranscriptFile::open(&path, Some("s")).unwrap();
    assert!(!tf.exists());
    assert!(tf.transcript().records.is_empty());
    assert_eq!(tf.refresh().unwrap(), Refresh::Unchanged);

    let first = format!("{}\n", text("a", None, "user"));
    append(&path, first.as_bytes());
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    check_file(&tf);
    assert_eq!(tf.refresh().unwrap(), Refresh::Unchanged);

    let second = format!("{}\n", tool_use("b", Some("a"), &["t1"]));
    append(&path, second.as_bytes());
    assert_eq!(
        tf.refresh().unwrap(),
        Refresh::Appended {
            bytes: second.len() as u64
        }
    );
    check_file(&tf);
    assert_eq!(
        tf.transcript().problems()[0].kind,
        ProblemKind::PendingToolUse
    );

    // A line arriving in two writes, split inside a multi-byte character.
    let third = format!(
        "{}\n",
        msg(
            "c",
            Some("b"),
            "user",
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "日本"}]}
            ])
        )
    );
    let split = third.find('本').unwrap() + 1;
    append(&path, &third.as_bytes()[..split]);
    assert_eq!(
        tf.refresh().unwrap(),
        Refresh::Appended {
            bytes: split as u64
        }
    );
    check_file(&tf);
    let kinds_now: Vec<ProblemKind> = tf.transcript().problems().iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds_now,
        [ProblemKind::PendingToolUse, ProblemKind::TornTail]
    );
    append(&path, &third.as_bytes()[split..]);
    assert_eq!(
        tf.refresh().unwrap(),
        Refresh::Appended {
            bytes: (third.len() - split) as u64
        }
    );
    check_file(&tf);
    assert_eq!(tf.transcript().problems(), vec![]);
    assert_eq!(tf.transcript().records.len(), 3);

    fs::remove_file(&path).unwrap();
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    assert!(tf.transcript().records.is_empty());
    assert!(!tf.exists());
}

fn three_lines() -> String {
    format!(
        "{}\n{}\n{}\n",
        text("a", None, "user"),
        text("b", Some("a"), "assistant"),
        text("c", Some("b"), "user")
    )
}

#[test]
fn rewriting_the_last_line_in_place_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let content = three_lines();
    fs::write(&path, &content).unwrap();
    let mut tf = TranscriptFile::open(&path, Some("s")).unwrap();
    assert_eq!(tf.transcript().records.len(), 3);

    // Same size, last line changed, same inode, and the old mtime put back: only the
    // checksum of the last line can tell.
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    let rewritten = content.replacen("\"c\"", "\"z\"", 1);
    assert_eq!(rewritten.len(), content.len());
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(rewritten.as_bytes(), 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    check_file(&tf);
    assert_eq!(tf.transcript().records[2].record.uuid, "z");
}

#[test]
fn shrinking_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let content = three_lines();
    fs::write(&path, &content).unwrap();
    let mut tf = TranscriptFile::open(&path, Some("s")).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let keep = content.find('\n').unwrap() + 1;
    f.set_len(keep as u64).unwrap();
    drop(f);
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    check_file(&tf);
    assert_eq!(tf.transcript().records.len(), 1);
}

#[test]
fn rewriting_the_prefix_and_growing_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let content = three_lines();
    fs::write(&path, &content).unwrap();
    let mut tf = TranscriptFile::open(&path, Some("s")).unwrap();
    // Replaced by a new file (new inode) whose last old line moved: reparse everything.
    let tmp = dir.path().join("tmp");
    let grown = format!(
        "{}{}\n",
        content.replacen("\"a\"", "\"aa\"", 1),
        text("d", Some("c"), "assistant")
    );
    fs::write(&tmp, &grown).unwrap();
    fs::rename(&tmp, &path).unwrap();
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    check_file(&tf);
    assert_eq!(tf.transcript().records[0].record.uuid, "aa");
}

#[test]
fn rewriting_the_torn_tail_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    fs::write(
        &path,
        format!("{}\n{{\"uuid\":\"b", text("a", None, "user")),
    )
    .unwrap();
    let mut tf = TranscriptFile::open(&path, Some("s")).unwrap();
    assert_eq!(tf.transcript().problems()[0].kind, ProblemKind::TornTail);
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    use std::os::unix::fs::FileExt;
    let at = tf.len() - 1;
    f.write_all_at(b"X\",\"type\":\"boundary\"}\n", at).unwrap();
    drop(f);
    assert_eq!(tf.refresh().unwrap(), Refresh::Reloaded);
    check_file(&tf);
    assert_eq!(tf.transcript().records[1].record.uuid, "X");
}

#[test]
fn example_file_loads() {
    let tf = TranscriptFile::open(main_transcript(), Some(SID)).unwrap();
    assert!(tf.exists());
    assert_eq!(tf.transcript().messages.len(), 44);
    assert_eq!(tf.transcript().problems(), vec![]);
}

#[test]
fn sidechains_are_found_sorted_and_other_files_ignored() {
    let found = sidechain_paths(&example_root().join("transcripts"), SID).unwrap();
    assert_eq!(found, vec![("a7f3c2".to_string(), sidechain_transcript())]);

    let dir = tempfile::tempdir().unwrap();
    assert_eq!(sidechain_paths(dir.path(), "s").unwrap(), vec![]);
    let sub = dir.path().join("s/subagents");
    fs::create_dir_all(&sub).unwrap();
    for name in [
        "agent-b.jsonl",
        "agent-a.jsonl",
        "agent-.jsonl",
        "notes.txt",
        "agent-c.json",
        "b.jsonl",
    ] {
        fs::write(sub.join(name), "").unwrap();
    }
    fs::create_dir(sub.join("agent-d.jsonl")).unwrap();
    let found = sidechain_paths(dir.path(), "s").unwrap();
    assert_eq!(
        found,
        vec![
            ("a".to_string(), sub.join("agent-a.jsonl")),
            ("b".to_string(), sub.join("agent-b.jsonl")),
        ]
    );
    assert!(sidechain_paths(dir.path(), "../x").is_err());
}

/// A JSON value for a content item's field: any type, nested items too.
fn field_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("7".to_string()),
        Just("-2.5".to_string()),
        "[a-z\\n\"é]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("\"text\"".to_string()),
        Just("\"tool_use\"".to_string()),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3)
                .prop_map(|v| format!("[{}]", v.join(","))),
            // Nested objects repeat no key: a JSON value (what classifying takes) cannot
            // hold a repeated key, while a raw `input` keeps it byte for byte.
            proptest::collection::vec((field_key(), inner), 0..4).prop_map(|mut kv| {
                let mut seen = std::collections::HashSet::new();
                kv.retain(|(k, _)| seen.insert(k.clone()));
                object(&kv)
            }),
        ]
    })
}

fn field_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("type"),
        Just("text"),
        Just("thinking"),
        Just("signature"),
        Just("id"),
        Just("name"),
        Just("input"),
        Just("tool_use_id"),
        Just("content"),
        Just("is_error"),
        Just("x"),
    ]
    .prop_map(str::to_string)
}

/// A JSON object written by hand, so that a key may repeat.
fn object(kv: &[(String, String)]) -> String {
    let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", fields.join(","))
}

fn item() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("text"),
        Just("thinking"),
        Just("tool_use"),
        Just("tool_result"),
        Just("compact_boundary"),
        Just("skill"),
    ];
    prop_oneof![
        4 => (kind, proptest::collection::vec((field_key(), field_value()), 0..5)).prop_map(
            |(kind, mut kv)| {
                kv.insert(0, ("type".to_string(), format!("\"{kind}\"")));
                object(&kv)
            }
        ),
        1 => field_value(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Reading an item directly (no map first) gives what classifying its JSON value gives.
    #[test]
    fn a_content_item_reads_as_its_value_classifies(text in item()) {
        let value: Value = serde_json::from_str(&text).unwrap();
        let direct: Content = serde_json::from_str(&text).unwrap();
        let classified = Content::from_value(value);
        prop_assert_eq!(&direct, &classified);
        // Field order too (map equality ignores it).
        prop_assert_eq!(
            serde_json::to_string(&direct).unwrap(),
            serde_json::to_string(&classified).unwrap()
        );
    }
}

/// A tool_use or compact_boundary item without `input` is written back without it (kept
/// verbatim), and one with `"input":null` keeps its null.
#[test]
fn items_without_input_round_trip() {
    for item in [
        r#"{"type":"tool_use","id":"t1","name":"Read"}"#,
        r#"{"type":"tool_use","id":"t1","name":"Read","input":null}"#,
        r#"{"type":"compact_boundary"}"#,
        r#"{"type":"compact_boundary","input":null}"#,
    ] {
        let line = format!(
            r#"{{"uuid":"u1","type":"message","message":{{"role":"assistant","content":[{item}]}}}}"#
        );
        assert_round_trip(&line, true);
    }
    let typed = parse_line(
        br#"{"uuid":"u1","type":"message","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}"#,
    )
    .unwrap();
    assert!(matches!(
        &typed.as_message().unwrap().content[0],
        Content::ToolUse(_)
    ));
}

/// A tool call's identity is its input's exact bytes (SPEC 2.5): escapes, number spellings
/// and spacing inside `input` are kept as stored, also through a write.
#[test]
fn tool_use_input_keeps_its_exact_bytes() {
    let input = r#"{"cmd": "a \u003c b && c","n":1.0,"e":1e5,"s":"\u00e9"}"#;
    let line = format!(
        r#"{{"uuid":"u1","session_id":"s","timestamp":"t","type":"message","message":{{"role":"assistant","content":[{{"type":"tool_use","id":"c1","name":"Bash","input":{input}}}]}}}}"#
    );
    let rec = parse_line(line.as_bytes()).expect("parses");
    let msg = rec.as_message().expect("a message");
    let Content::ToolUse(u) = &msg.content[0] else {
        panic!("not typed as tool_use: {:?}", msg.content[0]);
    };
    assert_eq!(u.input.get(), input);
    assert_eq!(u.input.to_value()["cmd"], "a < b && c");
    assert_eq!(rec.to_line(), line);
}
