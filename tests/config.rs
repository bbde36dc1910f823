//! Configuration (SPEC 10): the runtime's defaults, every key by flag, by `-o` and by TOML,
//! precedence, session tables and parents, the files the conformance tool writes, warnings for
//! questionable values and errors for unusable ones.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use normafs::cli::parse_settings;
use normafs::config::{
    keys, parse_options, ArchivePaths, Config, ConfigError, ConfigFile, KeyOwner, NoaConfig,
    Settings, Sources, Warning, NOA_KEYS,
};
use serde_json::{json, Value};

/// A non-default, unquestionable value of every key: as `-o`/flag text, and as the value it
/// must take (the JSON of [`NoaConfig::get`], or of the mount field).
fn samples() -> BTreeMap<&'static str, (&'static str, Value)> {
    BTreeMap::from([
        ("window", ("128000", json!(128_000))),
        ("floor_ratio", ("0.4", json!(0.4))),
        ("pressure_ratio", ("0.7", json!(0.7))),
        ("truncate_ratio", ("0.9", json!(0.9))),
        ("growth_ratio", ("0.1", json!(0.1))),
        ("growth_floor", ("40000", json!(40_000))),
        ("growth_cap", ("60000", json!(60_000))),
        ("min_growth_floor", ("10000", json!(10_000))),
        ("min_growth_ratio", ("0.5", json!(0.5))),
        ("tier2_growth_multiplier", ("2.5", json!(2.5))),
        ("min_benefit_tokens", ("7000", json!(7000))),
        ("protect_recent_messages", ("7", json!(7))),
        ("protect_recent_tokens", ("6000", json!(6000))),
        (
            "protected_tools",
            ("TodoWrite:mcp__*", json!(["TodoWrite", "mcp__*"])),
        ),
        ("min_range_chars", ("4000", json!(4000))),
        ("min_summary_chars", ("60", json!(60))),
        ("max_summary_chars", ("10000", json!(10_000))),
        ("max_tier", ("2", json!(2))),
        ("tier2_min_blocks", ("4", json!(4))),
        ("tier3_min_blocks", ("8", json!(8))),
        ("max_compress_attempts", ("5", json!(5))),
        ("live_seconds", ("0", json!(0))),
        ("archive_paths", ("mount", json!("mount"))),
        ("parents", ("s2:s1", json!(["s2", "s1"]))),
        ("ttl_ms", ("500", json!(500))),
        ("cache_mb", ("64", json!(64))),
    ])
}

/// The value of key `name` in `c`.
fn value_of(c: &Config, name: &str) -> Value {
    match name {
        "ttl_ms" => json!(c.ttl_ms),
        "cache_mb" => c.cache_mb.map_or(json!("auto"), |n| json!(n)),
        _ => c.noa.get(name),
    }
}

fn load(args: &[&str]) -> (Config, Vec<Warning>) {
    parse_settings(args)
        .expect("settings arguments parse")
        .load()
        .expect("settings load")
}

fn from_toml(text: &str) -> Result<(Config, Vec<Warning>), ConfigError> {
    let file = ConfigFile::parse(text, Path::new("test.toml"))?;
    Ok(Config::build(file, &Settings::default()))
}

