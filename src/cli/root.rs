//! The root a command works on: its directories resolved, checked to look like a session root,
//! its settings loaded (their warnings printed), a session named on the command line checked
//! to be one of it.

use std::path::Path;

use super::args::{RootArgs, SettingsArgs};
use super::CliError;
use crate::config::{Config, Sources};
use crate::store::root::{self, Discovery, RootOverrides, RootPaths};

/// A root that `view`, `audit` and `ctl` read must look like one: a transcripts, archive or
/// memory directory (an empty root would silently report nothing).
pub(super) fn check_root(paths: &RootPaths, root: &Path) -> Result<(), CliError> {
    if [&paths.transcripts, &paths.archives, &paths.memory]
        .iter()
        .any(|d| d.is_dir())
    {
        return Ok(());
    }
    Err(CliError::new(format!(
        "{} is not a session root: it has none of {}, {} and {}",
        root.display(),
        paths.transcripts.display(),
        paths.archives.display(),
        paths.memory.display()
    )))
}

/// The root's directories, made absolute, those `dirs` names instead of the root's own; the
/// root must be a directory.
pub(super) fn resolve_root(root: &Path, dirs: &RootArgs) -> Result<RootPaths, CliError> {
    if !root.is_dir() {
        return Err(CliError::new(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    Ok(RootPaths::with_overrides(
        &abs(root),
        RootOverrides {
            transcripts: dirs.transcripts.as_deref().map(abs),
            memory: dirs.memory.as_deref().map(abs),
            archives: dirs.archives.as_deref().map(abs),
        },
    ))
}

/// The root a command reads (it must look like one) and its settings, warnings printed for
/// `sid`'s too.
pub(super) fn open_root(
    root: &Path,
    dirs: &RootArgs,
    settings: &SettingsArgs,
    sid: Option<&str>,
) -> Result<(RootPaths, Config), CliError> {
    let paths = resolve_root(root, dirs)?;
    check_root(&paths, root)?;
    let cfg = load_settings(settings, root, sid)?;
    for line in unknown_tables(&paths, &cfg) {
        eprintln!("normafs: warning: {line}");
    }
    Ok((paths, cfg))
}

/// The warnings for session tables that name no session of the root.
pub(super) fn unknown_tables(paths: &RootPaths, cfg: &Config) -> Vec<String> {
    if cfg.sessions.is_empty() {
        return Vec::new();
    }
    root::discover(paths).map_or_else(|_| Vec::new(), |d| cfg.unknown_session_tables(&d.sessions))
}

/// Load the settings and print their warnings; with `sid`, also those about that session's.
/// A setting that cannot be used is a usage error (exit 2).
pub(super) fn load_settings(
    args: &SettingsArgs,
    root: &Path,
    sid: Option<&str>,
) -> Result<Config, CliError> {
    let sources = Sources {
        root: Some(root.to_path_buf()),
        ..args.0.clone()
    };
    let (cfg, warnings) = sources.load().map_err(|e| CliError {
        message: e.to_string(),
        code: 2,
    })?;
    let mut shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    if let Some(sid) = sid {
        for w in cfg.session_checked(sid).1 {
            let line = w.to_string();
            if !shown.contains(&line) {
                shown.push(line);
            }
        }
    }
    for line in shown {
        eprintln!("normafs: warning: {line}");
    }
    Ok(cfg)
}

/// `sid` must be a session of the root: a valid name with a transcript or an archive.
pub(super) fn check_session(paths: &RootPaths, sid: &str) -> Result<(), CliError> {
    root::valid_session_name(std::ffi::OsStr::new(sid))
        .map_err(|e| CliError::new(format!("{sid:?} is not a session name: {e}")))?;
    // Symbolic links are followed only as discovery follows them (SPEC 1, store::root).
    let transcript_link =
        root::is_escaping_link(&paths.transcripts, format!("{sid}.jsonl").as_ref(), false);
    let archive_link = root::is_escaping_link(&paths.archives, sid.as_ref(), true);
    let has_transcript = !transcript_link && paths.transcript_path(sid).is_file();
    let has_archive = !archive_link && paths.archive_root(sid).is_dir();
    if !has_transcript && !has_archive && (transcript_link || archive_link) {
        return Err(CliError::new(format!(
            "no session {sid}: {} is a symbolic link leading outside its directory (not followed)",
            if transcript_link {
                paths.transcript_path(sid)
            } else {
                paths.archive_root(sid)
            }
            .display()
        )));
    }
    if !has_transcript && !has_archive {
        return Err(CliError::new(format!(
            "no session {sid} (neither {} nor {} exists)",
            paths.transcript_path(sid).display(),
            paths.archive_root(sid).display()
        )));
    }
    Ok(())
}

/// The root's sessions and bad names.
pub(super) fn discover(paths: &RootPaths) -> Result<Discovery, CliError> {
    root::discover(paths).map_err(|e| CliError::new(format!("cannot list the root: {e}")))
}
