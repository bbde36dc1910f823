//! Memory files (SPEC 2.2, 9) against the runtime: slug, parse, render, scan, the index, the
//! audit checks and relevance, with the runtime's own memory directory and oracle.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{norma_data, set_mtime};
use normafs::audit::{self, Severity};
use normafs::format::memory::{
    self, check, check_index, file_for, index_matches, parse, relevance, render, render_index,
    scan, slug, Irregularity, Memory, MemoryProblemKind,
};
use serde_json::Value;

/// The runtime's own memory directory.
fn corpus_dir() -> PathBuf {
    norma_data().join("corpus/memory")
}

/// A file of the memory oracle (`oracle/_memory/<file>`).
fn oracle(file: &str) -> Value {
    common::oracle(&format!("_memory/{file}"))
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Write a file and give it a modification time.
fn write_at(dir: &Path, name: impl AsRef<Path>, text: &[u8], secs: u64) {
    let path = dir.join(name);
    fs::write(&path, text).expect("write");
    set_mtime(&path, at(secs));
}

/// A temporary copy of the corpus memory directory, each file with its oracle modification
/// time (scan.json), `MEMORY.md` with the newest.
fn corpus_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tmp");
    for entry in fs::read_dir(corpus_dir()).expect("corpus") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), tmp.path().join(entry.file_name())).expect("copy");
    }
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in oracle("scan.json").as_array().expect("array") {
        let stamp = e["modTime"].as_str().expect("modTime");
        let t = chrono::DateTime::parse_from_rfc3339(stamp).expect("rfc3339");
        let nanos = t.timestamp_nanos_opt().expect("in range");
        let t = SystemTime::UNIX_EPOCH
            + Duration::from_nanos(u64::try_from(nanos).expect("after 1970"));
        newest = newest.max(t);
        set_mtime(&tmp.path().join(e["file"].as_str().expect("file")), t);
    }
    set_mtime(
        &tmp.path().join("MEMORY.md"),
        newest + Duration::from_secs(1),
    );
    tmp
}

/// `(code, file)` of every finding of the audit of `dir`.
fn codes(dir: &Path) -> BTreeSet<(&'static str, String)> {
    memory::audit(dir)
        .into_iter()
        .map(|p| (p.kind.code(), p.file_name))
        .collect()
}

