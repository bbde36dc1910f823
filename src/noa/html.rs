//! `view.html` and the root's `index.html` (issue 42): a session's view as one self-contained
//! page for a browser, and every session in one table.
//!
//! Safe with any transcript: every byte that comes from a transcript, a state, an archive or a
//! setting is escaped; nothing from them becomes markup, an attribute name or a link (content
//! is never turned into links, so a `javascript:` or `data:` URL in it is text). The page
//! carries a Content-Security-Policy that allows no script and no network at all; its links
//! are relative and only to files the mount shows. Text is shown pre-formatted, as written
//! (not rendered as Markdown: what the model was sent, character for character).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::assemble::{Assembled, Block as OutBlock, Meta};
use super::pipeline::Turn;
use super::render::band;
use super::tokens;
use crate::config::NoaConfig;
use crate::format::state::{Block, State};

/// A view of more messages than this shows its last ones only (a view is bounded by its
/// window; one that is not would make a page too large to open).
pub const SHOWN_MESSAGES: usize = 5_000;

/// A body longer than this many characters is shown cut, with its full size.
pub const SHOWN_CHARS: usize = 20_000;

/// The policy every page carries: styles of its own, images of the mount, nothing else.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
                       base-uri 'none'; form-action 'none'";

/// What a session's page shows besides its view.
#[derive(Debug, Default, Clone)]
pub struct Extras {
    /// `status.json`'s value (the latest view's page).
    pub status: Option<Value>,
    /// The session's audit findings: errors, warnings, notes.
    pub audit: Option<(usize, usize, usize)>,
    /// The history picture, each request linking to its page (inline).
    pub svg: Option<String>,
    /// The page of `at/<n>/`: the view after the first `n` messages.
    pub at: Option<usize>,
    /// When the transcript was last written (RFC 3339).
    pub last_write: Option<String>,
    /// Why the history picture is not inline (then it is linked).
    pub no_picture: Option<String>,
}

impl Extras {
    /// From the page to the session directory.
    fn up(&self) -> &'static str {
        if self.at.is_some() {
            "../../"
        } else {
            ""
        }
    }
}