fn toml_ok(text: &str) -> (Config, Vec<Warning>) {
    from_toml(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn the_samples_cover_every_key() {
    let names: Vec<&str> = keys().map(|k| k.name).collect();
    let sampled: Vec<&str> = samples().keys().copied().collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, sampled, "add a sample for every new key");
    for (name, (_, want)) in samples() {
        assert_ne!(
            value_of(&Config::default(), name),
            want,
            "{name}: the sample must differ from the default"
        );
    }
}

#[test]
fn defaults_are_the_runtimes_default_config() {
    // s1-small ran with DefaultConfig(200000); every other field is DefaultConfig's too.
    let spec = common::oracle("corpus-spec.json");
    let c = &spec["Sessions"][0]["Config"];
    assert_eq!(spec["Sessions"][0]["ID"], "s1-small");
    let n = &c["Nudge"];
    let d = NoaConfig::default();
    assert_eq!(json!(d.window), c["ModelContextLimit"]);
    assert_eq!(json!(d.floor_ratio), n["MinContextLimitPct"]);
    assert_eq!(json!(d.pressure_ratio), n["MaxContextLimitPct"]);
    assert_eq!(json!(d.truncate_ratio), c["Truncate"]["Threshold"]);
    assert_eq!(json!(d.truncate_ratio), n["EmergencyThresholdPct"]);
    assert_eq!(json!(d.growth_ratio), n["GrowthRatio"]);
    assert_eq!(json!(d.growth_floor), n["GrowthFloor"]);
    assert_eq!(json!(d.growth_cap), n["GrowthCap"]);
    assert_eq!(json!(d.min_growth_floor), n["MinGrowthFloor"]);
    assert_eq!(json!(d.min_growth_ratio), n["MinGrowthRatio"]);
    assert_eq!(json!(d.tier2_growth_multiplier), n["Tier2GrowthMultiplier"]);
    assert_eq!(json!(d.min_benefit_tokens), n["MinPressureBenefitTokens"]);
    assert_eq!(
        json!(d.protect_recent_messages),
        c["PreserveRecentMessages"]
    );
    assert_eq!(json!(d.protect_recent_tokens), c["PreserveRecentTokens"]);
    assert!(d.protected_tools.is_empty() && c["ProtectedTools"].is_null());
    assert_eq!(json!(d.min_range_chars), c["Compress"]["MinCompressRange"]);
    assert_eq!(
        json!(d.min_summary_chars),
        c["Compress"]["MinSummaryLength"]
    );
    assert_eq!(
        json!(d.max_summary_chars),
        c["Compress"]["MaxSummaryLength"]
    );
    assert_eq!(json!(d.max_tier), c["Tiers"]["MaxTier"]);
    assert_eq!(json!(d.tier2_min_blocks), c["Tiers"]["Tier2Trigger"]);
    assert_eq!(json!(d.tier3_min_blocks), c["Tiers"]["Tier3Trigger"]);
    assert_eq!(json!(d.max_compress_attempts), c["MaxCompressAttempts"]);
    // normafs's own keys (SPEC 10).
    assert_eq!(d.live_seconds, 120);
    assert_eq!(d.archive_paths, ArchivePaths::Runtime);
    assert!(d.parents.is_empty());
    assert_eq!(d.min_benefit(), 5_000);
    let cfg = Config::default();
    assert_eq!((cfg.ttl_ms, cfg.cache_mb), (1000, None));
    // `auto`: a sixteenth of the machine's memory, within bounds.
    assert_eq!(normafs::config::auto_cache_mb(24 << 30), 1536);
    assert_eq!(normafs::config::auto_cache_mb(1 << 30), 128);
    assert_eq!(normafs::config::auto_cache_mb(1 << 40), 4096);
    let b = cfg.cache_bytes();
    assert!((128 << 20..=4096 << 20).contains(&b), "{b}");
    assert!(cfg.sessions.is_empty());
    // No source at all gives the defaults, silently.
    let (built, w) = load(&[]);
    assert_eq!(built, cfg);
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn every_key_by_flag() {
    for k in keys() {
        let (text, want) = &samples()[k.name];
        let flag = format!("--{}", k.flag());
        let (c, w) = load(&[flag.as_str(), text]);
        assert!(w.is_empty(), "{flag}: {w:?}");
        assert_eq!(value_of(&c, k.name), *want, "{flag} {text}");
    }
}

#[test]
fn every_key_by_option() {
    for k in keys() {
        let (text, want) = &samples()[k.name];
        let item = format!("{}={text}", k.name);
        let (c, w) = load(&["-o", &item]);
        assert!(w.is_empty(), "-o {item}: {w:?}");
        assert_eq!(value_of(&c, k.name), *want, "-o {item}");
    }
    // All at once in one -o, as mount(8) would pass them.
    let all: Vec<String> = keys()
        .map(|k| format!("{}={}", k.name, samples()[k.name].0))
        .collect();
    let (c, w) = load(&["-o", &all.join(",")]);
    assert!(w.is_empty(), "{w:?}");
    for k in keys() {
        assert_eq!(value_of(&c, k.name), samples()[k.name].1, "{}", k.name);
    }
}

#[test]
fn every_key_by_toml_at_the_top_and_every_noa_key_in_a_session_table() {
    for k in keys() {
        let (_, want) = &samples()[k.name];
        // A JSON scalar or array of strings is also its TOML spelling.
        let text = format!("{} = {want}\n", k.name);
        let (c, w) = toml_ok(&text);
        assert!(w.is_empty(), "{text}: {w:?}");
        assert_eq!(value_of(&c, k.name), *want, "{text}");
        if k.owner == KeyOwner::Noa {
            let text = format!("[sessions.\"s9\"]\n{} = {want}\n", k.name);
            let (c, w) = toml_ok(&text);
            assert!(w.is_empty(), "{text}: {w:?}");
            assert_eq!(c.for_session("s9").get(k.name), *want, "{text}");
            assert_eq!(c.noa, NoaConfig::default(), "{text}: only s9 changes");
        }
    }
}

#[test]
fn describe_names_every_noa_key() {
    let d = NoaConfig::default().describe();
    let names: Vec<&str> = d
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let want: Vec<&str> = NOA_KEYS.iter().map(|k| k.name).collect();
    assert_eq!(names, want);
    assert_eq!(d["window"], 200_000);
    assert_eq!(d["min_benefit_tokens"], 5_000, "the value in effect");
    assert_eq!(d["archive_paths"], "runtime");
    assert_eq!(d["parents"], json!([]));
}

#[test]
fn flags_over_options_over_the_file_over_the_defaults() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("n.toml");
    std::fs::write(
        &file,
        "window = 1000\nprotect_recent_messages = 3\nparents = [\"a\"]\n\
         [sessions.\"s2\"]\nwindow = 40000\nmax_tier = 2\n",
    )
    .expect("write");
    let f = file.to_str().expect("utf8");

    let (c, _) = load(&["--config", f]);
    assert_eq!(c.noa.window, 1000);
    assert_eq!(c.noa.protect_recent_messages, 3);
    assert_eq!(
        c.for_session("s2").window,
        40_000,
        "a session table over the top"
    );
    assert_eq!(c.for_session("s2").protect_recent_messages, 3);
    assert_eq!(c.for_session("s2").max_tier, 2);

    let (c, _) = load(&["--config", f, "-o", "window=2000,parents=b:c"]);
    assert_eq!(c.noa.window, 2000);
    assert_eq!(c.noa.parents, ["b", "c"], "a list replaces the file's");
    assert_eq!(c.noa.protect_recent_messages, 3);
    assert_eq!(
        c.for_session("s2").window,
        2000,
        "the command line wins over session tables too"
    );
    assert_eq!(c.for_session("s2").max_tier, 2);

    let (c, _) = load(&["-o", "window=2000", "--config", f, "--window", "3000"]);
    assert_eq!(c.noa.window, 3000);
    assert_eq!(c.for_session("s2").window, 3000);

    // Repeated -o adds to a list; a later scalar replaces an earlier one.
    let (c, _) = load(&[
        "-o",
        "protected_tools=A",
        "-o",
        "protected-tools=B:C,window=5,window=6",
    ]);
    assert_eq!(c.noa.protected_tools, ["A", "B", "C"]);
    assert_eq!(c.noa.window, 6);
    // Repeated list flags add up too; an empty value clears.
    let (c, _) = load(&["--parents", "x", "--parents", "y:z"]);
    assert_eq!(c.noa.parents, ["x", "y", "z"]);
    let (c, _) = load(&["--config", f, "-o", "parents="]);
    assert!(c.noa.parents.is_empty());
    // auto takes a file's min_benefit_tokens back to the computed default.
    let (c, _) = load(&["--min-benefit-tokens", "auto", "--window", "1000000"]);
    assert_eq!(c.noa.min_benefit(), 10_000);
}

#[test]
fn session_tables_and_parents() {
    let (c, w) = toml_ok(
        "window = 128000\nprotected_tools = [\"TodoWrite\"]\n\
         [sessions.\"s2-tier1\"]\nwindow = 40000\n\
         [sessions.\"s5-fork-of-s2\"]\nwindow = 40000\nparents = [\"s2-tier1\", \"s0\"]\n",
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.sessions.len(), 2);
    let s5 = c.for_session("s5-fork-of-s2");
    assert_eq!(s5.parents, ["s2-tier1", "s0"]);
    assert_eq!(s5.window, 40_000);
    assert_eq!(
        s5.protected_tools,
        ["TodoWrite"],
        "the top level still applies"
    );
    assert!(c.for_session("s2-tier1").parents.is_empty());
    let other = c.for_session("s-other");
    assert_eq!(other, c.noa, "a session without a table has the top level");
    assert_eq!(other.window, 128_000);
}

/// The TOML spelling of a JSON value, as the conformance tool's `toml_val` writes it.
fn toml_val(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(toml_val).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// The conformance tool's `keys_of`: a session's keys from its runtime config, in its order.
fn keys_of(sess: &Value) -> Vec<(&'static str, Value)> {
    let c = &sess["Config"];
    let n = &c["Nudge"];
    let tools = if c["ProtectedTools"].is_null() {
        json!([])
    } else {
        c["ProtectedTools"].clone()
    };
    let mut k = vec![
        ("window", c["ModelContextLimit"].clone()),
        ("floor_ratio", n["MinContextLimitPct"].clone()),
        ("pressure_ratio", n["MaxContextLimitPct"].clone()),
        ("truncate_ratio", c["Truncate"]["Threshold"].clone()),
        ("growth_ratio", n["GrowthRatio"].clone()),
        ("growth_floor", n["GrowthFloor"].clone()),
        ("growth_cap", n["GrowthCap"].clone()),
        ("min_growth_floor", n["MinGrowthFloor"].clone()),
        ("min_growth_ratio", n["MinGrowthRatio"].clone()),
        (
            "tier2_growth_multiplier",
            n["Tier2GrowthMultiplier"].clone(),
        ),
        (
            "protect_recent_messages",
            c["PreserveRecentMessages"].clone(),
        ),
        ("protect_recent_tokens", c["PreserveRecentTokens"].clone()),
        ("protected_tools", tools),
        ("min_range_chars", c["Compress"]["MinCompressRange"].clone()),
        (
            "min_summary_chars",
            c["Compress"]["MinSummaryLength"].clone(),
        ),
        (
            "max_summary_chars",
            c["Compress"]["MaxSummaryLength"].clone(),
        ),
        ("max_tier", c["Tiers"]["MaxTier"].clone()),
        ("tier2_min_blocks", c["Tiers"]["Tier2Trigger"].clone()),
        ("tier3_min_blocks", c["Tiers"]["Tier3Trigger"].clone()),
        ("max_compress_attempts", c["MaxCompressAttempts"].clone()),
    ];
    if !n["MinPressureBenefitTokens"].is_null() {
        k.push(("min_benefit_tokens", n["MinPressureBenefitTokens"].clone()));
    }
    if sess["ParentSessionIDs"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        k.push(("parents", sess["ParentSessionIDs"].clone()));
    }
    k
}

fn assert_session_settings(got: &NoaConfig, sess: &Value) {
    let id = sess["ID"].as_str().unwrap_or("?");
    assert_eq!(got.live_seconds, 0, "{id}");
    for (name, want) in keys_of(sess) {
        assert_eq!(got.get(name), want, "{id}: {name}");
    }
    let parents_given = keys_of(sess).iter().any(|(k, _)| *k == "parents");
    if !parents_given {
        assert!(got.parents.is_empty(), "{id}");
    }
}

#[test]
fn the_files_the_conformance_tool_writes_load_and_give_each_session_its_settings() {
    let spec = common::oracle("corpus-spec.json");
    let sessions = spec["Sessions"].as_array().expect("sessions");
    assert!(sessions.len() >= 5);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut mount = String::from("live_seconds = 0\n");
    let mut windows = std::collections::BTreeSet::new();
    for s in sessions {
        let id = s["ID"].as_str().expect("id");
        let mut flat = String::from("live_seconds = 0\n");
        mount.push_str(&format!("\n[sessions.\"{id}\"]\n"));
        for (k, v) in keys_of(s) {
            let line = format!("{k} = {}\n", toml_val(&v));
            flat.push_str(&line);
            mount.push_str(&line);
        }
        // A flat file per session, given to `view`/`ctl` with --config.
        let path = dir.path().join(format!("cfg-{id}.toml"));
        std::fs::write(&path, &flat).expect("write");
        let (c, w) = load(&["--config", path.to_str().expect("utf8")]);
        assert!(w.is_empty(), "{id}: {w:?}");
        assert_session_settings(&c.noa, s);
        assert_session_settings(&c.for_session(id), s);
        assert_eq!(json!(c.noa.window), s["Config"]["ModelContextLimit"]);
        windows.insert(c.noa.window);
    }
    assert!(windows.len() >= 3, "the corpus uses several windows");
    // One mount file with a table per session.
    let path = dir.path().join("mount.toml");
    std::fs::write(&path, &mount).expect("write");
    let (c, w) = load(&["--config", path.to_str().expect("utf8")]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.noa.live_seconds, 0);
    assert_eq!(
        c.noa.window, 200_000,
        "the top level keeps the default window"
    );
    for s in sessions {
        let id = s["ID"].as_str().expect("id");
        let got = c.for_session(id);
        assert_session_settings(&got, s);
        assert_eq!(json!(got.window), s["Config"]["ModelContextLimit"], "{id}");
    }
    let fork = c.for_session("s5-fork-of-s2");
    assert_eq!(fork.parents, ["s2-tier1"]);
    assert_eq!(fork.window, 40_000);
}

fn one_warning(w: &[Warning], key: &str) -> String {
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].keys.contains(&key), "{w:?}");
    let line = w[0].to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains(key), "{line}");
    line
}

