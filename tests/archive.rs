//! Tier archives (SPEC 2.4): reading the runtime's archives, write -> parse round trips,
//! collision-safe fences, body_sha256, errors and warnings.

use std::fs;
use std::path::{Path, PathBuf};

use normafs::format::archive::{
    absorbed_link, file_name, is_bare_safe, parse, parse_file_name, render, sha256_hex, ArchiveDoc,
    ArchiveError, Entry, Frontmatter, Part, ResultItem,
};
use normafs::format::transcript::parse_line;
use proptest::prelude::*;
use serde_json::json;

fn example_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/example-root")
}

fn read_example(name: &str) -> String {
    fs::read_to_string(example_root().join("noa/7f0c2a/tier1").join(name)).unwrap()
}

/// Parse and return the doc, with the sha the writer adds cleared, so it compares equal to a
/// doc built by hand.
fn round_trip(doc: &ArchiveDoc) -> ArchiveDoc {
    let text = render(doc);
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(parsed.sha_ok, Some(true), "{text}");
    assert!(parsed.warnings.is_empty(), "{:?}\n{text}", parsed.warnings);
    let mut back = parsed.doc;
    back.front.body_sha256 = None;
    // Writing what was read gives the same bytes.
    assert_eq!(render(&back), text);
    back
}

fn raw(reference: &str, role: &str, parts: Vec<Part>) -> Entry {
    Entry::Raw {
        reference: reference.to_string(),
        role: role.to_string(),
        timestamp: None,
        parts,
    }
}

#[test]
fn example_b1_parses() {
    let parsed = parse(&read_example("b1_m0001-m0006.md")).unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    assert_eq!(parsed.sha_ok, None);
    let doc = parsed.doc;
    let f = &doc.front;
    assert_eq!(
        (f.block.as_str(), f.tier, f.start.as_str(), f.end.as_str()),
        ("b1", 1, "m0001", "m0006")
    );
    assert_eq!(f.original_tokens, 93);
    assert_eq!(f.message_count, Some(6));
    assert_eq!(f.session.as_deref(), Some("7f0c2a"));
    assert_eq!(f.created.as_deref(), Some("2026-10-02T09:40:00Z"));
    assert_eq!(f.topic.as_deref(), Some("diagnosis"));
    assert!(f.extra.is_empty());
    assert_eq!(
        doc.summary,
        "Nightly build failed linking: undefined zstd_compress. Cause: build.rs no longer emits -lzstd since the refactor."
    );
    assert_eq!(doc.entries.len(), 6);
    let refs: Vec<&str> = doc
        .entries
        .iter()
        .map(|e| match e {
            Entry::Raw { reference, .. } => reference.as_str(),
            Entry::Absorbed { .. } => "absorbed",
        })
        .collect();
    assert_eq!(refs, ["m0001", "m0002", "m0003", "m0004", "m0005", "m0006"]);
    assert_eq!(
        doc.entries[0],
        raw(
            "m0001",
            "user",
            vec![Part::Text(
                "The nightly build fails on the linker step. Can you look?".into()
            )]
        )
    );
    assert_eq!(
        doc.entries[1],
        raw(
            "m0002",
            "assistant",
            vec![
                Part::Thinking("Check the CI log first.".into()),
                Part::ToolUse {
                    name: "Read".into(),
                    id: "toolu_a1".into(),
                    input: json!({"path": "ci/nightly.log", "offset": 0, "limit": 200}),
                },
            ]
        )
    );
    assert_eq!(
        doc.entries[2],
        raw(
            "m0003",
            "user",
            vec![Part::ToolResult {
                tool_use_id: "toolu_a1".into(),
                is_error: false,
                items: vec![ResultItem::Text(
                    "ld: error: undefined symbol: zstd_compress\n>>> referenced by archive.o"
                        .into()
                )],
            }]
        )
    );
    assert_eq!(
        doc.entries[4],
        raw(
            "m0005",
            "user",
            vec![Part::ToolResult {
                tool_use_id: "toolu_a2".into(),
                is_error: true,
                items: vec![ResultItem::Text(String::new())],
            }]
        )
    );
}

