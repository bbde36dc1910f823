//! Configuration (SPEC 10): noa and mount settings, their defaults, a TOML file, and warnings
//! for questionable values.
//!
//! Every key is also a flag of `mount`/`view`/`ctl`/`audit` with `-` for `_`; flags win over the
//! file, the file over the defaults. A questionable value is replaced by its default and
//! reported as a warning; it never stops a command.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The settings of the noa core (SPEC 4, 10).
#[derive(Debug, Clone, PartialEq)]
pub struct NoaConfig {
    pub window: u64,
    pub floor_ratio: f64,
    pub pressure_ratio: f64,
    pub truncate_ratio: f64,
    pub growth_ratio: f64,
    pub growth_floor: u64,
    pub growth_cap: u64,
    pub min_benefit_tokens: u64,
    pub protect_recent_messages: usize,
    pub protect_recent_tokens: u64,
    pub protected_tools: Vec<String>,
    pub compress_tool_name: String,
    pub min_range_messages: usize,
    pub min_summary_chars: usize,
    pub max_tier: u32,
    pub tier2_min_blocks: usize,
    pub tier3_min_blocks: usize,
    pub truncate_head: usize,
    pub truncate_tail: usize,
    // TEMPORARY (h-config replaces this struct): the v2 keys the new core reads.
    pub min_growth_floor: u64,
    pub min_growth_ratio: f64,
    pub tier2_growth_multiplier: f64,
    pub min_range_chars: usize,
    pub max_summary_chars: usize,
    pub max_compress_attempts: u32,
    pub live_seconds: u64,
    pub archive_paths: ArchivePaths,
    pub parents: Vec<String>,
}

/// What a summary's `path=` names (SPEC 10 `archive_paths`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchivePaths {
    Runtime,
    Mount,
}

impl Default for NoaConfig {
    fn default() -> Self {
        NoaConfig {
            window: 200_000,
            floor_ratio: 0.45,
            pressure_ratio: 0.75,
            truncate_ratio: 0.95,
            growth_ratio: 0.05,
            growth_floor: 5_000,
            growth_cap: 50_000,
            min_benefit_tokens: 2_000,
            protect_recent_messages: 8,
            protect_recent_tokens: 8_000,
            protected_tools: vec!["Compress".to_string()],
            compress_tool_name: "Compress".to_string(),
            min_range_messages: 2,
            min_summary_chars: 20,
            max_tier: 3,
            tier2_min_blocks: 6,
            tier3_min_blocks: 4,
            truncate_head: 1024,
            truncate_tail: 512,
            min_growth_floor: 20_000,
            min_growth_ratio: 0.45,
            tier2_growth_multiplier: 1.5,
            min_range_chars: 5_000,
            max_summary_chars: 20_000,
            max_compress_attempts: 3,
            live_seconds: 120,
            archive_paths: ArchivePaths::Runtime,
            parents: Vec::new(),
        }
    }
}

impl NoaConfig {
    /// TEMPORARY (h-config): the smallest benefit worth a nudge under pressure.
    pub fn min_benefit(&self) -> u64 {
        self.min_benefit_tokens
    }

    /// `clamp(growth_ratio × window, growth_floor, growth_cap)` (SPEC 4.6).
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

    pub fn is_protected_tool(&self, name: &str) -> bool {
        self.protected_tools.iter().any(|t| t == name)
    }
}

/// All settings: the core's and the mount's.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub noa: NoaConfig,
    pub ttl_ms: u64,
    pub cache_mb: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            noa: NoaConfig::default(),
            ttl_ms: 1000,
            cache_mb: 256,
        }
    }
}