fn set(items: &[(&'static str, &str)]) -> BTreeSet<(&'static str, String)> {
    items.iter().map(|(c, f)| (*c, f.to_string())).collect()
}

/// Rewrite `MEMORY.md` from the directory as it is (so that only the damage under test shows).
fn reindex(dir: &Path) {
    let s = scan(dir);
    fs::write(dir.join("MEMORY.md"), render_index(&s.memories)).expect("index");
}

#[test]
fn slug_table() {
    let cases = [
        // Unicode-only: empty.
        ("日本語のメモ", ""),
        ("한국어", ""),
        ("", ""),
        ("!!!", ""),
        // Punctuation runs become one dash.
        ("Scratch note: JWT leeway", "scratch-note-jwt-leeway"),
        ("a -- b", "a-b"),
        ("a_b", "a-b"),
        ("a!?.b", "a-b"),
        ("emoji 🚀 launch", "emoji-launch"),
        ("ÄÖÜ mixed", "mixed"),
        ("naïve café", "na-ve-caf"),
        // Leading and trailing runs are trimmed.
        ("  --Leading and trailing--  ", "leading-and-trailing"),
        ("한국어 notes 2026", "notes-2026"),
        ("(x)", "x"),
        // Digits are kept.
        ("v2.0 release", "v2-0-release"),
        ("2026", "2026"),
        ("007", "007"),
        // Mixed case is lowercased first.
        ("CI Dashboard", "ci-dashboard"),
        ("MiXeD CaSe", "mixed-case"),
        ("already-a-slug", "already-a-slug"),
        // Characters whose simple lowercase is ASCII.
        ("\u{212A}elvin", "kelvin"),
        ("\u{130}stanbul", "istanbul"),
    ];
    for (name, want) in cases {
        assert_eq!(slug(name), want, "slug({name:?})");
    }
    assert_eq!(file_for("日本語のメモ"), ".md");
    assert_eq!(file_for("Build system"), "build-system.md");
}

#[test]
fn parse_reads_what_the_runtime_reads() {
    let text = "---\nname: Build: system\nzeta: 1\ndescription:  How it links \ntype: project\nalpha: x:y\n---\n\nbody line\n";
    let m = parse("build-system.md", text, at(5));
    assert_eq!(m.irregularities, vec![]);
    assert_eq!(m.name, "Build: system");
    assert_eq!(m.description, "How it links");
    assert_eq!(m.kind.as_deref(), Some("project"));
    assert_eq!(m.content, "body line\n");
    assert_eq!(m.mtime, at(5));
    let extra: Vec<(&str, &str)> = m
        .extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(extra, [("zeta", "1"), ("alpha", "x:y")]);
    // Unknown keys survive a rewrite, after the known ones, in their order.
    assert_eq!(
        render(&m),
        "---\nname: Build: system\ndescription: How it links\ntype: project\nzeta: 1\nalpha: x:y\n---\n\nbody line\n"
    );
}

#[test]
fn parse_without_frontmatter_or_closing() {
    let whole = |text: &str, irregular: Irregularity| {
        let m = parse("Some Notes.md", text, at(0));
        assert_eq!(m.content, text, "{text:?}");
        assert_eq!(m.name, "Some Notes", "{text:?}");
        assert_eq!(m.description, "");
        assert_eq!(m.kind, None);
        assert_eq!(m.irregularities, vec![irregular], "{text:?}");
    };
    whole("no frontmatter at all\n", Irregularity::NoFrontmatter);
    whole("", Irregularity::NoFrontmatter);
    whole("\n---\nname: X\n---\nbody", Irregularity::NoFrontmatter);
    whole(" ---\nname: X\n---\n", Irregularity::NoFrontmatter);
    whole("---\nname: X\n", Irregularity::Unclosed);
    whole("---\nname: X\ndescription: d", Irregularity::Unclosed);
    // The line breaks after the opening `---` are skipped before `\n---` is looked for, so an
    // empty frontmatter is none at all.
    whole("---\n---\nbody", Irregularity::Unclosed);
    whole("---\n\n\n---\nbody", Irregularity::Unclosed);
    whole("---", Irregularity::Unclosed);
    // The empty stem of `.md`.
    let m = parse(".md", "plain\n", at(0));
    assert_eq!(m.name, "");
}

#[test]
fn parse_edge_cases() {
    // CRLF: values are trimmed, the content keeps its own line breaks.
    let m = parse(
        "x.md",
        "---\r\nname: X\r\ndescription: d\r\ntype: user\r\n---\r\n\r\nbody\r\nmore\r\n",
        at(0),
    );
    assert_eq!(
        (m.name.as_str(), m.description.as_str(), m.kind.as_deref()),
        ("X", "d", Some("user"))
    );
    assert_eq!(m.content, "body\r\nmore\r\n");
    assert_eq!(m.irregularities, vec![]);

    // `----` opening: the head starts with the extra dash (a line without `:`).
    let m = parse("x.md", "----\nname: X\n---\nbody", at(0));
    assert_eq!(m.name, "X");
    assert_eq!(m.content, "body");
    assert_eq!(m.irregularities, vec![Irregularity::NoColon { line: 1 }]);

    // A closing line with more dashes: the dashes go, then the line breaks.
    let m = parse("x.md", "---\nname: X\n-----\n\n\nbody\n", at(0));
    assert_eq!(m.content, "body\n");
    // Any line starting with `---` closes; the rest of it is content.
    let m = parse("x.md", "---\nname: X\n--- tail\nbody\n", at(0));
    assert_eq!(m.content, " tail\nbody\n");
    // Content that starts with a dash after the empty line keeps it.
    let m = parse("x.md", "---\nname: X\n---\n\n- item\n", at(0));
    assert_eq!(m.content, "- item\n");
    // Closing at the end of the file: empty content.
    let m = parse("x.md", "---\nname: X\ndescription: d\n---", at(0));
    assert_eq!(m.content, "");
    assert_eq!(m.irregularities, vec![]);

    // Keys without values; a line without `:`; values with colons; an empty key; NBSP trimmed.
    let m = parse(
        "stem.md",
        "---\nname:\ndescription\ntype: \nurl: https://a.b:8080/x\n: lost\nnote:\u{a0}x\u{a0}\n---\n",
        at(0),
    );
    assert_eq!(m.name, "stem", "an empty name falls back to the stem");
    assert_eq!(m.description, "");
    assert_eq!(m.kind, None);
    assert_eq!(
        m.extra,
        [
            ("url".to_string(), "https://a.b:8080/x".to_string()),
            ("note".to_string(), "x".to_string())
        ]
    );
    assert_eq!(
        m.irregularities,
        vec![
            Irregularity::NoColon { line: 3 },
            Irregularity::EmptyKey { line: 6 }
        ]
    );

    // A repeated key: the last value wins; line numbers count the skipped blank lines.
    let m = parse(
        "a.md",
        "---\n\n\nname: A\ntype: user\nname: B\ntype:\n---\nx",
        at(0),
    );
    assert_eq!(m.name, "B");
    assert_eq!(m.kind, None);
    assert_eq!(
        m.irregularities,
        vec![
            Irregularity::Repeated {
                key: "name".into(),
                line: 6
            },
            Irregularity::Repeated {
                key: "type".into(),
                line: 7
            }
        ]
    );
    assert_eq!(m.irregularities[0].line(), Some(6));

    // The head may start on the opening line itself.
    let m = parse("x.md", "---name: X\n---\nb", at(0));
    assert_eq!(m.name, "X");
    assert_eq!(m.irregularities, vec![]);
}

#[test]
fn render_is_the_runtimes() {
    assert_eq!(
        render(&Memory::new("N", "", None, "text")),
        "---\nname: N\ndescription: \n---\n\ntext\n"
    );
    assert_eq!(
        render(&Memory::new("N", "d", Some("user"), "text\n\n\n")),
        "---\nname: N\ndescription: d\ntype: user\n---\n\ntext\n"
    );
    assert_eq!(
        render(&Memory::new("N", "d", Some(""), "")),
        "---\nname: N\ndescription: d\n---\n\n\n"
    );
    // Line breaks inside values become spaces (normafs choice).
    let mut m = Memory::new("two\nlines", "a\r\nb\rc", Some("user"), "body\n");
    m.extra.push(("k".into(), "v\nw".into()));
    // Extras that would not read back as themselves are dropped.
    for bad in ["", "name", "type", "a:b", "---x", " pad", "x\ny"] {
        m.extra.push((bad.into(), "v".into()));
    }
    let text = render(&m);
    assert_eq!(
        text,
        "---\nname: two lines\ndescription: a b c\ntype: user\nk: v w\n---\n\nbody\n"
    );
    let back = parse("x.md", &text, at(0));
    assert_eq!(back.name, "two lines");
    assert_eq!(back.irregularities, vec![]);
}

#[test]
fn render_round_trip() {
    let mut m = Memory::new(
        "Round trip",
        "there and back",
        Some("feedback"),
        "line\n- item\n",
    );
    m.extra.push(("owner".into(), "me".into()));
    m.file_name = "round-trip.md".into();
    let back = parse("round-trip.md", &render(&m), m.mtime);
    assert_eq!(back, m);
    assert_eq!(render(&back), render(&m));
    // What the runtime reads back from its own rendering: leading line breaks of the content
    // are lost, trailing ones become one.
    let m = Memory::new("R", "", None, "\n\nx\n\n");
    let back = parse("r.md", &render(&m), m.mtime);
    assert_eq!(back.content, "x\n");
}

#[test]
fn corpus_files_parse_as_the_oracle_and_render_back_byte_identical() {
    let dir = corpus_dir();
    let entries = oracle("scan.json");
    let entries = entries.as_array().expect("array");
    assert_eq!(entries.len(), 6);
    for e in entries {
        let file = e["file"].as_str().expect("file");
        let text = fs::read_to_string(dir.join(file)).expect("memory file");
        let m = parse(file, &text, at(0));
        assert_eq!(m.name, e["name"].as_str().expect("name"), "{file}");
        assert_eq!(
            m.description,
            e["description"].as_str().expect("d"),
            "{file}"
        );
        assert_eq!(
            m.kind.as_deref().unwrap_or(""),
            e["type"].as_str().expect("t"),
            "{file}"
        );
        assert_eq!(m.content, e["content"].as_str().expect("content"), "{file}");
        assert_eq!(m.irregularities, vec![], "{file}");
        assert!(m.extra.is_empty(), "{file}");
        // The runtime wrote these files with the renderer normafs reproduces.
        assert_eq!(render(&m), text, "{file}");
    }
}

#[test]
fn scan_and_index_match_the_oracle() {
    let tmp = corpus_copy();
    let s = scan(tmp.path());
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let want: Vec<String> = oracle("scan.json")
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["file"].as_str().expect("file").to_string())
        .collect();
    let got: Vec<&str> = s.memories.iter().map(|m| m.file_name.as_str()).collect();
    assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>());
    let index =
        fs::read_to_string(norma_data().join("oracle/_memory/index.txt")).expect("index.txt");
    assert_eq!(render_index(&s.memories), index);
    // The runtime's own MEMORY.md is that index, and not stale.
    assert_eq!(
        fs::read_to_string(corpus_dir().join("MEMORY.md")).expect("MEMORY.md"),
        index
    );
    assert_eq!(check_index(tmp.path(), &s), None);
    let segment = fs::read_to_string(norma_data().join("oracle/_memory/system-segment.txt"))
        .expect("segment");
    assert!(segment.ends_with(&index));
}