/// Escape `s` for HTML text and quoted attribute values.
pub fn escape_into(out: &mut String, s: &str) {
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let rep = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            // A NUL is not kept by a parser: shown as the replacement character.
            0 => "\u{fffd}",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        out.push_str(rep);
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// `s` escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    out
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 48px;color:#1b1b1b;background:#fafafa}
h1{font-size:22px;margin:18px 0 6px}
nav a{margin-right:12px}
table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
th{background:#eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}
dl.figures{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0}
dl.figures dt{color:#555}
dl.figures dd{margin:0}
article{background:#fff;border:1px solid #ddd;border-left:4px solid #999;border-radius:4px;margin:10px 0;padding:6px 12px}
article.user{border-left-color:#1f77b4}
article.assistant{border-left-color:#2ca02c}
article.summary{border-left-color:#9467bd;background:#f7f3fb}
article.nudge{border-left-color:#d62728;background:#fff4f4}
article h2{font-size:13px;font-weight:600;margin:2px 0 6px;color:#333}
.refs,.tokens,.meta{color:#666;font-weight:400}
.mark{color:#b00;font-weight:600}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0;font:12.5px/1.4 ui-monospace,monospace}
details{margin:4px 0;border:1px solid #e4e4e4;border-radius:3px;padding:2px 8px;background:#fcfcfc}
summary{cursor:pointer;color:#333}
.cut{color:#b00}
.tag{color:#888}
.band-floor{color:#8a6d00}.band-pressure{color:#c55a00}.band-emergency{color:#b00}
figure{margin:10px 0;overflow-x:auto}
";

/// The page's head and opening body.
fn head(out: &mut String, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
    );
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"referrer\" content=\"no-referrer\">\n<title>");
    escape_into(out, title);
    out.push_str("</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n");
}

/// A body, cut past [`SHOWN_CHARS`] with its full size said.
fn body(out: &mut String, text: &str) {
    let (shown, cut) = match text.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    };
    out.push_str("<pre>");
    escape_into(out, shown);
    out.push_str("</pre>");
    if cut {
        let chars = text.chars().count();
        let _ = write!(
            out,
            "<p class=\"cut\">shown: the first {} of {} characters ({} bytes); the whole is in \
             view.jsonl</p>",
            thousands(SHOWN_CHARS as u64),
            thousands(chars as u64),
            thousands(text.len() as u64)
        );
    }
}

fn thousands(n: u64) -> String {
    crate::timeline::thousands(n)
}

/// `(characters, bytes)` of a body, for a collapsed block's line.
fn size(text: &str) -> String {
    let chars = text.chars().count();
    if chars == text.len() {
        format!("{} characters", thousands(chars as u64))
    } else {
        format!(
            "{} characters, {} bytes",
            thousands(chars as u64),
            thousands(text.len() as u64)
        )
    }
}

/// The text of a tool result's items, one after another.
fn result_text(b: &OutBlock<'_>) -> String {
    let parts: Vec<String> = b
        .content
        .iter()
        .map(|c| match c.kind.as_ref() {
            "text" => c.full_text().into_owned(),
            other => format!("[{other} item]"),
        })
        .collect();
    parts.join("\n")
}

/// Tokens of a block as its ref tag counts them (its text without the tag).
fn block_tokens(b: &OutBlock<'_>) -> u64 {
    match b.kind.as_ref() {
        "text" => tokens::count(&b.text),
        "thinking" => tokens::count(&b.thinking),
        "tool_use" => tokens::count(&b.input),
        "tool_result" => b.content.iter().map(|c| tokens::count(&c.text)).sum(),
        _ => 0,
    }
}

fn block_html(out: &mut String, b: &OutBlock<'_>) {
    match b.kind.as_ref() {
        "text" => {
            out.push_str("<div class=\"text\">");
            let (shown, cut) = match b.text.char_indices().nth(SHOWN_CHARS) {
                Some((at, _)) => (&b.text[..at], true),
                None => (b.text.as_ref(), false),
            };
            out.push_str("<pre>");
            escape_into(out, shown);
            if !b.suffix.is_empty() {
                out.push_str("<span class=\"tag\">");
                escape_into(out, &b.suffix);
                out.push_str("</span>");
            }
            out.push_str("</pre>");
            if cut {
                let _ = write!(
                    out,
                    "<p class=\"cut\">shown: the first {} of {} characters; the whole is in \
                     view.jsonl</p>",
                    thousands(SHOWN_CHARS as u64),
                    thousands(b.text.chars().count() as u64)
                );
            }
            out.push_str("</div>\n");
        }
        "thinking" => {
            let _ = write!(
                out,
                "<details class=\"thinking\"><summary>thinking · {}</summary>",
                size(&b.thinking)
            );
            body(out, &b.thinking);
            out.push_str("</details>\n");
        }
        "tool_use" => {
            out.push_str("<details class=\"tool-use\" data-name=\"");
            escape_into(out, &b.name);
            out.push_str("\" data-id=\"");
            escape_into(out, &b.id);
            out.push_str("\"><summary>tool call <b>");
            escape_into(out, &b.name);
            out.push_str("</b> <span class=\"meta\">");
            escape_into(out, &b.id);
            let _ = write!(out, " · input {}</span></summary>", size(&b.input));
            body(out, &b.input);
            out.push_str("</details>\n");
        }
        "tool_result" => {
            let text = result_text(b);
            out.push_str("<details class=\"tool-result\" data-tool-use-id=\"");
            escape_into(out, &b.tool_use_id);
            out.push_str("\"><summary>tool result");
            if b.is_error {
                out.push_str(" <span class=\"mark\">error</span>");
            }
            out.push_str(" <span class=\"meta\">");
            escape_into(out, &b.tool_use_id);
            let _ = write!(out, " · {}</span>", size(&text));
            if let Some(tag) = b.content.iter().rev().find(|c| !c.suffix.is_empty()) {
                out.push_str(" <span class=\"tag\">");
                escape_into(out, tag.suffix.trim());
                out.push_str("</span>");
            }
            out.push_str("</summary>");
            body(out, &text);
            out.push_str("</details>\n");
        }
        other => {
            out.push_str("<p class=\"meta\">a block of type <code>");
            escape_into(out, other);
            out.push_str("</code></p>\n");
        }
    }
}

/// `tier<N>/<file>` of an archive, when it names one inside the session's archive directory.
fn archive_link(b: &Block) -> Option<&str> {
    let rel = b.archive_rel.as_str();
    let (dir, file) = rel.split_once('/')?;
    let tier_dir = dir
        .strip_prefix("tier")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
    let plain = !file.is_empty()
        && !file.contains('/')
        && file != "."
        && file != ".."
        && !file.contains(['\0', '\\', '?', '#', '%']);
    (tier_dir && plain).then_some(rel)
}

/// The session whose archive directory holds block `b`'s archive at `rel`, as its
/// `archivePath` names it (`<archive base>/<sid>/<rel>`); `None` when it does not say.
fn archived_by<'b>(b: &'b Block, rel: &str) -> Option<&'b str> {
    let dir = b.archive_path.strip_suffix(rel)?.strip_suffix('/')?;
    let owner = dir.rsplit('/').next()?;
    let plain = !owner.is_empty() && owner != "." && owner != ".." && !owner.contains('\\');
    plain.then_some(owner)
}

/// A relative link: each part percent-encoded where a URL would read it otherwise.
fn href(out: &mut String, up: &str, rel: &str) {
    out.push_str(up);
    for b in rel.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

fn link(out: &mut String, up: &str, rel: &str, text: &str) {
    out.push_str("<a href=\"");
    href(out, up, rel);
    out.push_str("\">");
    escape_into(out, text);
    out.push_str("</a>");
}

/// A range of canonical refs (`m00001-m00180`), which `raw/` shows.
fn raw_range(range: &str) -> bool {
    let canon =
        |r: &str| r.len() == 6 && r.starts_with('m') && r[1..].bytes().all(|c| c.is_ascii_digit());
    match range.split_once('-') {
        Some((a, b)) => canon(a) && canon(b),
        None => canon(range),
    }
}

fn figure(out: &mut String, name: &str, value: &str) {
    out.push_str("<dt>");
    escape_into(out, name);
    out.push_str("</dt><dd>");
    out.push_str(value);
    out.push_str("</dd>\n");
}

/// A number of `status.json` at `path`, as text.
fn num(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

/// `view.html` (or `at/<n>/view.html`): the view as the model saw it, message by message,
/// with the session's figures above it.
pub fn session_page(
    msgs: &Assembled<'_>,
    t: &Turn<'_, '_>,
    state: &State,
    cfg: &NoaConfig,
    sid: &str,
    x: &Extras,
) -> String {
    let up = x.up();
    let mut s = String::new();
    let title = match x.at {
        Some(n) => format!("{sid} at request after {n} messages — normafs"),
        None => format!("{sid} — normafs"),
    };
    head(&mut s, &title);
    s.push_str("<header>\n<h1>");
    escape_into(&mut s, sid);
    if let Some(n) = x.at {
        let _ = write!(
            s,
            " <span class=\"meta\">the view sent after the first {} messages</span>",
            thousands(n as u64)
        );
    }
    s.push_str("</h1>\n<nav>");
    if x.at.is_some() {
        link(&mut s, up, "view.html", "today's view");
        s.push(' ');
        link(&mut s, "", "view.jsonl", "view.jsonl");
        link(&mut s, "", "view.md", "view.md");
    } else {
        for f in [
            "view.jsonl",
            "view.md",
            "status.json",
            "audit.txt",
            "timeline.jsonl",
        ] {
            link(&mut s, up, f, f);
        }
        link(&mut s, up, "../../index.html", "all sessions");
    }
    s.push_str("</nav>\n");

    // The figures.
    let band_name = band(t.measure, cfg);
    let mut live_by_tier: BTreeMap<i64, usize> = BTreeMap::new();
    for (b, live) in state.blocks().iter().zip(&t.active) {
        if *live {
            *live_by_tier.entry(b.tier).or_default() += 1;
        }
    }
    s.push_str("<dl class=\"figures\" id=\"figures\">\n");
    let window = match x.status.as_ref().and_then(|v| v.get("windowAssumed")) {
        Some(Value::String(why)) => format!(
            "{} tokens <span class=\"mark\">assumed</span>: {}",
            thousands(cfg.window),
            escape(why)
        ),
        _ => format!("{} tokens (set)", thousands(cfg.window)),
    };
    figure(&mut s, "window", &window);
    let pct = t.measure as f64 / cfg.window.max(1) as f64 * 100.0;
    figure(
        &mut s,
        "view",
        &format!(
            "<span id=\"view-tokens\" data-tokens=\"{}\">{} tokens</span> ({pct:.1}% of the \
             window), band <span id=\"band\" class=\"band-{band_name}\">{band_name}</span>",
            t.measure,
            thousands(t.measure)
        ),
    );
    figure(
        &mut s,
        "messages",
        &format!(
            "<span id=\"view-messages\">{}</span> sent, of {} content messages",
            thousands(msgs.messages.len() as u64),
            thousands(t.proj.len() as u64)
        ),
    );
    let tiers: Vec<String> = live_by_tier
        .iter()
        .map(|(tier, n)| format!("<span data-tier=\"{tier}\">tier {tier}: {n}</span>"))
        .collect();
    figure(
        &mut s,
        "live blocks",
        &if tiers.is_empty() {
            "none".to_string()
        } else {
            tiers.join(" · ")
        },
    );
    if t.truncated > 0 {
        figure(
            &mut s,
            "truncated",
            &format!(
                "<span class=\"mark\">{} tool results cut for this request</span>",
                t.truncated
            ),
        );
    }
    let nudge = t
        .injected()
        .and_then(|d| d.kind)
        .map_or("none", |k| k.as_str());
    figure(&mut s, "nudge", &escape(nudge));
    if let Some(st) = &x.status {
        let total = |who: &str| num(st, &["usage", who, "total"]).unwrap_or(0);
        let subs = st
            .get("usage")
            .and_then(|u| u.get("subagents"))
            .and_then(Value::as_object)
            .map_or(0, |m| m.len());
        figure(
            &mut s,
            "usage",
            &format!(
                "<span id=\"usage-total\">{}</span> tokens: the session {}, {} subagent(s) {}",
                thousands(total("sum")),
                thousands(total("parent")),
                subs,
                thousands(total("sum").saturating_sub(total("parent")))
            ),
        );
        let live = match st.get("live").and_then(|l| l.get("looksLive")) {
            Some(Value::Bool(true)) => "yes",
            Some(Value::Bool(false)) => "no",
            _ => "unknown",
        };
        let window = match (live, num(st, &["live", "liveSeconds"])) {
            ("yes", Some(n)) => format!(" (written to within the last {n} s)"),
            ("no", Some(n)) => format!(" (no write in the last {n} s)"),
            _ => String::new(),
        };
        let written = x.last_write.as_deref().map_or(String::new(), |w| {
            format!("; transcript last written {}", escape(w))
        });
        figure(
            &mut s,
            "live",
            &format!("<span id=\"live\">{live}</span>{window}{written}"),
        );
        if let Some(Value::String(e)) = st.get("stateError") {
            figure(
                &mut s,
                "state",
                &format!("<span class=\"mark\">{}</span>", escape(e)),
            );
        }
    }
    if let Some((errors, warnings, notes)) = x.audit {
        let mut a = String::new();
        link(
            &mut a,
            up,
            "audit.txt",
            &format!("{errors} error(s), {warnings} warning(s), {notes} note(s)"),
        );
        figure(&mut s, "audit", &format!("<span id=\"audit\">{a}</span>"));
    }
    s.push_str("</dl>\n</header>\n");

    if let Some(svg) = &x.svg {
        s.push_str("<figure id=\"history\">\n");
        s.push_str(svg);
        s.push_str(
            "<figcaption>Every request: click one to see the view it sent.</figcaption>\n\
             </figure>\n",
        );
    }

    if let Some(why) = &x.no_picture {
        s.push_str("<p id=\"history\" class=\"meta\">The history picture: ");
        link(&mut s, up, "timeline.svg", "timeline.svg");
        s.push_str(" (");
        escape_into(&mut s, why);
        s.push_str(").</p>\n");
    }

    let skipped = msgs.messages.len().saturating_sub(SHOWN_MESSAGES);
    if skipped > 0 {
        let _ = writeln!(
            s,
            "<p class=\"cut\" id=\"skipped\">The view has {} messages: the first {} are not \
             shown on this page; view.jsonl has them all.</p>",
            thousands(msgs.messages.len() as u64),
            thousands(skipped as u64)
        );
    }
    s.push_str("<main id=\"view\">\n");
    for (i, m) in msgs.messages.iter().enumerate().skip(skipped) {
        let n = i + 1;
        match &m.meta {
            Meta::Message { refs, truncated } => {
                let names: Vec<String> = refs
                    .iter()
                    .filter_map(|r| r.name().map(|n| n.into_owned()))
                    .collect();
                let role = escape(&m.role);
                let _ = write!(
                    s,
                    "<article class=\"message {role}\" id=\"msg-{n}\" data-role=\"{role}\" \
                     data-refs=\"{}\"{}>\n<h2>{role}",
                    escape(&names.join(" ")),
                    if *truncated {
                        " data-truncated=\"true\""
                    } else {
                        ""
                    }
                );
                if !names.is_empty() {
                    let _ = write!(
                        s,
                        " <span class=\"refs\">{}</span>",
                        escape(&names.join(" "))
                    );
                }
                let tokens: u64 = m.content.iter().flatten().map(block_tokens).sum();
                let _ = write!(
                    s,
                    " <span class=\"tokens\">{} tokens</span>",
                    thousands(tokens)
                );
                if *truncated {
                    s.push_str(
                        " <span class=\"mark\">emergency-truncated: tool results cut for this \
                         request</span>",
                    );
                }
                s.push_str("</h2>\n");
            }
            Meta::Summary { block, tier, range } => {
                let _ = write!(
                    s,
                    "<article class=\"summary\" id=\"msg-{n}\" data-role=\"{}\" \
                     data-block=\"{}\" data-tier=\"{tier}\" data-range=\"{}\">\n<h2>\
                     compressed block {} · tier {tier} · {}",
                    escape(&m.role),
                    escape(block),
                    escape(range),
                    escape(block),
                    escape(range)
                );
                let b = state.blocks().iter().find(|b| &b.block_id == block);
                if let Some(b) = b.filter(|b| !b.topic.is_empty()) {
                    let _ = write!(s, " · <span class=\"topic\">{}</span>", escape(&b.topic));
                }
                if let Some(b) = b {
                    let _ = write!(
                        s,
                        " <span class=\"tokens\">replaced {} tokens</span>",
                        thousands(b.compressed_tokens.max(0) as u64)
                    );
                }
                s.push_str("</h2>\n<p class=\"meta\">");
                match b.and_then(archive_link) {
                    Some(rel) => {
                        s.push_str("archive: ");
                        match b.and_then(|b| archived_by(b, rel)).filter(|o| *o != sid) {
                            // A fork's blocks copied from its ancestor are archived there.
                            Some(parent) => {
                                let there = format!("../{parent}/{rel}");
                                link(&mut s, up, &there, &format!("{parent}/{rel}"));
                            }
                            None => link(&mut s, up, rel, rel),
                        }
                    }
                    None => {
                        s.push_str("archive: ");
                        escape_into(
                            &mut s,
                            b.map_or("(not in the state)", |b| b.archive_rel.as_str()),
                        );
                    }
                }
                if raw_range(range) {
                    s.push_str(" · originals: ");
                    let raw = format!("raw/{range}.md");
                    link(&mut s, up, &raw, &raw);
                }
                if let Some(b) = b.filter(|b| !b.direct_block_ids.is_empty()) {
                    s.push_str(" · absorbed: ");
                    let ids: Vec<String> = b.direct_block_ids.iter().map(|i| escape(i)).collect();
                    let _ = write!(s, "<span class=\"absorbed\">{}</span>", ids.join(", "));
                }
                s.push_str("</p>\n");
            }
            Meta::Nudge(kind) => {
                let _ = write!(
                    s,
                    "<article class=\"nudge\" id=\"msg-{n}\" data-role=\"{}\" \
                     data-nudge=\"{}\">\n<h2>nudge · {} <span class=\"meta\">(written by noa \
                     into this request)</span></h2>\n",
                    escape(&m.role),
                    escape(kind),
                    escape(kind)
                );
            }
        }
        match &m.content {
            None => s.push_str("<p class=\"meta\">(no content)</p>\n"),
            Some(blocks) => {
                for b in blocks {
                    block_html(&mut s, b);
                }
            }
        }
        s.push_str("</article>\n");
    }
    s.push_str("</main>\n</body>\n</html>\n");
    s
}

/// One session of `index.html`.
#[derive(Debug, Clone)]
pub struct IndexRow {
    pub sid: String,
    /// Its `status.json`'s value (`None`: it could not be made).
    pub status: Option<Value>,
    /// Transcript messages.
    pub messages: usize,
    /// The last write to its files, as RFC 3339 (`None`: unknown).
    pub last_activity: Option<String>,
    /// Seconds since then, for ordering.
    pub idle_seconds: Option<u64>,
    /// Audit errors, warnings and notes.
    pub audit: (usize, usize, usize),
}

/// `index.html`: every session in one table, newest first, each linking to its page; the
/// root's picture beside it.
pub fn index_page(rows: &[IndexRow], svg: Option<&str>) -> String {
    let mut rows: Vec<&IndexRow> = rows.iter().collect();
    // Newest first; never written (unknown) last; then by id.
    rows.sort_by(|a, b| {
        a.idle_seconds
            .unwrap_or(u64::MAX)
            .cmp(&b.idle_seconds.unwrap_or(u64::MAX))
            .then_with(|| a.sid.cmp(&b.sid))
    });
    let mut s = String::new();
    head(&mut s, "sessions — normafs");
    let _ = writeln!(
        s,
        "<header><h1>Sessions <span class=\"meta\">{} in this root</span></h1>\n<nav>",
        rows.len()
    );
    link(&mut s, "", "audit.txt", "audit.txt");
    link(&mut s, "", "timeline.svg", "timeline.svg");
    s.push_str(
        "</nav></header>\n<main>\n<table id=\"sessions\">\n<thead><tr><th>session</th>\
                <th>messages</th><th>view tokens / window</th><th>band</th><th>live blocks by \
                tier</th><th>last activity</th><th>audit</th><th>live</th></tr></thead>\n<tbody>\n",
    );
    for r in &rows {
        let sid = escape(&r.sid);
        let _ = write!(s, "<tr data-session=\"{sid}\"><td>");
        link(&mut s, "", &format!("sessions/{}/view.html", r.sid), &r.sid);
        let _ = write!(
            s,
            "</td><td class=\"n\">{}</td>",
            thousands(r.messages as u64)
        );
        match &r.status {
            Some(st) => {
                let measured = num(st, &["measuredTokens"]).unwrap_or(0);
                let window = num(st, &["window"]).unwrap_or(0);
                let ratio = st.get("usageRatio").and_then(Value::as_f64).unwrap_or(0.0);
                let band = st.get("band").and_then(Value::as_str).unwrap_or("");
                let _ = write!(
                    s,
                    "<td class=\"n\" data-tokens=\"{measured}\" data-window=\"{window}\">{} / {} \
                     ({:.1}%)</td><td class=\"band-{b}\">{b}</td>",
                    thousands(measured),
                    thousands(window),
                    ratio * 100.0,
                    b = escape(band)
                );
                let tiers: Vec<String> = st
                    .get("liveBlocksByTier")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("T{}: {}", escape(k), v.as_u64().unwrap_or(0)))
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = write!(
                    s,
                    "<td>{}</td>",
                    if tiers.is_empty() {
                        "none".to_string()
                    } else {
                        tiers.join(" · ")
                    }
                );
            }
            None => s.push_str("<td colspan=\"3\" class=\"mark\">its view could not be made</td>"),
        }
        let _ = write!(
            s,
            "<td>{}</td>",
            escape(r.last_activity.as_deref().unwrap_or("unknown"))
        );
        let (e, w, _) = r.audit;
        let _ = write!(
            s,
            "<td data-errors=\"{e}\" data-warnings=\"{w}\">{}{e} error(s), {w} warning(s)</td>",
            if e > 0 {
                "<span class=\"mark\">●</span> "
            } else {
                ""
            }
        );
        let live = r
            .status
            .as_ref()
            .and_then(|st| st.get("live"))
            .and_then(|l| l.get("looksLive"))
            .and_then(Value::as_bool);
        let _ = writeln!(
            s,
            "<td>{}</td></tr>",
            match live {
                Some(true) => "live",
                Some(false) => "",
                None => "?",
            }
        );
    }
    s.push_str("</tbody>\n</table>\n");
    if let Some(svg) = svg {
        s.push_str("<figure id=\"peaks\">\n");
        s.push_str(svg);
        s.push_str("</figure>\n");
    }
    s.push_str("</main>\n</body>\n</html>\n");
    s
}

#[cfg(test)]
mod tests;