#[test]
fn questionable_values_warn_and_fall_back() {
    let (c, w) = toml_ok("window = 0\n");
    let line = one_warning(&w, "window");
    assert!(line.contains("using the default window = 200000"), "{line}");
    assert_eq!(c.noa.window, 200_000);

    for (text, key) in [
        ("floor_ratio = 7", "floor_ratio"),
        ("floor_ratio = -0.1", "floor_ratio"),
        ("pressure_ratio = nan", "pressure_ratio"),
        ("truncate_ratio = 0", "truncate_ratio"),
        ("truncate_ratio = 1.5", "truncate_ratio"),
        ("growth_ratio = inf", "growth_ratio"),
        ("min_growth_ratio = -1", "min_growth_ratio"),
        ("tier2_growth_multiplier = -2", "tier2_growth_multiplier"),
        ("max_tier = 4", "max_tier"),
        ("max_tier = 1", "max_tier"),
        ("tier2_min_blocks = 0", "tier2_min_blocks"),
        ("tier3_min_blocks = 5", "tier3_min_blocks"),
        ("min_summary_chars = 20000", "min_summary_chars"),
        ("max_compress_attempts = 0", "max_compress_attempts"),
        ("min_benefit_tokens = -1", "min_benefit_tokens"),
        ("protect_recent_messages = -3", "protect_recent_messages"),
        ("floor_ratio = 0.8", "floor_ratio"),
        ("truncate_ratio = 0.5", "truncate_ratio"),
        ("cache_mb = 0", "cache_mb"),
        ("ttl_ms = -1", "ttl_ms"),
        (
            "parents = [\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\"]",
            "parents",
        ),
    ] {
        let (c, w) = toml_ok(text);
        one_warning(&w, key);
        assert_eq!(
            value_of(&c, key),
            value_of(&Config::default(), key),
            "{text}: the default is used"
        );
        let def = Config::default();
        assert_eq!(c.noa, def.noa, "{text}");
    }

    // The same from -o and flags: a warning, never an error.
    let (c, w) = load(&["-o", "floor_ratio=nan", "--window", "-5"]);
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(c.noa, NoaConfig::default());
}