#[test]
fn example_b2_parses() {
    let parsed = parse(&read_example("b2_m0007-m0010.md")).unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let doc = parsed.doc;
    assert_eq!(doc.front.range(), "m0007-m0010");
    assert_eq!(doc.front.original_tokens, 43);
    assert_eq!(doc.front.message_count, Some(4));
    assert_eq!(doc.entries.len(), 4);
    let Entry::Raw { parts, .. } = &doc.entries[1] else {
        panic!("raw entry expected")
    };
    assert_eq!(
        parts,
        &[Part::ToolUse {
            name: "Edit".into(),
            id: "toolu_a3".into(),
            input: json!({"path": "build.rs", "old": "", "new": "println!(\"cargo:rustc-link-lib=zstd\");"}),
        }]
    );
}

/// The runtime's archives are exactly what normafs writes from the same transcript messages
/// (apart from the body_sha256 line normafs adds).
#[test]
fn writer_reproduces_the_runtime_archives() {
    let transcript = fs::read_to_string(example_root().join("transcripts/7f0c2a.jsonl")).unwrap();
    let messages: Vec<_> = transcript
        .lines()
        .map(|l| parse_line(l.as_bytes()).unwrap())
        .filter_map(|r| r.as_message().cloned())
        .collect();
    for (name, from, to) in [("b1_m0001-m0006.md", 0, 6), ("b2_m0007-m0010.md", 6, 10)] {
        let original = read_example(name);
        let mut doc = parse(&original).unwrap().doc;
        let built: Vec<Entry> = messages[from..to]
            .iter()
            .enumerate()
            .map(|(i, m)| Entry::raw(&format!("m{:04}", from + i + 1), m, None))
            .collect();
        assert_eq!(doc.entries, built, "{name}");

        doc.entries = built;
        let written = render(&doc);
        let without_sha: String = written
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("body_sha256: "))
            .collect();
        assert_eq!(without_sha, original, "{name}");
    }
}

#[test]
fn frontmatter_order_values_and_unknown_keys() {
    let mut front = Frontmatter::new("b5", 2, "m0001", "m0042", 9000);
    front.session = Some("s1".into());
    front.created = Some("2026-11-30T12:00:00Z".into());
    front.topic = Some("two\nlines\r\nhere".into());
    front.consumed_blocks = Some(vec!["b1".into(), "b2".into()]);
    front.loose_messages = Some(3);
    front.call = Some("toolu_9".into());
    front.extra = vec![
        ("zeta".into(), "z".into()),
        ("alpha".into(), "a: b".into()),
        ("tier".into(), "99".into()),
    ];
    let doc = ArchiveDoc {
        front,
        summary: "s".into(),
        entries: vec![],
    };
    let text = render(&doc);
    let header: Vec<&str> = text.lines().take(14).collect();
    assert_eq!(
        header[..13],
        [
            "---",
            "block: b5",
            "tier: 2",
            "range: m0001-m0042",
            "original_tokens: 9000",
            "session: s1",
            "created: 2026-11-30T12:00:00Z",
            "topic: two lines here",
            "consumed_blocks: [b1, b2]",
            "loose_messages: 3",
            "call: toolu_9",
            "zeta: z",
            "alpha: a: b",
        ]
    );
    assert!(header[13].starts_with("body_sha256: "));
    let back = parse(&text).unwrap().doc;
    assert_eq!(back.front.topic.as_deref(), Some("two lines here"));
    assert_eq!(
        back.front.consumed_blocks,
        Some(vec!["b1".into(), "b2".into()])
    );
    assert_eq!(
        back.front.extra,
        [("zeta".into(), "z".into()), ("alpha".into(), "a: b".into())]
    );
    assert_eq!(back.front.tier, 2);
}

