//! Configuration (SPEC 10): the noa core's and the mount's settings, the one list of their keys,
//! where values come from (defaults, a TOML file, `-o`, flags) and the warnings for questionable
//! values.
//!
//! Precedence, lowest first: the runtime's defaults (`noa/config.go` `DefaultConfig`); the
//! `--config` file's top level; for one session, its `[sessions."<sid>"]` table; `-o key=value`;
//! flags (`--window 128000`). The command line wins over the file everywhere, session tables
//! included.
//!
//! Two kinds of trouble, treated differently:
//! - a value that cannot mean anything (an unknown key, a value of the wrong type, a malformed
//!   `-o` item, an unknown `archive_paths` word) is a [`ConfigError`] and stops the command;
//! - a value of the right type that the runtime would call questionable (its `ValidateConfig`
//!   rules, plus ratios outside 0..1, `window = 0`, `max_tier` other than 2 or 3, negative
//!   counts, an unusable `parents` list) is a [`Warning`]: the key falls back and the command
//!   goes on. At the top level it falls back to the runtime's default; in a session table, to
//!   what the session would have without that table (the top level's value), except `parents`,
//!   which falls back to none.
//!
//! Every key is one entry of the `noa_settings!` list below (or of [`MOUNT_KEYS`]); the file
//! reader, `-o`, the flags of `cli.rs`, [`NoaConfig::describe`] and the tests all walk that one
//! list, so a key cannot be known to one of them and missed by another.

mod error;
pub use error::*;

mod file;
pub use file::*;

mod value;
pub use value::*;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};

/// The tool the core always protects (SPEC 4.6), whatever `protected_tools` says.
pub const COMPRESS_TOOL: &str = "Compress";

/// Most ancestors a session's `parents` may name (SPEC 4.10).
pub const MAX_PARENTS: usize = 8;

/// How a summary names its archive file (`archive_paths`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchivePaths {
    /// As the runtime does: the archive's path on the runtime's disk.
    #[default]
    Runtime,
    /// The path inside the mount, for agents that see only the mount.
    Mount,
}

impl ArchivePaths {
    /// The words the settings accept, in the order of the variants.
    pub const WORDS: &'static [&'static str] = &["runtime", "mount"];

    pub fn as_str(self) -> &'static str {
        match self {
            ArchivePaths::Runtime => "runtime",
            ArchivePaths::Mount => "mount",
        }
    }

    pub fn from_word(word: &str) -> Option<ArchivePaths> {
        match word {
            "runtime" => Some(ArchivePaths::Runtime),
            "mount" => Some(ArchivePaths::Mount),
            _ => None,
        }
    }
}

/// Whose setting a key is, which decides where it may be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOwner {
    /// The noa core's ([`NoaConfig`]): settable at the top level and per session.
    Noa,
    /// The mount's ([`Config`]'s mount settings): top level only.
    Mount,
}

/// One key of SPEC 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// As written in the file and in `-o` (flags write `-` for `_`).
    pub name: &'static str,
    pub kind: Kind,
    pub owner: KeyOwner,
    /// One line for `--help` (as a doc comment gives it: it may start with a space).
    pub help: &'static str,
}

impl Key {
    /// The long flag, without its `--`.
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    /// The default, as `--help` shows it.
    pub fn default_text(&self) -> String {
        let v = match self.owner {
            KeyOwner::Noa => NoaConfig::default().get(self.name),
            KeyOwner::Mount => Config::default().get_mount(self.name),
        };
        match v {
            Json::String(s) => s,
            Json::Array(a) if a.is_empty() => "none".into(),
            other => other.to_string(),
        }
    }
}

