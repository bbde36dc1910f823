//! `view.html` and `index.html` in a real browser (issue 42): headless Chromium opens the
//! pages from a real mount, and the DOM it built is checked against `view.jsonl` and
//! `status.json`; every link of the pages resolves to a file of the mount; a hostile
//! transcript's page runs nothing and shows every hostile string as text.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// Debian's `chromium` (installed by `scripts/test.sh` when missing); `None`, said on stderr,
/// where there is none (a failure under CI, where the test script installs it).
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {name}"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        if let Some(p) = found {
            return Some(p);
        }
    }
    assert!(
        !common::mount_required(),
        "chromium is missing where scripts/test.sh installs it (CI)"
    );
    eprintln!("notice: no chromium: browser test skipped");
    None
}

/// Chromium, headless, with a profile of its own (tests run in parallel).
fn browser(bin: &Path, profile: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The DOM Chromium built from the page at `page` (after it loaded: scripts would have run).
fn dump_dom(bin: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().expect("tempdir");
    let o = browser(bin, profile.path())
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium --dump-dom {}: {}",
        page.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let dom = String::from_utf8(o.stdout).expect("utf-8 DOM");
    assert!(dom.contains("</html>"), "no page: {dom:.300}");
    dom
}

/// The start tags of a serialized DOM (text never holds a raw `<`, and attribute values no
/// raw `>`: both are escaped).
fn tags(dom: &str) -> Vec<&str> {
    dom.match_indices('<')
        .filter_map(|(i, _)| {
            let rest = &dom[i + 1..];
            rest.starts_with(|c: char| c.is_ascii_alphabetic())
                .then(|| rest.find('>').map(|e| &rest[..e]))
                .flatten()
        })
        .collect()
}

/// The values of attribute `name` in the tags of `dom`, in order.
fn attrs<'d>(dom: &'d str, name: &str) -> Vec<&'d str> {
    let pat = format!(" {name}=\"");
    tags(dom)
        .into_iter()
        .flat_map(|t| {
            t.match_indices(&pat)
                .filter_map(|(i, _)| {
                    let rest = &t[i + pat.len()..];
                    rest.find('"').map(|e| &rest[..e])
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `&amp;` and the others back (the DOM serializes attribute values escaped).
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).expect("utf-8 link")
}

/// Every link of the page at `page` (inside the mount) resolves to a file of the mount,
/// relative to the page's own path, as the browser reads it. Returns the links.
fn links_resolve(dom: &str, page: &Path, mnt: &Path) -> Vec<String> {
    let dir = page.parent().expect("dir");
    let mut out = Vec::new();
    for href in attrs(dom, "href") {
        let href = unescape(href);
        assert!(
            !href.contains(':') && !href.starts_with('/'),
            "{}: a link that is not relative: {href}",
            page.display()
        );
        let target = dir.join(percent_decode(&href));
        let meta = std::fs::metadata(&target)
            .unwrap_or_else(|e| panic!("{}: link {href} resolves to nothing: {e}", page.display()));
        assert!(
            meta.is_file(),
            "{}: link {href} is not a file",
            page.display()
        );
        let canon = target.canonicalize().expect("canonical");
        assert!(
            canon.starts_with(mnt.canonicalize().expect("mnt")),
            "{}: link {href} leaves the mount",
            page.display()
        );
        out.push(href);
    }
    out
}

fn status(m: &common::Mounted, sid: &str) -> Value {
    serde_json::from_slice(
        &std::fs::read(m.at(&format!("sessions/{sid}/status.json"))).expect("status"),
    )
    .expect("status JSON")
}

fn view_lines(m: &common::Mounted, sid: &str) -> Vec<Value> {
    common::lines(&std::fs::read(m.at(&format!("sessions/{sid}/view.jsonl"))).expect("view"))
}

/// The page's articles and figures agree with `view.jsonl` and `status.json`.
fn check_page(dom: &str, lines: &[Value], st: &Value, sid: &str) {
    assert_eq!(
        dom.matches("<article ").count(),
        lines.len(),
        "{sid}: one article per view line"
    );
    let ids = attrs(dom, "id");
    for (i, l) in lines.iter().enumerate() {
        let n = i + 1;
        assert!(ids.contains(&format!("msg-{n}").as_str()), "{sid}: msg-{n}");
        let at = dom.find(&format!("id=\"msg-{n}\"")).expect("article");
        let open = &dom[at..at + dom[at..].find('>').expect("tag end")];
        if let Some(block) = l["block"].as_str() {
            assert!(
                open.contains(&format!(
                    "data-block=\"{block}\" data-tier=\"{}\" data-range=\"{}\"",
                    l["tier"],
                    l["range"].as_str().expect("range")
                )),
                "{sid}: block {block} in place: {open}"
            );
        } else if let Some(kind) = l["nudge"].as_str() {
            assert!(
                open.contains(&format!("data-nudge=\"{kind}\"")),
                "{sid}: nudge"
            );
        } else {
            assert_eq!(
                open.contains("data-truncated=\"true\""),
                l["truncated"] == true,
                "{sid}: line {n} marked as cut exactly when it was"
            );
            let refs: Vec<&str> = l["refs"]
                .as_array()
                .expect("refs")
                .iter()
                .map(|r| r.as_str().expect("ref"))
                .collect();
            assert!(
                open.contains(&format!("data-refs=\"{}\"", refs.join(" "))),
                "{sid}: refs of line {n}: {open}"
            );
            assert!(
                open.contains(&format!(
                    "data-role=\"{}\"",
                    l["message"]["role"].as_str().expect("role")
                )),
                "{sid}: role of line {n}"
            );
        }
    }
    // Tool calls and results collapsed, one each.
    let blocks = |kind: &str| {
        lines
            .iter()
            .flat_map(|l| {
                l["message"]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|b| b["type"] == kind)
            .count()
    };
    assert_eq!(
        dom.matches("<details class=\"tool-use\"").count(),
        blocks("tool_use"),
        "{sid}: tool calls"
    );
    assert_eq!(
        dom.matches("<details class=\"tool-result\"").count(),
        blocks("tool_result"),
        "{sid}: tool results"
    );
    assert_eq!(
        dom.matches("<details class=\"thinking\"").count(),
        blocks("thinking"),
        "{sid}: thinking"
    );
    assert!(
        !dom.contains("<details open"),
        "{sid}: collapsed by default"
    );
    // The figures.
    assert!(
        dom.contains(&format!("data-tokens=\"{}\"", st["measuredTokens"])),
        "{sid}: view tokens {}",
        st["measuredTokens"]
    );
    let band = st["band"].as_str().expect("band");
    assert!(
        dom.contains(&format!("id=\"band\" class=\"band-{band}\">{band}<")),
        "{sid}: band {band}"
    );
    for (tier, n) in st["liveBlocksByTier"].as_object().expect("tiers") {
        assert!(
            dom.contains(&format!(
                "<span data-tier=\"{tier}\">tier {tier}: {n}</span>"
            )),
            "{sid}: tier {tier} live blocks {n}"
        );
    }
    let total = st["usage"]["sum"]["total"].as_u64().expect("total");
    assert!(
        dom.contains(&format!(
            "<span id=\"usage-total\">{}</span>",
            normafs::timeline::thousands(total)
        )),
        "{sid}: usage {total}"
    );
}

#[test]
fn the_corpus_pages_in_a_browser_agree_with_the_view_and_status_and_every_link_resolves() {
    let Some(bin) = chromium() else { return };
    let Some(m) = common::mount_example() else {
        return;
    };
    let mut tier2_blocks = 0;
    for sid in common::CORPUS_SESSIONS {
        let page = m.at(&format!("sessions/{sid}/view.html"));
        let dom = dump_dom(&bin, &page);
        let lines = view_lines(&m, sid);
        let st = status(&m, sid);
        check_page(&dom, &lines, &st, sid);
        let links = links_resolve(&dom, &page, m.mnt());
        for l in lines.iter().filter(|l| l["block"].is_string()) {
            let range = l["range"].as_str().expect("range");
            assert!(
                links.contains(&format!("raw/{range}.md")),
                "{sid}: the originals of {range} linked"
            );
            if l["tier"].as_i64() == Some(2) {
                tier2_blocks += 1;
                assert!(
                    dom.contains("absorbed: "),
                    "{sid}: what a tier-2 block absorbed"
                );
            }
        }
        // The history picture inline, each request linking to its own page.
        let at: Vec<&String> = links.iter().filter(|l| l.starts_with("at/")).collect();
        let points = std::fs::read_dir(m.at(&format!("sessions/{sid}/at")))
            .expect("at/")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().parse::<usize>().is_ok())
            })
            .count();
        assert_eq!(at.len(), points, "{sid}: a link per request");
        if let Some(first) = at.first() {
            let page_at = m.at(&format!("sessions/{sid}/{first}"));
            let dom_at = dump_dom(&bin, &page_at);
            let n = first
                .trim_start_matches("at/")
                .trim_end_matches("/view.html");
            let lines_at = common::lines(
                &std::fs::read(m.at(&format!("sessions/{sid}/at/{n}/view.jsonl"))).expect("at"),
            );
            assert_eq!(
                dom_at.matches("<article ").count(),
                lines_at.len(),
                "{sid} at {n}"
            );
            let back = links_resolve(&dom_at, &page_at, m.mnt());
            assert!(
                back.contains(&"../../view.html".to_string()),
                "{sid}: back to today"
            );
        }
    }
    assert!(tier2_blocks > 0, "the corpus has a tier-2 block");

    // The root's page: every session, newest first, each linking to its page.
    let index = m.at("index.html");
    let dom_index = dump_dom(&bin, &index);
    let links = links_resolve(&dom_index, &index, m.mnt());
    let rows = attrs(&dom_index, "data-session");
    assert_eq!(rows.len(), common::CORPUS_SESSIONS.len());
    for sid in common::CORPUS_SESSIONS {
        assert!(
            links.contains(&format!("sessions/{sid}/view.html")),
            "{sid} linked"
        );
        let st = status(&m, sid);
        let at = dom_index
            .find(&format!("data-session=\"{sid}\""))
            .expect("row");
        let row = &dom_index[at..at + dom_index[at..].find("</tr>").expect("row end")];
        assert!(
            row.contains(&format!(
                "data-tokens=\"{}\" data-window=\"{}\"",
                st["measuredTokens"], st["window"]
            )),
            "{sid}: tokens against the window: {row}"
        );
    }
    assert!(
        dom_index.contains("<svg"),
        "the root's picture beside the table"
    );
}

