//! `gen --corrupt`: one damaged session (or file) per kind of the SPEC 9 catalogue.
//!
//! Each session damage gets its own session, named after it (`s<seed>-corrupt-state-overlap`),
//! built like a clean one and then damaged in one place, so damages never mask each other. A
//! damage is listed with the finding it must produce; where SPEC makes a second finding
//! unavoidable (an absorbed block still active also overlaps its parent; two files sharing a slug
//! cannot both be named after it; a name with an empty slug belongs in `.md`) that finding is
//! listed too.

use serde_json::json;

use super::text::{self, Rng};
use super::{
    batch_json, build, consolidation, memory_text, rfc3339, start_ns, tier1_ranges, tool_result,
    tool_use, write_index, write_memory, Damage, GenError, GenOptions, Layout, Out, Schedule,
    Session, Spec, StateFile, NANOS,
};
use crate::format::archive;
use crate::format::memory;
use crate::format::state::{BlockId, State};
use crate::format::transcript::{Content, ToolResultContent};
use crate::noa::refs;
use crate::noa::view::Materialized;

/// Damages that live in a session of their own, in the order they are written.
pub(crate) const SESSION_DAMAGES: &[&str] = crate::audit::CATALOGUE.split_at(29).0;

/// Damages whose session never compressed (a state file that cannot be loaded, or none, must
/// not leave archives behind that would be orphans).
fn plain_base(code: &str) -> bool {
    matches!(
        code,
        "state.missing" | "state.malformed" | "state.version" | "state.session-mismatch"
    )
}

/// Base sessions tried per damage before giving up.
const ATTEMPTS: u64 = 24;

/// Build the damaged session for `code` in session slot `slot`.
pub(crate) fn session<'a>(
    code: &'static str,
    opts: &'a GenOptions,
    slot: usize,
    out: &Out,
) -> Result<(Session<'a>, Vec<Damage>), GenError> {
    let sid = format!("s{:x}-corrupt-{}", opts.seed, code.replace('.', "-"));
    let root = out.archive_root(&sid)?;
    for attempt in 0..ATTEMPTS {
        let seed = opts
            .seed
            .wrapping_add(attempt.wrapping_mul(0x5851_f42d_4c95_7f2d));
        let mut rng = Rng::derive(seed, &format!("spec/{sid}"));
        let compress = (!plain_base(code)).then_some(Schedule {
            first_at: 20,
            interval: 12,
            consolidate_min: (3, 2),
            consolidate_percent: 100,
            consolidate_once: true,
            refuse_percent: 0,
            multi_range_percent: 0,
        });
        let spec = Spec {
            sid: sid.clone(),
            messages: if compress.is_some() { 240 } else { 24 },
            start_ns: start_ns(slot, &mut rng),
            max_result_bytes: opts.max_result_bytes.min(4000),
            subagents: 0,
            compress,
        };
        let mut s = build(&spec, &opts.config, &root, seed);
        if let Some(found) = inject(code, &mut s) {
            return Ok((s, found));
        }
    }
    Err(GenError::Damage {
        code,
        reason: format!(
            "none of {ATTEMPTS} base sessions had the blocks it needs (are the noa settings \
             unusual?)"
        ),
    })
}

fn damage(code: &'static str, path: String, line: Option<usize>, note: &str) -> Damage {
    Damage {
        code,
        path,
        line,
        note: note.to_string(),
    }
}

fn transcript_path(sid: &str) -> String {
    format!("transcripts/{sid}.jsonl")
}

fn state_path(sid: &str) -> String {
    format!("noa/{sid}/state.json")
}

fn archive_path(sid: &str, rel: &str) -> String {
    format!("noa/{sid}/{rel}")
}

/// Indices of the active blocks of `tier`.
fn live(state: &State, tier: u32) -> Vec<usize> {
    state
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.active && b.tier == tier)
        .map(|(i, _)| i)
        .collect()
}

