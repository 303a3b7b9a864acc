//! The log writer: assigns sequences, appends groups, makes each durable with one `fdatasync`,
//! rotates segments and deletes old ones.

use std::ops::Range;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use super::error::LogError;
use super::frame;
use super::index::{LogIndex, SegmentIndex, SharedIndex};
use super::io::{LogFs, SegmentFile};
use super::reader::{self, LogReader, Recovery};
use super::segment;
use super::sidecar;

/// How the log is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment is closed once it holds this many bytes; the next group starts a new one. A
    /// group is never split, so a segment may exceed it by one group.
    pub segment_bytes: u64,
    /// Test switch: acknowledge without `fdatasync`. Only for proving the crash harness sees
    /// the loss; never set it otherwise.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub unsafe_skip_fdatasync: bool,
    /// Test switch: never fsync the directory. Only for proving the crash harness sees the
    /// loss; never set it otherwise.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub unsafe_skip_dir_fsync: bool,
}

impl LogConfig {
    /// Whether appends and recovered segments are `fdatasync`ed (always, but in the tests that
    /// prove the harness sees the loss).
    fn syncs_data(&self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        let skip = self.unsafe_skip_fdatasync;
        #[cfg(not(any(test, feature = "testing")))]
        let skip = false;
        !skip
    }

    /// Whether the directory is fsynced (always, but in the tests that prove the harness sees
    /// the loss).
    fn syncs_dir(&self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        let skip = self.unsafe_skip_dir_fsync;
        #[cfg(not(any(test, feature = "testing")))]
        let skip = false;
        !skip
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            #[cfg(any(test, feature = "testing"))]
            unsafe_skip_fdatasync: false,
            #[cfg(any(test, feature = "testing"))]
            unsafe_skip_dir_fsync: false,
        }
    }
}

struct Active<W> {
    file: W,
    name: String,
    len: u64,
}

/// The single writer of a log directory.
pub struct LogWriter<F: LogFs> {
    fs: F,
    config: LogConfig,
    /// The segment appended to; `None` before the first group and after a failure or rotation.
    active: Option<Active<F::File>>,
    /// The segments on disk and their durable frames, shared with readers; the active
    /// segment is the last.
    index: SharedIndex,
    next_seq: u64,
    durable_through: u64,
    /// A segment whose last group failed and could not yet be cut off it (see
    /// [`LogWriter::append`]); cut before the next group is written.
    uncut: Option<Active<F::File>>,
    /// Deletions not yet made durable by a directory fsync.
    dir_dirty: bool,
    buf: Vec<u8>,
}

impl<F: LogFs> std::fmt::Debug for LogWriter<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("segments", &self.segments())
            .field("next_seq", &self.next_seq)
            .field("durable_through", &self.durable_through)
            .finish_non_exhaustive()
    }
}

impl<F: LogFs> LogWriter<F> {
    /// Opens the log in `fs`: recovers it ([`reader::recover`]), deletes unfinished segments,
    /// and makes every segment found durable (a process crash leaves written but unsynced bytes
    /// readable; they are synced before anything is built on them). Appending then starts a
    /// new segment.
    pub fn open(fs: F, config: LogConfig) -> Result<(Self, Recovery), LogError> {
        Self::open_lazy(fs, config, 0)
    }

    /// [`LogWriter::open`], leaving the segments whose events are all at or below
    /// `done_through` unscanned until a reader needs them (see [`reader::recover`]): opening a
    /// large log reads only its tail.
    pub fn open_lazy(
        fs: F,
        config: LogConfig,
        done_through: u64,
    ) -> Result<(Self, Recovery), LogError> {
        let recovery = reader::recover(&fs, done_through)?;
        // A hole and frames after it may end only the newest segment: cut them off before a
        // newer one exists (`super::segment`'s module doc, point 3).
        for (file, len) in &recovery.cut {
            fs.truncate(file, *len as u64)
                .map_err(|source| LogError::CutTail {
                    file: file.clone(),
                    offset: *len,
                    source,
                })?;
        }
        for file in &recovery.unfinished {
            fs.remove(file).map_err(|source| LogError::Remove {
                file: file.clone(),
                source,
            })?;
        }
        if config.syncs_data() {
            for &first_seq in &recovery.segments {
                let file = segment::name(first_seq);
                fs.sync_file(&file)
                    .map_err(|source| LogError::Read { file, source })?;
            }
        }
        if config.syncs_dir() {
            fs.sync_dir()
                .map_err(|source| LogError::SyncDir { source })?;
        }
        let writer = LogWriter {
            fs,
            config,
            active: None,
            index: Arc::new(RwLock::new(recovery.index.clone())),
            next_seq: recovery.next_seq,
            durable_through: recovery.last_seq,
            uncut: None,
            dir_dirty: false,
            buf: Vec::new(),
        };
        Ok((writer, recovery))
    }

