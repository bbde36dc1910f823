//! The audit of one session (SPEC 9): its transcripts, journal, `state.json` and archives,
//! each checked by a function of its own over what they share ([`Session`]), in the order
//! their findings are made.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::*;
use crate::format::state::{Block, State};
use crate::store::journal::JournalRead as Journal;

/// What the checks of one session share: its files as read and where findings point.
struct Session<'x> {
    s: &'x SessionData<'x>,
    sid: &'x str,
    style: PathStyle,
    /// Where findings about `state.json` and the journal point.
    spath: String,
    journal_path: String,
    lines: StateLines<'x>,
    /// The journal, when it could be read.
    journal: Option<&'x Journal>,
    st: &'x State,
    /// `state.json` exists and was read.
    usable: bool,
}

impl Session<'_> {
    fn block_line(&self, name: &str) -> Option<u64> {
        self.lines.line_of(&format!("\"blockId\": \"{name}\""))
    }
}

/// What the walk over the blocks saw, for the findings about all of them.
#[derive(Default)]
struct Blocks {
    /// Archives (relative to the session's archive root) some block or batch points to.
    referenced: HashSet<String>,
    max_block: u32,
    inherited_from: Vec<String>,
    ctl_made: Vec<String>,
    moved: Vec<String>,
}

/// The projection's facts the checks of refs and blocks need.
struct Projected<'p> {
    present: HashSet<&'p str>,
    numbered: HashSet<u32>,
    tool_ids: HashSet<&'p str>,
}

/// Audit one session into `a`: its transcripts, journal, `state.json` and archives (SPEC 9);
/// the root's paths find archives of inherited blocks in the sessions they live in.
pub fn audit_session_in(
    a: &mut Audit,
    s: &SessionData,
    cfg: &NoaConfig,
    style: PathStyle,
    paths: &RootPaths,
) {
    audit_session_with(a, s, None, cfg, style, paths);
}

/// [`audit_session_in`] with the projection of the session's messages when the caller has
/// it already (a mount computing the session's other files from the same transcript).
pub fn audit_session_with(
    a: &mut Audit,
    s: &SessionData,
    projection: Option<&Projection<'_>>,
    cfg: &NoaConfig,
    style: PathStyle,
    paths: &RootPaths,
) {
    let sid = s.sid.as_str();
    transcript_findings(a, &s.transcript, &style.transcript(sid));
    for (aid, _, t) in &s.sidechains {
        transcript_findings(a, t, &style.sidechain(sid, aid));
    }
    let state_text = if s.state.exists {
        crate::format::read_no_follow(&s.archive_root.join("state.json"))
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let mut cx = Session {
        s,
        sid,
        style,
        spath: style.archive(sid, "state.json"),
        journal_path: style.archive(sid, "ctl.jsonl"),
        lines: StateLines::new(&state_text),
        journal: None,
        st: &s.state.state,
        usable: s.state.exists && s.state.error.is_none(),
    };
    cx.journal = journal_file(a, &cx);
    state_file(a, &cx);

    // The projection and the refs a view hands out: what the state's refs and ranges name.
    // Only a state with refs or blocks needs the projection (most sessions have neither, and
    // hashing every content block is most of a session's audit).
    let st = cx.st;
    let needed = !st.message_refs.by_raw.is_empty()
        || !st.message_refs.by_ref.is_empty()
        || !st.blocks().is_empty();
    let own;
    let p = match projection {
        Some(p) if needed => p,
        _ => {
            own = Projection::new(if needed { s.messages() } else { Vec::new() });
            &own
        }
    };
    let (slots, _) = refs::assign(&p.cores, st, |c| protect::is_hard(c, cfg));
    let projected = Projected {
        present: p.cores.iter().map(|c| c.id.as_ref()).collect(),
        numbered: slots.iter().filter_map(|s| s.number()).collect(),
        tool_ids: p
            .cores
            .iter()
            .filter(|c| c.kind == crate::noa::content::Kind::ToolCall)
            .map(|c| c.call)
            .collect(),
    };
    ref_maps(
        a,
        &cx,
        &projected,
        s.transcript_exists || !p.msgs.is_empty(),
    );
    let seen = blocks(a, &cx, &projected, paths);
    after_blocks(a, &cx, &seen);
    let live = if st.blocks().is_empty() {
        Vec::new()
    } else {
        pipeline::prune_only(&p.cores, st, cfg, &crate::noa::views::runtime_path).active
    };
    overlap(a, &cx, &live);
    stats(a, &cx, &seen);
    behind_journal(a, &cx);
    archive_files(a, &cx, &seen);
}

/// The journal's malformed lines and torn tail; the journal when it could be read.
fn journal_file<'x>(a: &mut Audit, cx: &Session<'x>) -> Option<&'x Journal> {
    let journal = match &cx.s.journal {
        Ok(j) => Some(j),
        Err(e) => {
            a.push(
                Severity::Error,
                "journal.malformed",
                cx.journal_path.clone(),
                None,
                format!("cannot read the journal: {e}"),
            );
            None
        }
    };
    if let Some(j) = journal {
        for (line, msg) in &j.malformed {
            a.push(
                Severity::Error,
                "journal.malformed",
                cx.journal_path.clone(),
                Some(*line),
                format!("not a journal entry: {msg}"),
            );
        }
        if j.torn_tail.is_some() {
            let line = j.entries.len() as u64 + j.malformed.len() as u64 + 1;
            a.push(
                Severity::Warn,
                "journal.torn-tail",
                cx.journal_path.clone(),
                Some(line),
                "an uncommitted batch (torn last line); the next ctl command cuts it".into(),
            );
        }
    }
    journal
}