/// Declares [`NoaConfig`] from one list of `name: type = default` entries, and with it the key
/// list ([`NOA_KEYS`]) and the by-name access that every source uses.
macro_rules! noa_settings {
    ($( #[doc = $help:literal] $field:ident : $ty:ty = $default:expr ; )*) => {
        /// The settings of the noa core for one session (SPEC 4, 10); defaults are the
        /// runtime's `DefaultConfig`.
        #[derive(Debug, Clone, PartialEq)]
        pub struct NoaConfig {
            $( #[doc = $help] pub $field: $ty, )*
        }

        impl Default for NoaConfig {
            fn default() -> Self {
                NoaConfig { $( $field: $default, )* }
            }
        }

        /// Every noa key, in SPEC 10's order.
        pub const NOA_KEYS: &[Key] = &[
            $( Key {
                name: stringify!($field),
                kind: <$ty as Setting>::KIND,
                owner: KeyOwner::Noa,
                help: $help,
            }, )*
        ];

        impl NoaConfig {
            /// Set `name` from a checked value; `Err` says why the value is questionable.
            fn set(&mut self, name: &str, v: &Value) -> Result<(), Questionable> {
                match name {
                    $( stringify!($field) => self.$field = <$ty as Setting>::take(v)?, )*
                    _ => {}
                }
                Ok(())
            }

            /// Copy key `name` from `other`.
            fn copy_key(&mut self, name: &str, other: &NoaConfig) {
                match name {
                    $( stringify!($field) => self.$field = other.$field.clone(), )*
                    _ => {}
                }
            }

            /// The value of key `name` as JSON (`null` for no such key).
            pub fn get(&self, name: &str) -> Json {
                match name {
                    $( stringify!($field) => Setting::show(&self.$field), )*
                    _ => Json::Null,
                }
            }

            /// Every key and its value, in SPEC 10's order: what `status.json` and `view.md`
            /// report as the settings used. `min_benefit_tokens` is the value in effect
            /// ([`NoaConfig::min_benefit`]).
            pub fn describe(&self) -> Json {
                // Naming every field without `..` makes a field missing from the list a
                // compile error.
                let NoaConfig { $( $field: _, )* } = self;
                let mut m = serde_json::Map::new();
                $( m.insert(stringify!($field).into(), Setting::show(&self.$field)); )*
                m.insert("min_benefit_tokens".into(), json!(self.min_benefit()));
                Json::Object(m)
            }
        }
    };
}

noa_settings! {
    /// Context window in tokens
    window: u64 = 200_000;
    /// Usage share where count-based tier nudges start, and the first-sight floor
    floor_ratio: f64 = 0.45;
    /// Usage share where the pressure band starts
    pressure_ratio: f64 = 0.75;
    /// Usage share where the emergency (truncation) band starts
    truncate_ratio: f64 = 0.95;
    /// Growth unit as a share of the window (clamped to growth_floor..growth_cap)
    growth_ratio: f64 = 0.05;
    /// Smallest growth unit in tokens; also tier 1's pending floor
    growth_floor: u64 = 50_000;
    /// Largest growth unit in tokens
    growth_cap: u64 = 50_000;
    /// Smallest growth gate in tokens
    min_growth_floor: u64 = 20_000;
    /// Growth gate as a share of the growth unit
    min_growth_ratio: f64 = 0.45;
    /// Growth unit multiplier giving the pending threshold of tiers 2 and 3
    tier2_growth_multiplier: f64 = 1.5;
    /// Smallest benefit worth a nudge under pressure (auto: max(5000, 1% of window))
    min_benefit_tokens: Option<u64> = None;
    /// Messages at the tail kept out of compression
    protect_recent_messages: usize = 5;
    /// Tokens at the tail kept out of compression
    protect_recent_tokens: u64 = 5_000;
    /// Tools never compressed or truncated: exact (any case) or a trailing * (Compress always is)
    protected_tools: Vec<String> = Vec::new();
    /// Fewest characters a Compress batch of message ranges may cover
    min_range_chars: usize = 5_000;
    /// Shortest summary in characters
    min_summary_chars: usize = 50;
    /// Longest summary in characters
    max_summary_chars: usize = 20_000;
    /// Highest tier: 2 or 3
    max_tier: u32 = 3;
    /// Live tier-1 blocks that call for a tier-2 nudge
    tier2_min_blocks: usize = 5;
    /// Live tier-2 blocks that call for a tier-3 nudge
    tier3_min_blocks: usize = 10;
    /// Failed or ignored compressions in a row before nudges pause
    max_compress_attempts: u32 = 3;
    /// A session whose transcript changed this many seconds ago or less is live (ctl: EBUSY)
    live_seconds: u64 = 120;
    /// How summaries name their archive: runtime (as the runtime does) or mount
    archive_paths: ArchivePaths = ArchivePaths::Runtime;
    /// Ancestor sessions of a fork, nearest first (at most 8 used)
    parents: Vec<String> = Vec::new();
}

/// The mount's own keys (top level of the file only).
pub const MOUNT_KEYS: &[Key] = &[
    Key {
        name: "ttl_ms",
        kind: <u64 as Setting>::KIND,
        owner: KeyOwner::Mount,
        help: "Attribute and entry cache time of the mount in milliseconds",
    },
    Key {
        name: "cache_mb",
        kind: <Option<u64> as Setting>::KIND,
        owner: KeyOwner::Mount,
        help: "Memory budget in MiB for parsed transcripts and computed files (auto: 64 MiB for a mount, whose reads the kernel's page cache serves; for commands 1/16 of the machine's memory, 128 MiB to 4 GiB)",
    },
];

/// Every key of SPEC 10: the noa keys, then the mount's.
pub fn keys() -> impl Iterator<Item = &'static Key> {
    NOA_KEYS.iter().chain(MOUNT_KEYS)
}

/// The key called `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    keys().find(|k| k.name == name)
}

