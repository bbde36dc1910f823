use super::*;

#[test]
fn escapes_markup_and_quotes() {
    assert_eq!(
        escape("<script>alert('x')</script> & \"q\""),
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
    );
    assert_eq!(escape("a\0b"), "a\u{fffd}b");
    assert_eq!(escape("한국어 — plain"), "한국어 — plain");
}

fn block(rel: &str, path: &str) -> Block {
    Block {
        archive_rel: rel.into(),
        archive_path: path.into(),
        ..Block::default()
    }
}

#[test]
fn only_an_archive_inside_a_tier_directory_is_linked() {
    for ok in ["tier1/b1_m00001-m00004.md", "tier12/x.md"] {
        assert_eq!(archive_link(&block(ok, "")), Some(ok), "{ok}");
    }
    for bad in [
        "",
        "/etc/passwd",
        "../tier1/x.md",
        "tier1/../../x.md",
        "tier1/",
        "tier/x.md",
        "tierX/x.md",
        "notes/x.md",
        "tier1/a/b.md",
        "tier1/..",
        "tier1/x.md?y",
        "tier1/x.md#y",
        "tier1/a%2f..",
        "x.md",
    ] {
        assert_eq!(archive_link(&block(bad, "")), None, "{bad}");
    }
}

#[test]
fn an_archive_is_linked_in_the_directory_of_the_session_that_wrote_it() {
    let rel = "tier1/b1_m00004-m00009.md";
    let b = block(rel, "/var/lib/norma/noa/s2-tier1/tier1/b1_m00004-m00009.md");
    assert_eq!(archived_by(&b, rel), Some("s2-tier1"));
    assert_eq!(archived_by(&block(rel, ""), rel), None);
    assert_eq!(archived_by(&block(rel, "/elsewhere/other.md"), rel), None);
    assert_eq!(
        archived_by(&block(rel, "/x/../tier1/b1_m00004-m00009.md"), rel),
        None
    );
}

#[test]
fn links_are_percent_encoded_and_relative() {
    let mut s = String::new();
    href(&mut s, "../../", "tier1/a b\"<c>.md");
    assert_eq!(s, "../../tier1/a%20b%22%3Cc%3E.md");
    assert!(raw_range("m00001-m00180"));
    assert!(raw_range("m00042"));
    assert!(!raw_range("m1-m2"));
    assert!(!raw_range("../x"));
}

#[test]
fn a_long_body_is_cut_with_its_size_said() {
    let mut s = String::new();
    let text = "é".repeat(SHOWN_CHARS + 5);
    body(&mut s, &text);
    assert!(s.contains("shown: the first 20,000 of 20,005 characters (40,010 bytes)"));
    assert_eq!(s.matches('é').count(), SHOWN_CHARS);
    let mut short = String::new();
    body(&mut short, "<b>x</b>");
    assert_eq!(short, "<pre>&lt;b&gt;x&lt;/b&gt;</pre>");
}

#[test]
fn the_index_lists_sessions_newest_first_and_escapes_ids() {
    let row = |sid: &str, idle: Option<u64>| IndexRow {
        sid: sid.into(),
        status: None,
        messages: 3,
        last_activity: None,
        idle_seconds: idle,
        audit: (1, 0, 0),
    };
    let page = index_page(
        &[
            row("old", Some(500)),
            row("never", None),
            row("new<i>", Some(5)),
        ],
        None,
    );
    let at = |s: &str| page.find(s).unwrap_or_else(|| panic!("{s}"));
    assert!(at("data-session=\"new&lt;i&gt;\"") < at("data-session=\"old\""));
    assert!(at("data-session=\"old\"") < at("data-session=\"never\""));
    assert!(page.contains("href=\"sessions/new%3Ci%3E/view.html\""));
    assert!(!page.contains("<i>"));
    assert!(page.contains(CSP));
}
