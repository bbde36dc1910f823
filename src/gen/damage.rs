//! `gen --corrupt`: one damaged session (or file) per code of the SPEC 9 catalogue that gen can
//! make, each listed with the finding the audit must produce where it must produce it.
//!
//! Each session damage gets its own session, named after it (`s<seed>-corrupt-state-overlap`),
//! built like a clean one and then damaged in one place, so damages never mask each other.
//! The info codes are made the way they arise: `state.inherited` by a fork that inherits its
//! parent's blocks and compresses again, `state.runtime-unaware` and `state.behind-journal` by
//! a ctl batch applied as ctl applies it (journalled, then written into `state.json` or not),
//! `archive.truncated` by an archive holding a tool result cut as the runtime's emergency
//! truncation cuts it, `archive.moved` by a root whose `archivePath`s name an old location.
//! Where SPEC makes a second finding unavoidable (two files sharing a slug cannot both be named
//! after it) that finding is listed too.

mod root;
pub(crate) use root::*;

use serde_json::{json, Map, Value};

use super::text::{self, Rng};
use super::{
    build, compress_input, memory_text, rfc3339, run, seconds, start_ns, tier1, tool_result,
    tool_use, write_index, write_memory, write_session, Damage, GenError, GenOptions, GenReport,
    Out, Pick, Schedule, Session, Spec, StateFile, BASE_SECS, NANOS,
};
use crate::format::archive;
use crate::format::memory;
use crate::format::state::State;
use crate::format::transcript::{Content, Message, ToolResultContent};
use crate::noa::compress::{Applied, Placement};
use crate::noa::views::{self as noa_session, Projection};
use crate::noa::{args, rebuild, recommend, refs};
use crate::store::journal::JournalEntry;

/// Damages that live in a session of their own, in the order they are written: every session
/// and archive code of the catalogue (`transcript.*`, `state.*`, `archive.*`, `journal.*`).
pub(crate) fn session_damages() -> Vec<&'static str> {
    crate::audit::CATALOGUE
        .iter()
        .copied()
        .filter(|c| !c.starts_with("memory.") && !c.starts_with("root."))
        .collect()
}

/// Damages whose session never compressed (a state file that cannot be loaded, or none, and
/// transcript damages, which need no blocks).
fn plain_base(code: &str) -> bool {
    code.starts_with("transcript.")
        || code.starts_with("journal.")
        || matches!(
            code,
            "state.missing" | "state.malformed" | "state.version" | "state.session-mismatch"
        )
}

/// Base sessions tried per damage before giving up.
const ATTEMPTS: u64 = 24;

/// The schedule of a damaged session's base: compress early and often, consolidate once.
fn base_schedule() -> Schedule {
    Schedule {
        first_at: 20,
        interval: 12,
        refuse_percent: 0,
        consolidate_percent: 100,
        max_consolidations: 1,
        all_ranges_percent: 100,
        quiet_tail: 0,
    }
}