#[test]
fn bad_optional_values_are_warnings_and_kept() {
    let text = "---\nblock: b1\ntier: 1\nrange: m0001-m0002\noriginal_tokens: 5\nmessage_count: many\nconsumed_blocks: b1 b2\nnot a pair\ntier: 3\n---\n# Archive b1 · tier 1 · m0001–m0002\n\n> s\n\n";
    let parsed = parse(text).unwrap();
    let lines: Vec<usize> = parsed.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines, [6, 7, 8, 9], "{:?}", parsed.warnings);
    let f = &parsed.doc.front;
    assert_eq!(f.tier, 1);
    assert_eq!(f.message_count, None);
    assert_eq!(
        f.extra,
        [
            ("message_count".into(), "many".into()),
            ("consumed_blocks".into(), "b1 b2".into())
        ]
    );
    // Written back as they were read.
    let again = render(&parsed.doc);
    assert!(again.contains("\nmessage_count: many\n"));
    assert!(again.contains("\nconsumed_blocks: b1 b2\n"));
}

fn nasty_texts() -> Vec<String> {
    [
        "",
        "plain",
        "```",
        "````",
        "a ``` b",
        "```\ncode\n```",
        "````rust\nlet x = 1;\n````",
        "# x",
        "## m0005 · user",
        "### text",
        "---",
        "a\n---\nb",
        "\nleading newline",
        "trailing newline\n",
        "\n\n",
        "crlf\r\nline\r\n",
        "\r",
        "한국어 텍스트",
        "emoji 🚀🎉 mixed 한",
        "> looks like a quote",
        "[archive](../tier1/x.md) — /abs",
        "line one\n\nline three",
        "   indented\n\ttab",
        "`",
        "``",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn nasty_doc(tier: u32) -> ArchiveDoc {
    let texts = nasty_texts();
    let mut entries = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let reference = format!("m{:04}", i + 1);
        let other = texts[(i + 7) % texts.len()].clone();
        entries.push(Entry::Raw {
            reference,
            role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
            timestamp: (i % 3 == 0).then(|| "2026-11-30T11:58:01.000000001Z".to_string()),
            parts: vec![
                Part::Text(t.clone()),
                Part::Thinking(t.clone()),
                Part::Text(other.clone()),
                Part::ToolUse {
                    name: "Bash".into(),
                    id: format!("toolu_{i}"),
                    input: json!({"command": t, "n": i, "nested": [other, {"x": null}]}),
                },
                Part::ToolResult {
                    tool_use_id: format!("toolu_{i}"),
                    is_error: i % 2 == 1,
                    items: vec![
                        ResultItem::Text(t.clone()),
                        ResultItem::Json(json!({"type": "image", "data": t})),
                        ResultItem::Text(String::new()),
                    ],
                },
                Part::Other {
                    kind: "skill".into(),
                    value: json!({"type": "skill", "name": t}),
                },
            ],
        });
    }
    if tier >= 2 {
        for (i, t) in texts.iter().enumerate().take(4) {
            let child = file_name(&format!("b{}", i + 1), "m0001", "m0009");
            entries.push(Entry::Absorbed {
                block: format!("b{}", i + 1),
                tier: tier - 1,
                start: "m0001".into(),
                end: "m0009".into(),
                summary: t.clone(),
                link: absorbed_link(tier - 1, &child),
                path: format!("/abs/root/noa/s1/tier{}/{child}", tier - 1),
            });
        }
    }
    let mut front = Frontmatter::new("b9", tier, "m0001", "m0025", 12345);
    front.topic = Some("nasty content".into());
    if tier >= 2 {
        front.consumed_blocks = Some(vec!["b1".into(), "b2".into(), "b3".into(), "b4".into()]);
        front.loose_messages = Some(25);
    } else {
        front.message_count = Some(25);
    }
    ArchiveDoc {
        front,
        summary: "summary with ``` and\n# heading\n\nand 한국어\n".into(),
        entries,
    }
}

#[test]
fn nasty_content_round_trips_tier1() {
    let doc = nasty_doc(1);
    assert_eq!(round_trip(&doc), doc);
}

#[test]
fn nasty_content_round_trips_tier2_with_absorbed() {
    let doc = nasty_doc(2);
    let back = round_trip(&doc);
    assert_eq!(back, doc);
    let text = render(&doc);
    assert!(text.contains(
        "## absorbed b1 · tier 1 · m0001–m0009\n\n> \n\n[archive](../tier1/b1_m0001-m0009.md) — /abs/root/noa/s1/tier1/b1_m0001-m0009.md\n\n"
    ));
}

#[test]
fn other_parts_and_empty_entries_round_trip() {
    let doc = ArchiveDoc {
        front: Frontmatter::new("b1", 1, "m0001", "m0003", 1),
        summary: String::new(),
        entries: vec![
            raw("m0001", "system", vec![]),
            raw(
                "m0002",
                "user",
                vec![
                    Part::Other {
                        kind: "compact_boundary".into(),
                        value: json!({"type": "compact_boundary", "input": 5000}),
                    },
                    // An unknown type named like a known heading still reads back.
                    Part::Other {
                        kind: "text".into(),
                        value: json!({"type": "text", "text": 5}),
                    },
                    Part::Other {
                        kind: "thinking".into(),
                        value: json!({"type": "thinking"}),
                    },
                    Part::Other {
                        kind: "tool_use".into(),
                        value: json!({"type": "tool_use"}),
                    },
                    Part::Other {
                        kind: "tool_result".into(),
                        value: json!({"type": "tool_result"}),
                    },
                    Part::ToolResult {
                        tool_use_id: "t".into(),
                        is_error: false,
                        items: vec![],
                    },
                    Part::ToolUse {
                        name: "odd (name)".into(),
                        id: "".into(),
                        input: json!("string input with ``` inside"),
                    },
                ],
            ),
            raw("m0003", "assistant", vec![Part::Thinking(String::new())]),
        ],
    };
    assert_eq!(round_trip(&doc), doc);
}

#[test]
fn fences_are_longer_than_any_backtick_run() {
    let doc = ArchiveDoc {
        front: Frontmatter::new("b1", 1, "m0001", "m0001", 1),
        summary: "s".into(),
        entries: vec![raw(
            "m0001",
            "user",
            vec![Part::Text("before\n````\nafter".into())],
        )],
    };
    let text = render(&doc);
    assert!(
        text.contains("### text\n\n`````\nbefore\n````\nafter\n`````\n"),
        "{text}"
    );
    assert_eq!(round_trip(&doc), doc);
}

#[test]
fn bare_safety_rule() {
    assert!(is_bare_safe("plain text\nwith `code` and ``pairs``"));
    assert!(is_bare_safe("a line\n  # indented hash"));
    for unsafe_text in [
        "",
        "\nx",
        "x\n",
        "a\r\nb",
        "# h",
        "x\n## m1 · user",
        "```",
        "x\n````y",
    ] {
        assert!(!is_bare_safe(unsafe_text), "{unsafe_text:?}");
    }
}

#[test]
fn body_sha_is_verified_and_tampering_detected() {
    let doc = nasty_doc(1);
    let text = render(&doc);
    let (head, body) = text.split_at(text.find("\n---\n").unwrap() + 5);
    let sha_line = head
        .lines()
        .find_map(|l| l.strip_prefix("body_sha256: "))
        .unwrap();
    assert_eq!(sha_line, sha256_hex(body.as_bytes()));
    assert_eq!(parse(&text).unwrap().sha_ok, Some(true));

    // One changed byte in the body.
    assert!(body.contains("plain"));
    let tampered = format!("{head}{}", body.replacen("plain", "plaiN", 1));
    assert_eq!(parse(&tampered).unwrap().sha_ok, Some(false));
    // One byte more at the end.
    assert_eq!(parse(&format!("{text}\n")).unwrap().sha_ok, Some(false));
    // A changed frontmatter value does not touch the body hash.
    let retitled = text.replace("topic: nasty content", "topic: other");
    assert_eq!(parse(&retitled).unwrap().sha_ok, Some(true));
    // An uppercase hex digest is accepted.
    let upper = text.replace(sha_line, &sha_line.to_uppercase());
    assert_eq!(parse(&upper).unwrap().sha_ok, Some(true));
}

#[test]
fn frontmatter_errors() {
    let body = "# Archive b1 · tier 1 · m0001–m0002\n\n> s\n\n";
    let full = "block: b1\ntier: 1\nrange: m0001-m0002\noriginal_tokens: 5\n";
    let without = |key: &str| -> String {
        let kept: String = full
            .split_inclusive('\n')
            .filter(|l| !l.starts_with(key))
            .collect();
        format!("---\n{kept}---\n{body}")
    };
    assert!(parse(&format!("---\n{full}---\n{body}")).is_ok());
    for key in ["block", "tier", "range", "original_tokens"] {
        assert_eq!(
            parse(&without(key)).unwrap_err(),
            ArchiveError::MissingKey(key)
        );
    }
    assert_eq!(parse(body).unwrap_err(), ArchiveError::NoFrontmatter);
    assert_eq!(parse("").unwrap_err(), ArchiveError::NoFrontmatter);
    assert_eq!(
        parse(&format!("---\n{full}")).unwrap_err(),
        ArchiveError::NoFrontmatter
    );
    for bad in ["m0001", "m0001-", "-m0002", ""] {
        let text = format!("---\n{}---\n", full.replace("m0001-m0002", bad));
        assert_eq!(
            parse(&text).unwrap_err(),
            ArchiveError::BadRange(bad.to_string())
        );
    }
    let text = format!("---\n{}---\n", full.replace("tier: 1", "tier: one"));
    assert!(
        matches!(parse(&text).unwrap_err(), ArchiveError::BadValue { key, .. } if key == "tier")
    );
    let text = format!(
        "---\n{}---\n",
        full.replace("original_tokens: 5", "original_tokens: -5")
    );
    assert!(matches!(
        parse(&text).unwrap_err(),
        ArchiveError::BadValue { key, .. } if key == "original_tokens"
    ));
    // A frontmatter with no body is readable (with warnings about the missing parts).
    let parsed = parse(&format!("---\n{full}---\n")).unwrap();
    assert!(parsed.doc.entries.is_empty());
    assert!(!parsed.warnings.is_empty());
}

#[test]
fn body_problems_are_warnings_not_errors() {
    let text = "---\nblock: b1\ntier: 1\nrange: m0001-m0002\noriginal_tokens: 5\n---\n# Archive b9 · tier 1 · m0001–m0002\n\n> s\n\nstray line\n\n## m0001 · user\n\nhello\n\n### tool_use Bash (t1)\n\n```json\n{not json\n```\n\n## m0002 · assistant\n\n### text\n\n```\nnever closed\n";
    let parsed = parse(text).unwrap();
    let doc = &parsed.doc;
    assert_eq!(doc.summary, "s");
    assert_eq!(doc.entries.len(), 2);
    assert_eq!(
        doc.entries[0],
        raw(
            "m0001",
            "user",
            vec![
                Part::Text("hello".into()),
                Part::ToolUse {
                    name: "Bash".into(),
                    id: "t1".into(),
                    input: json!("{not json"),
                }
            ]
        )
    );
    assert_eq!(
        doc.entries[1],
        raw(
            "m0002",
            "assistant",
            vec![Part::Text("never closed\n".into())]
        )
    );
    let lines: Vec<usize> = parsed.warnings.iter().map(|w| w.line).collect();
    // heading mismatch (line 7), stray line (11), bad JSON (fence at 19), unclosed fence (27).
    assert_eq!(lines, [7, 11, 19, 27], "{:?}", parsed.warnings);
}

#[test]
fn file_names() {
    assert_eq!(file_name("b3", "m0010", "m0042"), "b3_m0010-m0042.md");
    assert_eq!(
        parse_file_name("b3_m0010-m0042.md"),
        Some(("b3".into(), "m0010".into(), "m0042".into()))
    );
    assert_eq!(
        parse_file_name("b12_m9999-m10000.md"),
        Some(("b12".into(), "m9999".into(), "m10000".into()))
    );
    for bad in [
        "b3_m0010-m0042.md.tmp",
        "b3_m0010-m0042",
        "b3-m0010-m0042.md",
        "_m1-m2.md",
        "b3_m1-.md",
        "b3_-m2.md",
        "b3_m1m2.md",
    ] {
        assert_eq!(parse_file_name(bad), None, "{bad}");
    }
    assert_eq!(
        absorbed_link(1, "b1_m0001-m0009.md"),
        "../tier1/b1_m0001-m0009.md"
    );
}

fn nasty_piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "a",
        "plain words",
        " ",
        "\n",
        "\r\n",
        "\r",
        "`",
        "``",
        "```",
        "````",
        "`````json",
        "# x",
        "## m0005 · user",
        "### text",
        "### thinking",
        "---",
        "> q",
        "[archive](x) — y",
        "한국어",
        "🚀",
        "—",
        "–",
        "·",
        "\t",
        "{\"a\":1}",
    ])
    .prop_map(str::to_string)
}