impl NoaConfig {
    /// `min_benefit_tokens`, or when unset `max(5000, round(1% of window))` (the runtime's).
    pub fn min_benefit(&self) -> u64 {
        self.min_benefit_tokens.unwrap_or_else(|| {
            let one_percent = (self.window as f64 * 0.01 + 0.5).floor() as u64;
            one_percent.max(5_000)
        })
    }

    /// Whether a tool's calls are hard-protected (SPEC 4.6): `Compress` always, and every name
    /// matching a `protected_tools` pattern (exact in any case, or a prefix before a `*`).
    pub fn is_protected_tool(&self, name: &str) -> bool {
        if name.is_empty() {
            return false;
        }
        if name == COMPRESS_TOOL {
            return true;
        }
        let name = name.to_lowercase();
        self.protected_tools.iter().any(|p| {
            let p = p.to_lowercase();
            match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => !p.is_empty() && p == name,
            }
        })
    }

    /// `clamp(growth_ratio × window, growth_floor, growth_cap)` (SPEC 4.7).
    pub fn cadence(&self) -> u64 {
        let raw = (self.growth_ratio * self.window as f64).round();
        let raw = if raw.is_finite() && raw > 0.0 {
            raw as u64
        } else {
            0
        };
        raw.clamp(self.growth_floor, self.growth_cap.max(self.growth_floor))
    }

    /// Tokens at which emergency truncation starts.
    pub fn truncate_threshold(&self) -> u64 {
        (self.truncate_ratio * self.window as f64).floor() as u64
    }
}

/// A questionable value that was replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// The session whose table held it; `None` for the top level and the command line.
    pub session: Option<String>,
    /// The keys that were replaced.
    pub keys: Vec<&'static str>,
    /// One line naming the keys, the problem and the value used instead.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.session {
            Some(sid) => write!(f, "[sessions.{sid:?}] {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Values of some keys as one source gave them (types checked, ranges not yet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    values: BTreeMap<&'static str, Value>,
}

impl Settings {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The keys set, in name order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.values.keys().copied()
    }

    /// Set a key to a value of its kind (a list value adds to the list already set).
    pub fn insert(&mut self, name: &str, v: Value) -> Result<(), KeyError> {
        let k = key(name).ok_or_else(|| KeyError::Unknown(name.to_string()))?;
        match (self.values.get_mut(k.name), v) {
            (Some(Value::List(have)), Value::List(more)) if k.kind.accumulates() => {
                have.extend(more)
            }
            (_, v) => {
                self.values.insert(k.name, v);
            }
        }
        Ok(())
    }

    /// Set a key from text, as `-o` and flags write it (a list key adds to its list).
    pub fn insert_text(&mut self, name: &str, text: &str) -> Result<(), KeyError> {
        let k = key(name).ok_or_else(|| KeyError::Unknown(name.to_string()))?;
        let v = k
            .kind
            .parse(text)
            .map_err(|error| KeyError::Text { key: k.name, error })?;
        self.insert(k.name, v)
    }

    /// `self` with every key of `higher` set over it.
    pub fn overridden_by(mut self, higher: &Settings) -> Settings {
        for (k, v) in &higher.values {
            self.values.insert(k, v.clone());
        }
        self
    }

    /// `self` without the keys `higher` sets.
    fn without(mut self, higher: &Settings) -> Settings {
        self.values.retain(|k, _| !higher.values.contains_key(k));
        self
    }
}

/// Parse `-o` arguments: each a comma-separated list of `key=value` (`-` may stand for `_` in
/// a key). A list value is `:`-separated, and a list key given again adds to the list.
pub fn parse_options<S: AsRef<str>>(args: &[S]) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    for arg in args {
        for item in arg.as_ref().split(',').map(str::trim) {
            if item.is_empty() {
                continue;
            }
            let Some((name, text)) = item.split_once('=') else {
                let item = item.to_string();
                return Err(ConfigError::OptionNotKeyValue { item });
            };
            let name = name.trim().replace('-', "_");
            s.insert_text(&name, text)
                .map_err(|error| ConfigError::Option {
                    item: item.to_string(),
                    error,
                })?;
        }
    }
    Ok(s)
}