#[test]
fn a_screenshot_of_the_tier2_session_page_is_not_blank() {
    let Some(bin) = chromium() else { return };
    let Some(m) = common::mount_example() else {
        return;
    };
    let profile = tempfile::tempdir().expect("tempdir");
    let shot = profile.path().join("shot.png");
    let o = browser(&bin, profile.path())
        .arg("--window-size=1200,1500")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            m.at("sessions/s3-tier2/view.html").display()
        ))
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("png");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("frame");
    assert_eq!((info.width, info.height), (1200, 1500));
    let px = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let background = &pixels[..px];
    let differ = pixels
        .chunks(px)
        .filter(|p| p.iter().zip(background).any(|(a, b)| a.abs_diff(*b) > 24))
        .count();
    let share = differ as f64 / (info.width * info.height) as f64;
    assert!(
        share > 0.03,
        "the page draws something: {share:.4} of pixels differ"
    );
}

/// What a transcript may hold that a page must never run or lose.
const HOSTILE: [&str; 9] = [
    "<script>document.title='pwned-script'</script>",
    "<img src=x onerror=\"document.title='pwned-img'\">",
    "</details></pre></article><b>out</b>",
    "--> <!-- a comment opened",
    "javascript:document.title='pwned-js'",
    "data:text/html,<script>alert(1)</script>",
    "<svg onload=\"document.title='pwned-svg'\"></svg>",
    "<a href=\"javascript:alert(1)\">click</a>",
    "\"'><style>body{display:none}</style>",
];

