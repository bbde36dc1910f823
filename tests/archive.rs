//! Tier archives in the runtime's layout (SPEC 2.4): every archive the runtime wrote reads back
//! and is reproduced byte for byte from its state and transcript; English labels; fences;
//! normafs's `call` and `body_sha256` keys; hostile input.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use common::norma_data;
use normafs::format::archive::{
    file_name, parse, parse_file_name, render, sha256_hex, tier_dir, Archive, ArchiveError,
    BlockEntry, Entry, HeadingKind, Labels, MessageEntry, MessageKind, Parsed,
};
use proptest::prelude::*;
use serde_json::Value;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every archive the runtime wrote: `.md` files in a `tier<N>` directory of the corpus and of
/// the oracle's compress and rebuild bases.
fn runtime_archives() -> Vec<PathBuf> {
    let mut all = Vec::new();
    walk(&norma_data(), &mut all);
    let mut out: Vec<PathBuf> = all
        .into_iter()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "md")
                && p.parent()
                    .and_then(|d| d.file_name())
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("tier"))
        })
        .collect();
    out.sort();
    out
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn parse_ok(text: &str, what: &str) -> Parsed {
    parse(text).unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn message_headings(p: &Parsed) -> usize {
    p.headings
        .iter()
        .filter(|h| matches!(h.kind, HeadingKind::Message { .. }))
        .count()
}

fn ref_number(r: &str) -> u64 {
    r.strip_prefix('m').unwrap().parse().unwrap()
}

#[test]
fn every_runtime_archive_parses_and_agrees_with_its_name_and_counts() {
    let files = runtime_archives();
    // The corpus's 113 (s2: 15, s3: 84 + 1 of tier 2, s5: 13), the 26 the oracle's runs wrote
    // and the 190 of the timeline's live sessions (t1: 25, t2: 48, t3: 67, t4: 49 + 1 of tier 2).
    assert_eq!(files.len(), 329);
    let mut tier2 = 0;
    for path in &files {
        let what = path.display().to_string();
        let text = read(path);
        let p = parse_ok(&text, &what);
        let fm = &p.frontmatter;
        let name = path.file_name().unwrap().to_str().unwrap();
        let (block, start, end) = parse_file_name(name).unwrap_or_else(|| panic!("{what}"));
        assert_eq!(file_name(&block, &start, &end), name);
        assert_eq!(fm.block, block, "{what}");
        assert_eq!(fm.range, Some((start.clone(), end.clone())), "{what}");
        let tier = fm.tier.unwrap();
        let dir = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(dir, tier_dir(tier), "{what}");
        assert_eq!(p.labels, Labels::Chinese, "{what}");
        assert_eq!(
            p.title.as_deref(),
            Some(format!("归档 {block} · Tier {tier} · {start}–{end}").as_str()),
            "{what}"
        );
        assert!(
            p.summary.as_deref().is_some_and(|s| !s.is_empty()),
            "{what}"
        );
        assert!(fm.session.is_some() && fm.created.is_some(), "{what}");
        assert!(fm.original_tokens.is_some_and(|n| n > 0), "{what}");
        assert!(fm.other.is_empty() && fm.call.is_none(), "{what}");
        assert_eq!(p.body_sha256_ok, None, "{what}");
        // Headings point at their lines: `## `, or `### ` for a message a tier-2 archive
        // places under the block it follows.
        let lines: Vec<&str> = text.split('\n').collect();
        for h in &p.headings {
            let line = lines[h.line - 1];
            assert!(
                line.starts_with("## ")
                    || (tier > 1
                        && line.starts_with("### ")
                        && matches!(h.kind, HeadingKind::Message { .. })),
                "{what}:{}",
                h.line
            );
        }
        match (fm.message_count, &fm.consumed_blocks, fm.loose_messages) {
            (Some(n), None, None) => {
                assert_eq!(p.headings.len() as i64, n, "{what}");
                let (lo, hi) = (ref_number(&start), ref_number(&end));
                for h in &p.headings {
                    assert_eq!(h.level, 2, "{what}");
                    let HeadingKind::Message { reference, .. } = &h.kind else {
                        panic!("{what}: a block heading in a tier-1 archive")
                    };
                    let r = ref_number(reference.as_deref().unwrap());
                    assert!(lo <= r && r <= hi, "{what}: {r} outside the range");
                }
            }
            (None, Some(consumed), Some(loose)) => {
                tier2 += 1;
                assert_eq!(
                    p.headings.len() as i64,
                    consumed.len() as i64 + loose,
                    "{what}"
                );
                let blocks: Vec<&str> = p
                    .headings
                    .iter()
                    .filter_map(|h| match &h.kind {
                        HeadingKind::Block { block_id, .. } => Some(block_id.as_str()),
                        HeadingKind::Message { .. } => None,
                    })
                    .collect();
                assert_eq!(blocks, *consumed, "{what}");
                assert_eq!(message_headings(&p) as i64, loose, "{what}");
            }
            other => panic!("{what}: counts {other:?}"),
        }
    }
    assert_eq!(tier2, 5);
}

// ---------------------------------------------------------------------------------------------
// Reproducing the runtime's archives from their state and the transcript

/// One projected content message (SPEC 2.5).
struct Core {
    role: &'static str,
    kind: MessageKind,
    tool: String,
    text: String,
    /// Position in the projection (= view order before compression).
    index: usize,
}

/// The session's content messages by raw id, projected from its transcript the way SPEC 2.5
/// says (the corpus has no compaction marker and no ref tag to strip). Each id is checked by
/// being looked up: a wrong text would give a different hash.
fn project(sid: &str) -> HashMap<String, Core> {
    let text = read(&norma_data().join(format!("corpus/transcripts/{sid}.jsonl")));
    let records: Vec<Value> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut names = HashMap::new();
    for r in &records {
        for b in r["message"]["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                names.insert(
                    b["id"].as_str().unwrap().to_string(),
                    b["name"].as_str().unwrap().to_string(),
                );
            }
        }
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashMap::new();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    for r in &records {
        let user = r["message"]["role"] == "user";
        for b in r["message"]["content"].as_array().into_iter().flatten() {
            let (role, ty, kind, call, tool, text) = match b["type"].as_str().unwrap() {
                "text" => (
                    if user { "user" } else { "assistant" },
                    "text",
                    MessageKind::Text,
                    String::new(),
                    String::new(),
                    s(&b["text"]),
                ),
                "thinking" => (
                    "assistant",
                    "reasoning",
                    MessageKind::Thinking,
                    String::new(),
                    String::new(),
                    s(&b["thinking"]),
                ),
                "tool_use" => (
                    "assistant",
                    "tool-call",
                    MessageKind::ToolUse,
                    s(&b["id"]),
                    s(&b["name"]),
                    // Compact JSON in key order: the corpus's inputs are stored that way.
                    serde_json::to_string(&b["input"]).unwrap(),
                ),
                "tool_result" => {
                    let call = s(&b["tool_use_id"]);
                    let parts: Vec<String> = b["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|c| c["type"] == "text" && !s(&c["text"]).is_empty())
                        .map(|c| s(&c["text"]))
                        .collect();
                    let tool = names.get(&call).cloned().unwrap_or_default();
                    (
                        "tool",
                        "tool-result",
                        MessageKind::ToolResult,
                        call,
                        tool,
                        parts.join("\n"),
                    )
                }
                _ => continue,
            };
            let seed = format!("{role}|{ty}|{call}|{tool}|{text}");
            let base = format!("h_{}", &sha256_hex(seed.as_bytes())[..16]);
            let n = seen.entry(base.clone()).or_insert(0);
            let id = if *n == 0 {
                base.clone()
            } else {
                format!("{base}_{n}")
            };
            *n += 1;
            let index = out.len();
            out.insert(
                id,
                Core {
                    role,
                    kind,
                    tool,
                    text,
                    index,
                },
            );
        }
    }
    out
}

fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The `Archive` of block `b` of `state`, from the state and the projected transcript, with
/// its entries in view order (a block's summary stands where its first message stood).
fn archive_of(state: &Value, b: &Value, cores: &HashMap<String, Core>) -> Archive {
    let by_raw = &state["messageRefs"]["byRaw"];
    let blocks: HashMap<String, &Value> = state["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (string(&b["blockId"]), b))
        .collect();
    let mut entries: Vec<(usize, Entry)> = Vec::new();
    for id in ids(&b["directMessageIds"]) {
        let c = cores
            .get(&id)
            .unwrap_or_else(|| panic!("{id} is not in the projected transcript"));
        let reference = by_raw[&id]
            .as_str()
            .filter(|r| *r != "BLOCKED")
            .map(str::to_string);
        entries.push((
            c.index,
            Entry::Message(MessageEntry {
                reference,
                role: c.role.to_string(),
                kind: c.kind,
                tool: c.tool.clone(),
                text: c.text.clone(),
            }),
        ));
    }
    for id in ids(&b["directBlockIds"]) {
        let child = blocks[&id];
        let first = ids(&child["effectiveMessageIds"])
            .iter()
            .map(|m| cores[m].index)
            .min()
            .unwrap();
        entries.push((
            first,
            Entry::Block(BlockEntry {
                block_id: id,
                tier: child["tier"].as_i64().unwrap(),
                start_ref: string(&child["startRef"]),
                end_ref: string(&child["endRef"]),
                topic: string(&child["topic"]),
                summary: string(&child["summary"]),
                archive_rel: string(&child["archiveRel"]),
                archive_path: string(&child["archivePath"]),
            }),
        ));
    }
    entries.sort_by_key(|(i, _)| *i);
    Archive {
        block_id: string(&b["blockId"]),
        tier: b["tier"].as_i64().unwrap(),
        session: string(&state["sessionId"]),
        created: b["createdAt"].as_i64().map(rfc3339).unwrap_or_default(),
        start_ref: string(&b["startRef"]),
        end_ref: string(&b["endRef"]),
        topic: string(&b["topic"]),
        summary: string(&b["summary"]),
        original_tokens: b["compressedTokens"].as_i64().unwrap(),
        entries: entries.into_iter().map(|(_, e)| e).collect(),
        call: None,
        with_body_sha256: false,
    }
}

/// Each state the runtime saved with the directory its archives are under.
fn states() -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for sid in ["s2-tier1", "s3-tier2", "s5-fork-of-s2"] {
        let noa = norma_data().join("corpus/noa").join(sid);
        out.push((noa.join("state.json"), noa));
        let oracle = norma_data().join("oracle").join(sid);
        for run in fs::read_dir(&oracle).unwrap() {
            let run = run.unwrap().path();
            let base = run.join("base").join(sid);
            if run.join("state.json").is_file() && base.is_dir() {
                out.push((run.join("state.json"), base));
            }
        }
    }
    out
}

/// Render every block of every state whose archive is in the state's directory; returns the
/// archive paths compared. Panics at the first difference, showing where.
fn reproduce(filter: impl Fn(&Path) -> bool) -> BTreeSet<PathBuf> {
    let mut projections: HashMap<String, HashMap<String, Core>> = HashMap::new();
    let mut done = BTreeSet::new();
    for (state_path, dir) in states() {
        let state: Value = serde_json::from_str(&read(&state_path)).unwrap();
        let sid = string(&state["sessionId"]);
        let cores = projections
            .entry(sid.clone())
            .or_insert_with(|| project(&sid));
        for b in state["blocks"].as_array().into_iter().flatten() {
            let path = dir.join(string(&b["archiveRel"]));
            if !path.is_file() || !filter(&path) {
                continue;
            }
            let want = read(&path);
            // An inherited block's archive is its parent's, written with the parent's state.
            if !want.contains(&format!("\nsession: {sid}\n")) {
                continue;
            }
            let got = render(&archive_of(&state, b, cores), Labels::Chinese);
            if got != want {
                let at = got
                    .bytes()
                    .zip(want.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                let from = at.saturating_sub(80);
                panic!(
                    "{} differs at byte {at}:\n got: {:?}\nwant: {:?}",
                    path.display(),
                    &got.as_bytes()[from..(at + 80).min(got.len())].escape_ascii(),
                    &want.as_bytes()[from..(at + 80).min(want.len())].escape_ascii(),
                );
            }
            done.insert(path);
        }
    }
    done
}

#[test]
fn render_reproduces_the_corpus_tier1_archive_b1() {
    let done = reproduce(|p| p.ends_with("corpus/noa/s2-tier1/tier1/b1_m00004-m00009.md"));
    assert_eq!(done.len(), 1);
}

#[test]
fn render_reproduces_tier2_archives_with_absorbed_blocks() {
    let done = reproduce(|p| p.parent().is_some_and(|d| d.ends_with("tier2")));
    let names: Vec<String> = done
        .iter()
        .map(|p| p.strip_prefix(norma_data()).unwrap().display().to_string())
        .collect();
    assert!(names.contains(
        &"oracle/s2-tier1/compress-2/base/s2-tier1/tier2/b16_m00012-m00041.md".to_string()
    ));
    assert!(names.contains(&"corpus/noa/s3-tier2/tier2/b51_m00004-m00401.md".to_string()));
    assert_eq!(done.len(), 4, "{names:?}");
}

#[test]
fn render_reproduces_every_runtime_archive() {
    let done = reproduce(|_| true);
    // The timeline's archives were written by live sessions whose Compress inputs no oracle
    // run records: they are parsed above, not made again here.
    let timeline = norma_data().join("timeline");
    let all: BTreeSet<PathBuf> = runtime_archives()
        .into_iter()
        .filter(|p| !p.starts_with(&timeline))
        .collect();
    let missed: Vec<_> = all.difference(&done).collect();
    assert!(missed.is_empty(), "not reproduced: {missed:?}");
    assert_eq!(done.len(), 139);
}

// ---------------------------------------------------------------------------------------------
// Hand-built archives

fn msg(reference: Option<&str>, role: &str, kind: MessageKind, tool: &str, text: &str) -> Entry {
    Entry::Message(MessageEntry {
        reference: reference.map(str::to_string),
        role: role.to_string(),
        kind,
        tool: tool.to_string(),
        text: text.to_string(),
    })
}

fn block(id: &str, tier: i64, start: &str, end: &str) -> Entry {
    Entry::Block(BlockEntry {
        block_id: id.to_string(),
        tier,
        start_ref: start.to_string(),
        end_ref: end.to_string(),
        topic: "earlier work".to_string(),
        summary: "  Read the handlers.\nKept JWT.\n".to_string(),
        archive_rel: format!("tier{tier}/{}", file_name(id, start, end)),
        archive_path: format!("/abs/noa/s9/tier{tier}/{}", file_name(id, start, end)),
    })
}

/// A tier-2 archive with one of each entry.
fn mixed() -> Archive {
    Archive {
        block_id: "b7".to_string(),
        tier: 2,
        session: "s9".to_string(),
        created: "2026-12-01T09:06:56Z".to_string(),
        start_ref: "m00001".to_string(),
        end_ref: "m00020".to_string(),
        topic: "build fixes".to_string(),
        summary: "\n  first line\n\nthird line  \n".to_string(),
        original_tokens: 5320,
        entries: vec![
            block("b1", 1, "m00001", "m00009"),
            msg(
                Some("m00010"),
                "user",
                MessageKind::Text,
                "",
                "please fix\nthe build",
            ),
            msg(
                Some("m00011"),
                "assistant",
                MessageKind::Thinking,
                "",
                "think",
            ),
            msg(
                Some("m00012"),
                "assistant",
                MessageKind::ToolUse,
                "Bash",
                r#"{"command":"make"}"#,
            ),
            msg(Some("m00013"), "tool", MessageKind::ToolResult, "", "ok\n"),
            msg(None, "assistant", MessageKind::Text, "", "done"),
            block("b2", 1, "m00014", "m00020"),
        ],
        call: None,
        with_body_sha256: false,
    }
}

/// A message heading as (level, reference, role, kind, tool).
type MessageHeading = (
    u8,
    Option<String>,
    Option<String>,
    MessageKind,
    Option<String>,
);

fn message_kinds(p: &Parsed) -> Vec<MessageHeading> {
    p.headings
        .iter()
        .filter_map(|h| match &h.kind {
            HeadingKind::Message {
                reference,
                role,
                kind,
                tool,
            } => Some((
                h.level,
                reference.clone(),
                role.clone(),
                *kind,
                tool.clone(),
            )),
            HeadingKind::Block { .. } => None,
        })
        .collect()
}

fn check_mixed(p: &Parsed, labels: Labels) {
    let fm = &p.frontmatter;
    assert_eq!(p.labels, labels);
    assert_eq!(fm.block, "b7");
    assert_eq!(fm.tier, Some(2));
    assert_eq!(fm.session.as_deref(), Some("s9"));
    assert_eq!(fm.created.as_deref(), Some("2026-12-01T09:06:56Z"));
    assert_eq!(fm.range, Some(("m00001".into(), "m00020".into())));
    assert_eq!(fm.consumed_blocks, Some(vec!["b1".into(), "b2".into()]));
    assert_eq!(fm.loose_messages, Some(5));
    assert_eq!(fm.message_count, None);
    assert_eq!(fm.original_tokens, Some(5320));
    assert_eq!(fm.topic.as_deref(), Some("build fixes"));
    assert_eq!(p.summary.as_deref(), Some("first line\n\nthird line"));
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        message_kinds(p),
        vec![
            (3, s("m00010"), s("user"), MessageKind::Text, None),
            (3, s("m00011"), s("assistant"), MessageKind::Thinking, None),
            (
                3,
                s("m00012"),
                s("assistant"),
                MessageKind::ToolUse,
                s("Bash")
            ),
            (3, s("m00013"), None, MessageKind::ToolResult, s("tool")),
            (3, None, s("assistant"), MessageKind::Text, None),
        ]
    );
    let blocks: Vec<_> = p
        .headings
        .iter()
        .filter_map(|h| match &h.kind {
            HeadingKind::Block {
                block_id,
                tier,
                start_ref,
                end_ref,
            } => Some((
                h.level,
                block_id.as_str(),
                *tier,
                start_ref.as_str(),
                end_ref.as_str(),
            )),
            HeadingKind::Message { .. } => None,
        })
        .collect();
    assert_eq!(
        blocks,
        vec![
            (2, "b1", 1, "m00001", "m00009"),
            (2, "b2", 1, "m00014", "m00020")
        ]
    );
}

#[test]
fn english_labels_render_and_parse_back() {
    let a = mixed();
    let en = render(&a, Labels::English);
    let zh = render(&a, Labels::Chinese);
    assert!(en.contains("\n# Archive b7 · Tier 2 · m00001–m00020\n\n**Summary** (the version currently active in context):\n\n> first line\n> \n> third line\n\n---\n\n"));
    assert!(en.contains("> Child archive: [`tier1/b1_m00001-m00009.md`](../tier1/b1_m00001-m00009.md)\n> Absolute path: `/abs/noa/s9/tier1/b1_m00001-m00009.md`\n"));
    // The two languages differ in their labels only.
    let swapped = en
        .replace("# Archive ", "# 归档 ")
        .replace(
            "**Summary** (the version currently active in context):",
            "**摘要**（当前在上下文中生效的版本）：",
        )
        .replace("> Child archive: ", "> 下级归档：")
        .replace("> Absolute path: ", "> 绝对路径：");
    assert_eq!(swapped, zh);
    let p = parse_ok(&en, "english");
    check_mixed(&p, Labels::English);
    assert_eq!(
        p.title.as_deref(),
        Some("Archive b7 · Tier 2 · m00001–m00020")
    );
    check_mixed(&parse_ok(&zh, "chinese"), Labels::Chinese);
    // Heading line numbers point at the heading lines.
    let lines: Vec<&str> = en.split('\n').collect();
    assert_eq!(
        lines[p.headings[0].line - 1],
        "## b1 · Tier 1 · m00001–m00009"
    );
    assert_eq!(
        lines[p.headings[5].line - 1],
        "### (unaddressed) · assistant"
    );
}

#[test]
fn a_hand_written_english_archive_parses() {
    // Written by hand after the vendored variant's writer.
    let text = "---
block: b12
tier: 2
session: s4
created: 2026-11-02T10:00:00Z
range: m00003-m00030
consumed_blocks: [b4, b9]
loose_messages: 2
original_tokens: 812
topic: db pool
---

# Archive b12 · Tier 2 · m00003–m00030

**Summary** (the version currently active in context):

> Pool size settled at 20.
> Timeouts moved to config.

---

## b4 · Tier 1 · m00003–m00011

**pool**

Measured the pool.

> Child archive: [`tier1/b4_m00003-m00011.md`](../tier1/b4_m00003-m00011.md)
> Absolute path: `/srv/noa/s4/tier1/b4_m00003-m00011.md`

### m00012 · assistant · tool_use · Read

```json
{\"file_path\":\"/src/db/pool.go\"}
```

### m00013 · tool_result · Read

````
package db
```go
## m00014 · user

```
````

## b9 · Tier 1 · m00015–m00030

> Child archive: [`tier1/b9_m00015-m00030.md`](../tier1/b9_m00015-m00030.md)

";
    let p = parse_ok(text, "hand-written");
    assert_eq!(p.labels, Labels::English);
    assert_eq!(
        p.frontmatter.consumed_blocks,
        Some(vec!["b4".into(), "b9".into()])
    );
    assert_eq!(
        p.summary.as_deref(),
        Some("Pool size settled at 20.\nTimeouts moved to config.")
    );
    let lines: Vec<usize> = p.headings.iter().map(|h| h.line).collect();
    assert_eq!(lines, vec![22, 31, 37, 47]);
    assert_eq!(message_headings(&p), 2);
}

// ---------------------------------------------------------------------------------------------
// Fences

fn tier1(entries: Vec<Entry>) -> Archive {
    Archive {
        block_id: "b3".to_string(),
        tier: 1,
        session: String::new(),
        created: String::new(),
        start_ref: "m00001".to_string(),
        end_ref: "m00004".to_string(),
        topic: String::new(),
        summary: "s".to_string(),
        original_tokens: 10,
        entries,
        call: None,
        with_body_sha256: false,
    }
}

#[test]
fn fences_grow_past_backtick_runs_and_hide_heading_shaped_lines() {
    let three = "see:\n```\n## m00009 · user\n\n```";
    let four = "````md\n\n## b1 · Tier 1 · m00001–m00002\n\n````\n";
    let a = tier1(vec![
        msg(
            Some("m00001"),
            "assistant",
            MessageKind::ToolUse,
            "Write",
            three,
        ),
        msg(
            Some("m00002"),
            "tool",
            MessageKind::ToolResult,
            "Write",
            four,
        ),
        msg(
            Some("m00003"),
            "tool",
            MessageKind::ToolResult,
            "Read",
            "\n## m00008 · user\n\n",
        ),
        msg(Some("m00004"), "user", MessageKind::Text, "", "thanks"),
    ]);
    let text = render(&a, Labels::Chinese);
    // A newline before the closing fence only where the body lacks one.
    assert!(text.contains(&format!("````json\n{three}\n````\n\n")));
    assert!(text.contains(&format!("`````\n{four}`````\n\n")));
    assert!(text.contains("```\n\n## m00008 · user\n\n```\n\n"));
    assert!(text.starts_with("---\nblock: b3\ntier: 1\nrange: m00001-m00004\nmessage_count: 4\noriginal_tokens: 10\n---\n\n# 归档 b3 · Tier 1 · m00001–m00004\n\n"));
    let p = parse_ok(&text, "fences");
    let refs: Vec<_> = message_kinds(&p)
        .into_iter()
        .map(|k| k.1.unwrap())
        .collect();
    assert_eq!(refs, ["m00001", "m00002", "m00003", "m00004"]);
    assert_eq!(p.frontmatter.message_count, Some(4));
}

#[test]
fn an_unclosed_fence_runs_to_the_end_of_the_file() {
    let text = "---\nblock: b1\n---\n\n# 归档 b1\n\n---\n\n## m00001 · tool_result · Bash\n\n```\nout\n\n## m00002 · user\n\nhi\n";
    let p = parse_ok(text, "unclosed fence");
    assert_eq!(p.headings.len(), 1);
}

#[test]
fn heading_shaped_lines_in_text_bodies() {
    // Text bodies are not fenced: a heading-shaped line with an empty line on each side reads
    // as a heading (the format cannot tell), one without them does not.
    let a = tier1(vec![
        msg(
            Some("m00001"),
            "user",
            MessageKind::Text,
            "",
            "a\n\n## m00007 · user\n\nb",
        ),
        msg(
            Some("m00002"),
            "user",
            MessageKind::Text,
            "",
            "a\n## m00008 · user\nb",
        ),
        msg(
            Some("m00003"),
            "assistant",
            MessageKind::Text,
            "",
            "```\n\n## m00009 · user\n",
        ),
    ]);
    let text = render(&a, Labels::Chinese);
    let p = parse_ok(&text, "text bodies");
    let refs: Vec<_> = message_kinds(&p)
        .into_iter()
        .map(|k| k.1.unwrap())
        .collect();
    assert_eq!(refs, ["m00001", "m00007", "m00002", "m00003", "m00009"]);
    // The audit sees the disagreement with the frontmatter.
    assert_eq!(p.frontmatter.message_count, Some(3));
}

// ---------------------------------------------------------------------------------------------
// normafs's keys

#[test]
fn call_and_body_sha256_follow_the_runtime_keys_and_verify() {
    let mut a = mixed();
    a.call = Some("toolu_01".to_string());
    a.with_body_sha256 = true;
    let text = render(&a, Labels::Chinese);
    let front: Vec<&str> = text.split('\n').take(13).collect();
    assert_eq!(front[9], "topic: build fixes");
    assert_eq!(front[10], "call: toolu_01");
    assert!(front[11].starts_with("body_sha256: "));
    assert_eq!(front[12], "---");
    let body = &text[text.find("\n---\n").unwrap() + 5..];
    assert_eq!(
        front[11],
        format!("body_sha256: {}", sha256_hex(body.as_bytes()))
    );
    // Without the two keys the rest is the runtime's output.
    let plain = render(&mixed(), Labels::Chinese);
    assert_eq!(
        text.replace(&format!("call: toolu_01\n{}\n", front[11]), ""),
        plain
    );

    let p = parse_ok(&text, "sha");
    assert_eq!(p.frontmatter.call.as_deref(), Some("toolu_01"));
    assert_eq!(p.body_sha256_ok, Some(true));
    check_mixed(&p, Labels::Chinese);

    let flipped = text.replacen("please fix", "please fiy", 1);
    assert_eq!(parse_ok(&flipped, "flipped").body_sha256_ok, Some(false));
    let upper = text.replace(
        &front[11]["body_sha256: ".len()..],
        &front[11]["body_sha256: ".len()..].to_uppercase(),
    );
    assert_eq!(parse_ok(&upper, "upper").body_sha256_ok, Some(true));

    // Without a topic they follow original_tokens.
    a.topic.clear();
    let text = render(&a, Labels::Chinese);
    assert!(text.contains("\noriginal_tokens: 5320\ncall: toolu_01\nbody_sha256: "));
    assert_eq!(parse_ok(&text, "no topic").body_sha256_ok, Some(true));
}

// ---------------------------------------------------------------------------------------------
// Hostile input

fn one_line_error(text: &str) -> ArchiveError {
    let e = parse(text).expect_err("should not parse");
    let shown = e.to_string();
    assert!(!shown.contains('\n') && shown.len() < 200, "{shown}");
    e
}

#[test]
fn frontmatter_errors_are_clear() {
    assert_eq!(one_line_error(""), ArchiveError::NoFrontmatter);
    assert_eq!(one_line_error("# 归档 b1\n"), ArchiveError::NoFrontmatter);
    assert_eq!(one_line_error("---"), ArchiveError::NoFrontmatter);
    assert_eq!(
        one_line_error("---\nblock: b1\n"),
        ArchiveError::UnclosedFrontmatter
    );
    assert_eq!(
        one_line_error("---\nblock: b1\n--- \n"),
        ArchiveError::UnclosedFrontmatter
    );
    for (text, says) in [
        ("---\ntier: 1\n---\n", "no `block` key"),
        (
            "---\nblock: b1\ntier: one\n---\n",
            "line 3: `tier` is not an integer: \"one\"",
        ),
        (
            "---\nblock: b1\nblock: b2\n---\n",
            "line 3: key `block` appears twice",
        ),
        (
            "---\nblock: b1\njust words\n---\n",
            "line 3: not a `key: value` line",
        ),
        (
            "---\nblock: b1\nrange: m1\n---\n",
            "`range` is not `<start>-<end>`",
        ),
        (
            "---\nblock: b1\nconsumed_blocks: b1, b2\n---\n",
            "`consumed_blocks` is not",
        ),
    ] {
        let e = one_line_error(text);
        assert!(e.to_string().contains(says), "{e} lacks {says}");
    }
    let long = format!("---\nblock: b1\ntier: {}\n---\n", "9".repeat(100_000));
    assert!(one_line_error(&long).to_string().ends_with("…"));
}

/// A topic with line breaks (a ctl command can give one) is written as one frontmatter line,
/// its breaks as spaces: the archive reads back (the runtime writes it as it is, and no
/// reader can take that frontmatter apart).
#[test]
fn a_topic_with_line_breaks_stays_one_frontmatter_line() {
    let mut a = tier1(vec![msg(
        Some("m00001"),
        "user",
        MessageKind::Text,
        "",
        "hi",
    )]);
    a.topic = "two\nlines\r\nand more".to_string();
    a.with_body_sha256 = true;
    let text = render(&a, Labels::Chinese);
    assert!(text.contains("\ntopic: two lines  and more\n"), "{text}");
    let p = parse_ok(&text, "topic");
    assert_eq!(p.frontmatter.topic.as_deref(), Some("two lines  and more"));
    assert_eq!(p.body_sha256_ok, Some(true));
    // A one-line topic is written as it is (the runtime's bytes).
    a.topic = "build fixes".to_string();
    assert!(render(&a, Labels::Chinese).contains("\ntopic: build fixes\n"));
}

#[test]
fn unknown_keys_and_blank_lines_are_kept_and_skipped() {
    let p = parse_ok(
        "---\nblock: b1\n\nzeta: 1\nalpha: x: y\nconsumed_blocks: []\n---\n",
        "unknown",
    );
    assert_eq!(
        p.frontmatter.other,
        vec![("zeta".into(), "1".into()), ("alpha".into(), "x: y".into())]
    );
    assert_eq!(p.frontmatter.consumed_blocks, Some(vec![]));
    assert!(p.headings.is_empty() && p.title.is_none() && p.summary.is_none());
}

/// A small deterministic generator (xorshift), so the junk is the same on every run.
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn hostile_input_never_panics() {
    let valid = render(&mixed(), Labels::Chinese);
    for seed in 1..300 {
        let bytes = junk(seed, (seed as usize * 37) % 4000);
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text);
        // Junk after a valid frontmatter reaches the body reader.
        let _ = parse(&format!("---\nblock: b1\n---\n{text}"));
        // Junk spliced into a valid archive.
        let at = (seed as usize * 101) % valid.len();
        let at = (0..=at).rev().find(|&i| valid.is_char_boundary(i)).unwrap();
        let _ = parse(&format!("{}{text}{}", &valid[..at], &valid[at..]));
        // And a valid archive cut short.
        let _ = parse(&valid[..at]);
    }
    let mb = "x".repeat(1 << 20);
    assert_eq!(parse(&mb), Err(ArchiveError::NoFrontmatter));
    let p = parse_ok(&format!("---\nblock: b1\n---\n{mb}"), "1 MB line");
    assert!(p.headings.is_empty());
    let p = parse_ok(&format!("---\nblock: b1\ntopic: {mb}\n---\n"), "1 MB value");
    assert_eq!(p.frontmatter.topic.map(|t| t.len()), Some(1 << 20));
    let backticks = "`".repeat(1 << 20);
    let p = parse_ok(
        &format!("---\nblock: b1\n---\n---\n\n## m1 · tool_result · {mb}\n\n{backticks}\n\n## m2 · user\n\n"),
        "1 MB fence",
    );
    assert_eq!(p.headings.len(), 1);
    // Rendering a body that is one huge run of backticks stays linear.
    let a = tier1(vec![msg(
        Some("m00001"),
        "tool",
        MessageKind::ToolResult,
        "",
        &backticks,
    )]);
    let text = render(&a, Labels::Chinese);
    assert!(text.contains(&format!("\n{backticks}`\n{backticks}\n{backticks}`\n")));
}

