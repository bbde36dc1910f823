//! Boundedness (issue 26): whether each request's view stayed under the truncate threshold
//! and the window, and whether the model let nudges pass, from the session's timeline. Only
//! `normafs audit` checks it (the replay costs a pipeline run per request, which the
//! mount's `audit.txt`, read by every `grep -r`, does not pay).
//!
//! Codes (normafs choices, beside the SPEC 9 catalogue): `view.over-window` (warn: a
//! request larger than the window), `view.over-truncate` (info: the runtime cut tool
//! results), `nudge.ignored` (info: [`IGNORED_RUN`] nudges or more in a row not answered
//! with a Compress call). Each run of requests is one finding, at the transcript line of
//! the message that answered its first request.

use super::*;
use crate::timeline::{self, Timeline};

/// The boundedness codes.
pub const CODES: [&str; 3] = ["view.over-window", "view.over-truncate", "nudge.ignored"];

/// A run of at least this many nudges let pass is a finding (one or two are the model
/// finishing what it was doing).
pub const IGNORED_RUN: usize = 3;

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

/// The findings of one session's timeline into `a`, and its peak.
pub fn audit_bounds(a: &mut Audit, tl: &Timeline, style: PathStyle) {
    let path = style.transcript(&tl.session);
    let share = |n: u64| {
        if tl.window == 0 {
            0.0
        } else {
            n as f64 / tl.window as f64
        }
    };
    let span = |first: usize, last: usize| {
        let (p, q) = (&tl.points[first], &tl.points[last]);
        if first == last {
            format!("request {} (after message {})", p.number, p.request.at)
        } else {
            format!(
                "requests {}–{} (after messages {}–{})",
                p.number, q.number, p.request.at, q.request.at
            )
        }
    };
    let worst = |first: usize, last: usize, f: &dyn Fn(&crate::noa::rebuild::Request) -> u64| {
        tl.points[first..=last]
            .iter()
            .max_by_key(|p| f(&p.request))
            .map(|p| (p.number, f(&p.request)))
            .unwrap_or((0, 0))
    };
    for (first, last) in tl.runs(|r| tl.over_window(r)) {
        let (at, n) = worst(first, last, &|r| r.sent);
        a.push(
            Severity::Warn,
            "view.over-window",
            path.clone(),
            Some(tl.points[first].line),
            format!(
                "{}: the view sent was larger than the window of {} tokens (peak {} tokens, {} \
                 of it, at request {at})",
                span(first, last),
                timeline::thousands(tl.window),
                timeline::thousands(n),
                pct(share(n)),
            ),
        );
    }
    let threshold = tl.truncate_at();
    for (first, last) in tl.runs(|r| tl.over_truncate(r)) {
        let (at, n) = worst(first, last, &|r| r.counted);
        let cut: usize = tl.points[first..=last].iter().map(|p| p.request.cut).sum();
        a.push(
            Severity::Info,
            "view.over-truncate",
            path.clone(),
            Some(tl.points[first].line),
            format!(
                "{}: the view reached the truncate threshold ({} tokens, {} of the window; \
                 peak {} tokens, {}, at request {at}); {cut} tool result(s) cut",
                span(first, last),
                timeline::thousands(threshold),
                pct(tl.truncate_ratio),
                timeline::thousands(n),
                pct(share(n)),
            ),
        );
    }
    for (first, last, count) in tl.ignored_nudges() {
        if count < IGNORED_RUN {
            continue;
        }
        let q = &tl.points[last];
        a.push(
            Severity::Info,
            "nudge.ignored",
            path.clone(),
            Some(tl.points[first].line),
            format!(
                "{}: {count} nudges in a row not answered with a Compress call (the view at {} \
                 of the window at the last)",
                span(first, last),
                pct(share(q.request.counted)),
            ),
        );
    }
    match tl.peak() {
        Some(p) => a.peaks.push(p),
        None => a.quiet.push(tl.session.clone()),
    }
}

/// The boundedness of session `s` (its files read by its audit) into `a`. A session whose
/// transcript or journal cannot be read is left out (its own findings say why).
pub fn audit_bounds_in(
    a: &mut Audit,
    s: &SessionData,
    cfg: &NoaConfig,
    style: PathStyle,
    paths: &RootPaths,
    now: chrono::DateTime<chrono::Utc>,
) {
    let Ok(journal) = &s.journal else { return };
    if !s.transcript_exists {
        return;
    }
    let rec = crate::store::txn::Recorded {
        transcript: &s.transcript,
        state: &s.state.state,
        journal,
        projected: None,
    };
    if let Ok(tl) = timeline::build_of(paths, &s.sid, cfg, now, rec) {
        audit_bounds(a, &tl, style);
    }
}

/// The line of a peak in `audit.txt`.
pub fn peak_line(p: &timeline::Peak) -> String {
    format!(
        "peak {}: {} of {} ({} tokens) at request {} (after message {}), {}; {} request(s) over \
         the truncate threshold, {} over the window",
        p.session,
        pct(p.fraction),
        timeline::thousands(p.window),
        timeline::thousands(p.tokens),
        p.request,
        p.message,
        p.band.as_str(),
        p.over_truncate,
        p.over_window
    )
}

/// Replay each of `sessions` (on as many threads as there are cores) and add its
/// boundedness findings and peak to `a`. A session whose transcript cannot be read is left
/// out (its own findings say why).
pub fn audit_bounds_of(
    a: &mut Audit,
    paths: &RootPaths,
    sessions: &[String],
    cfg: &Config,
    style: PathStyle,
) {
    let now = chrono::Utc::now();
    let one = |sid: &String| {
        let mut part = Audit::default();
        if let Ok(tl) = timeline::build(paths, sid, &cfg.for_session(sid), now) {
            audit_bounds(&mut part, &tl, style);
        }
        part
    };
    let threads = root::helpers().clamp(1, sessions.len().max(1));
    let chunk = sessions.len().div_ceil(threads).max(1);
    let parts: Vec<Audit> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .chunks(chunk)
            .map(|c| {
                let one = &one;
                std::thread::Builder::new()
                    .name("audit-bounds".into())
                    .stack_size(root::HELPER_STACK)
                    .spawn_scoped(scope, move || c.iter().map(one).collect::<Vec<_>>())
            })
            .collect();
        let mut out = Vec::new();
        for (h, c) in handles.into_iter().zip(sessions.chunks(chunk)) {
            match h.ok().and_then(|h| h.join().ok()) {
                Some(parts) => out.extend(parts),
                // No thread to be had (or a panic in one): on this one.
                None => out.extend(c.iter().map(one)),
            }
        }
        out
    });
    for p in parts {
        a.findings.extend(p.findings);
        a.peaks.extend(p.peaks);
        a.quiet.extend(p.quiet);
    }
}