#[test]
fn relevance_matches_the_oracle() {
    let tmp = corpus_copy();
    let s = scan(tmp.path());
    for case in oracle("relevant.json").as_array().expect("array") {
        let query = case["query"].as_str().expect("query");
        let max = case["max"].as_u64().expect("max") as usize;
        let want: Vec<&str> = case["names"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let got: Vec<&str> = relevance(query, &s.memories)
            .into_iter()
            .take(max)
            .filter_map(|(i, _)| s.memories.get(i).map(|m| m.name.as_str()))
            .collect();
        assert_eq!(got, want, "{query:?}");
    }
}

#[test]
fn relevance_scores_and_ties() {
    let mut mems = vec![
        Memory::new("Alpha", "nothing", Some("user"), "uses zstd\n"),
        Memory::new("Zstd linking", "zstd flags", Some("project"), "zstd\n"),
        Memory::new("Gamma", "other", Some("user"), "nothing\n"),
        Memory::new("Delta", "nothing", Some("user"), "ZSTD here\n"),
        Memory::new("Echo", "nothing", Some("user"), "zstd\n"),
    ];
    for (m, t) in mems.iter_mut().zip([10, 1, 50, 20, 20]) {
        m.mtime = at(t);
    }
    // Name + type 3, description 2, content 1; equal scores: newer first, then input order.
    assert_eq!(relevance("ZSTD?", &mems), [(1, 6), (3, 1), (4, 1), (0, 1)]);
    assert_eq!(relevance("project", &mems), [(1, 3)]);
    // Repeated tokens each count; stop words and one-letter words do not.
    assert_eq!(relevance("the linking zstd zstd a", &mems)[0], (1, 15));
    assert!(relevance("한국어 !! x", &mems).is_empty());
    assert!(relevance("", &mems).is_empty());
    let m = vec![Memory::new("U", "d", None, "snake_case here\n")];
    assert_eq!(relevance("snake_case", &m), [(0, 1)]);
    assert_eq!(relevance("snake-case", &m), [(0, 2)]);
}

#[test]
fn scan_order_filters_and_problems() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let text = |name: &str| render(&Memory::new(name, "d", None, "x"));
    write_at(dir, "old.md", text("Old").as_bytes(), 100);
    write_at(dir, "new.md", text("New").as_bytes(), 300);
    // Equal modification times: by file name.
    write_at(dir, "tie-b.md", text("Tie B").as_bytes(), 200);
    write_at(dir, "tie-a.md", text("Tie A").as_bytes(), 200);
    write_at(dir, ".md", text("日本語").as_bytes(), 200);
    write_at(dir, "MEMORY.md", b"# Memory\n\n", 400);
    write_at(dir, "notes.txt", b"not a memory", 400);
    write_at(dir, "upper.MD", b"not a memory either", 400);
    write_at(dir, "bad-utf8.md", b"---\nname: \xff\n---\n", 50);
    write_at(
        dir,
        OsStr::from_bytes(b"\xfe.md"),
        text("odd").as_bytes(),
        40,
    );
    fs::create_dir(dir.join("sub.md")).expect("mkdir");
    fs::write(dir.join("sub.md/inner.md"), text("Inner")).expect("write");
    std::os::unix::fs::symlink(dir.join("new.md"), dir.join("link.md")).expect("symlink");
    let fifo = dir.join("pipe.md");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);

    let s = scan(dir);
    let files: Vec<&str> = s.memories.iter().map(|m| m.file_name.as_str()).collect();
    assert_eq!(
        files,
        [
            "new.md",
            ".md",
            "tie-a.md",
            "tie-b.md",
            "old.md",
            "bad-utf8.md",
            "\u{fffd}.md"
        ]
    );
    let bad = &s.memories[5];
    assert_eq!(bad.name, "\u{fffd}");
    assert_eq!(bad.irregularities, vec![Irregularity::NotUtf8]);
    assert_eq!(
        s.memories[6].irregularities,
        vec![Irregularity::FileNameNotUtf8]
    );
    let problems: Vec<&str> = s.problems.iter().map(|p| p.file_name.as_str()).collect();
    assert_eq!(problems, ["link.md", "pipe.md"]);
    assert!(
        s.problems[0].message.contains("symbolic link"),
        "{:?}",
        s.problems
    );
    assert!(
        s.problems[1].message.contains("not a regular file"),
        "{:?}",
        s.problems
    );
    // Unreadable files are reported as malformed by the audit.
    let found = check(&s);
    for f in ["link.md", "pipe.md", "bad-utf8.md", "\u{fffd}.md"] {
        assert!(
            found
                .iter()
                .any(|p| p.kind == MemoryProblemKind::Malformed && p.file_name == f),
            "{f}: {found:?}"
        );
    }
}

