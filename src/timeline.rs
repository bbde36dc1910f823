//! A session's history request by request (issue 26): at every request the runtime made,
//! how large the history and the view it sent were against the window, whether it cut tool
//! results, the nudge it showed and the Compress calls the model answered with; as
//! `timeline.jsonl`, as a picture (`timeline.svg`), and as the peak the audit reports.
//!
//! The requests are the replay's (`noa::rebuild::history`): one before each assistant
//! message, over the state the transcript's Compress calls and the journal's batches had
//! made by then.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::transcript::Content;
use crate::noa::content::COMPRESS_TOOL;
use crate::noa::pipeline::truncate_threshold;
use crate::noa::rebuild::{Made, Request};
use crate::store::root::RootPaths;
use crate::store::session;
use crate::store::txn::{self, TxnError};

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
    Ok(of_history(sid, cfg, &h, &t))
}

/// [`build`] from the session's files read already.
pub fn build_of(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
    rec: txn::Recorded<'_>,
) -> Result<Timeline, TxnError> {
    let h = txn::history_of(paths, sid, cfg, &[], now, rec)?;
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
            uuid: rec.uuid.to_string(),
            timestamp: rec.timestamp.as_ref().map(|t| t.to_string()),
            line: loaded.line,
            reported,
            answers,
            ctl: before,
        });
    }
    Timeline {
        session: sid.to_string(),
        window: cfg.window,
        floor_ratio: cfg.floor_ratio,
        pressure_ratio: cfg.pressure_ratio,
        truncate_ratio: cfg.truncate_ratio,
        messages: len,
        points,
    }
}

