//! A session's history request by request (issue 26): at every request the runtime made,
//! how large the history and the view it sent were against the window, whether it cut tool
//! results, the nudge it showed and the Compress calls the model answered with; as
//! `timeline.jsonl`, as a picture (`timeline.svg`), and as the peak the audit reports.
//!
//! The requests are the replay's (`noa::rebuild::Replay::history`): where the runtime made
//! them (`noa::rebuild::request_points`), over the state the transcript's Compress calls and
//! the journal's batches had made by then.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::transcript::Content;
use crate::noa::content::COMPRESS_TOOL;
use crate::noa::pipeline::truncate_threshold;
use crate::noa::rebuild::{Asked, Made, Request};
use crate::store::root::RootPaths;
use crate::store::session;
use crate::store::txn::{self, TxnError};

mod svg;
pub use svg::root_svg;

/// Where a view stands against its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Band {
    /// Under `floor_ratio`.
    BelowFloor,
    /// From `floor_ratio` (count-based tier nudges may start) to `pressure_ratio`.
    Floor,
    /// From `pressure_ratio` to `truncate_ratio`.
    Pressure,
    /// At or over `truncate_ratio`: tool results are cut.
    Emergency,
}

impl Band {
    pub fn as_str(self) -> &'static str {
        match self {
            Band::BelowFloor => "below-floor",
            Band::Floor => "floor",
            Band::Pressure => "pressure",
            Band::Emergency => "emergency",
        }
    }
}

/// A Compress call the model answered a request with.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub call: String,
    /// What it made, when the replay made blocks of it.
    pub made: Option<Made>,
    /// Why it made nothing, when it did not.
    pub why: Option<String>,
}

/// One request.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// 1-based.
    pub number: usize,
    pub request: Request,
    /// The record of the assistant message that answered it.
    pub uuid: String,
    pub timestamp: Option<String>,
    pub line: u64,
    /// The prompt tokens the provider reported for that turn (input, cache reads and cache
    /// writes), where the transcript records its usage.
    pub reported: Option<u64>,
    pub answers: Vec<Answer>,
    /// ctl batches committed since the request before (they are in this request's view).
    pub ctl: Vec<Made>,
}

/// A session's timeline.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub session: String,
    pub window: u64,
    pub floor_ratio: f64,
    pub pressure_ratio: f64,
    pub truncate_ratio: f64,
    /// Transcript messages.
    pub messages: usize,
    pub points: Vec<Point>,
    /// ctl batches committed after the last request: in the next request's view, shown on the
    /// last line (`ctlAfter`).
    pub after: Vec<Made>,
}

/// The request at which a session's view came closest to its window.
#[derive(Debug, Clone, PartialEq)]
pub struct Peak {
    pub session: String,
    pub window: u64,
    pub request: usize,
    pub message: usize,
    pub tokens: u64,
    pub fraction: f64,
    pub band: Band,
    /// Requests over the truncate threshold, and over the window.
    pub over_truncate: usize,
    pub over_window: usize,
}

/// Replay session `sid` and make its timeline. Reads only.
pub fn build(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
) -> Result<Timeline, TxnError> {
    // No point asked: up to the end.
    let (h, t) = txn::history(paths, sid, cfg, &[], now)?;
    let timeline = of_history(sid, cfg, &h, &t);
    crate::drop_later::drop_later((h, t));
    Ok(timeline)
}

/// [`build`] from the session's files read already.
pub fn build_of(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
    rec: txn::Recorded<'_>,
) -> Result<Timeline, TxnError> {
    let h = txn::history_of(paths, sid, cfg, &[], now, rec, Asked::requests)?;
    Ok(of_history(sid, cfg, &h, rec.transcript))
}