#[test]
fn a_hostile_transcript_renders_inert_and_readable() {
    let Some(bin) = chromium() else { return };
    let root = tempfile::tempdir().expect("tempdir");
    let sid = "s9-hostile";
    let mut s = common::Session::new(sid);
    for (i, h) in HOSTILE.iter().enumerate() {
        s.user(h);
        s.thinking(h, h);
        s.tool(&format!("toolu_{i}<x>"), h, json!({"command": h}), h);
    }
    // A result the emergency truncation cuts (the long line takes the view past the window).
    s.tool(
        "toolu_big",
        "Read",
        json!({"path": "big.log"}),
        &"<i>log</i>\n".repeat(6_000),
    );
    // (The last turns are protected from the cut.)
    for k in 0..8 {
        s.user(&format!("q{k}"));
        s.assistant(&format!("a{k}"));
    }
    let long = "<b>".repeat(333_334);
    s.user(&long);
    s.assistant("done");
    common::write_session(root.path(), &s);
    let Some(m) = common::mount(
        root,
        normafs::config::Config::default(),
        normafs::fuse::MountOptions::default(),
    ) else {
        return;
    };
    let page = m.at(&format!("sessions/{sid}/view.html"));
    let bytes = std::fs::read(&page).expect("page");
    assert!(
        bytes.len() < 1 << 20,
        "the long line is cut: {} bytes",
        bytes.len()
    );
    let d = dump_dom(&bin, &page);
    // Nothing ran: the title is the page's own, no element came from the content.
    assert!(
        d.contains(&format!("<title>{sid} — normafs</title>")),
        "the title is untouched: {:.400}",
        &d[d.find("<title>").unwrap_or(0)..]
    );
    for tag in [
        "<script",
        "<img",
        "<style>body",
        "<b>out",
        "<a href=\"javascript",
    ] {
        assert!(!d.contains(tag), "an element from the content: {tag}");
    }
    assert_eq!(
        d.matches("<svg").count(),
        1,
        "only the history picture is an svg"
    );
    // Every hostile string is there as text (escaped in the serialized DOM), in the text,
    // the thinking, the tool's name, its input and its result.
    for h in HOSTILE {
        let shown = h
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(
            d.matches(&shown).count() >= 4,
            "{h} shown as text ({} times)",
            d.matches(&shown).count()
        );
    }
    assert!(
        d.contains("shown: the first 20,000 of 1,000,002 characters"),
        "the 1 MB line is cut with its size said"
    );
    // The policy that forbids any script and any network.
    assert!(d.contains("default-src 'none'"), "the CSP");
    let links = links_resolve(&d, &page, m.mnt());
    assert!(links.iter().all(|l| !l.contains("javascript")));
    // The page agrees with the view, a result cut for the request marked as such.
    let lines = view_lines(&m, sid);
    assert!(
        lines.iter().any(|l| l["truncated"] == true),
        "the view cut a result"
    );
    check_page(&d, &lines, &status(&m, sid), sid);
}

