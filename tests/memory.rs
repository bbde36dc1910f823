//! Memory files (SPEC 2.2): slug, parsing, rendering, scan, index, audit checks, relevance.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use normafs::format::memory::{
    check, index_entries_equal, parse, relevance, render, render_index, scan, slug, Memory,
    MemoryProblemKind,
};

fn example_memory_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/example-root/memory")
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Write a file and give it a modification time.
fn write_at(dir: &Path, name: &str, text: &[u8], secs: u64) {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    let f = fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(at(secs)).unwrap();
}

fn memory_text(name: &str, description: &str, kind: &str, body: &str) -> String {
    let mut s = format!("---\nname: {name}\ndescription: {description}\n");
    if !kind.is_empty() {
        s.push_str(&format!("type: {kind}\n"));
    }
    s.push_str("---\n");
    s.push_str(body);
    s
}

#[test]
fn slug_table() {
    let cases = [
        ("Deploy Pipeline!", "deploy-pipeline"),
        ("한국어", ""),
        ("A B", "a-b"),
        ("a_b", "a-b"),
        ("  --Leading and trailing--  ", "leading-and-trailing"),
        ("CI dashboard", "ci-dashboard"),
        ("v2.0 release", "v2-0-release"),
        ("already-a-slug", "already-a-slug"),
        ("한국어 notes 2026", "notes-2026"),
        ("emoji 🚀 launch", "emoji-launch"),
        ("", ""),
        ("!!!", ""),
        ("ÄÖÜ mixed", "mixed"),
        ("\u{212A}elvin", "kelvin"),
    ];
    for (name, want) in cases {
        assert_eq!(slug(name), want, "slug({name:?})");
    }
    assert_eq!(slug("A B"), slug("a_b"));
}

#[test]
fn parse_well_formed_keeps_unknown_keys_in_order() {
    let text = "---\nname: Build: system\nzeta: 1\ndescription:  How it links \ntype: project\nalpha: x:y\n---\nbody line\n";
    let m = parse("build-system.md", text, at(5));
    assert!(!m.malformed);
    assert_eq!(m.name, "Build: system");
    assert_eq!(m.description, "How it links");
    assert_eq!(m.kind.as_deref(), Some("project"));
    assert_eq!(m.body, "body line\n");
    let keys: Vec<&str> = m
        .frontmatter
        .as_ref()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, ["name", "zeta", "description", "type", "alpha"]);
    assert_eq!(m.get("alpha"), Some("x:y"));
    // Unknown keys survive a rewrite, after the known ones, in their order.
    assert_eq!(
        render(&m),
        "---\nname: Build: system\ndescription: How it links\ntype: project\nzeta: 1\nalpha: x:y\n---\nbody line\n"
    );
}

#[test]
fn parse_accepts_unknown_type_and_empty_type() {
    let m = parse("x.md", &memory_text("X", "d", "habit", "b"), at(0));
    assert!(!m.malformed);
    assert_eq!(m.kind.as_deref(), Some("habit"));
    let m = parse("x.md", "---\nname: X\ndescription: d\ntype:\n---\nb", at(0));
    assert_eq!(m.kind, None);
    assert_eq!(render(&m), "---\nname: X\ndescription: d\n---\nb");
}

#[test]
fn malformed_files_become_whole_body_named_by_stem() {
    let cases = [
        "no frontmatter at all\n",
        "",
        "---\nname: X\n", // never closed
        "---\nname: X\nthis line has no colon\n---\nbody",
        "--- \nname: X\n---\nbody",  // first line is not exactly ---
        "\n---\nname: X\n---\nbody", // frontmatter not on the first line
        "---\n: empty key\n---\nbody",
        "---\r\nname: X\r\n---\r\nbody", // CRLF first line
    ];
    for text in cases {
        let m = parse("Some Notes.md", text, at(0));
        assert!(m.malformed, "{text:?} should be malformed");
        assert_eq!(m.name, "Some Notes");
        assert_eq!(m.body, text);
        assert_eq!(m.frontmatter, None);
        assert_eq!(m.kind, None);
    }
}

#[test]
fn closing_line_at_end_of_file_gives_empty_body() {
    let m = parse("x.md", "---\nname: X\ndescription: d\n---", at(0));
    assert!(!m.malformed);
    assert_eq!(m.body, "");
}

