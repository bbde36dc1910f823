//! Hostile input: the fuzz properties (fuzz/src/lib.rs) as proptest cases over nasty inputs, and
//! a corpus of hostile session roots built at run time and checked through the CLI and the
//! library — no panic, no hang, bounded memory, every problem named by the audit, a one-line
//! error where a command cannot proceed, and nothing outside the root read or written.
//!
//! Each corpus test prints how many hostile files it tried (`hostile files tried: N`; run with
//! `-- --nocapture` to see them). The memory-directory case writes 20,000 files;
//! `NORMAFS_HOSTILE_FULL=1` makes it 100,000 (the audit then takes about 1 s in the test
//! profile, but creating and removing the files takes about 20 s more).

mod common;

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod props;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Property tests: the fuzz properties over nasty inputs.

/// Pieces that break parsers: JSON syntax, record keys, NUL, invalid UTF-8, CR/LF, lone
/// surrogates, numbers out of every range, deep nesting.
fn nasty_piece() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"",
        b"\\",
        b"null",
        b"\"uuid\":\"u1\",",
        b"\"uuid\":\"u2\",",
        b"\"parent_uuid\":\"u1\",",
        b"\"type\":\"message\",",
        b"\"type\":\"boundary\"",
        b"\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}",
        b"\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Compress\",\"input\":{}}]}",
        b"{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"x\"}",
        b"\"usage\":{\"input_tokens\":18446744073709551615}",
        b"\0",
        b"\xff\xfe",
        b"\xc3",
        b"\xed\xa0\x80",
        b"\r\n",
        b"\n",
        b"\r",
        b"\\u0000",
        b"\\ud800",
        b"1e999",
        b"-1e999",
        b"18446744073709551616",
        b"-9223372036854775809",
        b"1.7976931348623157e308",
        b"4.9e-324",
        b"-0",
        b"0.1",
        b"---\n",
        b"## m0001 \xc2\xb7 user\n",
        b"```\n",
        b"compress ",
        b"m99999999999999999999",
    ];
    prop_oneof![
        4 => prop::sample::select(fixed).prop_map(<[u8]>::to_vec),
        1 => (1usize..400).prop_map(|n| "[".repeat(n).into_bytes()),
        1 => (1usize..400).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..16),
        1 => "[a-z0-9 :\"{}]{0,12}".prop_map(String::into_bytes),
    ]
}

fn nasty_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(nasty_piece(), 0..24).prop_map(|v| v.concat())
}

/// A nasty string (valid UTF-8): control characters, NUL, line breaks, markup of the text forms.
fn nasty_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("\0".to_string()),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just("\r".to_string()),
            Just("---".to_string()),
            Just("```".to_string()),
            Just("## ".to_string()),
            Just(" · ".to_string()),
            Just("../".to_string()),
            Just("é".to_string()),
            Just("\u{202e}".to_string()),
            "[ -~]{0,8}",
        ],
        0..10,
    )
    .prop_map(|v| v.concat())
}

/// A transcript line that is a record (with nasty strings) or nasty bytes.
fn transcript_line() -> impl Strategy<Value = Vec<u8>> {
    let record = (
        0u8..8,
        prop::option::of(0u8..8),
        nasty_string(),
        prop_oneof![Just("message"), Just("boundary"), Just("x")],
        prop_oneof![Just("user"), Just("assistant"), Just("system")],
        0u8..4,
    )
        .prop_map(|(uuid, parent, text, kind, role, shape)| {
            let content = match shape {
                0 => json!([{"type": "text", "text": text}]),
                1 => json!([{"type": "tool_use", "id": text, "name": "Compress", "input": {"content": text}}]),
                2 => json!([{"type": "tool_result", "tool_use_id": text, "content": text}]),
                _ => json!([{"type": "thinking", "thinking": text}, {"type": "skill", "x": [text]}]),
            };
            let mut v = json!({"uuid": format!("u{uuid}"), "type": kind,
                "message": {"role": role, "content": content}});
            if let Some(p) = parent {
                v["parent_uuid"] = json!(format!("u{p}"));
            }
            v.to_string().into_bytes()
        });
    prop_oneof![2 => record, 1 => nasty_bytes()]
}

fn transcript_file() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (
        prop::collection::vec(
            (
                transcript_line(),
                prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b""[..])],
            ),
            0..8,
        ),
        prop::collection::vec(0usize..4000, 0..6),
    )
        .prop_map(|(lines, mut cuts)| {
            let mut file = Vec::new();
            for (l, end) in lines {
                file.extend_from_slice(&l);
                file.extend_from_slice(end);
            }
            cuts.sort_unstable();
            (file, cuts)
        })
}

/// A JSON value of any shape, nasty at the leaves (huge numbers, NUL, refs that climb out).
fn nasty_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        any::<i64>().prop_map(Value::from),
        Just(json!(1.5e300)),
        nasty_string().prop_map(Value::from),
        Just(json!("m18446744073709551615")),
        Just(json!("../../../../outside/x")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A state.json close to the real shape, about the content of [`props::CORE_TRANSCRIPT`]
/// (its raw ids), with nasty values in some fields.
fn state_json() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        4 => prop::sample::select(props::core_ids()),
        1 => Just("h_0000000000000000".to_string()),
        1 => nasty_string(),
    ];
    let reference = prop_oneof![
        (1u64..12).prop_map(|n| format!("m{n:05}")),
        Just("BLOCKED".to_string()),
        Just("m18446744073709551615".to_string()),
        Just("../../../../../../outside/pwn".to_string()),
        Just("/abs".to_string()),
        nasty_string(),
    ];
    let count = prop_oneof![
        Just(0u64),
        Just(40),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>()
    ];
    let block = (
        1u64..4,
        prop_oneof![Just(1u64), Just(2), Just(3), Just(u64::from(u32::MAX))],
        prop::collection::vec(id.clone(), 0..5),
        reference.clone(),
        reference.clone(),
        count.clone(),
        any::<bool>(),
        prop_oneof![
            Just("tier1/b1_m00001-m00003.md".to_string()),
            Just("../../../../outside/canary".to_string()),
            Just("/etc/passwd".to_string()),
            nasty_string(),
        ],
        prop::collection::vec((1u64..4).prop_map(|n| json!(format!("b{n}"))), 0..2),
        prop_oneof![Just("c1".to_string()), Just(String::new()), nasty_string()],
    )
        .prop_map(
            |(n, tier, ids, start, end, tokens, active, rel, children, call)| {
                json!({"blockId": format!("b{n}"), "tier": tier, "topic": "t", "summary": "a summary",
                "directMessageIds": ids, "effectiveMessageIds": ids, "directBlockIds": children,
                "archivePath": format!("/r/noa/s/{rel}"), "archiveRel": rel,
                "compressedTokens": tokens, "startRef": start, "endRef": end,
                "createdAt": tokens, "active": active, "compressCallId": call})
            },
        );
    (
        prop::collection::vec(block, 0..4),
        prop::collection::vec((id, reference), 0..8),
        prop::collection::vec(count.clone(), 0..8),
        count.clone(),
        count,
        nasty_value(),
        0u8..6,
    )
        .prop_map(|(blocks, refs, frozen, next, stat, extra, damage)| {
            let by_raw: serde_json::Map<String, Value> =
                refs.iter().map(|(u, r)| (u.clone(), json!(r))).collect();
            let by_ref: serde_json::Map<String, Value> = refs
                .iter()
                .filter(|(_, r)| r != "BLOCKED")
                .map(|(u, r)| (r.clone(), json!(u)))
                .collect();
            let snapshot: serde_json::Map<String, Value> = frozen
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("m{:05}", i + 1), json!(t)))
                .collect();
            let v = json!({"version": 1, "sessionId": "s", "nextBlockId": next,
                "blocks": blocks, "messageRefs": {"byRaw": by_raw, "byRef": by_ref},
                "tokenSnapshot": snapshot,
                "nudge": {"lastPerMessageNudgeTokens": stat, "lastNudgeShownTokens": 0, "lastShownByTier": {"2": stat}},
                "stats": {"tokensCompressed": stat, "compressionCount": stat},
                "extra": extra});
            let mut bytes = serde_json::to_vec(&v).unwrap_or_default();
            match damage {
                0 => bytes.truncate(bytes.len() / 2),
                1 => bytes.insert(bytes.len() / 3, 0),
                _ => {}
            }
            bytes
        })
}