/// Every key, optional: the shape of the TOML file and of the flags.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Context window in tokens [default: 200000]
    #[arg(long)]
    pub window: Option<u64>,
    /// Usage ratio where nudges start [default: 0.45]
    #[arg(long)]
    pub floor_ratio: Option<f64>,
    /// Usage ratio where the growth cadence stops applying [default: 0.75]
    #[arg(long)]
    pub pressure_ratio: Option<f64>,
    /// Usage ratio where emergency truncation starts [default: 0.95]
    #[arg(long)]
    pub truncate_ratio: Option<f64>,
    /// Growth cadence as a share of the window [default: 0.05]
    #[arg(long)]
    pub growth_ratio: Option<f64>,
    /// Smallest growth cadence in tokens [default: 5000]
    #[arg(long)]
    pub growth_floor: Option<u64>,
    /// Largest growth cadence in tokens [default: 50000]
    #[arg(long)]
    pub growth_cap: Option<u64>,
    /// Smallest compressible benefit worth a nudge [default: 2000]
    #[arg(long)]
    pub min_benefit_tokens: Option<u64>,
    /// Messages at the tail never compressed [default: 8]
    #[arg(long)]
    pub protect_recent_messages: Option<usize>,
    /// Tokens at the tail never compressed [default: 8000]
    #[arg(long)]
    pub protect_recent_tokens: Option<u64>,
    /// Tools whose calls are never compressed or truncated (repeat or comma-separate) [default: Compress]
    #[arg(long, value_delimiter = ',')]
    pub protected_tools: Option<Vec<String>>,
    /// Name of the Compress tool in transcripts [default: Compress]
    #[arg(long)]
    pub compress_tool_name: Option<String>,
    /// Fewest messages a compressed range may cover [default: 2]
    #[arg(long)]
    pub min_range_messages: Option<usize>,
    /// Shortest summary in characters [default: 20]
    #[arg(long)]
    pub min_summary_chars: Option<usize>,
    /// Highest tier [default: 3]
    #[arg(long)]
    pub max_tier: Option<u32>,
    /// Live tier-1 blocks before a tier-2 nudge [default: 6]
    #[arg(long)]
    pub tier2_min_blocks: Option<usize>,
    /// Live tier-2 blocks before a tier-3 nudge [default: 4]
    #[arg(long)]
    pub tier3_min_blocks: Option<usize>,
    /// Bytes kept at the head of a truncated tool result [default: 1024]
    #[arg(long)]
    pub truncate_head: Option<usize>,
    /// Bytes kept at the tail of a truncated tool result [default: 512]
    #[arg(long)]
    pub truncate_tail: Option<usize>,
    /// Attribute cache time of the mount in milliseconds [default: 1000]
    #[arg(long)]
    pub ttl_ms: Option<u64>,
    /// Memory budget of the mount's result cache in MiB [default: 256]
    #[arg(long)]
    pub cache_mb: Option<u64>,
    /// A TOML file with any of these keys (flags win over it)
    #[arg(long = "config", value_name = "FILE")]
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

