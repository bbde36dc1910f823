//! The pictures of a history: a session's `timeline.svg` and the root's.

use std::fmt::Write as _;

use super::*;

impl Timeline {
    /// `timeline.svg`: history and view tokens per request against the window's lines, the
    /// Compress calls by tier, and the nudges the model let pass.
    pub fn svg(&self) -> String {
        self.svg_with(false)
    }

    /// [`Timeline::svg`] with each request a link to its view's page (`at/<n>/view.html`,
    /// relative to the session directory): `view.html` shows it inline.
    pub fn svg_linked(&self) -> String {
        self.svg_with(true)
    }

    fn svg_with(&self, links: bool) -> String {
        let (w, h) = (960.0, 380.0);
        let (left, right, top, bottom) = (78.0, 130.0, 62.0, 52.0);
        let (pw, ph) = (w - left - right, h - top - bottom);
        let n = self.points.len();
        // Scaled to the data: a window far above it is named, not drawn (the curves would
        // sit at the bottom).
        let max_tokens = self
            .points
            .iter()
            .map(|p| p.request.history.max(p.request.sent).max(p.request.counted))
            .max()
            .unwrap_or(0)
            .max(1);
        // The counted view (before truncation) is drawn where it differs from what was sent.
        let counted_differs = self
            .points
            .iter()
            .any(|p| p.request.counted != p.request.sent);
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
                "{} — {n} requests, window {}, peak {:.0}% at request {} (counted before cuts)",
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
            let mut above = Vec::new();
            for (name, ratio, color, dash) in lines {
                let t = self.window as f64 * ratio;
                if t > ymax {
                    above.push(format!("{name} {}", thousands(t as u64)));
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
            if !above.is_empty() {
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#444\">↑ above the \
                     chart: {}</text>",
                    left + pw,
                    top - 6.0,
                    above.join(", ")
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
                0 => "#17becf",
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
            if counted_differs {
                let _ = writeln!(
                    s,
                    "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" \
                     stroke-dasharray=\"4 3\" opacity=\"0.7\" points=\"{}\"/>",
                    poly(&|r| r.counted)
                );
            }
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
        if links && n > 0 {
            // A column over each request (every k-th of very many: a page stays small).
            let every = n.div_ceil(MAX_LINKS).max(1);
            let col = if n <= 1 { pw } else { pw / (n - 1) as f64 } * every as f64;
            s.push_str("<g class=\"requests\">\n");
            for (i, p) in self.points.iter().enumerate().step_by(every) {
                let _ = writeln!(
                    s,
                    "<a href=\"at/{at}/view.html\"><rect x=\"{:.1}\" y=\"{top}\" width=\"{:.1}\" \
                     height=\"{ph}\" fill=\"#1f77b4\" fill-opacity=\"0\"><title>request {}: the \
                     view after {at} messages, {} tokens</title></rect></a>",
                    (x(i) - col / 2.0).max(left),
                    col.max(1.0),
                    p.number,
                    thousands(p.request.sent),
                    at = p.request.at,
                );
            }
            s.push_str("</g>\n");
        }
        // Legend.
        let mut legend = vec![
            ("#999999", "history"),
            ("#1f77b4", "view sent"),
            ("#2ca02c", "Compress T1"),
            ("#9467bd", "Compress T2"),
            ("#8c564b", "Compress T3"),
            ("#17becf", "Compress, no block"),
            ("#d62728", "nudge let pass"),
        ];
        if counted_differs {
            legend.insert(2, ("#1f77b4", "counted"));
        }
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

/// At most this many requests of a picture are links.
const MAX_LINKS: usize = 2000;

/// The root's `timeline.svg`: each session's peak share of its window, one bar each.
pub fn root_svg(
    peaks: &[(String, Option<Peak>)],
    pressure_ratio: f64,
    truncate_ratio: f64,
) -> String {
    // The highest peaks first (sessions without a request last), at most ROOT_ROWS of them.
    let mut order: Vec<&(String, Option<Peak>)> = peaks.iter().collect();
    order.sort_by(|(a, pa), (b, pb)| {
        let f = |p: &Option<Peak>| p.as_ref().map_or(f64::NEG_INFINITY, |p| p.fraction);
        f(pb).total_cmp(&f(pa)).then_with(|| a.cmp(b))
    });
    let more = order.len().saturating_sub(ROOT_ROWS);
    order.truncate(ROOT_ROWS);
    let row = 18.0;
    let (left, right, top) = (220.0, 90.0, 60.0);
    let bottom = if more > 0 { 58.0 } else { 40.0 };
    let w = 960.0;
    let pw = w - left - right;
    let h = top + bottom + row * order.len().max(1) as f64;
    let max = order
        .iter()
        .filter_map(|(_, p)| p.as_ref().map(|p| p.fraction))
        .fold(1.05f64, f64::max);
    let x = |f: f64| left + pw * (f / max).min(1.0);
    let axis_y = top + row * order.len().max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n"
    );
    let title = if more > 0 {
        format!(
            "Peak view per session, as a share of its window: the {} highest of {} sessions",
            order.len(),
            thousands(peaks.len() as u64)
        )
    } else {
        format!(
            "Peak view per session, as a share of its window ({} sessions, highest first)",
            peaks.len()
        )
    };
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>",
        escape(&title)
    );
    // The axis: the share of the window, every 25%.
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"#444\"/>",
        left + pw
    );
    let mut tick = 0.0;
    while tick <= max + 1e-9 {
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{axis_y}\" x2=\"{xx:.1}\" y2=\"{}\" stroke=\"#444\"/>\
             <text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{:.0}%</text>",
            axis_y + 4.0,
            axis_y + 16.0,
            tick * 100.0,
            xx = x(tick)
        );
        tick += 0.25;
    }
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
            "<line x1=\"{xx:.1}\" y1=\"{}\" x2=\"{xx:.1}\" y2=\"{axis_y}\" stroke=\"{color}\" \
             stroke-dasharray=\"6 4\"/><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" \
             fill=\"{color}\">{name}</text>",
            top - 4.0,
            top - 8.0 - 12.0 * (k % 2) as f64,
            xx = x(f)
        );
    }
    for (k, (sid, peak)) in order.iter().enumerate() {
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
    if more > 0 {
        let _ = writeln!(
            s,
            "<text x=\"{left}\" y=\"{}\" fill=\"#444\">and {} more sessions, lower \
             (`normafs audit` gives each one's peak)</text>",
            axis_y + 36.0,
            thousands(more as u64)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The root's picture shows at most this many sessions.
pub const ROOT_ROWS: usize = 40;

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

    fn peak(sid: &str, fraction: f64) -> (String, Option<Peak>) {
        (
            sid.to_string(),
            Some(Peak {
                session: sid.to_string(),
                window: 200_000,
                request: 1,
                message: 2,
                tokens: (fraction * 200_000.0) as u64,
                fraction,
                band: Band::BelowFloor,
                over_truncate: 0,
                over_window: 0,
            }),
        )
    }

    #[test]
    fn the_root_picture_shows_the_highest_peaks_first_and_says_how_many_more() {
        let mut peaks: Vec<(String, Option<Peak>)> = (0..100)
            .map(|i| peak(&format!("s{i:03}"), f64::from(i) / 200.0))
            .collect();
        peaks.push(("s-none".to_string(), None));
        let svg = root_svg(&peaks, 0.75, 0.95);
        assert!(svg.contains("the 40 highest of 101 sessions"), "{svg:.300}");
        assert!(svg.contains("and 61 more sessions, lower"));
        let at = |sid: &str| svg.find(&format!(">{sid}</text>"));
        assert!(at("s099") < at("s098") && at("s098").is_some());
        assert!(at("s060").is_some() && at("s059").is_none() && at("s-none").is_none());
        assert!(
            svg.contains(">0%</text>") && svg.contains(">50%</text>"),
            "an axis"
        );
        let few = root_svg(&peaks[..3], 0.75, 0.95);
        assert!(few.contains("(3 sessions, highest first)") && !few.contains("more sessions"));
    }

    #[test]
    fn escape_keeps_svg_well_formed() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(escape("x\u{1}y"), "x?y");
    }
}
