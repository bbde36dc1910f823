//! A generated session's conversation as the runtime would record it: its messages, turn by
//! turn, and the Compress calls it makes (through normafs's own core), refused ones included.

use super::*;

/// The next message of the conversation.
pub(super) enum Next {
    Prompt,
    Assistant,
    Results(Vec<(String, &'static str)>),
}

/// What a Compress attempt sends.
pub(crate) enum Pick {
    /// Ranges the recommendation offers: tier-1 blocks.
    Ranges(Vec<Want>),
    /// A block-endpoint range that makes a block of the next tier.
    Consolidate(Want),
    /// A batch the runtime refuses.
    Refused(Vec<Want>),
}

impl<'a> Session<'a> {
    pub fn new(
        cfg: &'a NoaConfig,
        rng: Rng,
        sid: &str,
        archive_root: &str,
        start_ns: i64,
    ) -> Session<'a> {
        Session {
            cfg,
            rng,
            sid: sid.to_string(),
            archive_root: archive_root.to_string(),
            agent: None,
            max_result_bytes: 300_000,
            records: Vec::new(),
            clock_ns: start_ns,
            context_tokens: 0,
            since_assistant: 0,
            messages: 0,
            state: State::initial(sid),
            archives: Vec::new(),
            sidechains: Vec::new(),
            calls: Vec::new(),
            refused: 0,
            subagent_budget: 0,
            consolidations: 0,
            state_file: StateFile::Auto,
            garbage: Vec::new(),
            torn_tail: None,
            noa_extra: Vec::new(),
            journal: None,
        }
    }

    /// Advance the clock by a few seconds; the new time.
    pub fn tick(&mut self) -> String {
        let secs = self.rng.range(1, 9) as i64;
        self.clock_ns += secs * NANOS + self.rng.range(0, 999_999_999) as i64;
        rfc3339(self.clock_ns)
    }

    /// A record chained to the previous one, timestamped now.
    pub fn record(&mut self, kind: &str) -> Record {
        let ts = self.tick();
        let sidechain = self.agent.is_some();
        Record {
            uuid: self.rng.uuid().into(),
            parent_uuid: self.records.last().map(|r| r.uuid.clone()),
            session_id: Some(self.sid.as_str().into()),
            agent_id: self.agent.as_deref().map(Box::from),
            is_sidechain: sidechain.then_some(true),
            timestamp: Some(ts.into()),
            kind: kind.to_string().into(),
            message: None,
            usage: None,
            boundary: None,
            extra: Default::default(),
        }
    }

    /// Append a message record (assistant records carry usage); its index in `records`.
    pub fn push_message(&mut self, role: &str, content: Vec<Content>) -> usize {
        let message = Message::new(role, content);
        let t = message_tokens(&message);
        let mut rec = self.record("message");
        if role == "assistant" {
            rec.usage = Some(Some(Box::new(Usage {
                input_tokens: self.rng.range(3, 900) as u64,
                output_tokens: t.max(1),
                cache_read_tokens: self.context_tokens,
                cache_write_tokens: self.since_assistant,
                extra: Default::default(),
            })));
            self.since_assistant = 0;
        } else {
            self.since_assistant += t;
        }
        self.context_tokens += t;
        rec.message = Some(Some(message));
        self.records.push(rec);
        self.messages += 1;
        self.records.len() - 1
    }

    pub fn user_text(&mut self, text: &str) -> usize {
        self.push_message("user", vec![Content::text(text)])
    }

    pub fn prompt(&mut self) -> usize {
        let t = text::user_prompt(&mut self.rng);
        self.user_text(&t)
    }

    pub fn final_answer(&mut self) -> usize {
        let mut content = Vec::new();
        if self.rng.percent(40) {
            content.push(self.thinking());
        }
        content.push(Content::text(&text::assistant_answer(&mut self.rng)));
        self.push_message("assistant", content)
    }

    pub(super) fn thinking(&mut self) -> Content {
        Content::Thinking(ThinkingPart {
            thinking: text::thinking(&mut self.rng).into(),
            signature: Some(self.rng.signature().into()),
            extra: Default::default(),
        })
    }

    /// An assistant turn calling one or two tools; the calls to answer.
    pub fn tool_calls(&mut self) -> Vec<(String, &'static str)> {
        let mut content = Vec::new();
        if self.rng.percent(75) {
            content.push(self.thinking());
        }
        if self.rng.percent(60) {
            content.push(Content::text(&text::assistant_preamble(&mut self.rng)));
        }
        let n = if self.rng.percent(12) { 2 } else { 1 };
        let mut calls = Vec::new();
        for _ in 0..n {
            let id = self.rng.tool_id();
            let (tool, input) = if self.subagent_budget > 0 && self.rng.percent(8) {
                let task = text::subagent_task(&mut self.rng);
                (
                    "Task",
                    json!({"description": "Find callers", "prompt": task, "subagent_type": "general-purpose"}),
                )
            } else {
                let tool = self.rng.pick(text::TOOLS);
                (tool, text::tool_input(&mut self.rng, tool))
            };
            content.push(tool_use(&id, tool, &input.to_string()));
            calls.push((id, tool));
        }
        self.push_message("assistant", content);
        calls
    }

    /// The user record answering `calls`.
    pub fn tool_results(&mut self, calls: &[(String, &'static str)]) -> usize {
        let mut content = Vec::new();
        for (id, tool) in calls {
            let part = if *tool == "Task" {
                let answer = self.subagent();
                tool_result(id, &answer, false)
            } else if self.rng.percent(6) {
                let err = text::tool_error(&mut self.rng, tool);
                tool_result(id, &err, true)
            } else {
                let mut size = text::result_size(&mut self.rng, self.max_result_bytes);
                if matches!(*tool, "Edit" | "Write") {
                    size = size.min(600);
                }
                let out = text::tool_output(&mut self.rng, tool, size);
                tool_result(id, &out, false)
            };
            content.push(part);
        }
        self.push_message("user", content)
    }

    /// Run a subagent in a sidechain transcript; its final answer.
    pub(super) fn subagent(&mut self) -> String {
        self.subagent_budget = self.subagent_budget.saturating_sub(1);
        let aid = self.rng.hex(6);
        let rng = Rng::new(self.rng.next_u64());
        let mut side = Session::new(self.cfg, rng, &self.sid, "", self.clock_ns);
        side.agent = Some(aid.clone());
        side.max_result_bytes = self.max_result_bytes.min(20_000);
        let task = text::subagent_task(&mut side.rng);
        side.user_text(&task);
        for _ in 0..side.rng.range(1, 3) {
            let calls = side.tool_calls();
            side.tool_results(&calls);
        }
        side.final_answer();
        self.clock_ns = side.clock_ns;
        let answer = side
            .records
            .last()
            .and_then(|r| r.as_message())
            .and_then(|m| {
                m.content.iter().find_map(|c| match c {
                    Content::Text(t) => Some(t.text.get().into_owned()),
                    _ => None,
                })
            })
            .unwrap_or_default();
        self.sidechains.push((aid, side.records));
        answer
    }

    /// A built-in compaction (SPEC 2.1): the marker, then the kept tail (the last turn when it
    /// is short, else the last answer) recorded a second time.
    pub(super) fn compact(&mut self) {
        let start = self
            .records
            .iter()
            .rposition(|r| {
                r.as_message().is_some_and(|m| {
                    m.role == "user" && matches!(m.content.first(), Some(Content::Text(_)))
                })
            })
            .unwrap_or(0);
        let start = if self.records.len() - start <= 6 {
            start
        } else {
            self.records.len().saturating_sub(1)
        };
        let kept: Vec<Message> = self.records[start..]
            .iter()
            .filter_map(|r| r.as_message().cloned())
            .collect();
        let meta = json!({
            "pre_tokens": self.context_tokens.max(1),
            "trigger": "auto",
            "messages_summarized": self.messages.saturating_sub(kept.len()),
        });
        self.push_message(
            "user",
            vec![Content::CompactBoundary(CompactBoundaryPart {
                input: RawJson::from_value(&meta),
                extra: Default::default(),
            })],
        );
        self.context_tokens = 0;
        for m in kept {
            let role = m.role.to_string();
            self.push_message(&role, m.content);
        }
    }

    /// The messages so far, as the core reads them.
    pub(super) fn messages_of(records: &[Record]) -> Vec<&Message> {
        records.iter().filter_map(Record::as_message).collect()
    }

    /// Try a Compress call now; true when one was recorded (two messages).
    pub(super) fn try_compress(&mut self, sched: &Schedule) -> bool {
        let cfg = self.cfg;
        let refuse = self.rng.percent(sched.refuse_percent);
        let consolidate = self.consolidations < sched.max_consolidations
            && self.rng.percent(sched.consolidate_percent);
        let all_ranges = self.rng.percent(sched.all_ranges_percent);
        // The view a resumed runtime sends, and what it recommends.
        let (pick, before) = {
            let p = Projection::new(Session::messages_of(&self.records));
            let t = views::turn(&p, &self.state, cfg, &views::runtime_path);
            let rec = recommend::recommend(&t, &self.state, cfg);
            let pick = if refuse {
                refused(&mut self.rng, &t, &rec, cfg)
            } else {
                consolidate
                    .then(|| consolidation(&mut self.rng, &t, &self.state, cfg))
                    .flatten()
                    .or_else(|| tier1(&mut self.rng, &rec, cfg, all_ranges))
            };
            let pick = match pick {
                Some(Pick::Ranges(w)) => {
                    let w = self.disjoint(&p, w);
                    (!w.is_empty()).then_some(Pick::Ranges(w))
                }
                Some(Pick::Consolidate(w)) => {
                    let w = self.disjoint(&p, vec![w]);
                    w.into_iter().next().map(Pick::Consolidate)
                }
                other => other,
            };
            (pick, t.measure)
        };
        let Some(pick) = pick else {
            return false;
        };
        let wants = match &pick {
            Pick::Ranges(w) | Pick::Refused(w) => w.clone(),
            Pick::Consolidate(w) => vec![w.clone()],
        };
        let call_id = self.rng.tool_id();
        let input = compress_input(&wants);
        self.push_message("assistant", vec![tool_use(&call_id, COMPRESS_TOOL, &input)]);
        let applied = self.apply_call(&call_id, &input);
        let panel = compress::panel(&applied, before);
        self.push_message("user", vec![tool_result(&call_id, &panel, false)]);
        if applied.created.is_empty() {
            self.refused += 1;
            return true;
        }
        if matches!(pick, Pick::Consolidate(_)) {
            self.consolidations += 1;
        }
        for (b, a) in applied.created.iter().zip(&applied.archives) {
            let mut plain = a.clone();
            plain.call = None;
            plain.with_body_sha256 = false;
            self.archives.push((b.archive_rel.clone(), plain));
        }
        self.state = applied.state;
        self.calls.push(Call { call_id });
        true
    }

    /// The ranges of `wants` whose blocks overlap no other live block.
    ///
    /// The runtime widens each range on its own (around tool pairs and reasoning runs) and
    /// counts in a block's coverage what the view shows in its span, covered or not (a
    /// reasoning run kept for its visible act, the first user message): so two adjacent
    /// ranges, or a range next to an older block, can make live blocks that cover one message
    /// (`state.overlap`, an error the runtime's own states never show when its model reads
    /// the panels). The generator tries the batch first, exactly as it will be applied, and
    /// sends only ranges that stay apart.
    pub(crate) fn disjoint(&self, p: &Projection<'_>, wants: Vec<Want>) -> Vec<Want> {
        let cfg = self.cfg;
        let t = pipeline::run(
            &p.cores,
            &self.state,
            cfg,
            Count::Given(0),
            &views::runtime_path,
        );
        let ledger = t.ledger(&self.state, &[]);
        let (created, now) = seconds(self.clock_ns);
        let place = Placement::new(&self.archive_root, &self.sid, created, now);
        let overlaps = |wants: &[Want]| {
            let parsed = args::parse(&compress_input(wants));
            let a = compress::apply(&t, &ledger, &parsed.ranges, cfg, "dry-run", &place);
            a.created.is_empty() || overlapping(&a.state)
        };
        if !overlaps(&wants) {
            return wants;
        }
        let mut kept: Vec<Want> = Vec::new();
        for w in wants {
            kept.push(w);
            if overlaps(&kept) {
                kept.pop();
            }
        }
        kept
    }

    /// Apply the Compress call just recorded (the last record holds its tool_use) exactly as
    /// a rebuild replays it: against the projection up to and including the call, with no
    /// token count (no truncation, no nudge), on the state with that view's refs recorded.
    pub(super) fn apply_call(&self, call_id: &str, input: &str) -> Applied {
        let cfg = self.cfg;
        // The projection of the whole transcript a rebuild slices, not the one a resumed
        // runtime continues from (that drops the trailing call, still unanswered here).
        let cores = content::project(&Session::messages_of(&self.records));
        let t: Turn<'_, '_> = pipeline::run(
            &cores,
            &self.state,
            cfg,
            Count::Given(0),
            &views::runtime_path,
        );
        let ledger = t.ledger(&self.state, &[]);
        let parsed = args::parse(input);
        let (created, now) = seconds(self.clock_ns);
        let place = Placement::new(&self.archive_root, &self.sid, created, now);
        compress::apply_owned(&t, ledger, &parsed.ranges, cfg, call_id, &place)
    }
}

/// Whether two active blocks of `state` cover one message.
pub(crate) fn overlapping(state: &State) -> bool {
    let mut seen = std::collections::HashSet::new();
    state
        .blocks()
        .iter()
        .filter(|b| b.active)
        .flat_map(|b| b.effective_message_ids.iter())
        .any(|id| !seen.insert(id.as_str()))
}

/// Tokens of a message's content (SPEC 4.2), for the usage counters.
pub(super) fn message_tokens(m: &Message) -> u64 {
    m.content
        .iter()
        .map(|c| match c {
            Content::Text(t) => tokens::count(&t.text.get()),
            Content::Thinking(t) => tokens::count(&t.thinking.get()),
            Content::ToolUse(u) => tokens::count(u.input.get()),
            Content::ToolResult(r) => r
                .items()
                .iter()
                .map(|i| match i {
                    Content::Text(t) => tokens::count(&t.text.get()),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        })
        .sum()
}

/// A summary of a span of `chars` characters: at least `min_summary_chars`, shorter than the
/// span where it can be.
pub(super) fn summary_for(rng: &mut Rng, cfg: &NoaConfig, chars: usize) -> Option<String> {
    let min = cfg.min_summary_chars.max(1);
    let max = (chars / 2).max(min + 8).min(cfg.max_summary_chars.max(min));
    text::summary(rng, min, max)
}

/// Tier-1 ranges from the recommendation: the oldest ones until their characters clear the
/// batch minimum (or every one of them).
pub(super) fn tier1(
    rng: &mut Rng,
    rec: &recommend::Recommendation,
    cfg: &NoaConfig,
    all: bool,
) -> Option<Pick> {
    let mut wants = Vec::new();
    let mut chars = 0;
    for r in &rec.ranges {
        if !all && chars >= cfg.min_range_chars && !wants.is_empty() {
            break;
        }
        let (Some(start), Some(end)) = (r.start.name(), r.end.name()) else {
            continue;
        };
        let summary = summary_for(rng, cfg, r.chars)?;
        wants.push(Want {
            start: start.into_owned(),
            end: end.into_owned(),
            summary,
            topic: if rng.percent(85) {
                text::topic(rng)
            } else {
                String::new()
            },
        });
        chars += r.chars;
    }
    (chars >= cfg.min_range_chars && !wants.is_empty()).then_some(Pick::Ranges(wants))
}

/// A consolidation: from the first to the last but one live block of the lowest eligible tier
/// in view order (the last too when there are only two), with no live block of a lower tier
/// between them (the range absorbs the blocks of its lowest tier into one of the next). A
/// tier is eligible with at least `tier2_min_blocks` (tier 1) or `tier3_min_blocks` (tier 2)
/// live blocks and a next tier within `max_tier`.
pub(super) fn consolidation(
    rng: &mut Rng,
    t: &Turn<'_, '_>,
    state: &State,
    cfg: &NoaConfig,
) -> Option<Pick> {
    let max_tier = if cfg.max_tier < 2 {
        3
    } else {
        i64::from(cfg.max_tier)
    };
    let blocks = state.blocks();
    let live: Vec<usize> = t
        .view()
        .filter_map(|(_, c)| match c.origin {
            Origin::Summary { block } if c.is_summary() => Some(block as usize),
            _ => None,
        })
        .filter(|&i| blocks.get(i).is_some_and(|b| b.active))
        .collect();
    for (tier, min) in [(1, cfg.tier2_min_blocks), (2, cfg.tier3_min_blocks)] {
        if tier + 1 > max_tier {
            continue;
        }
        let count = live.iter().filter(|&&i| blocks[i].tier == tier).count();
        if count < min.max(2) {
            continue;
        }
        // The first run of blocks of this tier or higher holding two of this tier.
        let mut run: Vec<usize> = Vec::new();
        let mut best: Option<Vec<usize>> = None;
        for &i in live.iter().chain(std::iter::once(&usize::MAX)) {
            let b = blocks.get(i);
            if b.is_some_and(|b| b.tier >= tier) {
                run.push(i);
                continue;
            }
            let of_tier: Vec<usize> = run
                .iter()
                .copied()
                .filter(|&k| blocks[k].tier == tier)
                .collect();
            if of_tier.len() >= 2 {
                best = Some(of_tier);
                break;
            }
            run.clear();
        }
        let Some(mut of_tier) = best else { continue };
        // The newest block stays as it is (its detail is the most likely to be needed).
        if of_tier.len() > 2 {
            of_tier.pop();
        }
        let (first, last) = (&blocks[of_tier[0]], &blocks[of_tier[of_tier.len() - 1]]);
        let children: Vec<(String, String)> = of_tier
            .iter()
            .map(|&k| (blocks[k].block_id.clone(), blocks[k].summary.clone()))
            .collect();
        let summary = text::consolidated_summary(
            rng,
            &children,
            cfg.min_summary_chars,
            cfg.max_summary_chars.max(cfg.min_summary_chars),
        )?;
        return Some(Pick::Consolidate(Want {
            start: first.block_id.clone(),
            end: last.block_id.clone(),
            summary,
            topic: text::topic(rng),
        }));
    }
    None
}

/// A batch the runtime refuses: a summary below the minimum over a recommended range, or a
/// range ending at a ref this session never handed out.
pub(super) fn refused(
    rng: &mut Rng,
    t: &Turn<'_, '_>,
    rec: &recommend::Recommendation,
    cfg: &NoaConfig,
) -> Option<Pick> {
    let first = rec.ranges.first();
    if let Some(r) = first.filter(|_| cfg.min_summary_chars > 6 && rng.percent(50)) {
        let (start, end) = (r.start.name()?, r.end.name()?);
        return Some(Pick::Refused(vec![Want {
            start: start.into_owned(),
            end: end.into_owned(),
            summary: "Done.".to_string(),
            topic: String::new(),
        }]));
    }
    let highest = t.slots.iter().filter_map(|s| s.number()).max()?;
    let start = first
        .and_then(|r| r.start.name().map(|n| n.into_owned()))
        .unwrap_or_else(|| refs::format_ref(1));
    let summary = summary_for(rng, cfg, 4000)?;
    Some(Pick::Refused(vec![Want {
        start,
        end: refs::format_ref((highest + 40).min(refs::MAX_REF)),
        summary,
        topic: text::topic(rng),
    }]))
}

pub(crate) fn tool_use(id: &str, name: &str, input: &str) -> Content {
    Content::ToolUse(ToolUsePart {
        id: id.to_string(),
        name: name.to_string(),
        input: RawJson::from_text(input).unwrap_or_default(),
        extra: Default::default(),
    })
}

/// A tool result as the runtime records it: `content` an array of one text block.
pub(crate) fn tool_result(id: &str, text: &str, is_error: bool) -> Content {
    Content::ToolResult(ToolResultPart {
        tool_use_id: id.to_string(),
        content: Some(ToolResultContent::Items(vec![Content::text(text)])),
        is_error: is_error.then_some(true),
        extra: Default::default(),
    })
}

/// Build one session as its spec says.
pub(crate) fn build<'a>(
    spec: &Spec,
    cfg: &'a NoaConfig,
    archive_root: &str,
    seed: u64,
) -> Session<'a> {
    let rng = Rng::derive(seed, &format!("session/{}", spec.sid));
    let mut s = Session::new(cfg, rng, &spec.sid, archive_root, spec.start_ns);
    s.max_result_bytes = spec.max_result_bytes;
    s.subagent_budget = spec.subagents;
    run(&mut s, spec);
    s
}

/// Go on with the conversation of `s` (which ends with an answer, or is empty) until it holds
/// `spec.messages` messages, compressing as `spec.compress` says.
pub(crate) fn run(s: &mut Session<'_>, spec: &Spec) {
    let m = spec.messages;
    let mut marker_at = spec
        .marker_at_percent
        .map(|p| m * p / 100)
        .filter(|&at| at >= 4 && at + 12 <= m);
    let mut next_compress = spec.compress.as_ref().map(|c| c.first_at);
    if let (Some(at), Some(next)) = (marker_at, next_compress.as_mut()) {
        // No Compress call before the marker: the projection starts after it (SPEC 4.1), so
        // a rebuild could not replay them.
        if let Some(c) = &spec.compress {
            *next = (*next).max(at + c.interval);
        }
    }
    let mut next = Next::Prompt;
    while s.messages < m {
        let remaining = m - s.messages;
        next = match next {
            Next::Prompt => {
                if marker_at.is_some_and(|at| s.messages >= at) && remaining >= 12 {
                    marker_at = None;
                    s.compact();
                    if s.messages >= m {
                        break;
                    }
                }
                s.prompt();
                // Every later step takes two messages (a tool turn and its results, a final
                // answer and the next prompt, a Compress call and its panel): with an even
                // count left, the user sends a follow-up right away, so the transcript still
                // ends with an assistant answer.
                let left = m.saturating_sub(s.messages);
                if left >= 2 && left % 2 == 0 {
                    let t = text::user_followup(&mut s.rng);
                    s.user_text(&t);
                }
                Next::Assistant
            }
            Next::Assistant => {
                if let (Some(sched), Some(at)) = (&spec.compress, next_compress) {
                    if s.messages >= at && remaining >= 3 + sched.quiet_tail {
                        let jitter = sched.interval * s.rng.range(75, 125) / 100;
                        next_compress = Some(s.messages + jitter.max(1));
                        if s.try_compress(sched) {
                            next = Next::Assistant;
                            continue;
                        }
                    }
                }
                if remaining < 3 || s.rng.percent(25) {
                    s.final_answer();
                    Next::Prompt
                } else {
                    Next::Results(s.tool_calls())
                }
            }
            Next::Results(calls) => {
                s.tool_results(&calls);
                Next::Assistant
            }
        };
    }
}