impl Settings {
    /// Read a TOML settings file.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })
    }

    /// Fill every unset key of `self` from `lower`.
    fn or(self, lower: Settings) -> Settings {
        macro_rules! pick {
            ($($f:ident),*) => { Settings { $($f: self.$f.or(lower.$f),)* config_file: self.config_file } };
        }
        pick!(
            window,
            floor_ratio,
            pressure_ratio,
            truncate_ratio,
            growth_ratio,
            growth_floor,
            growth_cap,
            min_benefit_tokens,
            protect_recent_messages,
            protect_recent_tokens,
            protected_tools,
            compress_tool_name,
            min_range_messages,
            min_summary_chars,
            max_tier,
            tier2_min_blocks,
            tier3_min_blocks,
            truncate_head,
            truncate_tail,
            ttl_ms,
            cache_mb
        )
    }

    /// Flags over the `--config` file over defaults; returns the config and its warnings.
    pub fn resolve(self) -> Result<(Config, Vec<String>), ConfigError> {
        let merged = match &self.config_file {
            Some(path) => {
                let file = Settings::from_file(path)?;
                self.or(file)
            }
            None => self,
        };
        Ok(merged.build())
    }

    /// Apply the settings over the defaults, replacing questionable values by defaults.
    pub fn build(self) -> (Config, Vec<String>) {
        let d = Config::default();
        let dn = &d.noa;
        let mut warnings = Vec::new();
        let mut ratio = |name: &str, v: Option<f64>, def: f64| -> f64 {
            match v {
                Some(x) if x.is_finite() && (0.0..=1.0).contains(&x) => x,
                Some(x) => {
                    warnings.push(format!(
                        "{name} = {x} is outside 0..1; using the default {def}"
                    ));
                    def
                }
                None => def,
            }
        };
        let mut noa = NoaConfig {
            window: self.window.unwrap_or(dn.window),
            floor_ratio: ratio("floor_ratio", self.floor_ratio, dn.floor_ratio),
            pressure_ratio: ratio("pressure_ratio", self.pressure_ratio, dn.pressure_ratio),
            truncate_ratio: ratio("truncate_ratio", self.truncate_ratio, dn.truncate_ratio),
            growth_ratio: ratio("growth_ratio", self.growth_ratio, dn.growth_ratio),
            growth_floor: self.growth_floor.unwrap_or(dn.growth_floor),
            growth_cap: self.growth_cap.unwrap_or(dn.growth_cap),
            min_benefit_tokens: self.min_benefit_tokens.unwrap_or(dn.min_benefit_tokens),
            protect_recent_messages: self
                .protect_recent_messages
                .unwrap_or(dn.protect_recent_messages),
            protect_recent_tokens: self
                .protect_recent_tokens
                .unwrap_or(dn.protect_recent_tokens),
            protected_tools: self
                .protected_tools
                .unwrap_or_else(|| dn.protected_tools.clone()),
            compress_tool_name: self
                .compress_tool_name
                .unwrap_or_else(|| dn.compress_tool_name.clone()),
            min_range_messages: self.min_range_messages.unwrap_or(dn.min_range_messages),
            min_summary_chars: self.min_summary_chars.unwrap_or(dn.min_summary_chars),
            max_tier: self.max_tier.unwrap_or(dn.max_tier),
            tier2_min_blocks: self.tier2_min_blocks.unwrap_or(dn.tier2_min_blocks),
            tier3_min_blocks: self.tier3_min_blocks.unwrap_or(dn.tier3_min_blocks),
            truncate_head: self.truncate_head.unwrap_or(dn.truncate_head),
            truncate_tail: self.truncate_tail.unwrap_or(dn.truncate_tail),
            ..dn.clone()
        };
        if noa.window == 0 {
            warnings.push(format!(
                "window = 0 is not a context window; using the default {}",
                dn.window
            ));
            noa.window = dn.window;
        }
        if noa.growth_floor > noa.growth_cap {
            warnings.push(format!(
                "growth_floor {} is above growth_cap {}; using the defaults {} and {}",
                noa.growth_floor, noa.growth_cap, dn.growth_floor, dn.growth_cap
            ));
            noa.growth_floor = dn.growth_floor;
            noa.growth_cap = dn.growth_cap;
        }
        if !(noa.floor_ratio <= noa.pressure_ratio && noa.pressure_ratio <= noa.truncate_ratio) {
            warnings.push(format!(
                "ratios must satisfy floor_ratio <= pressure_ratio <= truncate_ratio \
                 ({} / {} / {}); using the defaults {} / {} / {}",
                noa.floor_ratio,
                noa.pressure_ratio,
                noa.truncate_ratio,
                dn.floor_ratio,
                dn.pressure_ratio,
                dn.truncate_ratio
            ));
            noa.floor_ratio = dn.floor_ratio;
            noa.pressure_ratio = dn.pressure_ratio;
            noa.truncate_ratio = dn.truncate_ratio;
        }
        if noa.max_tier == 0 {
            warnings.push(format!(
                "max_tier = 0 leaves no tier; using the default {}",
                dn.max_tier
            ));
            noa.max_tier = dn.max_tier;
        }
        if noa.min_range_messages == 0 {
            warnings.push(format!(
                "min_range_messages = 0 would allow empty ranges; using the default {}",
                dn.min_range_messages
            ));
            noa.min_range_messages = dn.min_range_messages;
        }
        if noa.compress_tool_name.is_empty() {
            warnings.push("compress_tool_name is empty; using the default Compress".to_string());
            noa.compress_tool_name = dn.compress_tool_name.clone();
        }
        let mut cache_mb = self.cache_mb.unwrap_or(d.cache_mb);
        if cache_mb == 0 {
            warnings.push(format!(
                "cache_mb = 0 leaves no cache; using the default {}",
                d.cache_mb
            ));
            cache_mb = d.cache_mb;
        }
        let config = Config {
            noa,
            ttl_ms: self.ttl_ms.unwrap_or(d.ttl_ms),
            cache_mb,
        };
        (config, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_cadence() {
        let (c, w) = Settings::default().build();
        assert!(w.is_empty());
        assert_eq!(c, Config::default());
        assert_eq!(c.noa.cadence(), 10_000);
        assert_eq!(c.noa.truncate_threshold(), 190_000);
    }

    #[test]
    fn questionable_values_fall_back_with_a_warning() {
        let s = Settings {
            floor_ratio: Some(1.5),
            growth_floor: Some(9),
            growth_cap: Some(3),
            ..Settings::default()
        };
        let (c, w) = s.build();
        assert_eq!(c.noa.floor_ratio, 0.45);
        assert_eq!((c.noa.growth_floor, c.noa.growth_cap), (5_000, 50_000));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("floor_ratio = 1.5"));
    }

    #[test]
    fn flags_win_over_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("n.toml");
        std::fs::write(&path, "window = 1000\nprotect_recent_messages = 3\n").expect("write");
        let s = Settings {
            window: Some(5000),
            config_file: Some(path),
            ..Settings::default()
        };
        let (c, w) = s.resolve().expect("resolve");
        assert!(w.is_empty());
        assert_eq!(c.noa.window, 5000);
        assert_eq!(c.noa.protect_recent_messages, 3);
    }

    #[test]
    fn unknown_key_in_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("n.toml");
        std::fs::write(&path, "windw = 1000\n").expect("write");
        let s = Settings {
            config_file: Some(path),
            ..Settings::default()
        };
        let err = s.resolve().expect_err("unknown key");
        assert!(err.to_string().contains("windw"), "{err}");
    }
}