/// The view of the request after the first `n` messages of session `sid` (`at/<n>/`,
/// `normafs view --at N`): over the state the replay had there (opened as the runtime opens
/// it: a fork without blocks of its own inherits), summaries naming archives by `path`.
pub fn view_at(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    n: usize,
    now: DateTime<Utc>,
    path: crate::noa::session::ArchivePath<'_>,
    form: crate::noa::session::Form<'_>,
) -> Result<crate::bytes::Bytes, TxnError> {
    use crate::noa::session as view;
    let files = txn::SessionFiles::read(paths, sid)?;
    let own = txn::states_of(paths, sid, cfg, &[n], now, files.recorded())?
        .pop()
        .unwrap_or_else(|| crate::format::state::State::initial(sid));
    let mut msgs = session::messages(&files.transcript);
    msgs.truncate(n);
    let (state, _) = session::opened_state(paths, sid, &own, cfg);
    let p = view::Projection::new(msgs);
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
        json!({
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
        })
    }

    /// `timeline.jsonl`: one line per request.
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for p in &self.points {
            out.extend_from_slice(self.line(p).to_string().as_bytes());
            out.push(b'\n');
        }
        out
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

    /// `timeline.svg`: history and view tokens per request against the window's lines, the
    /// Compress calls by tier, and the nudges the model let pass.
    pub fn svg(&self) -> String {
        let (w, h) = (960.0, 380.0);
        let (left, right, top, bottom) = (78.0, 130.0, 62.0, 52.0);
        let (pw, ph) = (w - left - right, h - top - bottom);
        let n = self.points.len();
        let max_tokens = self
            .points
            .iter()
            .map(|p| p.request.history.max(p.request.sent))
            .max()
            .unwrap_or(0)
            .max(self.window)
            .max(1);
        let tick = nice_step(max_tokens as f64 * 1.05 / 4.0);
        let ymax = (max_tokens as f64 * 1.05 / tick).ceil() * tick;
        let x = |i: usize| {
            if n <= 1 {
                left + pw / 2.0
            } else {
                left + pw * i as f64 / (n - 1) as f64
            }
        };
        let y = |t: f64| top + ph - ph * (t / ymax).min(1.0);
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n"
        );
        let peak = self.peak();
        let title = match &peak {
            Some(p) => format!(
                "{} — {n} requests, window {}, peak {:.0}% at request {}",
                self.session,
                thousands(self.window),
                p.fraction * 100.0,
                p.request
            ),
            None => format!("{} — no request yet", self.session),
        };
        let _ = writeln!(
            s,
            "<text x=\"{left}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>",
            escape(&title)
        );
        // Axes and token ticks.
        let _ = writeln!(
            s,
            "<g stroke=\"#444\"><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\"/>\
             <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/></g>",
            top + ph,
            top + ph,
            left + pw,
            top + ph
        );
        for k in 0..=((ymax / tick).round() as usize) {
            let t = tick * k as f64;
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#444\">{}</text>",
                left - 6.0,
                y(t) + 4.0,
                thousands(t as u64)
            );
        }
        let step = (n / 10).max(1);
        for i in (0..n).step_by(step) {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
                x(i),
                top + ph + 16.0,
                i + 1
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">request</text>",
            left + pw / 2.0,
            h - 12.0
        );
        // The window's lines.
        if self.window > 0 {
            let lines = [
                ("window", 1.0, "#000000", ""),
                ("truncate", self.truncate_ratio, "#d62728", "6 4"),
                ("pressure", self.pressure_ratio, "#ff7f0e", "6 4"),
                ("floor", self.floor_ratio, "#2ca02c", "6 4"),
            ];
            // Labels at least a line apart, from the top down.
            let mut next_free = f64::MIN;
            for (name, ratio, color, dash) in lines {
                let t = self.window as f64 * ratio;
                if t > ymax {
                    continue;
                }
                let label_y = (y(t) + 4.0).max(next_free);
                next_free = label_y + 13.0;
                let _ = writeln!(
                    s,
                    "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"{color}\" \
                     stroke-dasharray=\"{dash}\"/><text x=\"{}\" y=\"{:.1}\" fill=\"{color}\">{name} \
                     {}</text>",
                    left + pw,
                    left + pw + 6.0,
                    label_y,
                    thousands(t as u64),
                    yy = y(t)
                );
            }
        }
        // Compress calls by tier, behind the lines.
        for (i, p) in self.points.iter().enumerate() {
            let tiers: Vec<i64> = p
                .answers
                .iter()
                .filter_map(|a| a.made.as_ref())
                .chain(p.ctl.iter())
                .flat_map(|m| m.blocks.iter().map(|b| b.1))
                .collect();
            if tiers.is_empty() && p.answers.is_empty() {
                continue;
            }
            let tier = tiers.iter().copied().max().unwrap_or(0);
            let color = match tier {
                0 => "#999999",
                1 => "#2ca02c",
                2 => "#9467bd",
                _ => "#8c564b",
            };
            let label = if tier == 0 {
                "none".to_string()
            } else {
                format!("T{tier}")
            };
            let _ = writeln!(
                s,
                "<line x1=\"{xx:.1}\" y1=\"{top}\" x2=\"{xx:.1}\" y2=\"{}\" stroke=\"{color}\" \
                 stroke-width=\"2\" opacity=\"0.6\"><title>request {}: Compress → {label}</title>\
                 </line><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\" \
                 fill=\"{color}\">{label}</text>",
                top + ph,
                p.number,
                top - 4.0,
                xx = x(i)
            );
        }
        // History and view.
        let poly = |f: &dyn Fn(&Request) -> u64| -> String {
            self.points
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(f(&p.request) as f64)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if n > 0 {
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"#999999\" stroke-width=\"1.5\" points=\"{}\"/>",
                poly(&|r| r.history)
            );
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>",
                poly(&|r| r.sent)
            );
        }
        // Nudges the model let pass.
        for (first, last, _) in self.ignored_nudges() {
            for i in first..=last {
                let p = &self.points[i];
                if p.request.nudge.is_none() {
                    continue;
                }
                let (xx, yy) = (x(i), y(p.request.sent as f64) - 6.0);
                let _ = writeln!(
                    s,
                    "<path d=\"M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"#d62728\">\
                     <title>request {}: nudge not answered</title></path>",
                    xx - 4.0,
                    yy - 6.0,
                    xx + 4.0,
                    yy - 6.0,
                    xx,
                    yy,
                    p.number
                );
            }
        }
        // Legend.
        let legend = [
            ("#999999", "history"),
            ("#1f77b4", "view sent"),
            ("#2ca02c", "Compress T1"),
            ("#9467bd", "Compress T2"),
            ("#8c564b", "Compress T3"),
            ("#999999", "Compress, no block"),
            ("#d62728", "nudge let pass"),
        ];
        // Each label as wide as its text (about 7 px a character at this size).
        let mut lx = left;
        for (color, name) in legend {
            let ly = 38.0;
            let _ = writeln!(
                s,
                "<rect x=\"{lx}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/>\
                 <text x=\"{}\" y=\"{:.1}\">{name}</text>",
                ly - 9.0,
                lx + 14.0,
                ly
            );
            lx += 30.0 + 7.0 * name.chars().count() as f64;
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Each of `sessions` with its peak among `peaks` (`None`: no request).
pub fn peaks_by_session(sessions: &[String], peaks: &[Peak]) -> Vec<(String, Option<Peak>)> {
    sessions
        .iter()
        .map(|s| (s.clone(), peaks.iter().find(|p| p.session == *s).cloned()))
        .collect()
}

/// The root's `timeline.svg`: each session's peak share of its window, one bar each.
pub fn root_svg(
    peaks: &[(String, Option<Peak>)],
    pressure_ratio: f64,
    truncate_ratio: f64,
) -> String {
    let row = 18.0;
    let (left, right, top, bottom) = (220.0, 90.0, 60.0, 36.0);
    let w = 960.0;
    let pw = w - left - right;
    let h = top + bottom + row * peaks.len().max(1) as f64;
    let max = peaks
        .iter()
        .filter_map(|(_, p)| p.as_ref().map(|p| p.fraction))
        .fold(1.05f64, f64::max);
    let x = |f: f64| left + pw * (f / max).min(1.0);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Peak view per \
         session, as a share of its window ({} sessions)</text>",
        peaks.len()
    );
    for (k, (name, f, color)) in [
        ("pressure", pressure_ratio, "#ff7f0e"),
        ("truncate", truncate_ratio, "#d62728"),
        ("window", 1.0, "#000000"),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{}\" x2=\"{xx:.1}\" y2=\"{}\" stroke=\"{color}\" \
             stroke-dasharray=\"6 4\"/><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" \
             fill=\"{color}\">{name}</text>",
            top - 4.0,
            h - bottom,
            top - 8.0 - 12.0 * (k % 2) as f64,
            xx = x(f)
        );
    }
    for (k, (sid, peak)) in peaks.iter().enumerate() {
        let yy = top + row * k as f64;
        let shown: String = if sid.chars().count() > 30 {
            sid.chars().take(29).chain(['…']).collect()
        } else {
            sid.clone()
        };
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            yy + 13.0,
            escape(&shown)
        );
        match peak {
            Some(p) => {
                let color = match p.band {
                    Band::BelowFloor | Band::Floor => "#1f77b4",
                    Band::Pressure => "#ff7f0e",
                    Band::Emergency => "#d62728",
                };
                let _ = writeln!(
                    s,
                    "<rect x=\"{left}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{}\" fill=\"{color}\">\
                     <title>{}: {:.1}% of {} at request {}</title></rect><text x=\"{:.1}\" \
                     y=\"{:.1}\">{:.0}%</text>",
                    yy + 3.0,
                    (x(p.fraction) - left).max(1.0),
                    row - 6.0,
                    escape(sid),
                    p.fraction * 100.0,
                    thousands(p.window),
                    p.request,
                    x(p.fraction) + 4.0,
                    yy + 13.0,
                    p.fraction * 100.0
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{:.1}\" fill=\"#888\">no request</text>",
                    left + 4.0,
                    yy + 13.0
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// A step of 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
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

/// Text for an SVG text node or attribute.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(28_407.0), 50_000.0);
        assert_eq!(nice_step(4_000.0), 5_000.0);
        assert_eq!(nice_step(1_500.0), 2_000.0);
        assert_eq!(nice_step(1_000.0), 1_000.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(200_000), "200,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn escape_keeps_svg_well_formed() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(escape("x\u{1}y"), "x?y");
    }
}
