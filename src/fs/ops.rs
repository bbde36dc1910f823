//! The filesystem's operations, one file per family of requests: names and lookups
//! (`namespace`), attributes (`attr`), directory listings (`dirs`), opening, reading and
//! writing files (`files`), ctl commands (`ctl`) and changes to real files (`changes`). They
//! ask the state owners beside them in `fs/` (inodes, versions, growth, handles, the computed
//! cache, the watcher) and keep no state of their own.

mod attr;
mod changes;
mod ctl;
mod dirs;
mod files;
mod namespace;