#[test]
fn scan_missing_dir_is_empty_and_its_index_says_so() {
    let tmp = tempfile::tempdir().expect("tmp");
    let s = scan(&tmp.path().join("absent"));
    assert!(s.memories.is_empty());
    assert!(s.problems.is_empty());
    assert_eq!(render_index(&s.memories), "# Memory\n\n(no memories yet)\n");
    assert_eq!(check_index(&tmp.path().join("absent"), &s), None);
}

#[test]
fn index_lines_and_comparison() {
    let mut a = Memory::new("日本語のメモ", "x", Some("user"), "");
    a.file_name = ".md".into();
    let b = Memory::new("Scratch note: JWT leeway", "", None, "");
    assert_eq!(memory::index_line(&a), "- [日本語のメモ](.md) — x");
    assert_eq!(
        render_index(&[a, b]),
        "# Memory\n\n- [日本語のメモ](.md) — x\n- [Scratch note: JWT leeway](scratch-note-jwt-leeway.md) — \n"
    );
    // The index links slug(name).md, whatever file the memory is in.
    let mut c = Memory::new("Right Name", "d", None, "");
    c.file_name = "wrong.md".into();
    assert_eq!(memory::index_line(&c), "- [Right Name](right-name.md) — d");

    let one = "# Memory\n\n- [A](a.md) — x\n- [B](b.md) — y\n";
    assert!(index_matches(
        one,
        "# Memory\n\n- [B](b.md) — y\n- [A](a.md) — x\n"
    ));
    assert!(index_matches(
        one,
        "# Memory\n\n- [A](a.md) — x\n- [B](b.md) — y"
    ));
    assert!(!index_matches(one, "# Memory\n\n- [A](a.md) — x\n"));
    assert!(!index_matches(
        one,
        "# Memory index\n\n- [A](a.md) — x\n- [B](b.md) — y\n"
    ));
    assert!(!index_matches(
        one,
        "# Memory\n\n- [A](a.md) — x \n- [B](b.md) — y\n"
    ));
    assert!(!index_matches(
        "# Memory\n\n(no memories yet)\n",
        "# Memory\n\n- [A](a.md) — x\n"
    ));
}