#[test]
fn example_memories_render_back_byte_identical() {
    let dir = example_memory_dir();
    let mut seen = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name == "MEMORY.md" {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let m = parse(&name, &text, at(0));
        assert!(!m.malformed, "{name}");
        assert_eq!(render(&m), text, "{name}");
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[test]
fn render_makes_values_single_line() {
    let mut m = parse("x.md", &memory_text("X", "d", "user", "body\n"), at(0));
    m.name = "two\nlines".to_string();
    m.description = "a\r\nb\rc".to_string();
    let text = render(&m);
    assert_eq!(
        text,
        "---\nname: two lines\ndescription: a b c\ntype: user\n---\nbody\n"
    );
    let back = parse("x.md", &text, at(0));
    assert_eq!(back.name, "two lines");
}

#[test]
fn scan_example_root_and_its_index() {
    let dir = example_memory_dir();
    let s = scan(&dir);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let mut names: Vec<&str> = s.memories.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["Build system", "CI dashboard", "Prefers small PRs"]);
    assert!(check(&s).is_empty(), "{:?}", check(&s));

    let on_disk = fs::read_to_string(dir.join("MEMORY.md")).unwrap();
    let computed = render_index(&s.memories);
    assert!(computed.starts_with("# Memory index\n\n"));
    assert!(computed.ends_with('\n'));
    assert_eq!(computed.lines().count(), 5);
    // The copy lost the original mtimes: same entries, maybe another order.
    assert!(index_entries_equal(&on_disk, &computed));

    // In the original order the index is byte-identical to the runtime's.
    let order = ["build-system.md", "prefers-small-prs.md", "ci-dashboard.md"];
    let ordered: Vec<Memory> = order
        .iter()
        .map(|f| {
            s.memories
                .iter()
                .find(|m| m.file_name == *f)
                .unwrap()
                .clone()
        })
        .collect();
    assert_eq!(render_index(&ordered), on_disk);
}

#[test]
fn index_comparison_detects_real_differences() {
    let a = "# Memory index\n\n- [A](a.md) — x (user)\n- [B](b.md) — y\n";
    let reordered = "# Memory index\n\n- [B](b.md) — y\n- [A](a.md) — x (user)\n";
    assert!(index_entries_equal(a, reordered));
    assert!(!index_entries_equal(
        a,
        "# Memory index\n\n- [A](a.md) — x (user)\n"
    ));
    assert!(!index_entries_equal(
        a,
        "# Memory index\n\n- [A](a.md) — x (project)\n- [B](b.md) — y\n"
    ));
    assert!(!index_entries_equal(
        a,
        "# Memory index\n\n- [A](a.md) — x (user)\n- [B](b.md) — y\n- [B](b.md) — y\n"
    ));
}

#[test]
fn render_index_format() {
    let a = parse("a.md", &memory_text("A", "first", "user", ""), at(2));
    let b = parse("b.md", &memory_text("B", "second", "", ""), at(1));
    assert_eq!(
        render_index(&[a, b]),
        "# Memory index\n\n- [A](a.md) — first (user)\n- [B](b.md) — second\n"
    );
    assert_eq!(render_index(&[]), "# Memory index\n\n");
}

#[test]
fn scan_order_filters_and_problems() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_at(
        dir,
        "old.md",
        memory_text("Old", "d", "user", "").as_bytes(),
        100,
    );
    write_at(
        dir,
        "new.md",
        memory_text("New", "d", "user", "").as_bytes(),
        300,
    );
    write_at(
        dir,
        "tie-b.md",
        memory_text("Tie B", "d", "", "").as_bytes(),
        200,
    );
    write_at(
        dir,
        "tie-a.md",
        memory_text("Tie A", "d", "", "").as_bytes(),
        200,
    );
    write_at(dir, "MEMORY.md", b"# Memory index\n\n", 400);
    write_at(dir, "notes.txt", b"not a memory", 400);
    write_at(dir, "bad-utf8.md", b"---\nname: \xff\n---\n", 400);
    fs::create_dir(dir.join("sub.md")).unwrap();
    fs::write(
        dir.join("sub.md/inner.md"),
        memory_text("Inner", "d", "", ""),
    )
    .unwrap();
    fs::create_dir(dir.join("nested")).unwrap();
    fs::write(dir.join("nested/deep.md"), memory_text("Deep", "d", "", "")).unwrap();
    std::os::unix::fs::symlink(dir.join("nested"), dir.join("dirlink.md")).unwrap();
    std::os::unix::fs::symlink(dir.join("nowhere.md"), dir.join("dangling.md")).unwrap();

    let s = scan(dir);
    let files: Vec<&str> = s.memories.iter().map(|m| m.file_name.as_str()).collect();
    assert_eq!(files, ["new.md", "tie-a.md", "tie-b.md", "old.md"]);
    let problems: Vec<&str> = s.problems.iter().map(|p| p.file_name.as_str()).collect();
    assert_eq!(problems, ["bad-utf8.md", "dangling.md"]);
    assert!(s.problems[0].message.contains("UTF-8"));

    // Unreadable files are reported as malformed by the audit.
    let found = check(&s);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found
        .iter()
        .all(|p| p.kind == MemoryProblemKind::Malformed && p.kind.code() == "memory.malformed"));
}