#[test]
fn a_hundred_thousand_headings() {
    let mut text =
        String::from("---\nblock: b1\nmessage_count: 100000\n---\n\n# 归档 b1\n\n---\n\n");
    for i in 0..100_000 {
        text.push_str(&format!("## m{i:05} · user\n\nhi\n\n"));
    }
    let started = std::time::Instant::now();
    let p = parse_ok(&text, "100k headings");
    assert_eq!(p.headings.len(), 100_000);
    assert_eq!(p.headings[99_999].line, 10 + 4 * 99_999);
    assert!(started.elapsed().as_secs() < 10);
}

// ---------------------------------------------------------------------------------------------
// Names

#[test]
fn file_names_and_tier_dirs() {
    assert_eq!(file_name("b3", "m00010", "m00042"), "b3_m00010-m00042.md");
    assert_eq!(
        parse_file_name("b3_m00010-m00042.md"),
        Some(("b3".into(), "m00010".into(), "m00042".into()))
    );
    assert_eq!(
        parse_file_name("b16_b2-b5.md"),
        Some(("b16".into(), "b2".into(), "b5".into()))
    );
    for bad in [
        "b3_m00010-m00042.txt",
        "b3_m00010-m00042.md.tmp",
        ".noa-123.tmp",
        "b3_m00010.md",
        "b3-m00010-m00042.md",
        "x3_m00010-m00042.md",
        "b_m00010-m00042.md",
        "b3_m00010-m00042-m9.md",
        "b3_-m00042.md",
        "b3_m0001_0-m00042.md",
        "b3_m00010-.md",
        "",
    ] {
        assert_eq!(parse_file_name(bad), None, "{bad}");
    }
    assert_eq!(tier_dir(1), "tier1");
    assert_eq!(tier_dir(3), "tier3");
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Text and thinking bodies from an alphabet without `·`, so none of their lines can be
/// shaped like a heading.
fn plain_text() -> impl Strategy<Value = String> {
    "[a-z #`\n>-]{0,30}"
}

/// Tool bodies: any mix of backtick runs, heading-shaped lines and line breaks.
fn tool_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("```".to_string()),
            Just("`".to_string()),
            Just("\n".to_string()),
            Just("\n\n## m00001 · user\n\n".to_string()),
            Just("### b1 · Tier 1 · m1–m2".to_string()),
            Just("---\n".to_string()),
            "[a-z{}\":]{1,8}",
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

fn entry() -> impl Strategy<Value = Entry> {
    let reference = prop::option::of("m[0-9]{5}");
    prop_oneof![
        (
            reference.clone(),
            prop_oneof![Just("user"), Just("assistant")],
            plain_text()
        )
            .prop_map(|(r, role, t)| Entry::Message(MessageEntry {
                reference: r,
                role: role.to_string(),
                kind: MessageKind::Text,
                tool: String::new(),
                text: t,
            })),
        (reference.clone(), plain_text()).prop_map(|(r, t)| Entry::Message(MessageEntry {
            reference: r,
            role: "assistant".to_string(),
            kind: MessageKind::Thinking,
            tool: String::new(),
            text: t,
        })),
        (
            reference.clone(),
            "[A-Za-z_]{0,6}( · [a-z]{1,3})?",
            tool_text()
        )
            .prop_map(|(r, tool, t)| Entry::Message(MessageEntry {
                reference: r,
                role: "assistant".to_string(),
                kind: MessageKind::ToolUse,
                tool,
                text: t,
            })),
        (reference, "[A-Za-z_]{0,6}", tool_text()).prop_map(|(r, tool, t)| {
            Entry::Message(MessageEntry {
                reference: r,
                role: "tool".to_string(),
                kind: MessageKind::ToolResult,
                tool,
                text: t,
            })
        }),
        ("b[1-9][0-9]{0,2}", 1i64..3, plain_text()).prop_map(|(id, tier, s)| {
            Entry::Block(BlockEntry {
                block_id: id,
                tier,
                start_ref: "m00001".to_string(),
                end_ref: "m00002".to_string(),
                topic: String::new(),
                summary: s,
                archive_rel: String::new(),
                archive_path: String::new(),
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rendered_archives_read_back(
        entries in prop::collection::vec(entry(), 0..8),
        summary in plain_text(),
        english in any::<bool>(),
    ) {
        let labels = if english { Labels::English } else { Labels::Chinese };
        let mut a = tier1(entries);
        a.summary = summary;
        a.call = Some("toolu_x".to_string());
        a.with_body_sha256 = true;
        let text = render(&a, labels);
        let p = parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(p.body_sha256_ok, Some(true));
        prop_assert_eq!(p.headings.len(), a.entries.len(), "{}", text);
        let absorbed = a.entries.iter().any(|e| matches!(e, Entry::Block(_)));
        for (h, e) in p.headings.iter().zip(&a.entries) {
            match (e, &h.kind) {
                (Entry::Message(m), HeadingKind::Message { reference, role, kind, tool }) => {
                    prop_assert_eq!(h.level, if absorbed { 3 } else { 2 });
                    prop_assert_eq!(reference, &m.reference);
                    prop_assert_eq!(*kind, m.kind);
                    match m.kind {
                        MessageKind::ToolResult => {
                            prop_assert_eq!(role, &None);
                            let want = if m.tool.is_empty() { "tool" } else { m.tool.as_str() };
                            prop_assert_eq!(tool.as_deref(), Some(want));
                        }
                        MessageKind::ToolUse => {
                            prop_assert_eq!(role.as_deref(), Some(m.role.as_str()));
                            prop_assert_eq!(tool.as_deref(), Some(m.tool.as_str()));
                        }
                        _ => prop_assert_eq!(role.as_deref(), Some(m.role.as_str())),
                    }
                }
                (Entry::Block(b), HeadingKind::Block { block_id, tier, .. }) => {
                    prop_assert_eq!(h.level, 2);
                    prop_assert_eq!(block_id, &b.block_id);
                    prop_assert_eq!(*tier, b.tier);
                }
                _ => prop_assert!(false, "kinds differ\n{}", text),
            }
        }
        let trimmed = a.summary.trim();
        prop_assert_eq!(p.summary.as_deref(), (!trimmed.is_empty()).then_some(trimmed));
    }

    #[test]
    fn parse_never_panics(s in "\\PC*", cut in any::<prop::sample::Index>()) {
        let _ = parse(&s);
        let valid = render(&mixed(), Labels::English);
        let at = cut.index(valid.len() + 1);
        let at = (0..=at).rev().find(|&i| valid.is_char_boundary(i)).unwrap_or(0);
        let _ = parse(&format!("{}{s}{}", &valid[..at], &valid[at..]));
    }
}