fn nasty_string() -> impl Strategy<Value = String> {
    prop::collection::vec(nasty_piece(), 0..8).prop_map(|v| v.concat())
}

fn part_strategy() -> impl Strategy<Value = Part> {
    prop_oneof![
        nasty_string().prop_map(Part::Text),
        nasty_string().prop_map(Part::Thinking),
        (nasty_string(), any::<u32>()).prop_map(|(s, n)| Part::ToolUse {
            name: "Tool".into(),
            id: format!("toolu_{n}"),
            input: json!({"s": s, "n": n}),
        }),
        (
            any::<bool>(),
            prop::collection::vec(
                prop_oneof![
                    nasty_string().prop_map(ResultItem::Text),
                    nasty_string().prop_map(|s| ResultItem::Json(json!({"type": "x", "v": s}))),
                ],
                0..3
            )
        )
            .prop_map(|(is_error, items)| Part::ToolResult {
                tool_use_id: "toolu_r".into(),
                is_error,
                items,
            }),
        nasty_string().prop_map(|s| Part::Other {
            kind: "skill".into(),
            value: json!({"type": "skill", "body": s}),
        }),
    ]
}

fn entry_strategy() -> impl Strategy<Value = Entry> {
    prop_oneof![
        3 => (1u32..9999, prop::collection::vec(part_strategy(), 0..5), any::<bool>()).prop_map(
            |(n, parts, ts)| Entry::Raw {
                reference: format!("m{n:04}"),
                role: "assistant".into(),
                timestamp: ts.then(|| "2026-11-30T11:58:01Z".to_string()),
                parts,
            }
        ),
        1 => (1u32..99, nasty_string()).prop_map(|(n, summary)| Entry::Absorbed {
            block: format!("b{n}"),
            tier: 1,
            start: "m0001".into(),
            end: "m0009".into(),
            summary,
            link: absorbed_link(1, &file_name(&format!("b{n}"), "m0001", "m0009")),
            path: "/abs/x — y.md".into(),
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn write_then_parse_is_identity(
        summary in nasty_string(),
        entries in prop::collection::vec(entry_strategy(), 0..6),
        tier in 1u32..4,
    ) {
        let doc = ArchiveDoc {
            front: Frontmatter::new("b7", tier, "m0001", "m0099", 77),
            summary,
            entries,
        };
        let text = render(&doc);
        let parsed = parse(&text).unwrap();
        prop_assert_eq!(parsed.sha_ok, Some(true));
        prop_assert!(parsed.warnings.is_empty(), "{:?}\n{}", parsed.warnings, text);
        let mut back = parsed.doc;
        back.front.body_sha256 = None;
        prop_assert_eq!(back, doc);
    }
}