#[test]
fn the_runtimes_directory_audits_clean_but_for_the_empty_slug() {
    // In place (the copy lost the order of MEMORY.md, not its lines) and with oracle times.
    let want = set(&[("memory.empty-slug", ".md")]);
    assert_eq!(codes(&corpus_dir()), want);
    let tmp = corpus_copy();
    assert_eq!(codes(tmp.path()), want);
    // Through the root audit: a warning, on memory/.md.
    let mut a = audit::Audit::default();
    audit::audit_memory(&mut a, &corpus_dir());
    let lines: Vec<String> = a.findings.iter().map(|f| f.to_line()).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("warn memory.empty-slug memory/.md — "),
        "{lines:?}"
    );
}

#[test]
fn audit_slug_collision() {
    let tmp = corpus_copy();
    let dir = tmp.path();
    write_at(
        dir,
        "build-system-2.md",
        render(&Memory::new("Build System!", "again", Some("project"), "x")).as_bytes(),
        1,
    );
    reindex(dir);
    assert_eq!(
        codes(dir),
        set(&[
            ("memory.empty-slug", ".md"),
            ("memory.slug-collision", "build-system.md"),
            ("memory.slug-collision", "build-system-2.md"),
            ("memory.name-mismatch", "build-system-2.md"),
        ])
    );
    let found = memory::audit(dir);
    let collision = found
        .iter()
        .find(|p| p.kind == MemoryProblemKind::SlugCollision && p.file_name == "build-system.md")
        .expect("collision");
    assert!(
        collision.message.contains("build-system-2.md"),
        "{}",
        collision.message
    );
    assert_eq!(collision.kind.severity(), Severity::Error);

    // Two Unicode-only names both map to `.md`.
    let tmp = corpus_copy();
    let dir = tmp.path();
    write_at(
        dir,
        "korean.md",
        render(&Memory::new("한국어 메모", "d", Some("user"), "x")).as_bytes(),
        1,
    );
    reindex(dir);
    assert_eq!(
        codes(dir),
        set(&[
            ("memory.empty-slug", ".md"),
            ("memory.empty-slug", "korean.md"),
            ("memory.name-mismatch", "korean.md"),
            ("memory.slug-collision", ".md"),
            ("memory.slug-collision", "korean.md"),
        ])
    );
}

