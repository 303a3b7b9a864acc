//! The file-system operations the log needs, behind a small trait, and the real implementation.
//!
//! The trait is scoped to one directory (the log's) and names files by their name in it. It
//! exposes each durability step separately — `sync_data` of a file, `sync_dir` of the directory
//! — so the writer decides when each happens, and a test implementation
//! ([`super::sim::SimFs`]) can record them and build every state a crash may leave.
//! [`RealFs`] does exactly what each call says and nothing more: the directory fsync after a
//! create, rename or unlink is the writer's call to [`LogFs::sync_dir`].
//!
//! One thing a [`SegmentFile`] does below the writer: it reserves a segment's blocks ahead of
//! its writes (`fallocate`, [`PREALLOCATE_BYTES`] at a time on the real disk, the same
//! [`reservation`] rule in [`super::sim::SimFile`], which records it in the crash trace) and
//! writes at its own offset, so an append allocates nothing and its `fdatasync` has less to
//! commit than a plain append's. The file is then longer than what was written, its end zeros;
//! [`SegmentFile::seal`] gives the space back when the writer is done with the segment, and a
//! crash leaves the zeros, which the segment scan takes for the segment's end
//! (`super::segment::scan`).
//!
//! Sidecar indexes (`super::sidecar`) go through the trait too ([`LogFs::store`]), so the
//! simulated directory records them and the crash enumeration covers them.

use std::fs::{self, File, OpenOptions};
use std::io;
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
    /// The length of `name` as the operating system shows it now.
    fn len(&self, name: &str) -> io::Result<u64>;
    /// Cuts the existing file `name` back to its first `len` bytes and makes the cut durable
    /// (`ftruncate`, then `fdatasync`): for a torn tail found at open.
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Writes the small file `name` whole: under `{name}.tmp`, `fdatasync`ed, then renamed into
    /// place (the directory is not fsynced: a crash may keep the old file or none). For the
    /// sidecar indexes, which the log can do without.
    fn store(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
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
    /// The writer is done with the file (rotation, close): space reserved past what was
    /// appended is given back, so the file is exactly its appends. Nothing else changes.
    fn seal(&mut self) -> io::Result<()> {
        Ok(())
    }
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
    type File = RealFile;

    fn create(&self, name: &str) -> io::Result<RealFile> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(RealFile {
            file,
            written: 0,
            reserved: 0,
        })
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

    fn len(&self, name: &str) -> io::Result<u64> {
        Ok(fs::metadata(self.dir.join(name))?.len())
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        file.set_len(len)?;
        file.sync_data()
    }

    fn store(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write as _;
        let (tmp, path) = (self.dir.join(format!("{name}.tmp")), self.dir.join(name));
        let written = File::create(&tmp)
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.sync_data()
            })
            .and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

/// How much of a segment [`RealFile`] reserves at a time ahead of its writes: one
/// `fallocate`, and one `fdatasync` that commits a size change, per 8 MiB appended.
pub const PREALLOCATE_BYTES: u64 = 8 << 20;

/// Where a file reserved up to `reserved`, with `written` bytes appended, must be reserved to
/// (a whole number of `chunk`s) before `len` more bytes are appended; `None` when it need not
/// grow. The one rule of [`RealFile`] and the simulated file.
pub fn reservation(written: u64, reserved: u64, len: u64, chunk: u64) -> Option<u64> {
    let end = written.saturating_add(len);
    (end > reserved).then(|| end.div_ceil(chunk.max(1)).saturating_mul(chunk.max(1)))
}

/// A segment open for appending on the real file system.
#[derive(Debug)]
pub struct RealFile {
    file: File,
    /// Bytes appended: where the next append goes.
    written: u64,
    /// The file's length: blocks reserved up to here (zeros past `written`).
    reserved: u64,
}

impl RealFile {
    /// Reserves blocks for `len` more bytes past what is written, a chunk at a time. Where the
    /// file system cannot (no `fallocate`, or no space for the whole chunk), the append
    /// allocates its own blocks as a plain append would.
    fn reserve(&mut self, len: u64) {
        let Some(want) = reservation(self.written, self.reserved, len, PREALLOCATE_BYTES) else {
            return;
        };
        if fallocate(&self.file, self.reserved, want - self.reserved).is_ok() {
            self.reserved = want;
        }
    }
}

#[cfg(target_os = "linux")]
fn fallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::unix::io::AsRawFd as _;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: fallocate(2) on a descriptor this `File` owns; it touches no memory of ours.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn fallocate(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

impl SegmentFile for RealFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        self.reserve(bytes.len() as u64);
        self.file.write_all_at(bytes, self.written)?;
        self.written += bytes.len() as u64;
        self.reserved = self.reserved.max(self.written);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        (self.written, self.reserved) = (len, len);
        self.file.sync_data()
    }

    fn seal(&mut self) -> io::Result<()> {
        if self.reserved > self.written {
            self.file.set_len(self.written)?;
            self.reserved = self.written;
            self.file.sync_data()?;
        }
        Ok(())
    }
}