    /// Appends a group of events and makes it durable with one `fdatasync`; returns their
    /// sequences, consecutive, only once they are durable. On an error nothing is acknowledged,
    /// the sequences the group took are never handed out again, and the next call starts a
    /// new segment. A failed write or sync may have left any part of the group in the segment
    /// (in the page cache, whatever the disk holds), so the segment is cut back to where the
    /// group began: a restarted process must not find, and publish, events that were reported
    /// not durable and that a later power cut may take away. A cut that fails is tried again
    /// before the next group, which fails while it does.
    pub fn append<P: AsRef<[u8]>>(&mut self, events: &[P]) -> Result<Range<u64>, LogError> {
        for (index, event) in events.iter().enumerate() {
            let len = event.as_ref().len();
            if len > frame::MAX_PAYLOAD {
                let max = frame::MAX_PAYLOAD;
                return Err(LogError::TooLarge { index, len, max });
            }
        }
        let first = self.next_seq;
        if events.is_empty() {
            return Ok(first..first);
        }
        self.cut_failed_group()?;
        let end = first.saturating_add(events.len() as u64);
        self.next_seq = end;
        self.buf.clear();
        for (seq, event) in (first..end).zip(events) {
            frame::encode(seq, event.as_ref(), &mut self.buf);
        }
        match self.write_group(first) {
            Ok(()) => {
                self.durable_through = end - 1;
                let lens = events.iter().map(|e| frame::encoded_len(e.as_ref().len()));
                self.index_mut().push_group(lens, end - 1);
                Ok(first..end)
            }
            Err(err) => {
                self.uncut = self.active.take();
                // The group's error is the one to report; a failed cut is retried and
                // reported by the next append.
                let _ = self.cut_failed_group();
                Err(err)
            }
        }
    }

    /// Cuts the segment of a failed group back to its durable length, if one is waiting.
    fn cut_failed_group(&mut self) -> Result<(), LogError> {
        let Some(mut segment) = self.uncut.take() else {
            return Ok(());
        };
        match segment.file.cut(segment.len) {
            Ok(()) => Ok(()),
            Err(source) => {
                let file = segment.name.clone();
                self.uncut = Some(segment);
                Err(LogError::Cut { file, source })
            }
        }
    }

    fn write_group(&mut self, first: u64) -> Result<(), LogError> {
        let full = self
            .active
            .as_ref()
            .is_some_and(|active| active.len >= self.config.segment_bytes);
        if full {
            self.seal_active();
            self.store_sidecar();
        }
        if full || self.active.is_none() {
            self.active = None;
            self.start_segment(first)?;
        }
        let Some(active) = self.active.as_mut() else {
            return Ok(());
        };
        active
            .file
            .append(&self.buf)
            .map_err(|source| LogError::Write {
                file: active.name.clone(),
                source,
            })?;
        if self.config.syncs_data() {
            active.file.sync_data().map_err(|source| LogError::Sync {
                file: active.name.clone(),
                source,
            })?;
        }
        // Only a durable group counts: a failed one is cut back to this length.
        active.len += self.buf.len() as u64;
        Ok(())
    }

    /// At a clean close: keeps the active segment's frame offsets beside it, so the next open
    /// reads them instead of scanning the segment (up to 64 MiB). Nothing writes to the
    /// segment afterwards (a reopened log starts a new one), and the next open uses them only
    /// while the segment's length is what they describe.
    pub fn store_active_sidecar(&mut self) {
        if self.uncut.is_none() {
            self.seal_active();
            self.store_sidecar();
        }
    }

    /// Gives back the space reserved past the active segment's appends ([`SegmentFile::seal`]).
    /// A failure only leaves zeros after its frames, which a scan takes for its end.
    fn seal_active(&mut self) {
        if let Some(active) = self.active.as_mut() {
            if let Err(err) = active.file.seal() {
                tracing::debug!(file = %active.name, error = %err, "cannot give back a segment's reserved space; its zeros stay after its frames");
            }
        }
    }

