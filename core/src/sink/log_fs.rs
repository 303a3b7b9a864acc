//! The file system under the sink's log, and the reader over it: every part that touches the
//! log names these, so they do not depend on each other for them.

use super::fault_fs::FaultFs;
use super::log::LogReader;

/// The file system the sink's log is on.
pub(crate) type Fs = FaultFs;

/// The reader of the sink's log.
pub(crate) type Reader = LogReader<Fs>;
