//! Changes through the mount: creating, removing and renaming files in `memory/`, and
//! attribute changes of real files (the ctl file accepts a truncation and nothing else).

use std::ffi::OsStr;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::fs::handles::Handle;
use crate::fs::reply::to_timespec;
use crate::fs::{real, Base, Entry, FsError, Node, NormaFs, Opened, SetAttr};

impl NormaFs {
    /// The backing directory where a child of `parent` may be created, removed or renamed:
    /// only `memory/` accepts new names.
    fn mutable_dir(&self, parent: &Node) -> Result<(Base, PathBuf), FsError> {
        match parent {
            Node::MemoryDir => Ok((Base::Memory, PathBuf::new())),
            _ => Err(FsError::Access),
        }
    }

    /// `create` of `name` in `parent` with the caller's `mode` and `umask` (the file gets
    /// `mode & !umask`, whatever the mount's own umask is).
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Entry, Opened), FsError> {
        self.create_as(parent, name, mode, umask, flags, None)
    }

    /// [`NormaFs::create`] for the caller `owner` (uid, gid): a file it creates belongs to
    /// the caller (see `Backing::create`).
    pub fn create_as(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        owner: Option<(u32, u32)>,
    ) -> Result<(Entry, Opened), FsError> {
        let p = self.node(parent)?;
        let (b, dir) = self.mutable_dir(&p)?;
        self.opts.writable()?;
        if !real::valid_component(name) {
            return Err(FsError::Invalid("bad name".into()));
        }
        if name == "MEMORY.md" {
            return Err(FsError::Access);
        }
        let rel = dir.join(name);
        let node = Node::Real(b, rel.clone());
        let keep_cache = self.covered(&node, false);
        let f = Arc::new(self.backing.create(
            b,
            &rel,
            crate::fs::ops::files::backing_flags(flags) | libc::O_CREAT,
            mode & !umask & 0o7777,
            owner,
        )?);
        // Counts the kernel's lookup of the new inode, which holds the file from now on.
        let e = self.entry_of(&node)?;
        let fh = self.new_handle(Handle::real(f.clone(), e.attr.ino, keep_cache));
        Ok((
            e,
            Opened {
                fh,
                direct_io: false,
                keep_cache,
                backing: Some(f),
                stale_attr: false,
            },
        ))
    }

    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        let p = self.node(parent)?;
        let child = self.child(&p, name)?;
        let (b, _) = self.mutable_dir(&p)?;
        self.opts.writable()?;
        let Node::Real(_, rel) = &child else {
            return Err(FsError::Access);
        };
        self.backing.unlink(b, rel)?;
        self.inodes.remove(&child);
        Ok(())
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<(), FsError> {
        let p = self.node(parent)?;
        let np = self.node(newparent)?;
        let (b, _) = self.mutable_dir(&p)?;
        let (nb, _) = self.mutable_dir(&np)?;
        self.opts.writable()?;
        if b != nb {
            return Err(FsError::CrossDevice);
        }
        if !real::valid_component(newname) {
            return Err(FsError::Invalid("bad name".into()));
        }
        if name == "MEMORY.md" || newname == "MEMORY.md" {
            return Err(FsError::Access);
        }
        let from = PathBuf::from(name);
        let to = PathBuf::from(newname);
        self.backing.rename(b, &from, &to, flags)?;
        self.inodes.rename(&Node::Real(b, from), &Node::Real(b, to));
        Ok(())
    }

    /// `set` applied to real file `f` (inode `ino`) through its descriptor.
    fn set_attrs_of(&self, f: &File, set: &SetAttr) -> Result<(), FsError> {
        use crate::fs::real::by_fd;
        if let Some(size) = set.size {
            by_fd::truncate(f, size)?;
        }
        if let Some(mode) = set.mode {
            by_fd::chmod(f, mode & 0o7777)?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            by_fd::chown(f, set.uid, set.gid)?;
        }
        let now = SystemTime::now();
        let at = if set.atime_now { Some(now) } else { set.atime };
        let mt = if set.mtime_now { Some(now) } else { set.mtime };
        if at.is_some() || mt.is_some() {
            by_fd::utimes(f, at.map(to_timespec), mt.map(to_timespec))?;
        }
        Ok(())
    }

    pub fn setattr(&self, ino: u64, fh: Option<u64>, set: &SetAttr) -> Result<Entry, FsError> {
        let node = self.node(ino)?;
        match &node {
            Node::Ctl(_) => {
                // `echo … > ctl` truncates first: accepted and ignored.
                if set.size.is_some_and(|s| s != 0)
                    || set.mode.is_some()
                    || set.uid.is_some()
                    || set.gid.is_some()
                {
                    return Err(FsError::Perm);
                }
                self.attr_of(&node, ino)
            }
            Node::Real(b, rel) => {
                self.opts.writable()?;
                // Changes go to the inode's own file when it is open (held, or the handle's),
                // whatever its name names by now.
                if let Some(f) = self.real_file(ino, fh) {
                    self.set_attrs_of(&f, set)?;
                    return self.real_attr_by(&node, ino, fh, set.size.is_some());
                }
                // Else through the name: it must still name the inode's file (else ESTALE,
                // and the kernel looks it up again and retries).
                let (st, id) = self.backing.lstat_ident(*b, rel)?;
                if !self.inodes.answers_for(ino, &st, id) {
                    return Err(FsError::Stale);
                }
                if let Some(size) = set.size {
                    let handle_file = fh.and_then(|fh| match self.handles.lock().get(&fh) {
                        Some(Handle::Real { file, .. }) => Some(file.clone()),
                        _ => None,
                    });
                    match handle_file {
                        Some(f) => f.set_len(size)?,
                        None => self.backing.truncate(*b, rel, size)?,
                    }
                }
                if let Some(mode) = set.mode {
                    self.backing.chmod(*b, rel, mode & 0o7777)?;
                }
                if set.uid.is_some() || set.gid.is_some() {
                    self.backing.chown(*b, rel, set.uid, set.gid)?;
                }
                let now = SystemTime::now();
                let at = if set.atime_now { Some(now) } else { set.atime };
                let mt = if set.mtime_now { Some(now) } else { set.mtime };
                if at.is_some() || mt.is_some() {
                    self.backing
                        .utimes(*b, rel, at.map(to_timespec), mt.map(to_timespec))?;
                }
                // The kernel takes the size of the reply as it is.
                self.real_attr_of(&node, ino, set.size.is_some())
            }
            Node::MemoryDir => {
                // The memory directory is a real one: its mode, owner and times change as
                // any directory's; it has no size to set.
                self.opts.writable()?;
                if set.size.is_some() {
                    return Err(FsError::IsDir);
                }
                let d = File::open(self.backing.base(Base::Memory))?;
                self.set_attrs_of(&d, set)?;
                self.attr_of(&node, ino)
            }
            n if n.is_computed_file() => {
                // `> view.jsonl` truncates before it writes: refused as the write would be.
                self.opts.writable()?;
                Err(FsError::Access)
            }
            _ => {
                self.opts.writable()?;
                Err(FsError::Perm)
            }
        }
    }
}