    /// Keeps the frame offsets of the full active segment beside it (`super::sidecar`).
    fn store_sidecar(&self) {
        let index = self
            .index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sealed) = index.segments().last() {
            sidecar::store(&self.fs, sealed);
        }
    }

    /// Creates the segment starting at `first`: header written and synced under a temporary
    /// name, renamed, directory fsynced; only then does it become the active segment.
    fn start_segment(&mut self, first: u64) -> Result<(), LogError> {
        let (tmp, name) = (segment::tmp_name(first), segment::name(first));
        let mut file = self.fs.create(&tmp).map_err(|source| LogError::Create {
            file: tmp.clone(),
            source,
        })?;
        file.append(segment::MAGIC)
            .map_err(|source| LogError::Write {
                file: tmp.clone(),
                source,
            })?;
        if self.config.syncs_data() {
            file.sync_data().map_err(|source| LogError::Sync {
                file: tmp.clone(),
                source,
            })?;
        }
        self.fs
            .rename(&tmp, &name)
            .map_err(|source| LogError::Rename {
                from: tmp,
                to: name.clone(),
                source,
            })?;
        self.index_mut()
            .push_segment(SegmentIndex::new(first, segment::MAGIC.len() as u64));
        self.sync_dir()?;
        let len = segment::MAGIC.len() as u64;
        self.active = Some(Active { file, name, len });
        Ok(())
    }

    fn sync_dir(&mut self) -> Result<(), LogError> {
        if self.config.syncs_dir() {
            self.fs
                .sync_dir()
                .map_err(|source| LogError::SyncDir { source })?;
        }
        self.dir_dirty = false;
        Ok(())
    }

    /// The highest sequence known durable (0 before any): every event up to it that was
    /// appended is on disk. Readers never go past it.
    #[cfg(any(test, feature = "testing"))]
    pub fn durable_through(&self) -> u64 {
        self.durable_through
    }

    /// Every sequence up to this one was settled (made durable, or burned by a failed group)
    /// before the log's state now: the highest of [`LogWriter::durable_through`] and the
    /// sequence before the newest segment's first. The events themselves may be gone (deleted
    /// by retention), but not this evidence, since the newest segment always stays: an empty
    /// newest segment (a failed group cut back to its header) still says how far the log went.
    pub fn settled_through(&self) -> u64 {
        let newest = self.segments().last().copied().unwrap_or(0);
        self.durable_through.max(newest.saturating_sub(1))
    }

    /// The sequence the next event will get (at least; a failure skips sequences).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The first sequences of the segments on disk, ascending.
    pub fn segments(&self) -> Vec<u64> {
        let index = self
            .index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        index.segments().iter().map(|s| s.first_seq).collect()
    }

    /// Makes the next sequence at least `seq` (the sequences skipped are never handed out);
    /// the next group then starts a new segment. For carrying sequences over from elsewhere.
    pub fn skip_to(&mut self, seq: u64) {
        if seq > self.next_seq {
            self.next_seq = seq;
            self.seal_active();
            self.active = None;
        }
    }

    fn index_mut(&self) -> RwLockWriteGuard<'_, LogIndex> {
        self.index
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<F: LogFs + Clone> LogWriter<F> {
    /// A reader of this log's durable events, for other threads.
    pub fn reader(&self) -> LogReader<F> {
        LogReader::new(self.fs.clone(), self.index.clone())
    }

    /// The events from `from` on, in order, up to [`LogWriter::durable_through`].
    #[cfg(any(test, feature = "testing"))]
    pub fn records(&self, from: u64) -> reader::Records<F> {
        self.reader().records(from)
    }
}

impl<F: LogFs> LogWriter<F> {
    /// Deletes, oldest first, every segment whose events are all at or below `seq` (and
    /// durable); the newest segment always stays, and so does the newest one holding an event
    /// (after a failed group the newest is empty: the log's last event, which the next open
    /// names as the new epoch's predecessor, must not go with the older segments). The
    /// directory is fsynced after each deletion, so a crash keeps a prefix of them and the log
    /// never has a hole. Returns how many segments were deleted. Which events may go (applied,
    /// checkpointed, published, past retention) is the caller's decision.
    pub fn remove_through(&mut self, seq: u64) -> Result<usize, LogError> {
        let limit = seq.min(self.durable_through);
        let last_event_segment = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            let holding = index.segments().iter().rev().find(|s| !s.is_empty());
            holding.map_or(u64::MAX, |segment| segment.first_seq)
        };
        let mut removed = 0;
        while let [first, next, ..] = self.segments()[..] {
            if next - 1 > limit || first >= last_event_segment {
                break;
            }
            let file = segment::name(first);
            match self.fs.remove(&file) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(LogError::Remove { file, source }),
            }
            sidecar::remove(&self.fs, first);
            self.index_mut().drop_front(1);
            removed += 1;
            // One directory fsync per segment: a crash keeps a prefix of the deletions, so the
            // log never has a hole (a later segment gone, an earlier one still there).
            self.dir_dirty = true;
            self.sync_dir()?;
        }
        if self.dir_dirty {
            self.sync_dir()?;
        }
        Ok(removed)
    }

    /// The file system the log runs on.
    pub fn fs(&self) -> &F {
        &self.fs
    }
}