/// All settings: the noa core's (the top level and each session's table) and the mount's.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The top-level noa settings, checked.
    pub noa: NoaConfig,
    /// Per-session tables as read, less the keys the command line sets (it wins over them).
    pub sessions: BTreeMap<String, Settings>,
    pub ttl_ms: u64,
    /// The cache's budget in MiB; `None`: sized from the machine's memory
    /// ([`Config::cache_bytes`]).
    pub cache_mb: Option<u64>,
    /// Where each setting came from.
    pub origins: Origins,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            noa: NoaConfig::default(),
            sessions: BTreeMap::new(),
            ttl_ms: 1000,
            cache_mb: None,
            origins: Origins::default(),
        }
    }
}

/// A mount's budget under `cache_mb = auto`, in MiB: the kernel's page cache holds what was
/// read (the mount answers no open, so the kernel serves warm reads itself), and the mount
/// keeps what is costly to make again — the parse of large or live sessions — within this.
pub const MOUNT_CACHE_MB: u64 = 64;

/// The share of the machine's memory `cache_mb = auto` budgets for commands, and its bounds
/// in MiB.
const AUTO_CACHE_SHARE: u64 = 16;
const AUTO_CACHE_MIN_MB: u64 = 128;
const AUTO_CACHE_MAX_MB: u64 = 4096;