/// The timeline of a replayed history `h` of transcript `t`.
fn of_history(
    sid: &str,
    cfg: &NoaConfig,
    h: &crate::noa::rebuild::History,
    t: &crate::format::loader::Transcript,
) -> Timeline {
    let len = session::messages(t).len();
    let records: Vec<_> = t.iter_messages().collect();
    let mut ctl: Vec<&Made> = h.made.iter().filter(|m| m.journal).collect();
    ctl.sort_by_key(|m| m.at);
    let mut ctl = ctl.into_iter().peekable();
    let mut points = Vec::with_capacity(h.requests.len());
    for (k, r) in h.requests.iter().enumerate() {
        let Some((loaded, msg)) = records.get(r.at) else {
            continue;
        };
        let rec = &loaded.record;
        let reported = match &rec.usage {
            Some(Some(u)) => Some(
                u.input_tokens
                    .saturating_add(u.cache_read_tokens)
                    .saturating_add(u.cache_write_tokens),
            ),
            _ => None,
        };
        let answers = msg
            .content
            .iter()
            .filter_map(|c| match c {
                Content::ToolUse(u) if u.name == COMPRESS_TOOL && !u.id.is_empty() => {
                    Some(u.id.to_string())
                }
                _ => None,
            })
            .map(|call| {
                let made = h
                    .made
                    .iter()
                    .find(|m| !m.journal && m.call == call)
                    .cloned();
                let why = match made {
                    Some(_) => None,
                    None => Some(
                        h.skipped
                            .iter()
                            .find_map(|s| s.strip_prefix(&format!("{call}: ")))
                            .unwrap_or("made no block")
                            .to_string(),
                    ),
                };
                Answer { call, made, why }
            })
            .collect();
        let mut before = Vec::new();
        while let Some(m) = ctl.next_if(|m| m.at <= r.at) {
            before.push(m.clone());
        }
        points.push(Point {
            number: k + 1,
            request: r.clone(),
            uuid: rec.uuid.as_ref().to_owned(),
            timestamp: rec.timestamp.as_ref().map(|t| t.as_ref().to_owned()),
            line: loaded.line,
            reported,
            answers,
            ctl: before,
        });
    }
    let after = ctl.cloned().collect();
    Timeline {
        session: sid.to_string(),
        window: cfg.window,
        floor_ratio: cfg.floor_ratio,
        pressure_ratio: cfg.pressure_ratio,
        truncate_ratio: cfg.truncate_ratio,
        messages: len,
        points,
        after,
    }
}

/// The view of the request after the first `n` messages of session `sid` (`at/<n>/`,
/// `normafs view --at N`): over the state the replay had there (opened as the runtime opens
/// it: a fork without blocks of its own inherits), summaries naming archives by `path`; at a
/// request point the nudge as the live runtime paced it, elsewhere as a resumed runtime.
pub fn view_at(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    n: usize,
    now: DateTime<Utc>,
    path: crate::noa::views::ArchivePath<'_>,
    form: crate::noa::views::Form<'_>,
) -> Result<crate::bytes::Bytes, TxnError> {
    use crate::noa::views as view;
    let files = txn::SessionFiles::read_for_first(paths, sid, n)?;
    let mut msgs = session::messages(&files.transcript);
    msgs.truncate(n);
    // The replay's and the view's projection are one.
    let p = view::Projection::new(msgs);
    let rec = txn::Recorded {
        projected: Some(&p),
        ..files.recorded()
    };
    let own = txn::history_of(paths, sid, cfg, &[n], now, rec, Asked::states)?
        .states
        .pop()
        .unwrap_or_else(|| crate::format::state::State::initial(sid));
    let (state, _) = session::opened_state(paths, sid, &own, cfg);
    Ok(view::Files::new(&p, &state, cfg, sid, path).bytes(form, &mut Default::default()))
}

