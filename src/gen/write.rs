//! Writing a generated session's files (transcript, state, archives, journal, damages) and
//! the root's memory files.

use super::*;

/// The time of a record (Unix nanoseconds), when it has a parsable one.
pub(super) fn record_ns(r: &Record) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(r.timestamp.as_deref()?).ok()?;
    t.timestamp_nanos_opt()
}

/// Write a transcript's lines; its modification time is its last record's time.
pub(super) fn write_transcript(
    out: &mut Out,
    rel: &str,
    records: &[Record],
    garbage: &[(usize, String)],
    torn_tail: Option<&str>,
) -> Result<(), GenError> {
    let mut t = String::new();
    for (i, r) in records.iter().enumerate() {
        for (_, line) in garbage.iter().filter(|(at, _)| *at == i) {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str(&r.to_line());
        t.push('\n');
    }
    for (_, line) in garbage.iter().filter(|(at, _)| *at >= records.len()) {
        t.push_str(line);
        t.push('\n');
    }
    if let Some(tail) = torn_tail {
        t.push_str(tail);
    }
    let path = out.write(rel, t.as_bytes())?;
    if let Some(ns) = records.iter().rev().find_map(record_ns) {
        set_mtime(&path, ns)?;
    }
    Ok(())
}

/// Write a session's files and account for them.
pub(crate) fn write_session(
    out: &mut Out,
    s: &Session<'_>,
    report: &mut GenReport,
) -> Result<(), GenError> {
    let sid = &s.sid;
    write_transcript(
        out,
        &format!("transcripts/{sid}.jsonl"),
        &s.records,
        &s.garbage,
        s.torn_tail.as_deref(),
    )?;
    for (aid, records) in &s.sidechains {
        write_transcript(
            out,
            &format!("transcripts/{sid}/subagents/agent-{aid}.jsonl"),
            records,
            &[],
            None,
        )?;
        report.subagents += 1;
        report.subagent_messages += records.iter().filter(|r| r.as_message().is_some()).count();
    }
    for (rel, a) in &s.archives {
        let text = archive::render(a, Labels::Chinese);
        out.write(&format!("noa/{sid}/{rel}"), text.as_bytes())?;
    }
    let state = match &s.state_file {
        StateFile::Auto => (!s.state.blocks().is_empty()).then(|| s.state.to_json()),
        StateFile::Skip => None,
        StateFile::Raw(bytes) => Some(bytes.clone()),
    };
    if let Some(bytes) = state {
        out.write(&format!("noa/{sid}/state.json"), bytes.as_bytes())?;
        report.blocks += s.state.blocks().len();
    }
    if let Some(j) = &s.journal {
        out.write(&format!("noa/{sid}/ctl.jsonl"), j.as_bytes())?;
    }
    for (rel, bytes) in &s.noa_extra {
        out.write(&format!("noa/{sid}/{rel}"), bytes)?;
    }
    report.sessions += 1;
    report.messages += s
        .records
        .iter()
        .filter(|r| r.as_message().is_some())
        .count();
    report.compress_calls += s.calls.len();
    report.refused_calls += s.refused;
    Ok(())
}

/// The memories of a generated root: `(name, description, type, body)`; types cycle through
/// all four, and one name is Unicode-only (its file is `.md`, as the runtime names it).
pub(super) const MEMORIES: &[(&str, &str, &str, &str)] = &[
    (
        "Build system",
        "How the crate links native libraries",
        "project",
        "build.rs emits the link flags; zstd is required.\n\n```toml\n[build-dependencies]\ncc = \"1\"\n```\n",
    ),
    (
        "Prefers small PRs",
        "The user wants one change per PR",
        "feedback",
        "Split refactors from behaviour changes. Reviews happen in the morning (KST).\n",
    ),
    (
        "CI dashboard",
        "Where nightly results are shown",
        "reference",
        "https://ci.example.com/nightly — the red column is the linker job.\n",
    ),
    (
        "한국어 메모",
        "Notes kept in Korean: the name has no ASCII letter, so the file is .md",
        "user",
        "배포는 금요일에 하지 않습니다.\n",
    ),
    (
        "Senior Rust developer",
        "The user knows Rust well; skip the basics",
        "user",
        "Explain trade-offs, not syntax. 한국어로 물어봐도 됩니다.\n",
    ),
    (
        "Release process",
        "Tag, changelog, then publish from CI",
        "project",
        "1. bump the version\n2. `git tag vX.Y.Z`\n3. CI publishes on tag push 🚀\n",
    ),
    (
        "Review tone",
        "Direct, short review comments",
        "feedback",
        "No praise padding; say what to change and why.\n",
    ),
    (
        "Staging database",
        "psql host and read-only role for staging",
        "reference",
        "`psql -h staging-db.internal -U readonly app`\n",
    ),
    (
        "Works in KST",
        "The user is in Seoul (UTC+9)",
        "user",
        "Schedule long jobs for the user's night.\n",
    ),
];

/// Write one memory file with a fixed modification time (scan order, and so `MEMORY.md`, must
/// not depend on when the files were written).
pub(crate) fn write_memory(
    out: &mut Out,
    file_name: &str,
    text: &str,
    minute: u64,
) -> Result<(), GenError> {
    let path = out.write(&format!("memory/{file_name}"), text.as_bytes())?;
    set_mtime(&path, (BASE_SECS + minute as i64 * 60) * NANOS)
}

/// Render a well-formed memory file, as the runtime saves one (`kind` `""`: no type).
pub(crate) fn memory_text(name: &str, description: &str, kind: &str, body: &str) -> String {
    let kind = (!kind.is_empty()).then_some(kind);
    memory::render(&memory::Memory::new(name, description, kind, body))
}

/// `MEMORY.md` computed from the memory directory as it is now, as the runtime writes it.
pub(crate) fn write_index(out: &mut Out) -> Result<(), GenError> {
    let scan = memory::scan(&out.path("memory"));
    let index = memory::render_index(&scan.memories);
    out.write("memory/MEMORY.md", index.as_bytes())?;
    Ok(())
}

pub(super) fn write_memories(
    out: &mut Out,
    opts: &GenOptions,
    report: &mut GenReport,
) -> Result<(), GenError> {
    let mut slugs = std::collections::HashSet::new();
    for i in 0..opts.memories {
        let Some(&(base, description, kind, body)) = MEMORIES.get(i % MEMORIES.len()) else {
            continue;
        };
        let round = i / MEMORIES.len();
        let mut name = if round == 0 {
            base.to_string()
        } else {
            format!("{base} {}", round + 1)
        };
        // Two names sharing a slug would overwrite each other (the runtime's hazard); only
        // the first Unicode-only name keeps the empty slug.
        while !slugs.insert(memory::slug(&name)) {
            name.push_str(" again");
        }
        write_memory(
            out,
            &memory::file_for(&name),
            &memory_text(&name, description, kind, body),
            i as u64,
        )?;
        report.memories += 1;
    }
    if opts.corrupt {
        let found = damage::memories(out, opts.memories as u64)?;
        report.memories += found.1;
        report.damages.extend(found.0);
    } else {
        write_index(out)?;
    }
    Ok(())
}
