//! What goes wrong with settings: the errors that stop a command ([`ConfigError`] and the
//! errors it holds), and why a questionable value falls back ([`Questionable`]).

use super::*;

/// A setting that cannot be used: the command stops.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: {error}", path.display())]
    File { path: PathBuf, error: FileError },
    #[error("-o {item}: expected key=value")]
    OptionNotKeyValue { item: String },
    #[error("-o {item}: {error}")]
    Option { item: String, error: KeyError },
}

/// A key that a source cannot set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unknown key {0:?}")]
    Unknown(String),
    /// A mount key in a session table.
    #[error("{0} is a mount setting: set it at the top level")]
    MountKeyInSession(&'static str),
    /// From `-o` or a flag: `window: "abc" is not an integer`.
    #[error("{key}: {error}")]
    Text {
        key: &'static str,
        error: TextValueError,
    },
    /// From a settings file: `window must be an integer, not the string "abc"`.
    #[error("{key} {error}")]
    Toml {
        key: &'static str,
        error: TomlValueError,
    },
}

/// What makes a settings file unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Not TOML: the parser's message, after the line where it stopped when it says.
    #[error("{}{message}", line.map_or(String::new(), |l| format!("line {l}: ")))]
    Toml {
        line: Option<usize>,
        message: String,
    },
    #[error("sessions must hold [sessions.\"<sid>\"] tables")]
    SessionsNotTables,
    #[error("sessions.{0:?} must be a table")]
    SessionNotTable(String),
    #[error("[sessions.{sid:?}] {error}")]
    InSession { sid: String, error: KeyError },
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Text (`-o`, a flag) that is no value of its key's kind: `"abc" is not an integer`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not {}", kind.expected())]
pub struct TextValueError {
    /// The text, trimmed.
    pub text: String,
    pub kind: Kind,
}

/// A TOML value of a type its key does not take: `must be an integer, not the string "abc"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be {}, not {found}", kind.expected())]
pub struct TomlValueError {
    pub kind: Kind,
    /// The value as messages name it (`the string "abc"`, `a table`).
    pub found: String,
}

/// Why a value of its key's type is questionable: the key falls back, with a [`Warning`].
/// Each reads after the key and its value (`window = -5 is negative`). `NotInteger`,
/// `NotNumber`, `NotList` and `NotWord` cannot come from a source: each checks a value's type
/// against its key's kind when it reads the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Questionable {
    #[error("is negative")]
    Negative,
    #[error("is too large")]
    TooLarge,
    #[error("is not an integer")]
    NotInteger,
    #[error("is not a number")]
    NotNumber,
    #[error("is not a list")]
    NotList,
    #[error("is not a word")]
    NotWord,
    #[error("is not {}", one_of(.0))]
    NotOneOf(&'static [&'static str]),
    /// `cache_mb = 0`.
    #[error("leaves no cache")]
    NoCache,
}