/// The frontmatter lines of an archive and the rest, when it has one.
fn split_front(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some((&rest[..end], &rest[end + 5..]))
}

/// Replace the value of `key` in the frontmatter; `None` without frontmatter or key.
fn set_front(text: &str, key: &str, value: &str) -> Option<String> {
    let (front, body) = split_front(text)?;
    let prefix = format!("{key}:");
    let mut found = false;
    let lines: Vec<String> = front
        .lines()
        .map(|l| {
            if !found && l.starts_with(&prefix) {
                found = true;
                format!("{key}: {value}")
            } else {
                l.to_string()
            }
        })
        .collect();
    found.then(|| format!("---\n{}\n---\n{body}", lines.join("\n")))
}

/// A one-call `Bash` tool_use message; its record index.
fn lone_tool_use(s: &mut Session<'_>) -> usize {
    let id = s.rng.tool_id();
    let input = text::tool_input(&mut s.rng, "Bash");
    s.push_message("assistant", vec![tool_use(&id, "Bash", input)])
}

/// Apply `code` to a freshly built session; `None` when the session lacks what it needs.
fn inject(code: &'static str, s: &mut Session<'_>) -> Option<Vec<Damage>> {
    let sid = s.sid.clone();
    let tp = transcript_path(&sid);
    let sp = state_path(&sid);
    let n = s.records.len();
    if !plain_base(code) && (live(&s.state, 1).len() < 2 || s.calls.is_empty() || n < 4) {
        return None;
    }
    let one =
        |path: String, line: Option<usize>, note: &str| Some(vec![damage(code, path, line, note)]);
    match code {
        "transcript.malformed-line" => {
            let whole = s.records.get(n - 1)?.to_line();
            let line = text::cut(&whole, whole.len() / 2).to_string();
            s.garbage.push((n - 1, line));
            one(
                tp,
                Some(n),
                "a half-written record line before the last record",
            )
        }
        "transcript.duplicate-uuid" => {
            let first = s.records.first()?.uuid.clone();
            s.records.get_mut(n - 1)?.uuid = first;
            one(
                tp,
                Some(n),
                "the last record reuses the first record's uuid",
            )
        }
        "transcript.torn-tail" => {
            let mut rec = s.record("message");
            rec.message = Some(Some(crate::format::transcript::Message::new(
                "assistant",
                vec![Content::text(&text::assistant_answer(&mut s.rng))],
            )));
            let whole = rec.to_line();
            s.torn_tail = Some(text::cut(&whole, whole.len() * 3 / 5).to_string());
            one(
                tp,
                Some(n + 1),
                "a record cut off mid-write, no final newline",
            )
        }
        "transcript.parent-chain" => {
            let other = s.rng.uuid();
            s.records.get_mut(n - 2)?.parent_uuid = Some(other);
            one(
                tp,
                Some(n - 1),
                "parent_uuid names a record that does not exist",
            )
        }
        "transcript.session-mismatch" => {
            s.records.get_mut(n - 2)?.session_id = Some(format!("{sid}-fork").into());
            one(tp, Some(n - 1), "one record written by another session id")
        }
        "transcript.orphan-tool-result" => {
            let id = s.rng.tool_id();
            let part = tool_result(
                &id,
                ToolResultContent::Items(vec![Content::text("ok")]),
                false,
            );
            let at = s.push_message("user", vec![part]);
            s.final_answer();
            one(
                tp,
                Some(at + 1),
                "a tool_result answering no earlier tool_use",
            )
        }
        "transcript.unanswered-tool-use" => {
            let at = lone_tool_use(s);
            s.prompt();
            s.final_answer();
            one(
                tp,
                Some(at + 1),
                "a tool_use followed by a new prompt, never answered",
            )
        }
        "transcript.pending-tool-use" => {
            s.prompt();
            let at = lone_tool_use(s);
            one(
                tp,
                Some(at + 1),
                "the transcript ends with an unanswered tool_use",
            )
        }
        "state.missing" => {
            s.state_file = StateFile::Skip;
            one(sp, None, "a transcript and no state.json")
        }
        "state.malformed" => {
            let whole = State::initial(&sid).to_pretty();
            s.state_file = StateFile::Raw(text::cut(&whole, whole.len() / 2).to_string());
            one(sp, None, "state.json cut in half")
        }
        "state.version" => {
            let mut st = State::initial(&sid);
            st.version = 2;
            s.state_file = StateFile::Raw(st.to_pretty());
            one(sp, None, "\"version\": 2")
        }
        "state.session-mismatch" => {
            s.state_file = StateFile::Raw(State::initial(&format!("{sid}-old")).to_pretty());
            one(sp, None, "sessionId names another session")
        }
        "state.ref-map" => {
            let refs = &mut s.state.message_refs.by_ref;
            let len = refs.len();
            if len < 2 {
                return None;
            }
            let prev_raw = refs.get_index(len - 2)?.1.clone();
            *refs.get_index_mut(len - 1)?.1 = prev_raw;
            one(
                sp,
                None,
                "byRef maps the last ref to the raw id of the one before",
            )
        }
        "state.dangling-ref" => {
            let max = s
                .state
                .message_refs
                .by_ref
                .keys()
                .filter_map(|r| refs::ref_number(r))
                .max()?;
            let r = refs::format_ref(max + 1);
            let raw = s.rng.uuid();
            let mr = &mut s.state.message_refs;
            mr.by_raw.insert(raw.clone(), r.clone());
            mr.by_ref.insert(r, raw);
            one(sp, None, "a ref whose raw id is in no transcript record")
        }
        "state.block-range" => {
            let bi = live(&s.state, 1).into_iter().find(|&i| {
                s.state
                    .blocks
                    .get(i)
                    .is_some_and(|b| b.start_ref != b.end_ref)
            })?;
            let b = s.state.blocks.get_mut(bi)?;
            std::mem::swap(&mut b.start_ref, &mut b.end_ref);
            // Keep the archive consistent with the block so that only the range is wrong.
            let old_rel = b.archive_rel.clone();
            let rel = format!(
                "tier{}/{}",
                b.tier,
                archive::file_name(&b.block_id.name(), &b.start_ref, &b.end_ref)
            );
            b.archive_rel = rel.clone();
            b.archive_path = format!("{}/{rel}", s.archive_root);
            let range = format!("{}-{}", b.start_ref, b.end_ref);
            let entry = s.archives.iter_mut().find(|(r, _)| *r == old_rel)?;
            entry.0 = rel;
            if let Some(t) = set_front(&entry.1, "range", &range) {
                entry.1 = t;
            }
            one(sp, None, "a block whose startRef comes after its endRef")
        }
        "state.unknown-block" => {
            let bi = *live(&s.state, 1).first()?;
            let missing = BlockId::from_number(s.state.next_block_id + 7);
            s.state.blocks.get_mut(bi)?.direct_block_ids.push(missing);
            one(sp, None, "directBlockIds names a block that does not exist")
        }
        "state.overlap" => {
            let l = live(&s.state, 1);
            let (&a, &b) = (l.first()?, l.get(1)?);
            let id = s.state.blocks.get(a)?.effective_message_ids.last()?.clone();
            let blk = s.state.blocks.get_mut(b)?;
            blk.effective_message_ids.insert(0, id.clone());
            if let Some(direct) = blk.direct_message_ids.as_mut() {
                direct.insert(0, id);
            }
            one(
                sp,
                None,
                "a live block also covers the last message of another",
            )
        }
        "state.dead-block" => {
            let bi = *live(&s.state, 1).first()?;
            let fresh = s.rng.uuid();
            let blk = s.state.blocks.get_mut(bi)?;
            let old = blk.effective_message_ids.last_mut()?;
            let gone = std::mem::replace(old, fresh.clone());
            for id in blk.direct_message_ids.iter_mut().flatten() {
                if *id == gone {
                    *id = fresh.clone();
                }
            }
            one(
                sp,
                None,
                "an active block covers a message the transcript does not have",
            )
        }
        "state.next-block-id" => {
            let max = s
                .state
                .blocks
                .iter()
                .filter_map(|b| b.block_id.number())
                .max()?;
            s.state.next_block_id = max;
            one(sp, None, "nextBlockId equals the highest block number")
        }
        "state.consumed-active" => {
            let child = s
                .state
                .blocks
                .iter()
                .find(|b| b.active && b.tier >= 2)
                .and_then(|b| b.direct_block_ids.first())?
                .name();
            let blk = s
                .state
                .blocks
                .iter_mut()
                .find(|b| b.block_id.name() == child)?;
            blk.active = true;
            Some(vec![
                damage(
                    code,
                    sp.clone(),
                    None,
                    "a block absorbed by a live tier-2 block is active again",
                ),
                damage(
                    "state.overlap",
                    sp,
                    None,
                    "companion: the reactivated block and its parent cover the same messages",
                ),
            ])
        }
        "state.stats" => {
            s.state.stats.tokens_compressed += 977;
            one(
                sp,
                None,
                "stats.tokensCompressed is 977 above the blocks' sum",
            )
        }
        "state.unreplayable" => {
            let call = s.calls.pop()?;
            if call.result_record <= call.use_record || call.result_record + 1 >= s.records.len() {
                return None;
            }
            s.records.remove(call.result_record);
            s.records.remove(call.use_record);
            s.messages -= 2;
            let prev = s.records.get(call.use_record - 1)?.uuid.clone();
            s.records.get_mut(call.use_record)?.parent_uuid = Some(prev);
            one(
                sp,
                None,
                &format!(
                    "the Compress call {} is gone from the transcript",
                    call.call_id
                ),
            )
        }
        "state.behind-journal" => {
            let call_id = format!("ctl-{}", s.rng.uuid_hyphenated());
            let at = rfc3339(s.clock_ns + 40 * NANOS);
            let cfg = s.cfg;
            let mut choose = |rng: &mut Rng, mat: &Materialized<'_>, lay: &Layout| {
                tier1_ranges(rng, mat, lay, cfg, 0)
                    .or_else(|| consolidation(rng, mat, lay, cfg, 1, 2))
            };
            let (ranges, result) = s.plan_with(&call_id, &at, &mut choose)?;
            let planned = result.ok()?;
            // The same shape the ctl transaction journals: the state's blocks.
            let blocks: Vec<_> = planned
                .blocks
                .iter()
                .map(|p| serde_json::to_value(&p.block).unwrap_or_default())
                .collect();
            let line = json!({
                "at": at,
                "input": batch_json(&ranges),
                "blocks": blocks,
                "callId": call_id,
            });
            s.journal.push(line.to_string());
            for p in &planned.blocks {
                s.noa_extra
                    .push((p.block.archive_rel.clone(), p.archive.clone().into_bytes()));
            }
            one(
                format!("noa/{sid}/ctl.jsonl"),
                Some(1),
                "ctl.jsonl holds a committed batch that state.json lacks",
            )
        }
        "archive.missing" => {
            let bi = *live(&s.state, 1).first()?;
            let rel = s.state.blocks.get(bi)?.archive_rel.clone();
            s.archives.retain(|(r, _)| *r != rel);
            one(
                archive_path(&sid, &rel),
                None,
                "the block's archive was never written",
            )
        }
        "archive.moved" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks.get_mut(bi)?;
            b.archive_path = format!("/srv/norma-old/noa/{sid}/{}", b.archive_rel);
            one(
                archive_path(&sid, &b.archive_rel),
                None,
                "archivePath points into another (old) root",
            )
        }
        "archive.mismatch" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks.get(bi)?;
            let wrong_end = refs::format_ref(refs::ref_number(&b.end_ref)? + 1);
            let wrong = format!("{}-{wrong_end}", b.start_ref);
            let minimal = format!(
                "---\nblock: {}\ntier: {}\nrange: {wrong}\noriginal_tokens: {}\n---\n",
                b.block_id.name(),
                b.tier,
                b.compressed_tokens
            );
            let rel = b.archive_rel.clone();
            let entry = s.archives.iter_mut().find(|(r, _)| *r == rel)?;
            entry.1 = set_front(&entry.1, "range", &wrong).unwrap_or(minimal);
            one(
                archive_path(&sid, &rel),
                None,
                "the frontmatter range ends one message later than the block",
            )
        }
        "archive.corrupt" => {
            let bi = *live(&s.state, 1).first()?;
            let rel = s.state.blocks.get(bi)?.archive_rel.clone();
            let entry = s.archives.iter_mut().find(|(r, _)| *r == rel)?;
            let (text, note) = match split_front(&entry.1) {
                Some((front, _)) if front.lines().any(|l| l.starts_with("body_sha256:")) => (
                    format!(
                        "{}\nEdited by hand after the checksum was written.\n",
                        entry.1
                    ),
                    "the body was edited after body_sha256 was written",
                ),
                Some((_, body)) => (body.to_string(), "the frontmatter was stripped"),
                None if entry.1.is_empty() => (
                    "# Archive\n\n(the frontmatter is gone)\n".to_string(),
                    "no frontmatter",
                ),
                None => (entry.1.clone(), "no frontmatter"),
            };
            entry.1 = text;
            one(archive_path(&sid, &rel), None, note)
        }
        "archive.orphan" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks.get(bi)?;
            let id = format!("b{}", s.state.next_block_id + 3);
            let rel = format!(
                "tier1/{}",
                archive::file_name(&id, &b.start_ref, &b.end_ref)
            );
            let old = s
                .archives
                .iter()
                .find(|(r, _)| *r == b.archive_rel)?
                .1
                .clone();
            let text = set_front(&old, "block", &id).unwrap_or(old);
            s.archives.push((rel.clone(), text));
            one(
                archive_path(&sid, &rel),
                None,
                "an archive no block points to",
            )
        }
        "archive.temp-debris" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks.get(bi)?;
            let name = archive::file_name(
                &format!("b{}", s.state.next_block_id),
                &b.start_ref,
                &b.end_ref,
            );
            let rel = format!("tier1/.{name}.tmp-{}", s.rng.hex(6));
            let old = s
                .archives
                .iter()
                .find(|(r, _)| *r == b.archive_rel)?
                .1
                .clone();
            let mut partial = text::cut(&old, old.len() / 2).to_string();
            if partial.is_empty() {
                partial = format!("---\nblock: b{}\n", s.state.next_block_id);
            }
            s.noa_extra.push((rel.clone(), partial.into_bytes()));
            one(
                archive_path(&sid, &rel),
                None,
                "a temp file left by an interrupted write",
            )
        }
        _ => None,
    }
}

/// The damaged memory files, `MEMORY.md` computed before the last of them; the damages and
/// the number of memory files written.
pub(crate) fn memories(out: &mut Out, first_minute: u64) -> Result<(Vec<Damage>, usize), GenError> {
    let mut on_call = memory::Memory::new(
        "On-call rota",
        "Who carries the pager",
        Some("project"),
        "Weekly, handed over on Mondays.\n",
    );
    on_call.extra.push(("owner".to_string(), "sre".to_string()));
    let files: [(&str, String); 7] = [
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
        (
            "hangul-memo.md",
            memory_text(
                "한국어 메모",
                "Notes kept in Korean",
                "user",
                "배포는 금요일에 하지 않습니다.\n",
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
            m("hangul-memo.md"),
            None,
            "a name with no ASCII letter or digit",
        ),
        damage(
            "memory.name-mismatch",
            m("hangul-memo.md"),
            None,
            "companion: a name with an empty slug belongs in .md",
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
        "timestamp": rfc3339(super::BASE_SECS * NANOS),
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