/// Archive texts in the runtime's layout (both label languages), with damage.
fn archive_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("---".to_string()),
        Just("".to_string()),
        Just("block: b1".to_string()),
        Just("tier: 1".to_string()),
        Just("tier: 99999999999".to_string()),
        Just("range: m00001-m00003".to_string()),
        Just("range: m99999999999999999999-m0".to_string()),
        Just("message_count: 3".to_string()),
        Just("original_tokens: 18446744073709551615".to_string()),
        Just("original_tokens: 18446744073709551616".to_string()),
        Just("consumed_blocks: [b1, , b2".to_string()),
        Just("loose_messages: -1".to_string()),
        Just("body_sha256: 00".to_string()),
        Just("call: ctl-1".to_string()),
        Just("# 归档 b1 · Tier 1 · m00001–m00003".to_string()),
        Just("# Archive b1 · Tier 1 · m00001–m00003".to_string()),
        Just("**摘要**（当前在上下文中生效的版本）：".to_string()),
        Just("**Summary** (the version currently active in context):".to_string()),
        Just("> a summary".to_string()),
        Just("## m00001 · user".to_string()),
        Just("## m00002 · assistant · thinking".to_string()),
        Just("## m00002 · assistant · tool_use · Read".to_string()),
        Just("### m00003 · tool_result · Read".to_string()),
        Just("## (unaddressed) · user".to_string()),
        Just("## b1 · Tier 1 · m00001–m00003".to_string()),
        Just("## b1 · Tier 99999999999999999999 · m1–m2".to_string()),
        Just("> 下级归档：[`tier1/b1_m00001-m00003.md`](../tier1/b1_m00001-m00003.md)".to_string()),
        Just("> Absolute path: `/abs/../../x`".to_string()),
        Just("```json".to_string()),
        Just("````".to_string()),
        Just("```".to_string()),
        Just(format!("{}1{}", "[".repeat(300), "]".repeat(300))),
        nasty_string(),
    ];
    prop::collection::vec(line, 0..24).prop_map(|v| {
        let mut s = String::from(
            "---\nblock: b1\ntier: 1\nrange: m00001-m00003\nmessage_count: 3\noriginal_tokens: 5\n",
        );
        s.push_str(&v.join("\n"));
        s
    })
}

fn ctl_line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        Just("compress".to_string()),
        Just("rebuild".to_string()),
        Just("help".to_string()),
        Just("reindex-memory".to_string()),
        Just("compress!".to_string()),
        Just("rebuild!".to_string()),
        Just("m00001".to_string()),
        Just("b1".to_string()),
        Just("m99999999999999999999".to_string()),
        Just(
            "{\"content\":[{\"startId\":\"m00001\",\"endId\":\"m00003\",\"summary\":\"x\"}]}"
                .to_string()
        ),
        Just("{\"content\":\"[{\\\"startId\\\":\\\"m1\\\"}]\"}".to_string()),
        Just("```json\n{\"content\":[],}\n```".to_string()),
        Just("{\"content\":[]}".to_string()),
        Just(format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200))),
        Just("\u{3000}".to_string()),
        Just("\u{85}".to_string()),
        nasty_string(),
        nasty_value().prop_map(|v| v.to_string()),
    ];
    prop::collection::vec(word, 0..6).prop_map(|v| v.join(" "))
}

fn journal_bytes() -> impl Strategy<Value = Vec<u8>> {
    let entry = (nasty_string(), nasty_value(), nasty_string()).prop_map(|(at, input, call)| {
        json!({"at": at, "input": input, "blocks": [input], "callId": call})
            .to_string()
            .into_bytes()
    });
    prop::collection::vec(
        (
            prop_oneof![2 => entry, 1 => nasty_bytes()],
            prop_oneof![Just(true), Just(false)],
        ),
        0..6,
    )
    .prop_map(|lines| {
        let mut out = Vec::new();
        for (l, newline) in lines {
            out.extend_from_slice(&l);
            if newline {
                out.push(b'\n');
            }
        }
        out
    })
}

/// Cases per property: 256, or `NORMAFS_HOSTILE_CASES` (scripts/torture.sh's hostile stage
/// runs thousands).
fn cases() -> u32 {
    std::env::var("NORMAFS_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn transcript_never_panics_and_chunks_agree((file, cuts) in transcript_file()) {
        props::transcript_split(&file, &cuts);
    }

    #[test]
    fn transcript_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        props::transcript(&data);
    }

    #[test]
    fn state_never_panics_and_round_trips(bytes in state_json()) {
        props::state(&bytes);
    }

    #[test]
    fn state_random_bytes(bytes in nasty_bytes()) {
        props::state(&bytes);
    }

    #[test]
    fn archive_never_panics(text in archive_text()) {
        props::archive(text.as_bytes());
    }

    #[test]
    fn archives_render_and_read_back(
        summary in nasty_string(),
        entries in prop::collection::vec((any::<u8>(), nasty_string()), 0..8),
    ) {
        props::archive_round_trip(&summary, &entries);
    }

    #[test]
    fn memory_never_panics_and_round_trips(name in nasty_string(), text in prop_oneof![
        nasty_string(),
        (nasty_string(), nasty_string(), nasty_string()).prop_map(|(n, d, b)| format!("---\nname: {n}\ndescription: {d}\ntype: x\n---\n{b}")),
    ]) {
        props::memory_split(&format!("{name}.md"), &text);
    }

    #[test]
    fn ctl_parse_never_panics_and_round_trips(line in ctl_line()) {
        props::ctl(line.as_bytes());
    }

    #[test]
    fn ctl_random_bytes(data in nasty_bytes()) {
        props::ctl(&data);
    }

    #[test]
    fn journal_never_panics_and_round_trips(bytes in journal_bytes()) {
        props::journal(&bytes);
    }
}

