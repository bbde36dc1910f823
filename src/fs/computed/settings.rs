//! The settings a mount computes with, which a change of its settings files replaces while it
//! serves: each session's settings are a part of its files' fingerprints (a session whose
//! settings changed has its files made again, once; the others keep theirs), and a settings
//! file that stops parsing leaves the settings as they were and is said in `audit.txt`.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::Config;

/// A settings file the mount could not use: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SettingsError {
    /// The file, when the error names one (else the command line).
    pub path: Option<PathBuf>,
    pub reason: String,
}

impl SettingsError {
    /// From the error that stopped a load of the settings.
    pub fn of(e: &crate::config::ConfigError) -> SettingsError {
        use crate::config::ConfigError as E;
        match e {
            E::Read { path, source } => SettingsError {
                path: Some(path.clone()),
                reason: format!("cannot be read: {source}"),
            },
            E::File { path, error } => SettingsError {
                path: Some(path.clone()),
                reason: error.to_string(),
            },
            other => SettingsError {
                path: None,
                reason: other.to_string(),
            },
        }
    }

    /// The path `audit.txt` names: the file, absolute (it is outside the mount).
    pub fn shown_path(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "settings".to_string(), |p| p.display().to_string())
    }
}

/// The settings in effect and what is derived from them per session.
pub(super) struct Live {
    cfg: RwLock<Arc<Config>>,
    /// Each session's stamp (see [`stamp`]), made when first asked for.
    stamps: Mutex<HashMap<String, u64>>,
    /// The stamp of the whole configuration (the root's files read every session).
    whole: Mutex<u64>,
    error: Mutex<Option<SettingsError>>,
}

/// What a session's files are made with: its settings and whether its window is assumed.
fn stamp(cfg: &Config, sid: &str) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{:?}", cfg.for_session(sid)).hash(&mut h);
    cfg.window_assumed(sid).hash(&mut h);
    h.finish()
}

fn whole_stamp(cfg: &Config) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{:?}", cfg.noa).hash(&mut h);
    format!("{:?}", cfg.sessions).hash(&mut h);
    h.finish()
}

/// A fingerprint of `error` (0 without one).
fn error_fp(error: &Option<SettingsError>) -> u64 {
    error.as_ref().map_or(0, |e| {
        let mut h = DefaultHasher::new();
        e.hash(&mut h);
        h.finish() | 1
    })
}

impl Live {
    pub(super) fn new(cfg: Config) -> Live {
        let whole = whole_stamp(&cfg);
        Live {
            cfg: RwLock::new(Arc::new(cfg)),
            stamps: Mutex::new(HashMap::new()),
            whole: Mutex::new(whole),
            error: Mutex::new(None),
        }
    }

    pub(super) fn cfg(&self) -> Arc<Config> {
        self.cfg.read().clone()
    }

    /// Session `sid`'s stamp under the settings in effect.
    pub(super) fn stamp(&self, sid: &str) -> u64 {
        if let Some(s) = self.stamps.lock().get(sid) {
            return *s;
        }
        let s = stamp(&self.cfg(), sid);
        self.stamps.lock().insert(sid.to_string(), s);
        s
    }

    /// The whole configuration's stamp, with the error's.
    pub(super) fn whole(&self) -> u64 {
        *self.whole.lock() ^ self.error_fp()
    }

    pub(super) fn error(&self) -> Option<SettingsError> {
        self.error.lock().clone()
    }

    pub(super) fn error_fp(&self) -> u64 {
        error_fp(&self.error.lock())
    }

    /// Use `new` from now on: the sessions among `sessions` whose files it changes (all of
    /// them when an error is cleared: their `audit.txt` said it).
    pub(super) fn replace(&self, new: Config, sessions: &[String]) -> Vec<String> {
        let old = self.cfg();
        let had_error = self.error.lock().take().is_some();
        let changed: Vec<String> = sessions
            .iter()
            .filter(|sid| had_error || stamp(&old, sid) != stamp(&new, sid))
            .cloned()
            .collect();
        *self.whole.lock() = whole_stamp(&new);
        *self.cfg.write() = Arc::new(new);
        self.stamps.lock().clear();
        changed
    }

    /// Keep the settings in effect and say `error` in `audit.txt`: the sessions whose
    /// `audit.txt` changes (every one, unless the same error was said already).
    pub(super) fn failed(&self, error: SettingsError, sessions: &[String]) -> Vec<String> {
        let mut e = self.error.lock();
        if e.as_ref() == Some(&error) {
            return Vec::new();
        }
        *e = Some(error);
        sessions.to_vec()
    }
}
