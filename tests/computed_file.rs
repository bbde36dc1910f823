//! A computed file added to a mount's session directories: one `ComputedFile` and its render
//! function (`turns.txt` below, a few lines), shown, read and kept current through a real mount
//! like the built-in ones.

mod common;

use std::time::Duration;

use normafs::bytes::Bytes;
use normafs::config::Config;
use normafs::fs::{ComputedFile, FsError, FsOptions, LayoutError, NormaFs, SessionFiles};
use normafs::fuse::MountOptions;
use normafs::store::root::RootPaths;

use common::{cat, mount, ok, quoted, sh, write_session, Session};

// The file: each message's role, one a line.
fn turns(f: &mut SessionFiles) -> Result<Bytes, FsError> {
    let roles: String = f
        .messages()
        .iter()
        .map(|m| format!("{}\n", &*m.role))
        .collect();
    Ok(Bytes::from(roles.into_bytes()))
}
static TURNS: ComputedFile = ComputedFile::new("turns.txt", turns);

#[test]
fn a_computed_file_added_at_setup_is_listed_read_and_follows_its_transcript() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut s = Session::new("s1");
    s.user("hello").assistant("hi");
    write_session(root.path(), &s);
    let opts = MountOptions {
        computed_files: vec![&TURNS],
        ..MountOptions::default()
    };
    let Some(m) = mount(root, Config::default(), opts) else {
        return;
    };
    let dir = m.at("sessions/s1");
    let names = ok(&sh(&format!("ls {}", quoted(&dir))));
    assert!(names.lines().any(|n| n == "turns.txt"), "{names}");
    assert!(names.lines().any(|n| n == "view.jsonl"), "{names}");
    let file = dir.join("turns.txt");
    assert_eq!(cat(&file), b"user\nassistant\n");
    // The built-in files are made beside it as before.
    assert!(!cat(&dir.join("view.jsonl")).is_empty());

    common::append_user_message(&m.root().join("transcripts/s1.jsonl"), "s1", "again");
    let followed = common::within(Duration::from_secs(10), || {
        cat(&file) == b"user\nassistant\nuser\n"
    });
    assert!(
        followed,
        "turns.txt after an append: {:?}",
        String::from_utf8_lossy(&cat(&file))
    );
}

#[test]
fn a_name_a_session_directory_shows_is_refused_at_setup() {
    static CLASH: ComputedFile = ComputedFile::new("view.md", turns);
    let root = tempfile::tempdir().expect("tempdir");
    let cfg = Config::default();
    let setup = || {
        NormaFs::setup(
            RootPaths::from_root(root.path()),
            cfg.clone(),
            FsOptions::new(&cfg, false),
        )
    };
    assert!(matches!(
        setup().computed_file(&CLASH),
        Err(LayoutError::Taken("view.md"))
    ));
    let twice = setup()
        .computed_file(&TURNS)
        .and_then(|s| s.computed_file(&TURNS));
    assert!(matches!(twice, Err(LayoutError::Taken("turns.txt"))));
}
