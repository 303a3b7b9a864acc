//! The file-system operations the log needs, behind a small trait, and the real implementation.
//!
//! The trait is scoped to one directory (the log's) and names files by their name in it. It
//! exposes each durability step separately — `sync_data` of a file, `sync_dir` of the directory
//! — so the writer decides when each happens, and a test implementation
//! ([`super::sim::SimFs`]) can record them and build every state a crash may leave.
//! [`RealFs`] does exactly what each call says and nothing more: the directory fsync after a
//! create, rename or unlink is the writer's call to [`LogFs::sync_dir`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// A directory of segment files.
pub trait LogFs {
    /// An open segment, appended to by the writer.
    type File: SegmentFile;

    /// Creates the file `name`, which must not exist, open for appending. The new directory
    /// entry is durable only after [`LogFs::sync_dir`].
    fn create(&self, name: &str) -> io::Result<Self::File>;
    /// The whole content of `name` as the operating system shows it now.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// `len` bytes of `name` from byte `offset` on (an error when the file is shorter).
    fn read_at(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// The names of the files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Renames `from` to `to` (replacing `to`); durable after [`LogFs::sync_dir`].
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Unlinks `name`; durable after [`LogFs::sync_dir`].
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries durable (fsync of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// Makes the data of an existing file durable (`fdatasync`), for files found at open.
    fn sync_file(&self, name: &str) -> io::Result<()>;
    /// The directory on the real disk where sealed segments' sidecar indexes are kept
    /// (`super::sidecar`); `None`: none are kept.
    fn sidecar_dir(&self) -> Option<&Path> {
        None
    }
}

/// A file open for appending.
pub trait SegmentFile {
    /// Appends all of `bytes` at the end of the file (not yet durable).
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to its first `len` bytes and makes the cut durable (`ftruncate`,
    /// then `fdatasync`): bytes a failed write or sync left behind are gone, also from the page
    /// cache a restarted process would read.
    fn cut(&mut self, len: u64) -> io::Result<()>;
}

/// The log directory on the real file system.
#[derive(Debug, Clone)]
pub struct RealFs {
    dir: PathBuf,
}

impl RealFs {
    /// Opens (creating it if needed) the log directory `dir`. A directory created here is made
    /// durable in its parent before this returns.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl LogFs for RealFs {
    fn sidecar_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    type File = RealFile;

    fn create(&self, name: &str) -> io::Result<RealFile> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(RealFile(file))
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.dir.join(name))
    }

    fn read_at(&self, name: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt as _;
        let mut buf = vec![0; len];
        File::open(self.dir.join(name))?.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.dir.join(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn sync_file(&self, name: &str) -> io::Result<()> {
        File::open(self.dir.join(name))?.sync_data()
    }
}

/// A segment open for appending on the real file system.
#[derive(Debug)]
pub struct RealFile(File);

impl SegmentFile for RealFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        self.0.sync_data()
    }
}