/// `state.json` as a file: unreadable, missing, another session's, keys the runtime drops.
fn state_file(a: &mut Audit, cx: &Session<'_>) {
    let (s, sid, spath) = (cx.s, cx.sid, &cx.spath);
    match &s.state.error {
        Some(e) => {
            let code = match e {
                StateLoadError::Version(_) => "state.version",
                StateLoadError::Malformed(_) | StateLoadError::Io(_) => "state.malformed",
            };
            a.push(
                Severity::Error,
                code,
                spath.clone(),
                None,
                format!("{e}; the runtime starts this session from an empty state (run `rebuild` to recover)"),
            );
        }
        None if !s.state.exists && s.transcript_exists => {
            a.push(
                Severity::Info,
                "state.missing",
                spath.clone(),
                None,
                "no state.json: nothing compressed yet".into(),
            );
        }
        None => {}
    }
    let st = cx.st;
    if cx.usable && st.session_id != *sid {
        a.push(
            Severity::Error,
            "state.session-mismatch",
            spath.clone(),
            cx.lines.line_of("\"sessionId\""),
            format!("sessionId is {:?}, the session is {sid:?}", st.session_id),
        );
    }
    if cx.usable {
        let unknown = st.unknown_keys();
        if !unknown.is_empty() {
            a.push(
                Severity::Warn,
                "state.unknown-keys",
                spath.clone(),
                None,
                format!(
                    "keys the runtime does not know and drops at its next save: {}",
                    examples(&unknown)
                ),
            );
        }
    }
}

/// The ref maps: each one the other's inverse, and naming content the transcript has (when
/// `has_content`).
fn ref_maps(a: &mut Audit, cx: &Session<'_>, p: &Projected<'_>, has_content: bool) {
    let refs_map = &cx.st.message_refs;
    let mut disagree: Vec<(String, Option<u64>)> = Vec::new();
    let mut raws: Vec<(&String, &String)> = refs_map.by_raw.iter().collect();
    raws.sort();
    for (raw, r) in raws {
        if r != refs::BLOCKED && refs_map.by_ref.get(r) != Some(raw) {
            disagree.push((
                format!("byRaw maps {raw} to {r} but byRef does not map {r} back"),
                cx.lines.line_of(&format!("\"{raw}\": \"{r}\"")),
            ));
        }
    }
    let mut by_ref: Vec<(&String, &String)> = refs_map.by_ref.iter().collect();
    by_ref.sort();
    for (r, raw) in &by_ref {
        if refs_map.by_raw.get(*raw) != Some(*r) {
            disagree.push((
                format!("byRef maps {r} to {raw} but byRaw does not map {raw} back"),
                cx.lines.line_of(&format!("\"{r}\": \"{raw}\"")),
            ));
        }
    }
    for (m, line) in disagree {
        a.push(Severity::Error, "state.ref-map", cx.spath.clone(), line, m);
    }
    if has_content {
        let mut dangling: Vec<String> = refs_map
            .by_raw
            .iter()
            .filter(|(raw, _)| !p.present.contains(raw.as_str()))
            .map(|(raw, r)| format!("{r} ({raw})"))
            .collect();
        dangling.sort();
        if !dangling.is_empty() {
            a.push(
                Severity::Warn,
                "state.dangling-ref",
                cx.spath.clone(),
                None,
                format!(
                    "{} recorded ref(s) name content that is not in the transcript's projection: {}",
                    dangling.len(),
                    examples(&dangling)
                ),
            );
        }
    }
}