/// `n` over `d`, 0 without a window.
fn share(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// Rounded to 4 places (what the files show).
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

impl Timeline {
    /// The band of a count, as the runtime's decisions place it.
    pub fn band(&self, counted: u64) -> Band {
        let f = share(counted, self.window);
        if self.window == 0 || f < self.floor_ratio {
            Band::BelowFloor
        } else if f < self.pressure_ratio {
            Band::Floor
        } else if f < self.truncate_ratio {
            Band::Pressure
        } else {
            Band::Emergency
        }
    }

    /// The truncate threshold in tokens.
    pub fn truncate_at(&self) -> u64 {
        truncate_threshold(&NoaConfig {
            window: self.window,
            truncate_ratio: self.truncate_ratio,
            ..NoaConfig::default()
        })
    }

    /// Whether a request's view reached the truncate threshold (the runtime cut, or would
    /// have cut, tool results).
    pub fn over_truncate(&self, r: &Request) -> bool {
        let at = self.truncate_at();
        self.window > 0 && at > 0 && r.counted >= at
    }

    /// Whether the view sent was larger than the window.
    pub fn over_window(&self, r: &Request) -> bool {
        self.window > 0 && r.sent > self.window
    }

    /// The request whose counted view was largest (the first of equals).
    pub fn peak(&self) -> Option<Peak> {
        let p = self.points.iter().rev().max_by_key(|p| p.request.counted)?;
        Some(Peak {
            session: self.session.clone(),
            window: self.window,
            request: p.number,
            message: p.request.at,
            tokens: p.request.counted,
            fraction: share(p.request.counted, self.window),
            band: self.band(p.request.counted),
            over_truncate: self
                .points
                .iter()
                .filter(|p| self.over_truncate(&p.request))
                .count(),
            over_window: self
                .points
                .iter()
                .filter(|p| self.over_window(&p.request))
                .count(),
        })
    }

    /// One request's `timeline.jsonl` line, as JSON.
    pub fn line(&self, p: &Point) -> Value {
        let r = &p.request;
        let made = |m: &Made| {
            json!({
                "call": m.call,
                "blocks": m.blocks.iter().map(|(id, tier)| json!({"block": id, "tier": tier}))
                    .collect::<Vec<_>>(),
                "reclaimed": m.tokens,
            })
        };
        let mut v = json!({
            "request": p.number,
            "messages": r.at,
            "uuid": p.uuid,
            "timestamp": p.timestamp,
            "historyTokens": r.history,
            "viewTokens": r.counted,
            "sentTokens": r.sent,
            "window": self.window,
            "fraction": round4(share(r.counted, self.window)),
            "band": self.band(r.counted).as_str(),
            "overTruncate": self.over_truncate(r),
            "overWindow": self.over_window(r),
            "liveBlocks": r.live_blocks,
            "truncated": (r.cut > 0).then(|| json!({"results": r.cut, "tokens": r.cut_tokens})),
            "nudge": r.nudge.as_ref().map(|n| json!({
                "kind": n.kind.as_str(),
                "tier": n.tier,
                "targets": n.targets,
            })),
            "compress": p.answers.iter().map(|a| match &a.made {
                Some(m) => made(m),
                None => json!({"call": a.call, "blocks": [], "reclaimed": 0, "why": a.why}),
            }).collect::<Vec<_>>(),
            "ctl": p.ctl.iter().map(made).collect::<Vec<_>>(),
            "usage": p.reported.map(|n| json!({
                "promptTokens": n,
                "estimate": r.sent,
                "error": if n == 0 { Value::Null } else {
                    json!(round4((r.sent as f64 - n as f64) / n as f64))
                },
            })),
        });
        if self.is_last(p) && !self.after.is_empty() {
            if let Some(o) = v.as_object_mut() {
                o.insert("ctlAfter".into(), self.after.iter().map(made).collect());
            }
        }
        v
    }

    /// Whether `p` is the last request (its line shows the ctl batches committed after it).
    fn is_last(&self, p: &Point) -> bool {
        self.points.last().is_some_and(|l| l.number == p.number)
    }

    /// `timeline.jsonl`: one line per request ([`Timeline::line`]'s text, written directly).
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.points.len() * 400);
        for p in &self.points {
            self.write_line(p, &mut out);
            out.push(b'\n');
        }
        out
    }

    /// [`Timeline::line`] as serde_json prints it, without making the value.
    fn write_line(&self, p: &Point, out: &mut Vec<u8>) {
        use std::io::Write;
        let r = &p.request;
        // Writing to a Vec cannot fail.
        let _ = write!(
            out,
            "{{\"request\":{},\"messages\":{},\"uuid\":",
            p.number, r.at
        );
        json_str(out, &p.uuid);
        out.extend_from_slice(b",\"timestamp\":");
        match &p.timestamp {
            Some(t) => json_str(out, t),
            None => out.extend_from_slice(b"null"),
        }
        let _ = write!(
            out,
            ",\"historyTokens\":{},\"viewTokens\":{},\"sentTokens\":{},\"window\":{},\"fraction\":",
            r.history, r.counted, r.sent, self.window
        );
        json_f64(out, round4(share(r.counted, self.window)));
        let _ = write!(
            out,
            ",\"band\":\"{}\",\"overTruncate\":{},\"overWindow\":{},\"liveBlocks\":{},\"truncated\":",
            self.band(r.counted).as_str(),
            self.over_truncate(r),
            self.over_window(r),
            r.live_blocks
        );
        if r.cut > 0 {
            let _ = write!(out, "{{\"results\":{},\"tokens\":{}}}", r.cut, r.cut_tokens);
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b",\"nudge\":");
        match &r.nudge {
            Some(n) => {
                let _ = write!(out, "{{\"kind\":");
                json_str(out, n.kind.as_str());
                let _ = write!(out, ",\"tier\":{},\"targets\":[", n.tier);
                for (i, t) in n.targets.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    json_str(out, t);
                }
                out.extend_from_slice(b"]}");
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"compress\":[");
        for (i, a) in p.answers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match &a.made {
                Some(m) => write_made(out, m),
                None => {
                    out.extend_from_slice(b"{\"call\":");
                    json_str(out, &a.call);
                    out.extend_from_slice(b",\"blocks\":[],\"reclaimed\":0,\"why\":");
                    match &a.why {
                        Some(w) => json_str(out, w),
                        None => out.extend_from_slice(b"null"),
                    }
                    out.push(b'}');
                }
            }
        }
        out.extend_from_slice(b"],\"ctl\":[");
        for (i, m) in p.ctl.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_made(out, m);
        }
        out.extend_from_slice(b"],\"usage\":");
        match p.reported {
            Some(n) => {
                let _ = write!(
                    out,
                    "{{\"promptTokens\":{},\"estimate\":{},\"error\":",
                    n, r.sent
                );
                if n == 0 {
                    out.extend_from_slice(b"null");
                } else {
                    json_f64(out, round4((r.sent as f64 - n as f64) / n as f64));
                }
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        if self.is_last(p) && !self.after.is_empty() {
            out.extend_from_slice(b",\"ctlAfter\":[");
            for (i, m) in self.after.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_made(out, m);
            }
            out.push(b']');
        }
        out.push(b'}');
    }

    /// Runs of nudges the model did not answer with a Compress call: (first, last, count)
    /// as indices into `points`. A request without a nudge does not end a run; a Compress
    /// call (or a ctl batch) does.
    pub fn ignored_nudges(&self) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        let mut run: Option<(usize, usize, usize)> = None;
        for (i, p) in self.points.iter().enumerate() {
            if !p.answers.is_empty() || !p.ctl.is_empty() {
                out.extend(run.take());
                if !p.ctl.is_empty() && p.request.nudge.is_some() && p.answers.is_empty() {
                    run = Some((i, i, 1));
                }
                continue;
            }
            if p.request.nudge.is_some() {
                match &mut run {
                    Some((_, last, n)) => {
                        *last = i;
                        *n += 1;
                    }
                    None => run = Some((i, i, 1)),
                }
            }
        }
        out.extend(run);
        out
    }

    /// Requests `(first, last)` (indices into `points`) of each run of consecutive requests
    /// for which `over` holds.
    pub fn runs(&self, over: impl Fn(&Request) -> bool) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, p) in self.points.iter().enumerate() {
            match (over(&p.request), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    out.push((s, i - 1));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            out.push((s, self.points.len() - 1));
        }
        out
    }
}

