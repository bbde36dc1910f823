//! The configuration file (TOML): its top-level, `[mount]` and per-session tables, and where
//! each setting came from.

use super::*;

/// What a `--config` file holds: its top-level keys and its session tables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    pub top: Settings,
    pub sessions: BTreeMap<String, Settings>,
}

impl ConfigFile {
    /// Read and parse a TOML settings file.
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ConfigFile::parse(&text, path)
    }

    /// Parse TOML text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        let err = |message: String| ConfigError::File {
            path: path.to_path_buf(),
            message,
        };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim().replace('\n', " ");
            err(match line {
                Some(l) => format!("line {l}: {message}"),
                None => message,
            })
        })?;
        let mut file = ConfigFile::default();
        for (name, v) in &table {
            if name == "sessions" {
                let toml::Value::Table(sessions) = v else {
                    return Err(err(
                        "sessions must hold [sessions.\"<sid>\"] tables".to_string()
                    ));
                };
                for (sid, t) in sessions {
                    let toml::Value::Table(t) = t else {
                        return Err(err(format!("sessions.{sid:?} must be a table")));
                    };
                    let at = format!("[sessions.{sid:?}] ");
                    file.sessions.insert(
                        sid.clone(),
                        read_table(t, Scope::Noa).map_err(|m| err(format!("{at}{m}")))?,
                    );
                }
            } else {
                read_key(&mut file.top, name, v, Scope::Mount).map_err(err)?;
            }
        }
        Ok(file)
    }
}

/// Keys of one table; `widest` is [`Scope::Mount`] where mount keys are allowed too.
pub(super) fn read_table(t: &toml::Table, widest: Scope) -> Result<Settings, String> {
    let mut s = Settings::default();
    for (name, v) in t {
        read_key(&mut s, name, v, widest)?;
    }
    Ok(s)
}

pub(super) fn read_key(
    s: &mut Settings,
    name: &str,
    v: &toml::Value,
    widest: Scope,
) -> Result<(), String> {
    let k = key(name).ok_or_else(|| format!("unknown key {name:?}"))?;
    if k.scope == Scope::Mount && widest == Scope::Noa {
        return Err(format!(
            "{name} is a mount setting: set it at the top level"
        ));
    }
    let value = k.kind.read_toml(v).map_err(|m| format!("{name} {m}"))?;
    s.values.insert(k.name, value);
    Ok(())
}

/// Where a command's settings come from (the `--config`, `-o` and flag arguments).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sources {
    pub file: Option<PathBuf>,
    /// `-o` arguments, in order.
    pub options: Vec<String>,
    /// Flags, already parsed.
    pub flags: Settings,
}

impl Sources {
    /// Read the file, parse `-o`, and build the configuration with its warnings.
    pub fn load(&self) -> Result<(Config, Vec<Warning>), ConfigError> {
        let file = match &self.file {
            Some(path) => ConfigFile::read(path)?,
            None => ConfigFile::default(),
        };
        let command_line = parse_options(&self.options)?.overridden_by(&self.flags);
        Ok(Config::build(file, &command_line))
    }
}