#[test]
fn questionable_values_in_a_session_table_name_the_session() {
    let (c, w) = toml_ok(
        "window = 100000\n\
         [sessions.\"s2\"]\nwindow = 0\nmax_tier = 2\n\
         [sessions.\"s3\"]\nparents = [\"s1\", \"s3\"]\n",
    );
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0].session.as_deref(), Some("s2"));
    assert!(
        w[0].to_string().starts_with("[sessions.\"s2\"] window = 0"),
        "{}",
        w[0]
    );
    assert_eq!(w[1].session.as_deref(), Some("s3"));
    assert_eq!(w[1].keys, ["parents"]);
    let s2 = c.for_session("s2");
    assert_eq!(s2.window, 100_000, "what s2 would have without its table");
    assert_eq!(s2.max_tier, 2, "the good keys of the table still apply");
    assert!(c.for_session("s3").parents.is_empty());

    // A top-level `parents` that names the session asked for.
    let (c, w) = toml_ok("parents = [\"s1\"]\n");
    assert!(w.is_empty());
    let (s1, w) = c.session_checked("s1");
    one_warning(&w, "parents");
    assert!(s1.parents.is_empty());
    assert_eq!(c.for_session("s2").parents, ["s1"]);

    // A table that breaks a rule only together with the top level.
    let (c, w) = toml_ok("truncate_ratio = 0.8\n[sessions.\"s4\"]\npressure_ratio = 0.85\n");
    assert_eq!(w.len(), 1, "{w:?}");
    let s4 = c.for_session("s4");
    assert_eq!((s4.pressure_ratio, s4.truncate_ratio), (0.75, 0.8));
}