/// The core on states that name refs climbing out of the root, huge counters and huge frozen
/// token counts, blocks over the transcript's own content with absurd fields (named
/// regressions of what the properties found).
#[test]
fn core_on_hostile_states() {
    let climb = "../../../../../../outside/pwn";
    let ids = props::core_ids();
    assert_eq!(ids.len(), 10, "the core transcript's content messages");
    let states = [
        json!({"version": 1, "sessionId": "s",
            "messageRefs": {"byRaw": {&ids[0]: climb}, "byRef": {climb: &ids[0]}}}),
        json!({"version": 1, "sessionId": "s", "nextBlockId": u64::MAX}),
        json!({"version": 1, "sessionId": "s", "nextBlockId": i64::MAX}),
        json!({"version": 1, "sessionId": "s",
            "messageRefs": {"byRaw": {&ids[0]: "m18446744073709551615"}, "byRef": {"m18446744073709551615": &ids[0]}}}),
        json!({"version": 1, "sessionId": "s",
            "messageRefs": {"byRaw": {&ids[0]: "m99999"}, "byRef": {"m99999": &ids[0]}}}),
        // Recorded refs that start with a multi-byte character.
        json!({"version": 1, "sessionId": "s",
            "messageRefs": {"byRaw": {&ids[0]: "é", &ids[1]: "\u{202e}## "}, "byRef": {"é": &ids[0]}}}),
        json!({"version": 1, "sessionId": "s",
            "tokenSnapshot": {"m00001": u64::MAX, "m00002": i64::MIN, "m00003": 1.5e300}}),
        json!({"version": 1, "sessionId": "s", "blocks": [
            {"blockId": "b1", "tier": u32::MAX, "summary": "x", "effectiveMessageIds": [&ids[0], &ids[1]],
             "archiveRel": "tier1/x.md", "startRef": "m00001", "endRef": "m00002", "active": true,
             "compressedTokens": u64::MAX, "directBlockIds": ["b1", "b2"]},
            {"blockId": "b2", "tier": 1, "summary": "y", "effectiveMessageIds": [&ids[4]],
             "archiveRel": "../../y.md", "startRef": "m00004", "endRef": "m00004", "active": true,
             "compressedTokens": i64::MIN, "compressCallId": "c1"}]}),
        json!({"version": 1, "sessionId": "s", "blocks": [null, {}, {"blockId": ""}, {"blockId": "b0", "tier": -1}]}),
    ];
    for s in states {
        props::state(s.to_string().as_bytes());
    }
    // A real state of the core transcript: a batch ctl made, then its journal replayed.
    let t =
        normafs::format::loader::Transcript::parse(props::CORE_TRANSCRIPT.as_bytes(), Some("s"));
    let p = normafs::noa::views::Projection::new(normafs::store::session::messages(&t));
    let cfg = normafs::config::NoaConfig {
        min_range_chars: 0,
        protect_recent_messages: 1,
        ..Default::default()
    };
    let parsed = normafs::noa::args::parse(
        r#"{"content":[{"startId":"m00001","endId":"m00004","summary":"the build question, the file read and the answer that followed"}]}"#,
    );
    let place = normafs::noa::compress::Placement::new(
        "/r/noa/s",
        "s",
        "2026-11-30T12:00:00Z",
        1_796_040_000,
    );
    let a = normafs::noa::rebuild::ctl_apply(
        &p,
        &normafs::format::state::State::initial("s"),
        &cfg,
        &parsed.ranges,
        "ctl-1",
        &place,
        &normafs::noa::views::runtime_path,
    );
    assert!(a.whole(), "{:?}", a.errors);
    props::state(a.state.to_json().as_bytes());
}

// ---------------------------------------------------------------------------------------------
// The corpus of hostile roots.

/// What a run of the binary did.
struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    secs: f64,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Run `normafs` with a deadline: a hang fails the test instead of blocking it.
fn normafs<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run normafs");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut o = Vec::new();
        let _ = out.read_to_end(&mut o);
        o
    });
    let err_reader = std::thread::spawn(move || {
        let mut e = Vec::new();
        let _ = err.read_to_end(&mut e);
        e
    });
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(s) => s.expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("normafs {args:?} did not finish within 300 s");
        }
    };
    let stdout = reader.join().expect("stdout reader");
    let stderr = String::from_utf8_lossy(&err_reader.join().expect("stderr reader")).into_owned();
    let run = Run {
        code: status.code(),
        stdout,
        stderr,
        secs: start.elapsed().as_secs_f64(),
    };
    assert!(
        !run.stderr.contains("panicked") && run.code != Some(101),
        "normafs {args:?} panicked: {}",
        run.stderr
    );
    assert!(
        run.code.is_some(),
        "normafs {args:?} was killed by a signal: {status:?}"
    );
    run
}

/// The largest resident set of any child waited for so far, in MiB.
fn children_max_rss_mib() -> i64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_maxrss / 1024
}

/// An audit run: exit 0 (no errors) or 1 (errors), the findings and a summary line on stdout.
fn audit(root: &Path, extra: &[&str]) -> (Run, String) {
    let mut args: Vec<OsString> = vec!["audit".into(), root.into()];
    args.extend(extra.iter().map(OsString::from));
    let run = normafs(&args);
    let out = run.out();
    assert!(
        matches!(run.code, Some(0 | 1)),
        "audit exit {:?}: {}",
        run.code,
        run.stderr
    );
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("summary: ")),
        "no summary line: {out}"
    );
    assert_eq!(
        run.code == Some(1),
        !out.contains("summary: 0 errors"),
        "exit code and summary disagree: {out}"
    );
    (run, out)
}

/// The audit has a finding of `code` at `path` (exactly, or `path:<line>`).
fn has_finding(out: &str, code: &str, path: &str) -> bool {
    out.lines().any(|l| {
        let mut it = l.splitn(4, ' ');
        let (_, c, p) = (it.next(), it.next(), it.next().unwrap_or(""));
        c == Some(code) && (p == path || p.strip_prefix(path).is_some_and(|r| r.starts_with(':')))
    })
}

fn assert_finding(out: &str, code: &str, path: &str) {
    assert!(
        has_finding(out, code, path),
        "expected {code} at {path}:\n{out}"
    );
}

/// A command that cannot proceed: non-zero exit, one `normafs: …` line on stderr (a refused
/// ctl batch: that line, then Compress's panel as written, its lines indented or `▣`).
fn assert_one_line_error(run: &Run, what: &str) {
    assert!(run.code != Some(0), "{what} should fail");
    let first = run.stderr.lines().next().unwrap_or("");
    let panel = first.starts_with("normafs: refused, nothing written")
        && run
            .stderr
            .lines()
            .skip(1)
            .all(|l| l.starts_with("▣ noa | ") || l.starts_with("  "));
    assert!(
        panel || run.stderr.lines().count() == 1,
        "{what}: one line expected: {:?}",
        run.stderr
    );
    assert!(
        run.stderr.starts_with("normafs: "),
        "{what}: {:?}",
        run.stderr
    );
}

/// Success, or a clean one-line failure.
fn assert_ok_or_one_line_error(run: &Run, what: &str) {
    if run.code != Some(0) {
        assert_one_line_error(run, what);
    }
}

/// A session root inside a temp dir, beside `outside/` holding canary files: everything outside
/// the root is recorded when [`Hostile::seal`] is called and compared by [`Hostile::check_outside`].
struct Hostile {
    _tmp: tempfile::TempDir,
    outer: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    sealed: BTreeMap<PathBuf, Entry>,
    files: usize,
}

#[derive(Debug, PartialEq)]
enum Entry {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Every entry under `dir` except `skip`, without following symlinks.
fn entries(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p == skip {
            continue;
        }
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            out.insert(
                p.clone(),
                Entry::Link(std::fs::read_link(&p).expect("readlink")),
            );
        } else if ft.is_dir() {
            out.insert(p.clone(), Entry::Dir);
            entries(&p, skip, out);
        } else {
            out.insert(p.clone(), Entry::File(std::fs::read(&p).expect("read")));
        }
    }
}

const SECRET: &str = "SECRET-OUTSIDE";