/// Build, damage and write the session for `code` in session slot `slot`.
pub(crate) fn session(
    code: &'static str,
    opts: &GenOptions,
    slot: usize,
    out: &mut Out,
    report: &mut GenReport,
) -> Result<Vec<Damage>, GenError> {
    let sid = format!("s{:x}-corrupt-{}", opts.seed, code.replace('.', "-"));
    let root = out.archive_root(&sid)?;
    for attempt in 0..ATTEMPTS {
        let seed = opts
            .seed
            .wrapping_add(attempt.wrapping_mul(0x5851_f42d_4c95_7f2d));
        let mut rng = Rng::derive(seed, &format!("spec/{sid}"));
        let compress = (!plain_base(code)).then(base_schedule);
        let spec = Spec {
            sid: sid.clone(),
            messages: if compress.is_some() { 161 } else { 25 },
            start_ns: start_ns(slot, &mut rng),
            max_result_bytes: opts.max_result_bytes.min(6000),
            subagents: 0,
            compress,
            marker_at_percent: None,
        };
        let mut s = build(&spec, &opts.config, &root, seed);
        if code == "state.inherited" {
            if let Some((fork, found)) = fork(&s, &*out, opts, slot)? {
                write_session(out, &s, report)?;
                report.corrupt_sessions.push(s.sid.clone());
                write_session(out, &fork, report)?;
                report.corrupt_sessions.push(fork.sid.clone());
                return Ok(found);
            }
            continue;
        }
        if let Some(found) = inject(code, &mut s) {
            write_session(out, &s, report)?;
            report.corrupt_sessions.push(s.sid.clone());
            return Ok(found);
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

/// Indices of the active blocks of `tier`.
fn live(state: &State, tier: i64) -> Vec<usize> {
    state
        .blocks()
        .iter()
        .enumerate()
        .filter(|(_, b)| b.active && b.tier == tier)
        .map(|(i, _)| i)
        .collect()
}

/// A one-call `Bash` tool_use message; its record index.
fn lone_tool_use(s: &mut Session<'_>) -> usize {
    let id = s.rng.tool_id();
    let input = text::tool_input(&mut s.rng, "Bash").to_string();
    s.push_message("assistant", vec![tool_use(&id, "Bash", &input)])
}

/// A ctl batch over the session as it is, applied as ctl applies it (against the view a
/// resumed runtime sends, refs and token snapshots of that view recorded), all or nothing;
/// its journal line (the shape `ctl.jsonl` holds) and what it did.
fn ctl_batch(s: &mut Session<'_>) -> Option<(String, Applied)> {
    let cfg = s.cfg;
    let at_ns = s.clock_ns + 90 * NANOS;
    let at = rfc3339(at_ns);
    let call_id = format!("ctl-{}", s.rng.uuid());
    let p = Projection::new(Session::messages_of(&s.records));
    let wants = {
        let t = noa_session::turn(&p, &s.state, cfg, &noa_session::runtime_path);
        let rec = recommend::recommend(&t, &s.state, cfg);
        match tier1(&mut s.rng, &rec, cfg, false)? {
            Pick::Ranges(w) => w,
            _ => return None,
        }
    };
    let input = compress_input(&wants);
    let parsed = args::parse(&input);
    let (created, now) = seconds(at_ns);
    let place = Placement::new(&s.archive_root, &s.sid, created, now);
    let applied = rebuild::ctl_apply(
        &p,
        &s.state,
        cfg,
        &parsed.ranges,
        &call_id,
        &place,
        &noa_session::runtime_path,
    );
    if !applied.whole() || super::overlapping(&applied.state) {
        return None;
    }
    let mut extra = Map::new();
    if let Some(last) = s.records.iter().rev().find(|r| r.as_message().is_some()) {
        extra.insert("after".into(), Value::String(last.uuid.to_string()));
    }
    let entry = JournalEntry {
        at,
        input: serde_json::from_str(&input).unwrap_or(Value::String(input.clone())),
        blocks: applied
            .created
            .iter()
            .map(crate::store::txn::block_json)
            .collect(),
        call_id,
        extra,
    };
    let mut line = serde_json::to_string(&entry).ok()?;
    line.push('\n');
    Some((line, applied))
}

/// A fork of `parent` (SPEC 4.10): its history recorded again under a new session id, its
/// blocks inherited (their archives stay in the parent's directory; stats start again), then
/// more work and compressions of its own.
fn fork<'a>(
    parent: &Session<'a>,
    out: &Out,
    opts: &GenOptions,
    slot: usize,
) -> Result<Option<(Session<'a>, Vec<Damage>)>, GenError> {
    if live(&parent.state, 1).is_empty() {
        return Ok(None);
    }
    let sid = format!("{}-fork", parent.sid);
    let root = out.archive_root(&sid)?;
    let rng = Rng::derive(opts.seed, &format!("session/{sid}"));
    let mut s = Session::new(parent.cfg, rng, &sid, &root, parent.clock_ns + 600 * NANOS);
    let mut state = parent.state.clone();
    state.session_id = sid.clone();
    state.stats = Default::default();
    state.nudge = Default::default();
    state.token_snapshot.clear();
    s.state = state;
    for r in &parent.records {
        if let Some(m) = r.as_message() {
            s.push_message(&m.role.clone(), m.content.clone());
        }
    }
    let own = parent.messages + 60;
    let spec = Spec {
        sid: sid.clone(),
        messages: own,
        start_ns: start_ns(slot, &mut Rng::derive(opts.seed, &sid)),
        max_result_bytes: opts.max_result_bytes.min(6000),
        subagents: 0,
        compress: Some(Schedule {
            first_at: parent.messages + 12,
            max_consolidations: 0,
            ..base_schedule()
        }),
        marker_at_percent: None,
    };
    run(&mut s, &spec);
    if s.calls.is_empty() {
        return Ok(None);
    }
    let found = vec![damage(
        "state.inherited",
        format!("noa/{sid}/state.json"),
        None,
        &format!(
            "a fork of {} whose inherited blocks keep their archives there",
            parent.sid
        ),
    )];
    Ok(Some((s, found)))
}

/// Apply `code` to a freshly built session; `None` when the session lacks what it needs.
fn inject(code: &'static str, s: &mut Session<'_>) -> Option<Vec<Damage>> {
    let sid = s.sid.clone();
    let tp = format!("transcripts/{sid}.jsonl");
    let sp = format!("noa/{sid}/state.json");
    let ap = |rel: &str| format!("noa/{sid}/{rel}");
    let n = s.records.len();
    if !plain_base(code) && (live(&s.state, 1).len() < 2 || s.calls.is_empty() || n < 4) {
        return None;
    }
    if plain_base(code) && n < 6 {
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
        "transcript.line-too-long" => {
            // The last record padded with blanks past the runtime's 64 MiB line limit: it
            // still parses, but the runtime's loader cannot read the line.
            let mut line = s.records.get(n - 1)?.to_line();
            let pad = (crate::format::loader::MAX_LINE + 1).saturating_sub(line.len());
            line.push_str(&" ".repeat(pad));
            s.records.pop();
            s.garbage.push((n - 1, line));
            one(tp, Some(n), "the last record padded past 64 MiB")
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
            rec.message = Some(Some(Message::new(
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
            s.records.get_mut(n - 2)?.parent_uuid = Some(other.into());
            one(
                tp,
                Some(n - 1),
                "parent_uuid names a record that does not exist",
            )
        }
        "transcript.session-mismatch" => {
            s.records.get_mut(n - 2)?.session_id = Some(format!("{sid}-other").into());
            one(tp, Some(n - 1), "one record written by another session id")
        }
        "transcript.bad-shape" => {
            // A tool result written with a string for its content (the runtime reads arrays).
            let (at, part) = s.records.iter_mut().enumerate().find_map(|(i, r)| {
                let m = r.message.as_mut()?.as_mut()?;
                m.content.iter_mut().find_map(|c| match c {
                    Content::ToolResult(p) => Some((i, p)),
                    _ => None,
                })
            })?;
            let joined: Vec<String> = part
                .items()
                .iter()
                .filter_map(|c| match c {
                    Content::Text(t) => Some(t.text.get().into_owned()),
                    _ => None,
                })
                .collect();
            part.content = Some(ToolResultContent::Text(joined.join("\n")));
            one(
                tp,
                Some(at + 1),
                "a tool_result whose content is a string, not an array",
            )
        }
        "transcript.orphan-tool-result" => {
            let id = s.rng.tool_id();
            let at = s.push_message("user", vec![tool_result(&id, "ok", false)]);
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
            let whole = State::initial(&sid).to_json();
            s.state_file = StateFile::Raw(text::cut(&whole, whole.len() / 2).to_string());
            one(sp, None, "state.json cut in half")
        }
        "state.version" => {
            let mut st = State::initial(&sid);
            st.version = 2;
            s.state_file = StateFile::Raw(st.to_json());
            one(sp, None, "\"version\": 2")
        }
        "state.session-mismatch" => {
            s.state_file = StateFile::Raw(State::initial(&format!("{sid}-old")).to_json());
            one(sp, None, "sessionId names another session")
        }
        "state.ref-map" => {
            let refs = &mut s.state.message_refs.by_ref;
            let mut keys: Vec<String> = refs.keys().cloned().collect();
            keys.sort();
            let (last, prev) = (keys.last()?.clone(), keys.get(keys.len().checked_sub(2)?)?);
            let prev_raw = refs.get(prev)?.clone();
            refs.insert(last, prev_raw);
            one(
                sp,
                None,
                "byRef maps the last ref to the raw id of the one before",
            )
        }
        "state.dangling-ref" => {
            let max = refs::highest_recorded(&s.state);
            let r = refs::format_ref(max + 1);
            let raw = format!("h_{}", s.rng.hex(16));
            let mr = &mut s.state.message_refs;
            mr.by_raw.insert(raw.clone(), r.clone());
            mr.by_ref.insert(r, raw);
            one(
                sp,
                None,
                "a ref whose raw id is in no content of the transcript",
            )
        }
        "state.block-range" => {
            let bi = live(&s.state, 1).into_iter().find(|&i| {
                s.state
                    .blocks()
                    .get(i)
                    .is_some_and(|b| b.start_ref != b.end_ref)
            })?;
            let blocks = s.state.blocks.as_mut()?;
            let b = blocks.get_mut(bi)?;
            std::mem::swap(&mut b.start_ref, &mut b.end_ref);
            // Keep the archive consistent with the block so that only the range is wrong.
            let old_rel = b.archive_rel.clone();
            let rel = format!(
                "{}/{}",
                archive::tier_dir(b.tier),
                archive::file_name(&b.block_id, &b.start_ref, &b.end_ref)
            );
            b.archive_rel = rel.clone();
            b.archive_path = format!("{}/{rel}", s.archive_root);
            let (start, end) = (b.start_ref.clone(), b.end_ref.clone());
            let entry = s.archives.iter_mut().find(|(r, _)| *r == old_rel)?;
            entry.0 = rel;
            entry.1.start_ref = start;
            entry.1.end_ref = end;
            one(sp, None, "a block whose startRef comes after its endRef")
        }
        "state.unknown-block" => {
            let bi = *live(&s.state, 1).first()?;
            let missing = format!("b{}", s.state.next_block_id + 7);
            let blocks = s.state.blocks.as_mut()?;
            blocks.get_mut(bi)?.direct_block_ids.push(missing);
            one(sp, None, "directBlockIds names a block that does not exist")
        }
        "state.overlap" => {
            let l = live(&s.state, 1);
            let (&a, &b) = (l.first()?, l.get(1)?);
            let blocks = s.state.blocks.as_mut()?;
            let id = blocks.get(a)?.effective_message_ids.last()?.clone();
            let blk = blocks.get_mut(b)?;
            blk.effective_message_ids.insert(0, id.clone());
            blk.direct_message_ids.insert(0, id);
            one(
                sp,
                None,
                "a live block also covers the last message of another",
            )
        }
        "state.dead-block" => {
            let bi = *live(&s.state, 1).first()?;
            let n = s.state.blocks().get(bi)?.effective_message_ids.len();
            let fresh: Vec<String> = (0..n).map(|_| format!("h_{}", s.rng.hex(16))).collect();
            let blocks = s.state.blocks.as_mut()?;
            let blk = blocks.get_mut(bi)?;
            blk.effective_message_ids = fresh.clone();
            blk.direct_message_ids = fresh;
            one(
                sp,
                None,
                "an active block none of whose messages is in the transcript",
            )
        }
        "state.next-block-id" => {
            let max = s
                .state
                .blocks()
                .iter()
                .filter_map(|b| refs::parse_block_id(&b.block_id))
                .max()?;
            s.state.next_block_id = i64::from(max);
            one(sp, None, "nextBlockId equals the highest block number")
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
            // The blocks of one call name a call the transcript does not hold (a state copied
            // from another history).
            let call = s.calls.first()?.call_id.clone();
            let other = s.rng.tool_id();
            for b in s.state.blocks.as_mut()? {
                if b.compress_call_id == call {
                    b.compress_call_id = other.clone();
                }
            }
            one(
                sp,
                None,
                &format!("the blocks of {call} name the call {other}, which no record holds"),
            )
        }
        "state.behind-journal" => {
            let (line, applied) = ctl_batch(s)?;
            s.journal = Some(line);
            // Its archives were written (the commit point came after them); state.json was not.
            for (b, a) in applied.created.iter().zip(applied.archives) {
                s.archives.push((b.archive_rel.clone(), a));
            }
            one(
                format!("noa/{sid}/ctl.jsonl"),
                Some(1),
                "ctl.jsonl holds a committed batch that state.json lacks",
            )
        }
        "state.runtime-unaware" => {
            let (line, applied) = ctl_batch(s)?;
            s.journal = Some(line);
            for (b, a) in applied.created.iter().zip(applied.archives) {
                s.archives.push((b.archive_rel.clone(), a));
            }
            s.state = applied.state;
            one(sp, None, "blocks made by a ctl batch, in the journal only")
        }
        "state.unknown-keys" => {
            s.state
                .extra
                .insert("hostNote".into(), json!("written by a newer host"));
            let b = s.state.blocks.as_mut()?.first_mut()?;
            b.extra.insert("reviewedBy".into(), json!("lead"));
            one(sp, None, "hostNote and blocks[0].reviewedBy")
        }
        "archive.missing" => {
            let bi = *live(&s.state, 1).first()?;
            let rel = s.state.blocks().get(bi)?.archive_rel.clone();
            s.archives.retain(|(r, _)| *r != rel);
            one(ap(&rel), None, "the block's archive was never written")
        }
        "archive.moved" => {
            let old = format!("/srv/norma-old/noa/{sid}");
            for b in s.state.blocks.as_mut()? {
                b.archive_path = format!("{old}/{}", b.archive_rel);
            }
            one(sp, None, "every archivePath names the root's old location")
        }
        "archive.mismatch" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks().get(bi)?;
            let wrong_end = refs::format_ref(refs::parse_ref(&b.end_ref)? + 1);
            let rel = b.archive_rel.clone();
            let entry = s.archives.iter_mut().find(|(r, _)| *r == rel)?;
            entry.1.end_ref = wrong_end;
            one(
                ap(&rel),
                Some(2),
                "the frontmatter range ends one message later than the block",
            )
        }
        "archive.corrupt" => {
            let bi = *live(&s.state, 1).first()?;
            let rel = s.state.blocks().get(bi)?.archive_rel.clone();
            let at = s.archives.iter().position(|(r, _)| *r == rel)?;
            let (_, a) = s.archives.remove(at);
            let whole = archive::render(&a, archive::Labels::Chinese);
            let body = whole.strip_prefix("---\n")?.split_once("\n---\n")?.1;
            s.noa_extra.push((rel.clone(), body.as_bytes().to_vec()));
            one(ap(&rel), Some(1), "the frontmatter was stripped")
        }
        "archive.truncated" => {
            // The runtime archives from the view it sent: a tool result its emergency
            // truncation had cut is archived cut.
            let (rel, a) = s.archives.iter_mut().find(|(_, a)| {
                a.entries.iter().any(|e| {
                    matches!(e, archive::Entry::Message(m) if m.kind == archive::MessageKind::ToolResult)
                })
            })?;
            let rel = rel.clone();
            let m = a.entries.iter_mut().find_map(|e| match e {
                archive::Entry::Message(m) if m.kind == archive::MessageKind::ToolResult => Some(m),
                _ => None,
            })?;
            m.text = truncated(&m.text);
            one(
                ap(&rel),
                None,
                "a tool result archived as the emergency truncation cut it",
            )
        }
        "archive.orphan" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks().get(bi)?;
            let id = format!("b{}", s.state.next_block_id + 3);
            let rel = format!(
                "tier1/{}",
                archive::file_name(&id, &b.start_ref, &b.end_ref)
            );
            let mut a = s
                .archives
                .iter()
                .find(|(r, _)| *r == b.archive_rel)?
                .1
                .clone();
            a.block_id = id;
            s.archives.push((rel.clone(), a));
            one(ap(&rel), None, "an archive no block points to")
        }
        "archive.temp-debris" => {
            let bi = *live(&s.state, 1).first()?;
            let b = s.state.blocks().get(bi)?;
            let name = archive::file_name(
                &format!("b{}", s.state.next_block_id),
                &b.start_ref,
                &b.end_ref,
            );
            let rel = format!("tier1/.{name}.tmp-{}", s.rng.hex(6));
            let a = &s.archives.iter().find(|(r, _)| *r == b.archive_rel)?.1;
            let whole = archive::render(a, archive::Labels::Chinese);
            let partial = text::cut(&whole, whole.len() / 2).to_string();
            s.noa_extra.push((rel.clone(), partial.into_bytes()));
            one(ap(&rel), None, "a temp file left by an interrupted write")
        }
        "journal.malformed" => {
            s.journal = Some("{\"at\":\"2025-06-02T09:00:00Z\",\"input\":{}}\n".to_string());
            one(
                format!("noa/{sid}/ctl.jsonl"),
                Some(1),
                "a journal line without blocks or callId",
            )
        }
        "journal.torn-tail" => {
            let at = rfc3339(s.clock_ns + 30 * NANOS);
            s.journal = Some(format!(
                "{{\"at\":\"{at}\",\"input\":{{\"content\":[{{\"startId\":\"m00002\",\"endId\":\"m0"
            ));
            one(
                format!("noa/{sid}/ctl.jsonl"),
                Some(1),
                "an uncommitted batch: the journal's last line has no newline",
            )
        }
        _ => None,
    }
}

/// A tool result as the runtime's emergency truncation leaves it (SPEC 4.4 step 6): its first
/// and last 2000 characters around the marker.
fn truncated(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = crate::noa::tokens::count(text);
    let marker = format!(
        "\n\n...{} — original ~{n} tokens]...\n\n",
        crate::noa::pipeline::TRUNCATION_MARKER
    );
    if chars.len() <= 4000 {
        let half: String = chars[..chars.len() / 2].iter().collect();
        let rest: String = chars[chars.len() / 2..].iter().collect();
        return format!("{half}{marker}{rest}");
    }
    let head: String = chars[..2000].iter().collect();
    let tail: String = chars[chars.len() - 2000..].iter().collect();
    format!("{head}{marker}{tail}")
}