fn error_of(text: &str) -> String {
    let e = from_toml(text).expect_err(text).to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(e.contains("test.toml"), "names the file: {e}");
    e
}

#[test]
fn unknown_keys_and_wrong_types_are_errors() {
    assert!(error_of("windw = 1000\n").contains("unknown key \"windw\""));
    let e = error_of("[sessions.\"s2\"]\nwindw = 1000\n");
    assert!(e.contains("windw") && e.contains("s2"), "{e}");
    for old in [
        "compress_tool_name = \"Compress\"",
        "min_range_messages = 2",
        "truncate_head = 1024",
        "truncate_tail = 512",
    ] {
        error_of(old);
    }
    assert!(error_of("window = \"big\"\n").contains("window must be an integer"));
    assert!(error_of("window = 1.5\n").contains("window"));
    assert!(error_of("floor_ratio = \"x\"\n").contains("floor_ratio"));
    assert!(error_of("protected_tools = \"Bash\"\n").contains("protected_tools"));
    assert!(error_of("parents = [1]\n").contains("parents"));
    assert!(error_of("archive_paths = \"disk\"\n").contains("archive_paths"));
    assert!(error_of("[sessions.\"s2\"]\nttl_ms = 5\n").contains("ttl_ms is a mount setting"));
    assert!(error_of("sessions = 3\n").contains("sessions"));
    assert!(error_of("window = \n").contains("line 1"));
    assert!(error_of("a = 1\na = 2\n").contains("line 2"));

    let missing = Sources {
        file: Some("/nonexistent/n.toml".into()),
        ..Sources::default()
    };
    let e = missing.load().expect_err("missing file").to_string();
    assert!(
        e.contains("cannot read config file /nonexistent/n.toml"),
        "{e}"
    );
}

