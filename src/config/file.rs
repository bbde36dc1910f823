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
        ConfigFile::from_text(text).map_err(|error| ConfigError::File {
            path: path.to_path_buf(),
            error,
        })
    }

    /// [`ConfigFile::parse`] without the path its errors name.
    fn from_text(text: &str) -> Result<ConfigFile, FileError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| FileError::Toml {
            line: e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1),
            message: e.message().trim().replace('\n', " "),
        })?;
        let mut file = ConfigFile::default();
        for (name, v) in &table {
            if name == "sessions" {
                let toml::Value::Table(sessions) = v else {
                    return Err(FileError::SessionsNotTables);
                };
                for (sid, t) in sessions {
                    let toml::Value::Table(t) = t else {
                        return Err(FileError::SessionNotTable(sid.clone()));
                    };
                    let table = read_session_table(t).map_err(|error| FileError::InSession {
                        sid: sid.clone(),
                        error,
                    })?;
                    file.sessions.insert(sid.clone(), table);
                }
            } else {
                read_key(&mut file.top, name, v, true)?;
            }
        }
        Ok(file)
    }
}

/// The keys of a `[sessions."<sid>"]` table.
fn read_session_table(t: &toml::Table) -> Result<Settings, KeyError> {
    let mut s = Settings::default();
    for (name, v) in t {
        read_key(&mut s, name, v, false)?;
    }
    Ok(s)
}

/// One key of a table; the mount's keys are allowed at the `top_level` only.
fn read_key(
    s: &mut Settings,
    name: &str,
    v: &toml::Value,
    top_level: bool,
) -> Result<(), KeyError> {
    let k = key(name).ok_or_else(|| KeyError::Unknown(name.to_string()))?;
    if k.owner == KeyOwner::Mount && !top_level {
        return Err(KeyError::MountKeyInSession(k.name));
    }
    let value = k
        .kind
        .read_toml(v)
        .map_err(|error| KeyError::Toml { key: k.name, error })?;
    s.values.insert(k.name, value);
    Ok(())
}

impl ConfigFile {
    /// `self`'s settings over `lower`'s: top-level keys and each session's table key by key.
    fn over(self, lower: ConfigFile) -> ConfigFile {
        let mut sessions = lower.sessions;
        for (sid, t) in self.sessions {
            let merged = sessions.remove(&sid).unwrap_or_default().overridden_by(&t);
            sessions.insert(sid, merged);
        }
        ConfigFile {
            top: lower.top.overridden_by(&self.top),
            sessions,
        }
    }
}

/// The name of the settings file normafs reads beside a root (`ROOT/.normafs.toml`).
pub const ROOT_FILE: &str = ".normafs.toml";

/// The user's settings file: `$XDG_CONFIG_HOME/normafs/config.toml`, else
/// `~/.config/normafs/config.toml`.
pub fn user_file() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".config"))
        })?;
    Some(base.join("normafs").join("config.toml"))
}

/// The user's settings file as messages name it.
pub fn user_file_shown() -> String {
    user_file().map_or_else(
        || "~/.config/normafs/config.toml".to_string(),
        |p| p.display().to_string(),
    )
}

/// The settings files read when present, lowest first: the user's, then the root's.
pub fn default_files(root: Option<&Path>) -> Vec<PathBuf> {
    user_file()
        .into_iter()
        .chain(root.map(|r| r.join(ROOT_FILE)))
        .collect()
}

/// Where a command's settings come from (the `--config`, `-o` and flag arguments, and the
/// settings files read when present).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sources {
    pub file: Option<PathBuf>,
    /// `-o` arguments, in order.
    pub options: Vec<String>,
    /// Flags, already parsed.
    pub flags: Settings,
    /// The session root, whose `.normafs.toml` is read when present.
    pub root: Option<PathBuf>,
}

impl Sources {
    /// The settings files these sources read when present, lowest first (a mount watches
    /// them all, present or not).
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = default_files(self.root.as_deref());
        files.extend(self.file.clone());
        files
    }

    /// Read the files (the user's and the root's when present, then `--config`), parse `-o`,
    /// and build the configuration with its warnings and where each setting came from.
    pub fn load(&self) -> Result<(Config, Vec<Warning>), ConfigError> {
        let mut paths: Vec<PathBuf> = default_files(self.root.as_deref())
            .into_iter()
            .filter(|p| p.is_file())
            .collect();
        paths.extend(self.file.clone());
        let mut file = ConfigFile::default();
        let mut origins = Origins::default();
        for path in paths {
            let f = ConfigFile::read(&path)?;
            origins.read(&path, &f);
            file = f.over(file);
        }
        let options = parse_options(&self.options)?;
        origins.given(&options, |_| "-o".to_string());
        origins.given(&self.flags, |k| format!("--{}", k.replace('_', "-")));
        let command_line = options.overridden_by(&self.flags);
        let (mut config, warnings) = Config::build(file, &command_line);
        config.origins = origins;
        Ok((config, warnings))
    }
}

/// Where each setting came from: `default`, a file (its path, and the session table), `-o`
/// or a flag.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origins {
    /// The settings files read, lowest first.
    pub files: Vec<PathBuf>,
    top: BTreeMap<&'static str, String>,
    sessions: BTreeMap<String, BTreeMap<&'static str, String>>,
    command_line: BTreeMap<&'static str, String>,
    /// The file each `[sessions."<id>"]` table was read from (the last, when several have it).
    tables: BTreeMap<String, PathBuf>,
}

impl Origins {
    fn read(&mut self, path: &Path, f: &ConfigFile) {
        self.files.push(path.to_path_buf());
        for name in f.top.names() {
            self.top.insert(name, path.display().to_string());
        }
        for (sid, t) in &f.sessions {
            self.tables.insert(sid.clone(), path.to_path_buf());
            let e = self.sessions.entry(sid.clone()).or_default();
            for name in t.names() {
                e.insert(name, format!("{} [sessions.{sid:?}]", path.display()));
            }
        }
    }

    fn given(&mut self, s: &Settings, how: impl Fn(&str) -> String) {
        for name in s.names() {
            self.command_line.insert(name, how(name));
        }
    }

    /// Where the value of `key` for session `sid` (the top level for `None`) came from. The
    /// command line wins over session tables, a session table over the top level.
    pub fn of(&self, sid: Option<&str>, key: &str) -> String {
        self.command_line
            .get(key)
            .or_else(|| sid.and_then(|s| self.sessions.get(s)?.get(key)))
            .or_else(|| self.top.get(key))
            .cloned()
            .unwrap_or_else(|| "default".to_string())
    }

    /// The file the table of session `sid` was read from.
    pub fn table_file(&self, sid: &str) -> Option<&Path> {
        self.tables.get(sid).map(PathBuf::as_path)
    }

    /// Whether no source set `key` for session `sid`: its value is the default.
    pub fn is_default(&self, sid: &str, key: &str) -> bool {
        self.of(Some(sid), key) == "default"
    }
}