impl Hostile {
    fn new() -> Hostile {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outer = tmp.path().to_path_buf();
        let root = outer.join("root");
        let outside = outer.join("outside");
        for d in ["transcripts", "memory", "noa"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::create_dir_all(outside.join("tier")).expect("mkdir");
        let mut h = Hostile {
            _tmp: tmp,
            outer,
            root,
            outside,
            sealed: BTreeMap::new(),
            files: 0,
        };
        h.write_outside("canary.txt", b"canary: must stay byte-identical\n");
        // What a leak would show: a transcript, memory, archive, state and journal whose
        // every readable field says SECRET.
        let rec = json!({"uuid": SECRET, "session_id": SECRET, "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": SECRET}]}});
        h.write_outside("secret.jsonl", format!("{rec}\n").as_bytes());
        h.write_outside("agent-z.jsonl", format!("{rec}\n").as_bytes());
        h.write_outside(
            "secret-memory.md",
            format!("---\nname: {SECRET}\ndescription: {SECRET}\ntype: {SECRET}\n---\n{SECRET}\n")
                .as_bytes(),
        );
        let secret_archive = format!(
            "---\nblock: {SECRET}\ntier: 7\nrange: {SECRET}-{SECRET}\noriginal_tokens: 1\n---\n# {SECRET}\n"
        );
        h.write_outside("canary.md", secret_archive.as_bytes());
        h.write_outside("tier/b1_m00004-m00009.md", secret_archive.as_bytes());
        h.write_outside("tier/b2_m00012-m00017.md", secret_archive.as_bytes());
        h.write_outside(
            "secret-state.json",
            json!({"version": 1, "sessionId": SECRET, "extra": SECRET})
                .to_string()
                .as_bytes(),
        );
        let entry = json!({"at": "2026-11-30T12:00:00Z", "input": {"content": [{"startId": "m00001", "endId": "m00002", "summary": SECRET}]}, "blocks": [], "callId": format!("ctl-{SECRET}")});
        h.write_outside(
            "secret-journal.jsonl",
            format!("{entry}\n{{\"torn").as_bytes(),
        );
        std::fs::create_dir_all(h.outside.join("noa-dir")).expect("mkdir");
        h.write_outside(
            "noa-dir/state.json",
            json!({"version": 1, "sessionId": SECRET})
                .to_string()
                .as_bytes(),
        );
        h
    }

    /// A root holding a copy of the corpus session `s2-tier1` (15 tier-1 blocks and their
    /// archives) as session `sid`.
    fn with_example(sid: &str) -> Hostile {
        let mut h = Hostile::new();
        h.add_example(sid);
        h
    }

    fn add_example(&mut self, sid: &str) {
        let ex = common::norma_data().join("corpus");
        let t = std::fs::read_to_string(ex.join("transcripts/s2-tier1.jsonl")).expect("read");
        std::fs::write(
            self.root.join(format!("transcripts/{sid}.jsonl")),
            t.replace(
                "\"session_id\":\"s2-tier1\"",
                &format!("\"session_id\":\"{sid}\""),
            ),
        )
        .expect("copy");
        common::copy_tree(&ex.join("noa/s2-tier1"), &self.root.join("noa").join(sid));
        let state = self.root.join("noa").join(sid).join("state.json");
        let text = std::fs::read_to_string(&state).expect("state");
        std::fs::write(
            &state,
            text.replace("\"s2-tier1\"", &format!("\"{sid}\""))
                .replace("/noa/s2-tier1/", &format!("/noa/{sid}/")),
        )
        .expect("write");
    }

    fn write_outside(&mut self, rel: &str, bytes: &[u8]) {
        let p = self.outside.join(rel);
        std::fs::write(p, bytes).expect("write outside");
    }

    /// Write a hostile file under the root (parents created) and count it.
    fn write(&mut self, rel: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, bytes).expect("write");
        self.files += 1;
        p
    }

    /// A hostile symlink under the root, counted.
    fn link(&mut self, target: impl AsRef<Path>, rel: impl AsRef<Path>) {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        symlink(target, &p).expect("symlink");
        self.files += 1;
    }

    fn seal(&mut self) {
        self.sealed.clear();
        entries(&self.outer, &self.root, &mut self.sealed);
    }

    /// Nothing outside the root changed, and nothing new appeared there.
    fn check_outside(&self) {
        let mut now = BTreeMap::new();
        entries(&self.outer, &self.root, &mut now);
        assert!(!self.sealed.is_empty(), "seal() first");
        assert_eq!(now, self.sealed, "something outside the root changed");
    }

    fn root_arg(&self) -> &Path {
        &self.root
    }
}

fn report(group: &str, files: usize) {
    eprintln!("hostile files tried: {files} ({group})");
}

fn view(root: &Path, sid: impl AsRef<OsStr>) -> Run {
    normafs([OsStr::new("view"), root.as_os_str(), sid.as_ref()])
}

fn ctl(root: &Path, sid: impl AsRef<OsStr>, cmd: &[&str]) -> Run {
    ctl_with(root, sid, &[], cmd)
}

/// `normafs ctl FLAGS ROOT SID COMMAND…` (flags first: the command takes the rest of the line).
/// Every hostile root is written just before its commands run, so every session would look
/// live: `--live-seconds 0`.
fn ctl_with(root: &Path, sid: impl AsRef<OsStr>, flags: &[&str], cmd: &[&str]) -> Run {
    let mut args: Vec<OsString> = vec!["ctl".into(), "--live-seconds".into(), "0".into()];
    args.extend(flags.iter().map(OsString::from));
    args.extend([root.as_os_str().to_owned(), sid.as_ref().to_owned()]);
    args.extend(cmd.iter().map(OsString::from));
    normafs(&args)
}

/// A session built like the runtime writes it, with enough messages to compress.
fn synthetic_session(sid: &str, n: usize) -> common::Session {
    let mut s = common::Session::new(sid);
    for i in 0..n {
        if i % 2 == 0 {
            s.user(&format!("question {i}: {}", "lorem ipsum ".repeat(20)));
        } else {
            s.assistant(&format!("answer {i}: {}", "dolor sit amet ".repeat(20)));
        }
    }
    s
}

const LOOSE: [&str; 6] = [
    "--protect-recent-messages",
    "1",
    "--protect-recent-tokens",
    "0",
    "--min-range-chars",
    "0",
];

