//! The root's damages: broken memory files and index, and bad names in the backing
//! directories.

use super::*;

/// The damaged memory files, `MEMORY.md` computed before the last of them; the damages and
/// the number of memory files written. `first_minute` is also the number of clean memories:
/// with four or more, the clean ones already hold the Unicode-only name in `.md`.
pub(crate) fn memories(out: &mut Out, first_minute: u64) -> Result<(Vec<Damage>, usize), GenError> {
    let mut on_call = memory::Memory::new(
        "On-call rota",
        "Who carries the pager",
        Some("project"),
        "Weekly, handed over on Mondays.\n",
    );
    on_call.extra.push(("owner".to_string(), "sre".to_string()));
    let mut files: Vec<(&str, String)> = vec![
        (
            "deploy-notes.md",
            memory_text(
                "Deploy notes",
                "Where the deploy scripts live",
                "project",
                "scripts/deploy.sh, run from CI only.\n",
            ),
        ),
        (
            "deploy-notes-2.md",
            memory_text(
                "Deploy Notes!",
                "A second copy written by hand",
                "project",
                "Deploys go through the staging cluster first.\n",
            ),
        ),
        ("on-call-rota.md", memory::render(&on_call)),
        (
            "release.md",
            memory_text(
                "Release checklist",
                "Steps before tagging",
                "project",
                "- changelog\n- version bump\n- tag\n",
            ),
        ),
        (
            "scratch.md",
            "just some notes\n- todo: check the flaky mount test\n".to_string(),
        ),
        (
            "team-rituals.md",
            memory_text(
                "Team rituals",
                "Stand-up at 10:00 KST",
                "opinion",
                "Demo on Fridays.\n",
            ),
        ),
    ];
    let clean_empty_slug = first_minute >= 4;
    if !clean_empty_slug {
        files.push((
            ".md",
            memory_text(
                "日本語のメモ",
                "A Unicode-only name: its slug is empty",
                "project",
                "スラッグが空になる例。\n",
            ),
        ));
    }
    let count = files.len() + 1;
    for (k, (name, text)) in files.iter().enumerate() {
        write_memory(out, name, text, first_minute + k as u64)?;
    }
    write_index(out)?;
    write_memory(
        out,
        "late-addition.md",
        &memory_text(
            "Late addition",
            "Written after MEMORY.md",
            "reference",
            "The index does not list this memory yet.\n",
        ),
        first_minute + files.len() as u64,
    )?;
    let m = |f: &str| format!("memory/{f}");
    let found = vec![
        damage(
            "memory.slug-collision",
            m("deploy-notes.md"),
            None,
            "shares the slug deploy-notes with deploy-notes-2.md",
        ),
        damage(
            "memory.slug-collision",
            m("deploy-notes-2.md"),
            None,
            "\"Deploy Notes!\" slugs to deploy-notes",
        ),
        damage(
            "memory.name-mismatch",
            m("deploy-notes-2.md"),
            None,
            "companion: its stem is not its slug",
        ),
        damage(
            "memory.empty-slug",
            m(".md"),
            None,
            "a name with no ASCII letter or digit (the runtime's own hazard)",
        ),
        damage(
            "memory.unknown-keys",
            m("on-call-rota.md"),
            None,
            "owner: sre",
        ),
        damage(
            "memory.name-mismatch",
            m("release.md"),
            None,
            "\"Release checklist\" belongs in release-checklist.md",
        ),
        damage("memory.malformed", m("scratch.md"), None, "no frontmatter"),
        damage(
            "memory.unknown-type",
            m("team-rituals.md"),
            None,
            "type: opinion",
        ),
        damage(
            "memory.index-stale",
            m("MEMORY.md"),
            None,
            "written before late-addition.md",
        ),
    ];
    Ok((found, count))
}

/// Root entries whose names cannot be sessions.
pub(crate) fn root_entries(out: &mut Out, opts: &GenOptions) -> Result<Vec<Damage>, GenError> {
    let name = "bad\nname";
    let mut rng = Rng::derive(opts.seed, "root/bad-name");
    let line = json!({
        "uuid": rng.uuid(),
        "session_id": name,
        "timestamp": rfc3339(BASE_SECS * NANOS),
        "type": "message",
        "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    });
    let transcript = format!("transcripts/{name}.jsonl");
    out.write(&transcript, format!("{line}\n").as_bytes())?;
    out.mkdir("noa/.x")?;
    Ok(vec![
        damage(
            "root.bad-name",
            transcript,
            None,
            "a session name with a newline",
        ),
        damage(
            "root.bad-name",
            "noa/.x".to_string(),
            None,
            "a session name starting with a dot",
        ),
    ])
}