#[test]
fn normafs_html_prints_the_pages_without_a_mount() {
    let root = common::example_root();
    let cfg = root.path().join("corpus.toml");
    std::fs::write(&cfg, common::corpus_config_toml("")).expect("config");
    let bin = env!("CARGO_BIN_EXE_normafs");
    let run = |args: &[&str]| {
        Command::new(bin)
            .arg("html")
            .arg(root.path())
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .output()
            .expect("run normafs html")
    };
    let page = common::ok(&run(&["s3-tier2"]));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("data-block=\"") && page.contains("data-tier=\"2\""));
    let view = Command::new(bin)
        .args(["view"])
        .arg(root.path())
        .arg("s3-tier2")
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("view");
    let lines = common::ok(&view).lines().count();
    assert_eq!(page.matches("<article ").count(), lines);
    let index = common::ok(&run(&[]));
    for sid in common::CORPUS_SESSIONS {
        assert!(index.contains(&format!("href=\"sessions/{sid}/view.html\"")));
    }
    let at = common::ok(&run(&["s3-tier2", "--at", "4"]));
    assert!(at.contains("the view sent after the first 4 messages"));
    assert!(at.contains("href=\"../../view.html\""));
    let bad = run(&["nosuch"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("nosuch"), "{err}");
    let help = Command::new(bin)
        .args(["html", "--help"])
        .output()
        .expect("help");
    assert!(common::ok(&help).contains("index.html"));
}

#[test]
fn a_page_of_a_very_long_view_shows_its_last_messages_and_links_the_history() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut s = common::Session::new("s1");
    for k in 0..5_100 {
        s.user(&format!("question {k}"));
        s.assistant(&format!("answer {k}"));
    }
    common::write_session(root.path(), &s);
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("html")
        .arg(root.path())
        .args(["s1", "--window", "100000000"])
        .output()
        .expect("run normafs html");
    let page = common::ok(&o);
    let shown = normafs::noa::html::SHOWN_MESSAGES;
    assert_eq!(page.matches("<article ").count(), shown);
    assert!(
        page.contains("The view has 10,200 messages: the first 5,200 are not shown on this page"),
        "{:.3000}",
        page
    );
    // The last message is there, the first is not.
    assert!(page.contains("id=\"msg-10200\"") && !page.contains("id=\"msg-1\""));
    assert!(page.contains(">answer 5099<"), "the last answer");
    // A history this long is linked, not replayed for the page.
    assert!(!page.contains("<svg"));
    assert!(page.contains(
        "The history picture: <a href=\"timeline.svg\">timeline.svg</a> (not drawn here: \
         replaying a history of 10200 messages takes long)."
    ));
}