#[test]
fn fifty_megabyte_lines() {
    let mut h = Hostile::new();
    const BIG: usize = 50 << 20;
    // One valid record holding 50 MB of text.
    let text = "x".repeat(BIG);
    let rec = json!({"uuid": "a1", "session_id": "big", "type": "message",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]}});
    h.write("transcripts/big.jsonl", format!("{rec}\n"));
    drop(rec);
    // One malformed 50 MB line between two good ones.
    let mut bad = Vec::with_capacity(BIG + 200);
    bad.extend_from_slice(b"{\"uuid\":\"b0\",\"type\":\"message\"}\n{\"uuid\":\"b1\",\"type\":\"message\",\"message\":");
    bad.resize(bad.len() + BIG, b'[');
    bad.extend_from_slice(b"\n{\"uuid\":\"b2\",\"parent_uuid\":\"b0\",\"type\":\"message\"}\n");
    h.write("transcripts/bad.jsonl", &bad);
    // A 50 MB last line without its newline: a torn tail.
    let mut torn = b"{\"uuid\":\"c0\",\"type\":\"message\"}\n{\"uuid\":\"c1\",\"text\":\"".to_vec();
    torn.resize(torn.len() + BIG, b'y');
    h.write("transcripts/torn.jsonl", &torn);
    drop((bad, torn, text));
    h.seal();

    let (run, out) = audit(h.root_arg(), &[]);
    eprintln!("audit of 3 x 50 MB transcripts: {:.1} s", run.secs);
    assert_finding(&out, "transcript.malformed-line", "transcripts/bad.jsonl:2");
    assert_finding(&out, "transcript.torn-tail", "transcripts/torn.jsonl:2");
    assert!(!out
        .lines()
        .any(|l| l.contains("transcripts/big.jsonl") && l.starts_with("error")));
    assert!(
        out.len() < 64 << 10,
        "the audit must not echo the lines: {} bytes",
        out.len()
    );

    let run = view(h.root_arg(), "big");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.len() > BIG, "the view holds the whole message");
    eprintln!("view of a 50 MB record: {:.1} s", run.secs);
    for sid in ["bad", "torn"] {
        let run = view(h.root_arg(), sid);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert!(run.stdout.len() < 1 << 20);
        let run = ctl(h.root_arg(), sid, &["rebuild"]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let rss = children_max_rss_mib();
    eprintln!("largest child resident set: {rss} MiB");
    assert!(
        rss < 2048,
        "memory must stay bounded: {rss} MiB for 50 MB lines"
    );
    h.check_outside();
    report("50 MB lines", h.files);
}

#[test]
fn deep_nesting() {
    let mut h = Hostile::with_example("deep");
    let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let deep_obj = |n: usize| format!("{}{}", "{\"a\":".repeat(n), "}".repeat(n));
    let good = std::fs::read_to_string(h.root.join("transcripts/deep.jsonl")).expect("read");
    // Deep nesting in a field read as a JSON value: past the parser's recursion limit, a
    // malformed line (the second); the rest of the transcript still loads.
    let line = format!(
        "{{\"uuid\":\"d1\",\"type\":\"message\",\"x\":{},\"message\":{{\"role\":\"user\",\"content\":[]}}}}",
        deep(10_000)
    );
    // Deep nesting in a tool call's input, which is kept as its raw text: it loads (the third
    // line).
    let raw = format!(
        "{{\"uuid\":\"d2\",\"type\":\"message\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"n\",\"input\":{}}}]}}}}",
        deep(5_000)
    );
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(1, &line);
    lines.insert(2, &raw);
    h.write("transcripts/deep.jsonl", lines.join("\n") + "\n");
    h.write(
        "noa/deep/state.json",
        format!(
            "{{\"version\":1,\"sessionId\":\"deep\",\"x\":{}}}",
            deep_obj(10_000)
        ),
    );
    h.write("noa/deep/ctl.jsonl", format!("{}\n", deep(10_000)));
    h.write(
        "noa/deep/tier1/b99_m00001-m00002.md",
        format!(
            "---\nblock: b99\ntier: 1\nrange: m00001-m00002\nmessage_count: 2\noriginal_tokens: 1\n---\n\n# 归档 b99 · Tier 1 · m00001–m00002\n\n> s\n\n---\n\n## m00001 · user\n\nhi\n\n## m00002 · assistant · tool_use · X\n\n```json\n{}\n```\n\n",
            deep(10_000)
        ),
    );
    h.write(
        "memory/deep.md",
        format!("---\nname: {}\n---\n", deep(10_000)),
    );
    h.seal();

    let (_, out) = audit(h.root_arg(), &[]);
    assert_finding(
        &out,
        "transcript.malformed-line",
        "transcripts/deep.jsonl:2",
    );
    assert_finding(&out, "state.malformed", "noa/deep/state.json");
    assert_finding(&out, "journal.malformed", "noa/deep/ctl.jsonl:1");
    assert_finding(
        &out,
        "archive.orphan",
        "noa/deep/tier1/b99_m00001-m00002.md",
    );
    assert!(out.contains("recursion limit"), "{out}");
    assert!(
        !has_finding(
            &out,
            "transcript.malformed-line",
            "transcripts/deep.jsonl:3"
        ),
        "{out}"
    );

    let run = view(h.root_arg(), "deep");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "one warning line: {}",
        run.stderr
    );
    let run = ctl(
        h.root_arg(),
        "deep",
        &["compress", &format!("{{\"content\":{}}}", deep(10_000))],
    );
    assert_one_line_error(&run, "compress with deep JSON");
    assert!(run.stderr.contains("could not be parsed"), "{}", run.stderr);
    // A journal line that is not an entry stops nothing: rebuild replaces the bad state.
    let run = ctl(h.root_arg(), "deep", &["rebuild"]);
    assert_ok_or_one_line_error(&run, "rebuild");
    h.check_outside();
    report("deep nesting", h.files);
}