/// The budget `cache_mb = auto` gives on a machine with `total` bytes of memory, in MiB.
pub fn auto_cache_mb(total: u64) -> u64 {
    ((total / AUTO_CACHE_SHARE) >> 20).clamp(AUTO_CACHE_MIN_MB, AUTO_CACHE_MAX_MB)
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if known.
fn memory_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

impl Config {
    /// The configuration from a parsed file and the command line's settings (`-o` and flags,
    /// merged), and the warnings for every questionable value, session tables included.
    pub fn build(file: ConfigFile, command_line: &Settings) -> (Config, Vec<Warning>) {
        let top = file.top.overridden_by(command_line);
        let defaults = Config::default();
        let mut warnings = Vec::new();
        let mut noa = NoaConfig::default();
        apply(&mut noa, &top, &defaults.noa, None, &mut warnings);
        settle(&mut noa, &defaults.noa, None, &mut warnings);
        let mut config = Config {
            noa,
            sessions: file
                .sessions
                .into_iter()
                .map(|(sid, t)| (sid, t.without(command_line)))
                .collect(),
            ..defaults.clone()
        };
        for k in MOUNT_KEYS {
            let Some(v) = top.get(k.name) else { continue };
            if let Err(why) = config.set_mount(k.name, v) {
                warnings.push(Warning {
                    session: None,
                    keys: vec![k.name],
                    message: format!(
                        "{} = {} {why}; using the default {}",
                        k.name,
                        show_value(v),
                        defaults.get_mount(k.name)
                    ),
                });
            }
        }
        for sid in config.sessions.keys() {
            warnings.extend(config.session_checked(sid).1);
        }
        (config, warnings)
    }

    /// A line for each `[sessions."<id>"]` table that names none of `sessions` (a typo of an
    /// id applies to nothing, silently): the table, its file, and the nearest session id.
    pub fn unknown_session_tables(&self, sessions: &[String]) -> Vec<String> {
        self.sessions
            .keys()
            .filter(|t| !sessions.contains(t))
            .map(|t| {
                let file = self
                    .origins
                    .table_file(t)
                    .map_or_else(|| "the settings".to_string(), |p| p.display().to_string());
                let nearest = sessions
                    .iter()
                    .min_by_key(|s| (edit_distance(t, s), s.as_str()))
                    .map_or_else(
                        || "the root has no session".to_string(),
                        |s| format!("the nearest session id is {s:?}"),
                    );
                format!(
                    "[sessions.{t:?}] in {file} names no session of this root, so it applies to \
                     nothing; {nearest}"
                )
            })
            .collect()
    }

    /// When no setting gives the window of session `sid`: that its window is the default,
    /// assumed, and how to give it. The runtime runs sessions at other windows (40,000,
    /// 128,000), and every band and nudge depends on it.
    pub fn window_assumed(&self, sid: &str) -> Option<String> {
        self.origins.is_default(sid, "window").then(|| {
            format!(
                "no setting gives this session's window: {} tokens (the runtime's default) is \
                 assumed; set window in a [sessions.{sid:?}] table of ROOT/{ROOT_FILE} or \
                 {}, or give --window (`normafs config ROOT {sid}` shows each setting and \
                 where it came from)",
                self.for_session(sid).window,
                user_file_shown(),
            )
        })
    }

    /// The settings of session `sid`: the top level with its table applied over them.
    pub fn for_session(&self, sid: &str) -> NoaConfig {
        self.session_checked(sid).0
    }

    /// [`Config::for_session`] and the warnings about its questionable values (those of its
    /// table, and a top-level `parents` that names `sid` itself).
    pub fn session_checked(&self, sid: &str) -> (NoaConfig, Vec<Warning>) {
        let mut c = self.noa.clone();
        let mut warnings = Vec::new();
        if let Some(t) = self.sessions.get(sid) {
            apply(&mut c, t, &self.noa, Some(sid), &mut warnings);
        }
        settle(&mut c, &self.noa, Some(sid), &mut warnings);
        (c, warnings)
    }

    /// Set mount key `name` from a checked value, as [`NoaConfig`] sets its keys; `Err` says
    /// why the value is questionable (the key is left as it was).
    fn set_mount(&mut self, name: &str, v: &Value) -> Result<(), Questionable> {
        match name {
            "ttl_ms" => self.ttl_ms = Setting::take(v)?,
            "cache_mb" => match Setting::take(v)? {
                Some(0) => return Err(Questionable::NoCache),
                mb => self.cache_mb = mb,
            },
            _ => {}
        }
        Ok(())
    }

    /// The value of mount key `name` as JSON (`null` for no such key).
    pub fn get_mount(&self, name: &str) -> Json {
        match name {
            "ttl_ms" => json!(self.ttl_ms),
            "cache_mb" => self.cache_mb.show(),
            _ => Json::Null,
        }
    }

    /// A mount's cache budget in bytes: `cache_mb`, or for `auto` [`MOUNT_CACHE_MB`].
    pub fn mount_cache_bytes(&self) -> usize {
        usize::try_from(self.cache_mb.unwrap_or(MOUNT_CACHE_MB))
            .unwrap_or(usize::MAX)
            .saturating_mul(1 << 20)
    }

    /// The cache's budget in bytes: `cache_mb`, or for `auto` 1/16 of the machine's memory
    /// (128 MiB to 4 GiB; 256 MiB where the memory is unknown).
    pub fn cache_bytes(&self) -> usize {
        let mb = match self.cache_mb {
            Some(mb) => mb,
            None => memory_total().map_or(256, auto_cache_mb),
        };
        usize::try_from(mb)
            .unwrap_or(usize::MAX)
            .saturating_mul(1 << 20)
    }
}

fn show_value(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Auto => "auto".into(),
        Value::Word(w) => format!("{w:?}"),
        Value::List(items) => json!(items).to_string(),
    }
}

fn fallback_text(keys: &[&str], fallback: &NoaConfig, session: Option<&str>) -> String {
    let what = if session.is_some() && keys != ["parents"] {
        "the top-level value"
    } else {
        "the default"
    };
    let values: Vec<String> = keys
        .iter()
        .map(|k| format!("{k} = {}", fallback.get(k)))
        .collect();
    format!(
        "using {what}{} {}",
        if keys.len() > 1 { "s" } else { "" },
        values.join(", ")
    )
}

/// Set the noa keys of `s` on `c`; a questionable value takes `fallback`'s and is reported.
fn apply(
    c: &mut NoaConfig,
    s: &Settings,
    fallback: &NoaConfig,
    session: Option<&str>,
    warnings: &mut Vec<Warning>,
) {
    for k in NOA_KEYS {
        let Some(v) = s.get(k.name) else { continue };
        if let Err(why) = c.set(k.name, v) {
            c.copy_key(k.name, fallback);
            warnings.push(Warning {
                session: session.map(String::from),
                keys: vec![k.name],
                message: format!(
                    "{} = {} {why}; {}",
                    k.name,
                    show_value(v),
                    fallback_text(&[k.name], fallback, session)
                ),
            });
        }
    }
}

/// Whether `x` is a ratio: finite, in 0..=1, and above 0 when `positive`.
fn is_ratio(x: f64, positive: bool) -> bool {
    x.is_finite() && (0.0..=1.0).contains(&x) && !(positive && x == 0.0)
}

