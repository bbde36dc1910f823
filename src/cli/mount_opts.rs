//! The mount's own `-o` items, as `mount(8)`, fstab and FUSE users write them (`ro`,
//! `allow_other`, `auto_unmount`, `threads=8`, …), taken out of the `-o` arguments before the
//! rest goes to the settings (SPEC 10 keys, which report an unknown key).

use std::path::PathBuf;

/// What the `-o` items said about the mount itself; `None`/`false` leaves the flag's value.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MountItems {
    pub read_only: bool,
    pub allow_other: bool,
    pub auto_unmount: bool,
    pub no_exec: bool,
    pub passthrough: bool,
    pub no_passthrough: bool,
    pub no_open: bool,
    pub allow_empty: bool,
    pub verbose: bool,
    pub threads: Option<u16>,
    pub log_file: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub transcripts: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub archives: Option<PathBuf>,
}

/// Words `mount(8)` and fstab add that concern the mount command, not the filesystem
/// (`mount -t fuse.normafs` passes `rw,dev,suid` by default; `user` becomes
/// `noexec,nosuid,nodev`), and the options normafs always has.
const ACCEPTED: &[&str] = &[
    "rw",
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "nofail",
    "_netdev",
    "async",
    "exec",
    // normafs mounts are always nosuid, nodev, noatime, with default_permissions.
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "relatime",
    "nodiratime",
    "strictatime",
    "default_permissions",
];

/// An item of the mount's that cannot be used; its message names the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountItemError {
    #[error(
        "-o {item}: normafs has no allow_root; allow_other lets other users in (permissions \
         still apply)"
    )]
    AllowRoot { item: String },
    #[error("-o {item}: threads is a number from 1 to 256")]
    Threads { item: String },
    /// `key` is the item's key as normafs reads it (`log_file` for `log-file`).
    #[error("-o {item}: {key} needs a path ({key}=PATH)")]
    NoPath { item: String, key: String },
}

/// Take the mount's items out of `options` (each a comma-separated `-o` argument); what is
/// left stays for the settings. An item of the mount with a bad value is one line naming it.
pub fn take(options: &mut Vec<String>) -> Result<MountItems, MountItemError> {
    let mut m = MountItems::default();
    let mut rest = Vec::new();
    for arg in options.iter() {
        let mut left: Vec<&str> = Vec::new();
        for item in arg.split(',') {
            let trimmed = item.trim();
            if trimmed.is_empty() {
                continue;
            }
            if !m.apply(trimmed)? {
                left.push(item);
            }
        }
        if !left.is_empty() {
            rest.push(left.join(","));
        }
    }
    *options = rest;
    Ok(m)
}

impl MountItems {
    /// Apply one item when it is the mount's; `false` when it is not.
    fn apply(&mut self, item: &str) -> Result<bool, MountItemError> {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim().replace('-', "_"), Some(v.trim())),
            None => (item.replace('-', "_"), None),
        };
        let path = |v: Option<&str>| match v {
            Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
            _ => Err(MountItemError::NoPath {
                item: item.to_string(),
                key: key.clone(),
            }),
        };
        match (key.as_str(), value) {
            (k, None) if ACCEPTED.contains(&k) || k.starts_with("x_") => {}
            ("comment", _) | ("fsname", _) | ("subtype", _) => {}
            ("ro" | "read_only", None) => self.read_only = true,
            ("allow_other", None) => self.allow_other = true,
            ("allow_root", None) => {
                return Err(MountItemError::AllowRoot {
                    item: item.to_string(),
                })
            }
            ("auto_unmount", None) => self.auto_unmount = true,
            ("noexec", None) => self.no_exec = true,
            ("passthrough", None) => self.passthrough = true,
            ("no_passthrough", None) => self.no_passthrough = true,
            ("no_open", None) => self.no_open = true,
            ("allow_empty", None) => self.allow_empty = true,
            ("verbose", None) => self.verbose = true,
            ("threads", v) => {
                self.threads = Some(
                    v.and_then(|v| v.parse::<u16>().ok())
                        .filter(|n| (1..=256).contains(n))
                        .ok_or_else(|| MountItemError::Threads {
                            item: item.to_string(),
                        })?,
                )
            }
            ("log_file", v) => self.log_file = Some(path(v)?),
            ("config", v) => self.config = Some(path(v)?),
            ("transcripts", v) => self.transcripts = Some(path(v)?),
            ("memory", v) => self.memory = Some(path(v)?),
            ("archives", v) => self.archives = Some(path(v)?),
            _ if item.starts_with("x-") => {}
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> (Result<MountItems, MountItemError>, Vec<String>) {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let r = take(&mut v);
        (r, v)
    }

    #[test]
    fn mount_words_are_taken_and_settings_stay() {
        let (m, rest) = run(&[
            "rw,dev,suid,window=128000,ro",
            "allow_other,x-systemd.automount,_netdev",
            "ttl_ms=500,threads=8,log-file=/tmp/n.log,auto_unmount",
            "parents=s2:s1",
        ]);
        let m = m.expect("ok");
        assert!(m.read_only && m.allow_other && m.auto_unmount);
        assert_eq!(m.threads, Some(8));
        assert_eq!(m.log_file, Some(PathBuf::from("/tmp/n.log")));
        assert_eq!(rest, vec!["window=128000", "ttl_ms=500", "parents=s2:s1"]);
    }

    #[test]
    fn a_bad_mount_item_is_named() {
        let (m, _) = run(&["threads=0"]);
        assert!(m.unwrap_err().to_string().contains("-o threads=0"));
        let (m, _) = run(&["allow_root"]);
        assert!(m.unwrap_err().to_string().contains("allow_other"));
        let (m, _) = run(&["log_file="]);
        assert!(m.unwrap_err().to_string().contains("needs a path"));
        // Not the mount's: left for the settings, which name unknown keys.
        let (m, rest) = run(&["frobnicate"]);
        assert_eq!(m, Ok(MountItems::default()));
        assert_eq!(rest, vec!["frobnicate"]);
    }
}