#[test]
fn audit_name_mismatch_names_the_file_it_would_overwrite() {
    let tmp = corpus_copy();
    let dir = tmp.path();
    fs::rename(dir.join("user-role.md"), dir.join("role.md")).expect("rename");
    // A memory whose name maps onto another memory's file (whose own name maps elsewhere):
    // not a collision, but saving it would overwrite that memory.
    fs::rename(dir.join("ci-dashboard.md"), dir.join("ci.md")).expect("rename");
    write_at(
        dir,
        "ci-dashboard.md",
        render(&Memory::new("Something else", "d", Some("user"), "x")).as_bytes(),
        2,
    );
    reindex(dir);
    assert_eq!(
        codes(dir),
        set(&[
            ("memory.empty-slug", ".md"),
            ("memory.name-mismatch", "role.md"),
            ("memory.name-mismatch", "ci.md"),
            ("memory.name-mismatch", "ci-dashboard.md"),
        ])
    );
    let found = memory::audit(dir);
    let m = found
        .iter()
        .find(|p| p.kind == MemoryProblemKind::NameMismatch && p.file_name == "role.md")
        .expect("mismatch");
    assert!(m.message.contains("user-role.md"), "{}", m.message);
    let m = found
        .iter()
        .find(|p| p.kind == MemoryProblemKind::NameMismatch && p.file_name == "ci.md")
        .expect("mismatch");
    assert!(m.message.contains("\"Something else\""), "{}", m.message);
}