/// Each block: its range, the blocks it absorbed, whether it can show and be replayed, and
/// its archive.
fn blocks(a: &mut Audit, cx: &Session<'_>, p: &Projected<'_>, paths: &RootPaths) -> Blocks {
    let refs_map = &cx.st.message_refs;
    let blocks = cx.st.blocks();
    let spath = &cx.spath;
    let known_ref = |r: &str| {
        refs_map.by_ref.contains_key(r)
            || refs::parse_ref(r).is_some_and(|n| p.numbered.contains(&n))
    };
    let by_name: HashMap<&str, usize> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.block_id.as_str(), i))
        .collect();
    let journal_calls: HashSet<&str> = cx
        .journal
        .map(|j| j.entries.iter().map(|(_, e)| e.call_id.as_str()).collect())
        .unwrap_or_default();
    let absorbed: HashSet<&str> = blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(String::as_str))
        .collect();
    let mut seen = Blocks {
        // Archives of committed journal batches are not orphans, even before a roll-forward.
        referenced: cx
            .journal
            .map(|j| {
                j.entries
                    .iter()
                    .flat_map(|(_, e)| e.blocks.iter())
                    .filter_map(|b| b.get("archiveRel").and_then(|v| v.as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        ..Blocks::default()
    };
    for b in blocks {
        let name = b.block_id.as_str();
        let line = cx.block_line(name);
        seen.max_block = seen.max_block.max(refs::parse_block_id(name).unwrap_or(0));
        for (label, r) in [("startRef", &b.start_ref), ("endRef", &b.end_ref)] {
            if !known_ref(r) {
                a.push(
                    Severity::Error,
                    "state.block-range",
                    spath.clone(),
                    line,
                    format!("{name}: {label} {r:?} is not a known ref"),
                );
            }
        }
        if let (Some(x), Some(y)) = (refs::parse_ref(&b.start_ref), refs::parse_ref(&b.end_ref)) {
            if x > y {
                a.push(
                    Severity::Error,
                    "state.block-range",
                    spath.clone(),
                    line,
                    format!(
                        "{name}: range {}..{} ends before it starts",
                        b.start_ref, b.end_ref
                    ),
                );
            }
        }
        for child in &b.direct_block_ids {
            if !by_name.contains_key(child.as_str()) {
                a.push(
                    Severity::Error,
                    "state.unknown-block",
                    spath.clone(),
                    line,
                    format!("{name} absorbed {child}, which is not in blocks"),
                );
            }
        }
        if b.active
            && !absorbed.contains(name)
            && !b
                .effective_message_ids
                .iter()
                .any(|id| p.present.contains(id.as_str()))
        {
            a.push(
                Severity::Warn,
                "state.dead-block",
                spath.clone(),
                line,
                format!("{name} is active but none of its messages is in the transcript; the view leaves it out"),
            );
        }
        let call = b.compress_call_id.as_str();
        if call.is_empty() || (!p.tool_ids.contains(call) && !journal_calls.contains(call)) {
            a.push(Severity::Warn, "state.unreplayable", spath.clone(), line, format!("{name}: compressCallId {call:?} is neither in the transcript nor in the journal; a rebuild cannot reproduce it"));
        } else if !p.tool_ids.contains(call) {
            seen.ctl_made.push(name.to_string());
        }
        if let Some(other) = other_session(&b.archive_path, cx.sid) {
            if !seen.inherited_from.iter().any(|x| x == other) {
                seen.inherited_from.push(other.to_string());
            }
        }
        block_archive(a, cx, b, line, paths, &mut seen);
    }
    seen
}

/// A block's archive (SPEC 2.3 lookup order): where it is, that it reads, and that it is the
/// block's.
fn block_archive(
    a: &mut Audit,
    cx: &Session<'_>,
    b: &Block,
    line: Option<u64>,
    paths: &RootPaths,
    seen: &mut Blocks,
) {
    let (name, sid, spath) = (b.block_id.as_str(), cx.sid, &cx.spath);
    if !b.archive_rel.is_empty() && !safe_rel(&b.archive_rel) {
        a.push(
            Severity::Error,
            "archive.mismatch",
            spath.clone(),
            line,
            format!(
                "{name}: archiveRel {:?} leaves the archive root",
                b.archive_rel
            ),
        );
        return;
    }
    let found = crate::store::session::locate_archive(paths, sid, b);
    let apath = if b.archive_rel.is_empty() {
        spath.clone()
    } else {
        cx.style.archive(sid, &b.archive_rel)
    };
    let Some(found) = found else {
        a.push(
            Severity::Error,
            "archive.missing",
            apath,
            None,
            format!(
                "the archive of {name} cannot be found (archiveRel {:?}, archivePath {:?})",
                b.archive_rel, b.archive_path
            ),
        );
        return;
    };
    let root = &cx.s.archive_root;
    if found.starts_with(root) {
        if let Ok(rel) = found.strip_prefix(root) {
            seen.referenced.insert(rel.to_string_lossy().into_owned());
        }
    }
    if Path::new(&b.archive_path) != found
        && std::path::absolute(&found).ok().as_deref() != Some(Path::new(&b.archive_path))
    {
        seen.moved.push(name.to_string());
    }
    let text = match crate::format::read_no_follow(&found)
        .map_err(|e| e.to_string())
        .and_then(|b| String::from_utf8(b).map_err(|_| "not valid UTF-8".to_string()))
    {
        Ok(t) => t,
        Err(e) => {
            a.push(
                Severity::Error,
                "archive.corrupt",
                apath,
                None,
                format!("cannot read: {e}"),
            );
            return;
        }
    };
    let parsed = match archive::parse(&text) {
        Err(e) => {
            a.push(
                Severity::Error,
                "archive.corrupt",
                apath,
                Some(1),
                e.to_string(),
            );
            return;
        }
        Ok(parsed) => parsed,
    };
    if parsed.body_sha256_ok == Some(false) {
        a.push(
            Severity::Error,
            "archive.corrupt",
            apath.clone(),
            None,
            "body_sha256 does not match the body (the archive was changed after it was written)"
                .into(),
        );
    }
    let f = &parsed.frontmatter;
    let mut diffs = Vec::new();
    if f.block != name {
        diffs.push(format!("block {} (state: {name})", f.block));
    }
    if f.tier != Some(b.tier) {
        diffs.push(format!("tier {:?} (state: {})", f.tier, b.tier));
    }
    let range = (b.start_ref.clone(), b.end_ref.clone());
    if f.range.as_ref() != Some(&range) {
        let (fs, fe) = f.range.clone().unwrap_or_default();
        diffs.push(format!(
            "range {fs}-{fe} (state: {}-{})",
            b.start_ref, b.end_ref
        ));
    }
    let file = found
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some((fs, fe)) = &f.range {
        if file != archive::file_name(&f.block, fs, fe) {
            diffs.push(format!("file name {file} does not match its frontmatter"));
        }
    }
    if !diffs.is_empty() {
        a.push(
            Severity::Error,
            "archive.mismatch",
            apath.clone(),
            Some(2),
            diffs.join("; "),
        );
    }
    if f.body_sha256.is_none() && text.contains(crate::noa::pipeline::TRUNCATION_MARKER) {
        a.push(Severity::Info, "archive.truncated", apath, None, format!("the runtime archived {name} from an emergency-truncated view; raw/{}-{}.md has the originals", b.start_ref, b.end_ref));
    }
}

/// What the walk over the blocks found of all of them: inherited, moved and ctl-made blocks,
/// and the next block number.
fn after_blocks(a: &mut Audit, cx: &Session<'_>, seen: &Blocks) {
    let spath = &cx.spath;
    if !seen.inherited_from.is_empty() {
        a.push(
            Severity::Info,
            "state.inherited",
            spath.clone(),
            None,
            format!(
                "blocks inherited from session(s) {} keep their archives there (a fork)",
                seen.inherited_from.join(", ")
            ),
        );
    }
    if !seen.moved.is_empty() {
        a.push(
            Severity::Info,
            "archive.moved",
            spath.clone(),
            None,
            format!("the archivePath of {} block(s) ({}) is not where the archive is (the root was moved or copied); normafs finds them by archiveRel", seen.moved.len(), examples(&seen.moved)),
        );
    }
    if !seen.ctl_made.is_empty() {
        a.push(
            Severity::Info,
            "state.runtime-unaware",
            spath.clone(),
            None,
            format!("{} block(s) made by normafs's ctl ({}): the runtime's own rebuild knows nothing of the journal and would drop them", seen.ctl_made.len(), examples(&seen.ctl_made)),
        );
    }
    let (st, max_block) = (cx.st, seen.max_block);
    if cx.usable && !st.blocks().is_empty() && st.next_block_id <= max_block as i64 {
        a.push(
            Severity::Error,
            "state.next-block-id",
            spath.clone(),
            cx.lines.line_of("\"nextBlockId\""),
            format!(
                "nextBlockId {} is not above every block number (highest b{max_block})",
                st.next_block_id
            ),
        );
    }
}

/// Overlap of live blocks, one finding per pair: two blocks that both newly took one content
/// message. (Effective coverage may overlap: a block takes the visible reasoning an earlier
/// block's span kept, and absorbing blocks repeat their children's.)
fn overlap(a: &mut Audit, cx: &Session<'_>, live: &[bool]) {
    let blocks = cx.st.blocks();
    let mut first_cover: HashMap<&str, usize> = HashMap::new();
    let mut pairs: Vec<(usize, usize, String, usize)> = Vec::new();
    for (bi, b) in blocks.iter().enumerate() {
        if !live.get(bi).copied().unwrap_or(false) {
            continue;
        }
        for id in &b.direct_message_ids {
            match first_cover.get(id.as_str()) {
                Some(&other) => match pairs.iter_mut().find(|p| p.0 == other && p.1 == bi) {
                    Some(p) => p.3 += 1,
                    None => {
                        let r = cx
                            .st
                            .message_refs
                            .by_raw
                            .get(id)
                            .cloned()
                            .unwrap_or_else(|| id.clone());
                        pairs.push((other, bi, r, 1));
                    }
                },
                None => {
                    first_cover.insert(id.as_str(), bi);
                }
            }
        }
    }
    for (x, y, r, n) in pairs {
        let (bx, by) = (&blocks[x].block_id, &blocks[y].block_id);
        let more = if n > 1 {
            format!(" and {} more messages", n - 1)
        } else {
            String::new()
        };
        a.push(
            Severity::Error,
            "state.overlap",
            cx.spath.clone(),
            cx.block_line(by),
            format!("live blocks {bx} and {by} both took {r}{more}"),
        );
    }
}

/// Stats: the runtime counts what it made (a fork's count starts again at zero).
fn stats(a: &mut Audit, cx: &Session<'_>, seen: &Blocks) {
    let st = cx.st;
    if cx.usable && seen.inherited_from.is_empty() {
        let blocks = st.blocks();
        let sum: i64 = blocks.iter().map(|b| b.compressed_tokens).sum();
        let count = blocks.len() as i64;
        if st.stats.tokens_compressed != sum || st.stats.compression_count != count {
            a.push(Severity::Warn, "state.stats", cx.spath.clone(), cx.lines.line_of("\"stats\": {"), format!("stats say {} tokens in {} compressions; the blocks hold {sum} tokens in {count}", st.stats.tokens_compressed, st.stats.compression_count));
        }
    }
}

/// Journal batches not in state.
fn behind_journal(a: &mut Audit, cx: &Session<'_>) {
    let Some(j) = cx.journal else { return };
    let calls: HashSet<&str> = cx
        .st
        .blocks()
        .iter()
        .map(|b| b.compress_call_id.as_str())
        .collect();
    for (line, e) in &j.entries {
        if !calls.contains(e.call_id.as_str()) {
            a.push(Severity::Warn, "state.behind-journal", cx.journal_path.clone(), Some(*line), format!("committed batch {} is missing from state.json; the next ctl command or rebuild rolls it forward", e.call_id));
        }
    }
}

/// Archive files no block points to, and temp files left behind.
fn archive_files(a: &mut Audit, cx: &Session<'_>, seen: &Blocks) {
    for f in &cx.s.archives {
        if !seen.referenced.contains(&f.rel) {
            a.push(
                Severity::Warn,
                "archive.orphan",
                cx.style.archive(cx.sid, &f.rel),
                None,
                "no block points to this archive".into(),
            );
        }
    }
    for d in &cx.s.debris {
        a.push(Severity::Warn, "archive.temp-debris", cx.style.archive(cx.sid, d), None, "a leftover temp file of an interrupted write (normafs's or the runtime's); the next ctl command removes it".into());
    }
}