#[test]
fn malformed_options_are_errors() {
    for (item, needle) in [
        ("window", "expected key=value"),
        ("windw=5", "unknown key \"windw\""),
        ("window=abc", "window"),
        ("floor_ratio=", "floor_ratio"),
        ("archive_paths=disk", "archive_paths"),
        ("window=5,max_tier=x", "max_tier=x"),
    ] {
        let e = parse_options(&[item]).expect_err(item).to_string();
        assert!(e.starts_with("-o "), "{e}");
        assert!(e.contains(needle), "{item}: {e}");
    }
    // Through the parsed command line, too.
    let src = parse_settings(["-o", "windw=1"]).expect("parses");
    assert!(src.load().is_err());
    // A bad flag value is clap's usage error.
    let e = parse_settings(["--window", "abc"])
        .expect_err("abc")
        .to_string();
    assert!(e.contains("invalid value 'abc'"), "{e}");
    assert!(parse_settings(["--archive-paths", "disk"]).is_err());
}

#[test]
fn a_session_table_naming_no_session_is_warned_of_with_its_file_and_the_nearest_id() {
    let root = common::example_root();
    let file = root.path().join(".normafs.toml");
    std::fs::write(
        &file,
        "[sessions.\"s2-tier11\"]\nwindow = 40000\n\n[sessions.\"s3-tier2\"]\nwindow = 128000\n",
    )
    .expect("write");
    let want = format!(
        "normafs: warning: [sessions.\"s2-tier11\"] in {} names no session of this root, so it \
         applies to nothing; the nearest session id is \"s2-tier1\"",
        file.display()
    );
    for args in [vec!["config"], vec!["audit"], vec!["view", "", "s1-small"]] {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"));
        c.arg(args[0]).arg(root.path());
        if args.len() > 2 {
            c.arg(args[2]);
        }
        let o = c.output().expect("run");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            e.lines().filter(|l| *l == want).count(),
            1,
            "{}: {e}",
            args[0]
        );
        assert!(
            !e.contains("s3-tier2\"] in"),
            "a table that names a session: {e}"
        );
    }
}