#[test]
fn nul_and_invalid_utf8() {
    let mut h = Hostile::with_example("nul");
    let good = std::fs::read(h.root.join("transcripts/nul.jsonl")).expect("read");
    let mut t = good.clone();
    t.extend_from_slice(b"{\"uuid\":\"n1\",\"type\":\"message\",\"text\":\"a\0b\"}\n");
    t.extend_from_slice(b"{\"uuid\":\"n2\",\"type\":\"message\",\"text\":\"\xff\xfe\"}\n");
    t.extend_from_slice(b"\0\0\0\0\n");
    t.extend_from_slice(b"{\"uuid\":\"n3\",\"type\":\"message\",\"text\":\"\\ud800\"}\r\n");
    t.extend_from_slice(b"{\"uuid\":\"n4\",\"type\":\"boundary\",\"text\":\"nul \\u0000 ok\"}\r\n");
    h.write("transcripts/nul.jsonl", &t);
    let mut state = std::fs::read(h.root.join("noa/nul/state.json")).expect("read");
    state.insert(30, 0);
    h.write("noa/nul/state.json", &state);
    h.write(
        "noa/nul/ctl.jsonl",
        b"{\"at\":\"\xff\",\"input\":{},\"blocks\":[],\"callId\":\"c\"}\n\0\n",
    );
    // A referenced archive that is not UTF-8, and an orphan with NUL in its frontmatter.
    let mut arch = std::fs::read(h.root.join("noa/nul/tier1/b1_m00004-m00009.md")).expect("read");
    arch.extend_from_slice(b"\xff\xfe\xfd");
    h.write("noa/nul/tier1/b1_m00004-m00009.md", &arch);
    h.write(
        "noa/nul/tier1/b77_m00001-m00002.md",
        b"---\nblock: b\x0077\ntier: 1\nrange: m00001-m00002\noriginal_tokens: 1\n---\n\0\0\0",
    );
    h.write("memory/bad-utf8.md", b"---\nname: \xff\n---\n");
    h.write(
        "memory/nul.md",
        b"---\nname: nul\0name\ndescription: \0\n---\n\0",
    );
    h.write(
        OsStr::from_bytes(b"memory/\xff\xfe.md"),
        b"---\nname: x\n---\n",
    );
    h.write("memory/MEMORY.md", b"# Memory index\n\xff\n");
    h.seal();

    let (run, out) = audit(h.root_arg(), &[]);
    assert_eq!(run.code, Some(1));
    let first_bad = good.iter().filter(|&&b| b == b'\n').count() + 1;
    for l in first_bad..first_bad + 4 {
        assert_finding(
            &out,
            "transcript.malformed-line",
            &format!("transcripts/nul.jsonl:{l}"),
        );
    }
    assert_finding(&out, "state.malformed", "noa/nul/state.json");
    assert_finding(&out, "journal.malformed", "noa/nul/ctl.jsonl:1");
    assert_finding(&out, "journal.malformed", "noa/nul/ctl.jsonl:2");
    assert_finding(&out, "archive.orphan", "noa/nul/tier1/b77_m00001-m00002.md");
    assert_finding(&out, "memory.malformed", "memory/bad-utf8.md");
    assert_finding(&out, "memory.malformed", "memory/\u{fffd}\u{fffd}.md");
    assert_finding(&out, "memory.index-stale", "memory/MEMORY.md");
    // The audit is text: one finding a line, whatever the files hold.
    assert!(!out.contains('\0'), "a NUL reached the audit");
    // With the state unusable the archive is only an orphan: restore the state to see the
    // archive reported as corrupt.
    let fixed = h.root.join("noa/nul/state.json");
    state.remove(30);
    std::fs::write(&fixed, &state).expect("write");
    let (_, out) = audit(h.root_arg(), &[]);
    assert_finding(&out, "archive.corrupt", "noa/nul/tier1/b1_m00004-m00009.md");

    let run = view(h.root_arg(), "nul");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.out().contains("\\u0000") || !run.out().contains('\0'));
    let run = ctl(h.root_arg(), "nul", &["rebuild"]);
    assert_ok_or_one_line_error(&run, "rebuild");
    let run = ctl(h.root_arg(), "-", &["reindex-memory"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    h.check_outside();
    report("NUL and invalid UTF-8", h.files);
}

#[test]
fn state_json_of_every_wrong_shape() {
    let mut h = Hostile::new();
    let shapes: Vec<(&str, Option<&[u8]>, &str)> = vec![
        ("array", Some(b"[]"), "state.malformed"),
        ("number", Some(b"42"), "state.malformed"),
        ("empty", Some(b""), "state.malformed"),
        ("blank", Some(b" \n\t"), "state.malformed"),
        ("null", Some(b"null"), "state.malformed"),
        ("string", Some(b"\"{}\""), "state.malformed"),
        // Read as Go's decoder reads it: a missing version is 0, a version that is not an
        // integer fails the decode.
        ("object", Some(b"{}"), "state.version"),
        ("v2", Some(b"{\"version\":2}"), "state.version"),
        ("vstr", Some(b"{\"version\":\"1\"}"), "state.malformed"),
        (
            "vhuge",
            Some(b"{\"version\":18446744073709551616}"),
            "state.malformed",
        ),
        (
            "cut",
            Some(b"{\"version\":1,\"blocks\":[{"),
            "state.malformed",
        ),
        (
            "blocks",
            Some(b"{\"version\":1,\"blocks\":7}"),
            "state.malformed",
        ),
        ("dir", None, "state.malformed"),
    ];
    for (sid, bytes, _) in &shapes {
        h.add_example(sid);
        let p = h.root.join("noa").join(sid).join("state.json");
        match bytes {
            Some(b) => {
                h.write(Path::new("noa").join(sid).join("state.json"), b);
            }
            None => {
                std::fs::remove_file(&p).expect("rm");
                std::fs::create_dir(&p).expect("mkdir");
                h.files += 1;
            }
        }
    }
    h.seal();
    let (run, out) = audit(h.root_arg(), &[]);
    assert_eq!(run.code, Some(1));
    for (sid, _, code) in &shapes {
        assert_finding(&out, code, &format!("noa/{sid}/state.json"));
    }
    for (sid, bytes, _) in &shapes {
        let run = view(h.root_arg(), sid);
        assert_eq!(run.code, Some(0), "{sid}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("normafs: warning: "),
            "{sid}: {}",
            run.stderr
        );
        let run = ctl(h.root_arg(), sid, &["rebuild"]);
        if bytes.is_some() {
            assert_eq!(run.code, Some(0), "{sid}: {}", run.stderr);
            let rebuilt = std::fs::read(h.root.join("noa").join(sid).join("state.json"));
            let rebuilt = normafs::format::state::parse_state(&rebuilt.expect("state"));
            assert!(rebuilt.is_ok(), "{sid}: rebuild leaves a usable state");
        } else {
            assert_one_line_error(&run, "rebuild over a directory");
        }
        let run = ctl(
            h.root_arg(),
            sid,
            &[
                "compress",
                "m00150",
                "m00160",
                "a summary long enough to pass the minimum length",
            ],
        );
        assert_ok_or_one_line_error(&run, "compress");
    }
    h.check_outside();
    report("state.json shapes", h.files);
}

#[test]
fn archive_paths_that_leave_the_root() {
    let mut h = Hostile::with_example("esc");
    let canary = h.outside.join("canary.md");
    let state_path = h.root.join("noa/esc/state.json");
    let mut state: Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("read")).expect("json");
    let rels = [
        "../../../outside/canary.md".to_string(),
        canary.to_string_lossy().into_owned(),
        "tier1/../../../../outside/canary.md".to_string(),
        String::new(),
        "tier1/\u{0}x.md".to_string(),
        "./tier1/b1_m00004-m00009.md".to_string(),
    ];
    let template = state["blocks"][0].clone();
    let blocks = state["blocks"].as_array_mut().expect("blocks");
    for (i, rel) in rels.iter().enumerate() {
        let mut b = template.clone();
        b["blockId"] = json!(format!("b{}", 10 + i));
        b["archiveRel"] = json!(rel);
        b["archivePath"] = json!(canary);
        b["active"] = json!(false);
        blocks.push(b);
    }
    state["nextBlockId"] = json!(20);
    h.write(
        "noa/esc/state.json",
        serde_json::to_vec_pretty(&state).expect("json"),
    );
    // Names with `..` inside a tier directory are just names.
    h.write("noa/esc/tier1/..md", "x");
    h.write(
        "noa/esc/tier1/b1_..-...md",
        "---\nblock: b1\ntier: 1\nrange: ..-..\noriginal_tokens: 1\n---\n",
    );
    h.seal();

    let (_, out) = audit(h.root_arg(), &[]);
    for (i, rel) in rels.iter().enumerate() {
        let b = format!("b{}", 10 + i);
        // An empty archiveRel is no path at all: the archive is looked for by archivePath,
        // which lies outside the archive base and is never used — so it is missing.
        let (code, says) = if rel.is_empty() {
            (
                "archive.missing",
                format!("the archive of {b} cannot be found"),
            )
        } else {
            ("archive.mismatch", format!("{b}: archiveRel"))
        };
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("{code} noa/esc/state.json")) && l.contains(&says)),
            "{b} ({rel:?}) not reported:\n{out}"
        );
    }
    assert_finding(&out, "archive.orphan", "noa/esc/tier1/..md");
    assert!(
        !out.contains(SECRET),
        "the audit read a file outside the root:\n{out}"
    );
    let run = view(h.root_arg(), "esc");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.out().contains(SECRET));
    let run = ctl_with(
        h.root_arg(),
        "esc",
        &LOOSE,
        &[
            "compress",
            "m00170",
            "m00175",
            "late messages of the session, summarized at some length",
        ],
    );
    assert_ok_or_one_line_error(&run, "compress beside escaping archive paths");
    assert!(!run.out().contains(SECRET) && !run.stderr.contains(SECRET));
    h.check_outside();
    let run = ctl(h.root_arg(), "esc", &["rebuild"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    h.check_outside();
    report("archive paths", h.files);
}

#[test]
fn refs_that_climb_out_never_name_an_archive() {
    let mut h = Hostile::new();
    let s = synthetic_session("climb", 12);
    common::write_session(&h.root, &s);
    h.files += 1;
    // The state maps the first message to a ref that climbs out of the root when it is used
    // in an archive file name (`tier1/b1_<start>-<end>.md`).
    let climb = "../../../../../../outside/pwn";
    let state = json!({"version": 1, "sessionId": "climb", "nextBlockId": 1, "blocks": [],
        "messageRefs": {"byRaw": {&s.ids()[0]: climb}, "byRef": {climb: &s.ids()[0]}}});
    h.write("noa/climb/state.json", state.to_string());
    h.seal();
    let run = ctl_with(
        h.root_arg(),
        "climb",
        &LOOSE,
        &[
            "compress",
            climb,
            "m00004",
            "the first messages of the session, summarized at some length",
        ],
    );
    assert_one_line_error(&run, "compress naming a climbing ref");
    h.check_outside();
    // A journal batch naming it is not rolled forward out of the root either.
    let entry = json!({"at": "2026-11-30T12:00:00Z", "input": {"content": [{"startId": climb, "endId": "m00004", "summary": "the first messages, summarized at length"}]}, "blocks": [], "callId": "ctl-1"});
    h.write("noa/climb/ctl.jsonl", format!("{entry}\n"));
    h.seal();
    let run = ctl_with(
        h.root_arg(),
        "climb",
        &LOOSE,
        &[
            "compress",
            "m00005",
            "m00008",
            "later messages of the session, summarized at some length",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let result: Value = serde_json::from_slice(&run.stdout).expect("result line");
    let notes = result["result"]["recovery"].to_string();
    assert!(notes.contains("could not be rolled forward"), "{notes}");
    assert_ok_or_one_line_error(&run, "compress after a climbing journal batch");
    let (_, out) = audit(h.root_arg(), &[]);
    assert!(!out.is_empty());
    h.check_outside();
    report("climbing refs", h.files);
}

#[test]
fn symlinks_that_lead_outside() {
    let mut h = Hostile::new();
    let out_dir = h.outside.clone();
    // A transcript link, in a session that exists through its archive root.
    h.link(out_dir.join("secret.jsonl"), "transcripts/lt.jsonl");
    std::fs::create_dir_all(h.root.join("noa/lt")).expect("mkdir");
    // A transcript link alone: not a session.
    h.link(out_dir.join("secret.jsonl"), "transcripts/lo.jsonl");
    // A memory link.
    h.write(
        "memory/real.md",
        "---\nname: real\ndescription: d\ntype: user\n---\nbody\n",
    );
    h.link(out_dir.join("secret-memory.md"), "memory/leak.md");
    // A tier directory link and an archive link, in copies of the example.
    h.add_example("td");
    std::fs::remove_dir_all(h.root.join("noa/td/tier1")).expect("rm");
    h.link(out_dir.join("tier"), "noa/td/tier1");
    h.add_example("al");
    std::fs::remove_file(h.root.join("noa/al/tier1/b1_m00004-m00009.md")).expect("rm");
    h.link(
        out_dir.join("tier/b1_m00004-m00009.md"),
        "noa/al/tier1/b1_m00004-m00009.md",
    );
    // state.json and journal links.
    h.add_example("sl");
    std::fs::remove_file(h.root.join("noa/sl/state.json")).expect("rm");
    h.link(out_dir.join("secret-state.json"), "noa/sl/state.json");
    h.add_example("jl");
    h.link(out_dir.join("secret-journal.jsonl"), "noa/jl/ctl.jsonl");
    // A sidechain link, a subagents directory link, an archive root link.
    h.add_example("sc");
    h.link(
        out_dir.join("secret.jsonl"),
        "transcripts/sc/subagents/agent-x.jsonl",
    );
    h.add_example("sd");
    h.link(&out_dir, "transcripts/sd/subagents");
    h.write(
        "transcripts/ar.jsonl",
        std::fs::read(h.root.join("transcripts/sc.jsonl")).expect("read"),
    );
    h.link(out_dir.join("noa-dir"), "noa/ar");
    h.seal();

    let (_, out) = audit(h.root_arg(), &[]);
    assert!(
        !out.contains(SECRET),
        "the audit read through a symlink:\n{out}"
    );
    assert_finding(&out, "root.bad-name", "transcripts/lt.jsonl");
    assert_finding(&out, "root.bad-name", "transcripts/lo.jsonl");
    assert_finding(&out, "root.bad-name", "noa/ar");
    assert_finding(&out, "memory.malformed", "memory/leak.md");
    assert!(
        has_finding(&out, "archive.corrupt", "noa/td/tier1/b1_m00004-m00009.md")
            || has_finding(&out, "archive.missing", "noa/td/tier1/b1_m00004-m00009.md"),
        "{out}"
    );
    assert!(
        has_finding(&out, "archive.corrupt", "noa/al/tier1/b1_m00004-m00009.md")
            || has_finding(&out, "archive.missing", "noa/al/tier1/b1_m00004-m00009.md"),
        "{out}"
    );
    assert_finding(&out, "state.malformed", "noa/sl/state.json");
    assert_finding(&out, "journal.malformed", "noa/jl/ctl.jsonl");

    for sid in ["lt", "lo", "td", "al", "sl", "jl", "sc", "sd", "ar"] {
        let run = view(h.root_arg(), sid);
        assert_ok_or_one_line_error(&run, "view");
        assert!(
            !run.out().contains(SECRET) && !run.stderr.contains(SECRET),
            "view {sid} read outside"
        );
        let run = ctl(h.root_arg(), sid, &["rebuild"]);
        assert_ok_or_one_line_error(&run, "rebuild");
        assert!(
            !run.out().contains(SECRET) && !run.stderr.contains(SECRET),
            "rebuild {sid} read outside"
        );
        h.check_outside();
    }
    assert_one_line_error(&view(h.root_arg(), "lo"), "view of a link-only session");
    let run = ctl(h.root_arg(), "-", &["reindex-memory"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let index = std::fs::read_to_string(h.root.join("memory/MEMORY.md")).expect("index");
    assert!(
        index.contains("real.md") && !index.contains(SECRET),
        "{index}"
    );
    // Rebuild replaced the linked state.json by a file, without carrying over what it held.
    let st = h.root.join("noa/sl/state.json");
    assert!(std::fs::symlink_metadata(&st).expect("state").is_file());
    let st = std::fs::read_to_string(st).expect("state");
    assert!(!st.contains(SECRET), "{st}");
    let (_, out) = audit(h.root_arg(), &[]);
    assert!(!out.contains(SECRET), "{out}");
    h.check_outside();
    report("symlinks", h.files);
}

#[test]
fn session_names_that_cannot_be_sessions() {
    let mut h = Hostile::new();
    let s = synthetic_session("ok", 4);
    common::write_session(&h.root, &s);
    let jsonl = s.jsonl();
    h.write("transcripts/new\nline.jsonl", &jsonl);
    h.write("transcripts/tab\tname.jsonl", &jsonl);
    h.write(OsStr::from_bytes(b"transcripts/\xff\xfe.jsonl"), &jsonl);
    h.write("transcripts/.hidden.jsonl", &jsonl);
    h.write("transcripts/..jsonl", &jsonl);
    std::fs::create_dir_all(h.root.join("noa/new\nline")).expect("mkdir");
    h.files += 1;
    // 255 bytes: the longest name a directory can have; its transcript name would be too long.
    let long255 = "l".repeat(255);
    h.write(
        Path::new("noa").join(&long255).join("state.json"),
        json!({"version": 1, "sessionId": long255}).to_string(),
    );
    let long249 = "m".repeat(249);
    h.write(format!("transcripts/{long249}.jsonl"), &jsonl);
    h.seal();

    let (_, out) = audit(h.root_arg(), &[]);
    assert_finding(&out, "root.bad-name", "transcripts/new\\nline.jsonl");
    assert_finding(&out, "root.bad-name", "transcripts/tab\\tname.jsonl");
    assert_finding(&out, "root.bad-name", "transcripts/\\xff\\xfe.jsonl");
    assert_finding(&out, "root.bad-name", "transcripts/.hidden.jsonl");
    assert_finding(&out, "root.bad-name", "noa/new\\nline");
    // Every finding is one line (and each session's peak).
    for l in out.lines() {
        assert!(
            l.starts_with("error ")
                || l.starts_with("warn ")
                || l.starts_with("info ")
                || l.starts_with("peak ")
                || l.starts_with("summary: "),
            "{l:?}"
        );
    }
    for sid in [&long255, &long249] {
        let run = view(h.root_arg(), sid);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let run = ctl(h.root_arg(), sid, &["rebuild"]);
        assert_ok_or_one_line_error(&run, "rebuild of a long name");
        let (run, _) = audit(h.root_arg(), &[sid]);
        assert!(run.stderr.is_empty(), "{}", run.stderr);
    }
    let long256 = "n".repeat(256);
    for sid in [
        "new\nline",
        "tab\tname",
        ".hidden",
        "..",
        ".",
        "",
        "a/b",
        &long256,
    ] {
        assert_one_line_error(&view(h.root_arg(), sid), "view of a bad name");
        assert_one_line_error(&ctl(h.root_arg(), sid, &["rebuild"]), "ctl of a bad name");
        assert_one_line_error(
            &normafs([OsStr::new("audit"), h.root.as_os_str(), OsStr::new(sid)]),
            "audit of a bad name",
        );
    }
    let bad = OsString::from_vec(b"\xff\xfe".to_vec());
    assert_one_line_error(&view(h.root_arg(), &bad), "view of a non-UTF-8 name");
    h.check_outside();
    report("session names", h.files);
}

#[test]
fn a_crowded_memory_directory() {
    let full = std::env::var("NORMAFS_HOSTILE_FULL").is_ok_and(|v| v == "1");
    let n = if full { 100_000 } else { 20_000 };
    let mut h = Hostile::new();
    let dir = h.root.join("memory");
    // The index the runtime wrote before any of them (a missing index is not stale).
    h.write("memory/MEMORY.md", "# Memory\n\n(no memories yet)\n");
    let mut malformed = 0;
    for i in 0..n {
        let name = format!("m{i:06}.md");
        let body = if i % 1000 == 7 {
            malformed += 1;
            format!("no frontmatter {i}\n")
        } else {
            format!("---\nname: m{i:06}\ndescription: memory {i}\ntype: user\n---\nbody {i}\n")
        };
        std::fs::write(dir.join(name), body).expect("write");
    }
    h.files += n;
    h.seal();
    let (run, out) = audit(h.root_arg(), &[]);
    eprintln!("audit of {n} memory files: {:.1} s", run.secs);
    let found = out
        .lines()
        .filter(|l| l.starts_with("warn memory.malformed "))
        .count();
    assert_eq!(found, malformed, "{out}");
    assert_finding(&out, "memory.index-stale", "memory/MEMORY.md");
    assert!(
        run.secs < 120.0,
        "audit of {n} memories took {:.1} s",
        run.secs
    );
    let run = ctl(h.root_arg(), "-", &["reindex-memory"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let index = std::fs::read_to_string(dir.join("MEMORY.md")).expect("index");
    assert_eq!(index.lines().filter(|l| l.starts_with("- [")).count(), n);
    let (run, out) = audit(h.root_arg(), &[]);
    assert!(
        !has_finding(&out, "memory.index-stale", "memory/MEMORY.md"),
        "{out}"
    );
    eprintln!("audit after reindex: {:.1} s", run.secs);
    h.check_outside();
    report("memory directory", h.files);
}

#[test]
fn absurd_ctl_commands() {
    let mut h = Hostile::new();
    let s = synthetic_session("c", 12);
    common::write_session(&h.root, &s);
    h.files += 1;
    h.seal();
    let root = h.root.clone();
    // A 1 MB command line, as many arguments (one argument may not exceed 128 KiB).
    let chunk = "w".repeat(64 << 10);
    let mut big: Vec<&str> = vec!["compress", "m00001", "m00004"];
    big.extend(std::iter::repeat_n(chunk.as_str(), 16));
    let run = ctl(&root, "c", &big);
    assert_one_line_error(&run, "1 MB compress");
    let mut junk: Vec<&str> = vec![];
    junk.extend(std::iter::repeat_n(chunk.as_str(), 16));
    let run = ctl(&root, "c", &junk);
    assert_one_line_error(&run, "1 MB unknown command");
    assert!(
        run.stderr.len() < 4096,
        "the error echoes {} bytes",
        run.stderr.len()
    );
    // Absurd ranges.
    for (a, b) in [
        ("m99999999999999999999", "m00004"),
        ("m00001", "m18446744073709551615"),
        ("m00099", "m00001"),
        ("m", "m-1"),
        ("b1", "../../x"),
    ] {
        let run = ctl(
            &root,
            "c",
            &["compress", a, b, "a summary long enough to pass"],
        );
        assert_one_line_error(&run, "absurd range");
    }
    let run = ctl(&root, "c", &["compress", "{\"content\":[{\"startId\":\"m99999999999999999999\",\"endId\":\"m00004\",\"summary\":\"x\"}]}"]);
    assert_one_line_error(&run, "absurd JSON range");
    // A summary with NUL, newlines and markup, through JSON: it is compressed and reads back.
    let summary = "line one\nline two\u{0} with NUL\r\n---\n```\n## m00001 · fake heading";
    let input = json!({"content": [{"startId": "m00001", "endId": "m00004", "topic": "t\nopic\u{0}", "summary": summary}]});
    let run = ctl_with(&root, "c", &LOOSE, &["compress", &input.to_string()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let result: Value = serde_json::from_slice(&run.stdout).expect("result line");
    let rel = result["result"]["blocks"][0]["archiveRel"]
        .as_str()
        .expect("archive")
        .to_string();
    let text = std::fs::read_to_string(root.join("noa/c").join(&rel)).expect("archive");
    let parsed = normafs::format::archive::parse(&text).expect("archive parses");
    assert_eq!(parsed.body_sha256_ok, Some(true));
    assert_eq!(parsed.summary.as_deref(), Some(summary));
    // The fake heading in the summary is quoted, not a heading: one entry per message.
    assert_eq!(parsed.headings.len(), 4, "{text}");
    let (run, out) = audit(&root, &[]);
    assert_eq!(run.code, Some(0), "{out}");
    // Rebuilt with the settings the batch ran with, it is replayed and its archive adopted.
    let run = ctl_with(&root, "c", &LOOSE, &["rebuild"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let result: Value = serde_json::from_slice(&run.stdout).expect("result line");
    assert_eq!(result["result"]["adopted"], json!([rel]), "{result}");
    h.check_outside();
    report("ctl commands", h.files);
}

#[test]
fn a_state_with_100000_dangling_refs() {
    let mut h = Hostile::new();
    let s = synthetic_session("refs", 4);
    common::write_session(&h.root, &s);
    let n = 100_000;
    let by_raw: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("h_gone{i:010}"), json!(format!("m{:05}", i + 10))))
        .collect();
    let by_ref: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("m{:05}", i + 10), json!(format!("h_gone{i:010}"))))
        .collect();
    let state = json!({"version": 1, "sessionId": "refs", "nextBlockId": 1, "blocks": [],
        "messageRefs": {"byRaw": by_raw, "byRef": by_ref}});
    h.write(
        "noa/refs/state.json",
        serde_json::to_vec_pretty(&state).expect("json"),
    );
    h.seal();
    let (run, out) = audit(h.root_arg(), &[]);
    eprintln!("audit of {n} dangling refs: {:.1} s", run.secs);
    // One finding for all of them (audit v2), naming how many and the first few; the audit
    // stays small however many refs dangle.
    let dangling: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("warn state.dangling-ref noa/refs/state.json"))
        .collect();
    assert_eq!(dangling.len(), 1, "{out}");
    assert!(
        dangling[0].contains(&format!("{n} recorded ref(s)")),
        "{}",
        dangling[0]
    );
    assert!(
        dangling[0].contains("m00010 (h_gone0000000000)"),
        "{}",
        dangling[0]
    );
    assert!(out.len() < 4096, "{} bytes", out.len());
    assert!(
        run.secs < 60.0,
        "{:.1} s: the audit must not rescan the file per finding",
        run.secs
    );
    let run = view(h.root_arg(), "refs");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    h.check_outside();
    report("dangling refs", h.files);
}