#[test]
fn audit_malformed_unknown_keys_unknown_type() {
    let tmp = corpus_copy();
    let dir = tmp.path();
    // Unclosed: the whole file is the content, the name the stem (which is the slug here).
    let p = dir.join("build-system.md");
    let text = fs::read_to_string(&p).expect("read");
    fs::write(&p, text.replacen("\n---\n", "\n", 1)).expect("write");
    // A head line without `:`, on line 3.
    let p = dir.join("user-role.md");
    let text = fs::read_to_string(&p).expect("read");
    fs::write(&p, text.replacen("description:", "description", 1)).expect("write");
    // Unknown keys.
    let p = dir.join("ci-dashboard.md");
    let text = fs::read_to_string(&p).expect("read");
    fs::write(&p, text.replacen("type:", "owner: sre\ntags: ci\ntype:", 1)).expect("write");
    // Unknown type.
    let p = dir.join("prefers-small-prs.md");
    let text = fs::read_to_string(&p).expect("read");
    fs::write(&p, text.replacen("type: feedback", "type: opinion", 1)).expect("write");
    reindex(dir);
    assert_eq!(
        codes(dir),
        set(&[
            ("memory.empty-slug", ".md"),
            ("memory.malformed", "build-system.md"),
            ("memory.malformed", "user-role.md"),
            ("memory.unknown-keys", "ci-dashboard.md"),
            ("memory.unknown-type", "prefers-small-prs.md"),
        ])
    );
    let found = memory::audit(dir);
    let get = |kind, file: &str| {
        found
            .iter()
            .find(|p| p.kind == kind && p.file_name == file)
            .expect("finding")
    };
    assert_eq!(
        get(MemoryProblemKind::Malformed, "user-role.md").line,
        Some(3)
    );
    assert_eq!(
        get(MemoryProblemKind::Malformed, "build-system.md").line,
        None
    );
    let keys = get(MemoryProblemKind::UnknownKeys, "ci-dashboard.md");
    assert!(keys.message.contains("owner, tags"), "{}", keys.message);
    assert_eq!(keys.kind.severity(), Severity::Warn);
    let kind = get(MemoryProblemKind::UnknownType, "prefers-small-prs.md");
    assert_eq!(kind.kind.severity(), Severity::Info);
    // The root audit carries the line number.
    let mut a = audit::Audit::default();
    audit::audit_memory(&mut a, dir);
    assert!(a.findings.iter().any(|f| f.code == "memory.malformed"
        && f.path == "memory/user-role.md"
        && f.line == Some(3)));
}

#[test]
fn audit_index_stale() {
    let stale = set(&[
        ("memory.empty-slug", ".md"),
        ("memory.index-stale", "MEMORY.md"),
    ]);
    // A memory saved after the index was written.
    let tmp = corpus_copy();
    let dir = tmp.path();
    write_at(
        dir,
        "late.md",
        render(&Memory::new("Late", "after the index", Some("user"), "x")).as_bytes(),
        1,
    );
    assert_eq!(codes(dir), stale);
    reindex(dir);
    assert_eq!(codes(dir), set(&[("memory.empty-slug", ".md")]));
    // A description edited by hand.
    let p = dir.join("late.md");
    let text = fs::read_to_string(&p).expect("read");
    fs::write(&p, text.replace("after the index", "edited")).expect("write");
    assert_eq!(codes(dir), stale);
    // The old guessed format is stale; a missing index is not (the runtime computes it).
    let tmp = corpus_copy();
    let dir = tmp.path();
    let old = fs::read_to_string(dir.join("MEMORY.md")).expect("index");
    fs::write(
        dir.join("MEMORY.md"),
        old.replace("# Memory\n", "# Memory index\n"),
    )
    .expect("w");
    assert_eq!(codes(dir), stale);
    fs::remove_file(dir.join("MEMORY.md")).expect("rm");
    assert_eq!(codes(dir), set(&[("memory.empty-slug", ".md")]));
    // A MEMORY.md that cannot be read as a file.
    fs::create_dir(dir.join("MEMORY.md")).expect("mkdir");
    assert_eq!(codes(dir), stale);
    // An empty directory with the runtime's empty index, and with a stale one.
    let tmp = tempfile::tempdir().expect("tmp");
    fs::write(
        tmp.path().join("MEMORY.md"),
        "# Memory\n\n(no memories yet)\n",
    )
    .expect("w");
    assert_eq!(codes(tmp.path()), set(&[]));
    fs::write(
        tmp.path().join("MEMORY.md"),
        "# Memory\n\n- [A](a.md) — x\n",
    )
    .expect("w");
    assert_eq!(
        codes(tmp.path()),
        set(&[("memory.index-stale", "MEMORY.md")])
    );
}
