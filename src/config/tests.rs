use super::*;

#[test]
fn every_key_has_a_distinct_name_and_flag() {
    let names: std::collections::BTreeSet<_> = keys().map(|k| k.name).collect();
    assert_eq!(names.len(), keys().count());
    assert_eq!(keys().count(), 26);
    for k in keys() {
        assert_eq!(k.flag().replace('-', "_"), k.name);
        assert!(!k.help.trim().is_empty(), "{}", k.name);
        assert!(!k.default_text().is_empty(), "{}", k.name);
    }
}

#[test]
fn defaults_pass_every_rule() {
    assert_eq!(first_problem(&NoaConfig::default(), None), None);
    assert_eq!(first_problem(&NoaConfig::default(), Some("s1")), None);
}

#[test]
fn min_benefit_follows_the_window_unless_set() {
    let mut c = NoaConfig::default();
    assert_eq!(c.min_benefit(), 5_000);
    c.window = 1_000_000;
    assert_eq!(c.min_benefit(), 10_000);
    c.window = 1_234_550;
    assert_eq!(c.min_benefit(), 12_346, "a half rounds up");
    c.min_benefit_tokens = Some(7);
    assert_eq!(c.min_benefit(), 7);
}

#[test]
fn protected_tools_match_exactly_in_any_case_or_by_prefix() {
    let c = NoaConfig {
        protected_tools: vec!["todowrite".into(), "mcp__vault_*".into(), String::new()],
        ..NoaConfig::default()
    };
    assert!(c.is_protected_tool("Compress"));
    assert!(c.is_protected_tool("TodoWrite"));
    assert!(c.is_protected_tool("MCP__Vault_read"));
    assert!(!c.is_protected_tool("TodoWriter"));
    assert!(!c.is_protected_tool("Read"));
    assert!(!c.is_protected_tool(""));
    assert!(!NoaConfig::default().is_protected_tool("compress"));
}

#[test]
fn cross_rules_settle_without_looping() {
    let mut c = NoaConfig {
        floor_ratio: 0.9,
        pressure_ratio: 0.95,
        truncate_ratio: 0.5,
        tier2_min_blocks: 30,
        ..NoaConfig::default()
    };
    let mut w = Vec::new();
    settle(&mut c, &NoaConfig::default(), None, &mut w);
    assert_eq!(first_problem(&c, None), None);
    assert!(w.len() >= 2, "{w:?}");
}

#[test]
fn options_split_on_commas_and_lists_on_colons() {
    let s =
        parse_options(&["window=1000,protected-tools=A:B", "protected_tools=C"]).expect("parse");
    assert_eq!(s.get("window"), Some(&Value::Int(1000)));
    assert_eq!(
        s.get("protected_tools"),
        Some(&Value::List(vec!["A".into(), "B".into(), "C".into()]))
    );
    let cleared = parse_options(&["parents="]).expect("parse");
    assert_eq!(cleared.get("parents"), Some(&Value::List(vec![])));
}