#[test]
fn scan_missing_dir_is_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scan(&tmp.path().join("absent"));
    assert!(s.memories.is_empty());
    assert!(s.problems.is_empty());
}

#[test]
fn check_reports_every_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_at(
        dir,
        "deploy.md",
        memory_text("Deploy", "d", "project", "").as_bytes(),
        1,
    );
    write_at(
        dir,
        "deploy-2.md",
        memory_text("deploy", "d", "user", "").as_bytes(),
        2,
    );
    write_at(
        dir,
        "korean.md",
        memory_text("한국어", "d", "user", "").as_bytes(),
        3,
    );
    write_at(
        dir,
        "wrong-file.md",
        memory_text("Right Name", "d", "user", "").as_bytes(),
        4,
    );
    write_at(
        dir,
        "odd-type.md",
        memory_text("Odd type", "d", "habit", "").as_bytes(),
        5,
    );
    write_at(dir, "plain.md", b"just text\n", 6);

    let found = check(&scan(dir));
    let got: Vec<(&str, &str)> = found
        .iter()
        .map(|p| (p.file_name.as_str(), p.kind.code()))
        .collect();
    assert_eq!(
        got,
        [
            ("deploy-2.md", "memory.slug-collision"),
            ("deploy-2.md", "memory.name-mismatch"),
            ("deploy.md", "memory.slug-collision"),
            ("korean.md", "memory.empty-slug"),
            ("odd-type.md", "memory.unknown-type"),
            ("plain.md", "memory.malformed"),
            ("wrong-file.md", "memory.name-mismatch"),
        ]
    );
    assert!(MemoryProblemKind::SlugCollision.is_error());
    assert!(!MemoryProblemKind::NameMismatch.is_error());
    let collision = found.iter().find(|p| p.file_name == "deploy.md").unwrap();
    assert!(
        collision.message.contains("deploy-2.md"),
        "{}",
        collision.message
    );
}

#[test]
fn relevance_scores_ranks_and_breaks_ties() {
    let mems = vec![
        // 0: body match only -> 1
        parse(
            "a.md",
            &memory_text("Alpha", "nothing", "user", "uses zstd\n"),
            at(10),
        ),
        // 1: name (3) + description (2) + body (1) = 6
        parse(
            "zstd.md",
            &memory_text("Zstd linking", "zstd flags", "project", "zstd\n"),
            at(1),
        ),
        // 2: no match
        parse(
            "c.md",
            &memory_text("Gamma", "other", "user", "nothing\n"),
            at(50),
        ),
        // 3: body match only -> 1, newer than 0
        parse(
            "d.md",
            &memory_text("Delta", "nothing", "user", "ZSTD here\n"),
            at(20),
        ),
        // 4: body match only -> 1, same mtime as 3, later file name
        parse(
            "e.md",
            &memory_text("Echo", "nothing", "user", "zstd\n"),
            at(20),
        ),
    ];
    assert_eq!(relevance("ZSTD?", &mems), [(1, 6), (3, 1), (4, 1), (0, 1)]);
    // Type matches score 3; tokens add up; repeated tokens count once.
    assert_eq!(relevance("project", &mems), [(1, 3)]);
    assert_eq!(relevance("linking zstd zstd", &mems)[0], (1, 9));
    // Non-ASCII query text is not a token.
    assert!(relevance("한국어 !!", &mems).is_empty());
    assert!(relevance("", &mems).is_empty());
    // Underscore is a token character.
    let m = vec![parse(
        "u.md",
        &memory_text("U", "d", "", "snake_case here\n"),
        at(0),
    )];
    assert_eq!(relevance("snake_case", &m), [(0, 1)]);
    assert_eq!(relevance("snake-case", &m), [(0, 2)]);
}