/// A made call's or batch's object in a `timeline.jsonl` line.
fn write_made(out: &mut Vec<u8>, m: &Made) {
    use std::io::Write;
    out.extend_from_slice(b"{\"call\":");
    json_str(out, &m.call);
    out.extend_from_slice(b",\"blocks\":[");
    for (i, (id, tier)) in m.blocks.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"block\":");
        json_str(out, id);
        let _ = write!(out, ",\"tier\":{tier}}}");
    }
    let _ = write!(out, "],\"reclaimed\":{}}}", m.tokens);
}

/// `s` as a JSON string, escaped as serde_json escapes it.
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `x` as serde_json prints a number made from it (`null` when it is not finite).
fn json_f64(out: &mut Vec<u8>, x: f64) {
    let _ = serde_json::to_writer(&mut *out, &serde_json::Value::from(x));
}

/// Each of `sessions` with its peak among `peaks` (`None`: no request).
pub fn peaks_by_session(sessions: &[String], peaks: &[Peak]) -> Vec<(String, Option<Peak>)> {
    sessions
        .iter()
        .map(|s| (s.clone(), peaks.iter().find(|p| p.session == *s).cloned()))
        .collect()
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noa::nudge::NudgeKind;
    use crate::noa::rebuild::Shown;

    fn made(call: &str, blocks: &[(&str, i64)], tokens: i64) -> Made {
        Made {
            call: call.to_string(),
            at: 3,
            blocks: blocks.iter().map(|(b, t)| (b.to_string(), *t)).collect(),
            tokens,
            journal: false,
        }
    }

    fn point(number: usize, counted: u64, sent: u64) -> Point {
        Point {
            number,
            request: Request {
                at: number * 2,
                history: counted + 7,
                counted,
                sent,
                cut: 0,
                cut_tokens: 0,
                live_blocks: 0,
                nudge: None,
            },
            uuid: format!("u-{number}"),
            timestamp: None,
            line: number as u64,
            reported: None,
            answers: Vec::new(),
            ctl: Vec::new(),
        }
    }

    #[test]
    fn each_line_is_the_json_value_printed() {
        let mut points = vec![point(1, 13, 13), point(2, 190_000, 201_000), point(3, 0, 0)];
        let p = &mut points[1];
        p.timestamp = Some("2025-06-02T09:09:59.305787387Z".into());
        p.uuid = "quote \" back \\ tab \t nl \n é \u{1}".into();
        p.reported = Some(229);
        p.request.cut = 4;
        p.request.cut_tokens = 1234;
        p.request.live_blocks = 2;
        p.request.nudge = Some(Shown {
            kind: NudgeKind::Tier2,
            tier: 2,
            targets: vec!["b1".into(), "b\"2".into()],
        });
        p.answers = vec![
            Answer {
                call: "c1".into(),
                made: Some(made("c1", &[("b3", 1), ("b4", 2)], -5)),
                why: None,
            },
            Answer {
                call: "c\u{7f}2".into(),
                made: None,
                why: Some("its result reports no block".into()),
            },
            Answer {
                call: "c3".into(),
                made: None,
                why: None,
            },
        ];
        p.ctl = vec![made("ctl-1", &[], 0), made("ctl-2", &[("b9", 3)], 77)];
        points[2].reported = Some(0);
        points[2].request.nudge = Some(Shown {
            kind: NudgeKind::Emergency,
            tier: 1,
            targets: Vec::new(),
        });
        for window in [200_000, 0, 3] {
            let tl = Timeline {
                session: "s".into(),
                window,
                floor_ratio: 0.3,
                pressure_ratio: 0.6,
                truncate_ratio: 0.9,
                messages: 9,
                points: points.clone(),
                after: if window == 3 {
                    vec![made("ctl-3", &[("b10", 1)], 12)]
                } else {
                    Vec::new()
                },
            };
            let want: String = points.iter().map(|p| format!("{}\n", tl.line(p))).collect();
            assert_eq!(String::from_utf8(tl.to_jsonl()).unwrap(), want);
            // The batches after the last request are on the last line only.
            let last = tl.line(points.last().unwrap());
            assert_eq!(last.get("ctlAfter").is_some(), window == 3, "{last}");
            assert!(tl.line(&points[0]).get("ctlAfter").is_none());
        }
    }
}