/// The first rule `c` breaks: the keys it involves and what is wrong.
fn first_problem(
    c: &NoaConfig,
    session: Option<&str>,
) -> Option<(&'static [&'static str], String)> {
    if c.window == 0 {
        return Some((&["window"], "window = 0 is not a context window".into()));
    }
    let ratios: [(&'static [&'static str], f64, bool); 5] = [
        (&["floor_ratio"], c.floor_ratio, false),
        (&["pressure_ratio"], c.pressure_ratio, false),
        (&["truncate_ratio"], c.truncate_ratio, true),
        (&["growth_ratio"], c.growth_ratio, false),
        (&["min_growth_ratio"], c.min_growth_ratio, false),
    ];
    for (keys, x, positive) in ratios {
        if !is_ratio(x, positive) {
            let range = if positive { "in (0, 1]" } else { "in [0, 1]" };
            return Some((keys, format!("{} = {x} is not a ratio {range}", keys[0])));
        }
    }
    if !(c.tier2_growth_multiplier.is_finite() && c.tier2_growth_multiplier >= 0.0) {
        return Some((
            &["tier2_growth_multiplier"],
            format!(
                "tier2_growth_multiplier = {} is not a non-negative number",
                c.tier2_growth_multiplier
            ),
        ));
    }
    if c.max_tier != 2 && c.max_tier != 3 {
        return Some((
            &["max_tier"],
            format!("max_tier = {} is not 2 or 3", c.max_tier),
        ));
    }
    if c.tier2_min_blocks < 1 {
        return Some((
            &["tier2_min_blocks"],
            "tier2_min_blocks must be at least 1".into(),
        ));
    }
    if c.max_compress_attempts < 1 {
        return Some((
            &["max_compress_attempts"],
            "max_compress_attempts must be at least 1".into(),
        ));
    }
    if c.floor_ratio > c.pressure_ratio {
        return Some((
            &["floor_ratio", "pressure_ratio"],
            format!(
                "floor_ratio ({}) must not exceed pressure_ratio ({})",
                c.floor_ratio, c.pressure_ratio
            ),
        ));
    }
    if c.pressure_ratio > c.truncate_ratio {
        return Some((
            &["pressure_ratio", "truncate_ratio"],
            format!(
                "pressure_ratio ({}) must not exceed truncate_ratio ({})",
                c.pressure_ratio, c.truncate_ratio
            ),
        ));
    }
    if c.tier3_min_blocks <= c.tier2_min_blocks {
        return Some((
            &["tier2_min_blocks", "tier3_min_blocks"],
            format!(
                "tier3_min_blocks ({}) must exceed tier2_min_blocks ({})",
                c.tier3_min_blocks, c.tier2_min_blocks
            ),
        ));
    }
    if c.min_summary_chars >= c.max_summary_chars {
        return Some((
            &["min_summary_chars", "max_summary_chars"],
            format!(
                "min_summary_chars ({}) must be below max_summary_chars ({})",
                c.min_summary_chars, c.max_summary_chars
            ),
        ));
    }
    if c.parents.len() > MAX_PARENTS {
        return Some((
            &["parents"],
            format!(
                "parents names {} sessions; at most {MAX_PARENTS} are used",
                c.parents.len()
            ),
        ));
    }
    if let Some(sid) = session.filter(|sid| c.parents.iter().any(|p| p == sid)) {
        return Some((
            &["parents"],
            format!("parents names the session {sid:?} itself"),
        ));
    }
    None
}

/// Replace the keys of every broken rule until none is broken, reporting each.
///
/// `fallback` satisfies every rule on its own (it is the defaults, or the checked top level),
/// so each round moves at least one key to its fallback for good; `parents` falls back to none,
/// which satisfies its rules for any session.
fn settle(
    c: &mut NoaConfig,
    fallback: &NoaConfig,
    session: Option<&str>,
    warnings: &mut Vec<Warning>,
) {
    let none = NoaConfig::default();
    let bound = 2 * NOA_KEYS.len();
    for _ in 0..bound {
        let Some((keys, why)) = first_problem(c, session) else {
            return;
        };
        let from = if keys == ["parents"] { &none } else { fallback };
        for k in keys {
            c.copy_key(k, from);
        }
        warnings.push(Warning {
            session: session.map(String::from),
            keys: keys.to_vec(),
            message: format!("{why}; {}", fallback_text(keys, from, session)),
        });
    }
}

#[cfg(test)]
mod tests;

/// The Levenshtein distance between `a` and `b` (in characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
