//! Test-only hooks that make a request handler panic, to prove that a panic is caught, answered
//! with `EIO`, and that the mount keeps serving (tests/panic.rs), or run a test's closure at a
//! racy point of a handler (tests/mapped.rs, tests/lookup_race.rs). They are process-wide.
//!
//! They exist only with the cargo feature `testhook`, which the package's dev-dependency on
//! itself turns on in every build of a test, bench or example (`cargo test`,
//! `./scripts/test.sh`); then an unset hook costs one relaxed atomic load per request. Without
//! it (`cargo build`, `cargo install`) the setters do not exist and the calls in the handlers
//! are empty inline functions, so a user's binary carries no hook and no check.

#[cfg(feature = "testhook")]
pub(crate) use armed::{before_computed_entry, before_mapped_reply, on_lookup};
#[cfg(feature = "testhook")]
pub use armed::{
    on_request, set_before_computed_entry, set_before_mapped_reply, set_panic_on_lookup,
    set_panic_on_request,
};
#[cfg(not(feature = "testhook"))]
pub use off::on_request;
#[cfg(not(feature = "testhook"))]
pub(crate) use off::{before_computed_entry, before_mapped_reply, on_lookup};

/// The calls in the handlers, without the feature: nothing.
#[cfg(not(feature = "testhook"))]
mod off {
    use std::ffi::OsStr;

    #[inline(always)]
    pub fn on_request(_op: &str) {}

    #[inline(always)]
    pub(crate) fn on_lookup(_name: &OsStr) {}

    #[inline(always)]
    pub(crate) fn before_mapped_reply() {}

    #[inline(always)]
    pub(crate) fn before_computed_entry() {}
}

/// The hooks, with the feature.
#[cfg(feature = "testhook")]
mod armed {
    use std::ffi::{OsStr, OsString};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, RwLock};

    /// Some hook is set.
    static ARMED: AtomicBool = AtomicBool::new(false);

    #[derive(Default)]
    struct Hooks {
        lookup: Option<OsString>,
        request: Option<String>,
        mapped_reply: Option<Arc<dyn Fn() + Send + Sync>>,
        computed_entry: Option<Arc<dyn Fn() + Send + Sync>>,
    }

    static HOOKS: RwLock<Hooks> = RwLock::new(Hooks {
        lookup: None,
        request: None,
        mapped_reply: None,
        computed_entry: None,
    });

    fn set(f: impl FnOnce(&mut Hooks)) {
        let mut h = HOOKS.write().unwrap_or_else(|e| e.into_inner());
        f(&mut h);
        let armed = h.lookup.is_some()
            || h.request.is_some()
            || h.mapped_reply.is_some()
            || h.computed_entry.is_some();
        ARMED.store(armed, Ordering::Relaxed);
    }

    /// Make every `lookup` of `name` panic inside [`NormaFs::lookup`](crate::fs::NormaFs::lookup), in
    /// every mount of this process; `None` disarms.
    pub fn set_panic_on_lookup(name: Option<&OsStr>) {
        set(|h| h.lookup = name.map(OsStr::to_os_string));
    }

    /// Make every kernel request of type `op` (the names the fuser adapter logs: `getattr`, `read`,
    /// `readdir`, `write`, …) panic inside its handler, in every mount of this process; `None`
    /// disarms.
    pub fn set_panic_on_request(op: Option<&str>) {
        set(|h| h.request = op.map(str::to_string));
    }

    /// Run `f` between the sizing of a real file's read served from a mapping of it and its reply
    /// (tests/mapped.rs truncates the file there), in every mount of this process; `None` disarms.
    pub fn set_before_mapped_reply(f: Option<Arc<dyn Fn() + Send + Sync>>) {
        set(|h| h.mapped_reply = f);
    }

    /// Runs the armed `set_before_mapped_reply` hook.
    pub(crate) fn before_mapped_reply() {
        run(|h| h.mapped_reply.clone());
    }

    /// Run `f` in a lookup of a computed file between taking the name's inode and computing its
    /// attributes, each time the lookup tries (tests/lookup_race.rs plays another worker's
    /// lookup of the same name there), in every mount of this process; `None` disarms.
    pub fn set_before_computed_entry(f: Option<Arc<dyn Fn() + Send + Sync>>) {
        set(|h| h.computed_entry = f);
    }

    /// Runs the armed `set_before_computed_entry` hook.
    pub(crate) fn before_computed_entry() {
        run(|h| h.computed_entry.clone());
    }

    /// Runs the hook `pick` chooses, when armed (outside the lock: a hook may make requests).
    fn run(pick: impl FnOnce(&Hooks) -> Option<Arc<dyn Fn() + Send + Sync>>) {
        if !ARMED.load(Ordering::Relaxed) {
            return;
        }
        let f = HOOKS.read().ok().and_then(|h| pick(&h));
        if let Some(f) = f {
            f();
        }
    }

    /// Panics if `name` is the armed lookup name.
    pub(crate) fn on_lookup(name: &OsStr) {
        if !ARMED.load(Ordering::Relaxed) {
            return;
        }
        let hit = HOOKS
            .read()
            .is_ok_and(|h| h.lookup.as_deref() == Some(name));
        if hit {
            panic!("test hook: panic on lookup of {}", name.to_string_lossy());
        }
    }

    /// Panics if `op` is the armed request type.
    pub fn on_request(op: &str) {
        if !ARMED.load(Ordering::Relaxed) {
            return;
        }
        let hit = HOOKS.read().is_ok_and(|h| h.request.as_deref() == Some(op));
        if hit {
            panic!("test hook: panic on {op}");
        }
    }
}
