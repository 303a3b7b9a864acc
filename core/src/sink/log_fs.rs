//! The file system under the sink's log, and the reader over it: every part that touches the
//! log names these, so they do not depend on each other for them.
//!
//! A release build writes the log straight to the data directory's `log/` ([`RealFs`]). Tests
//! and the `testing` feature put [`super::fault_fs::FaultFs`] in its place: the same disk, or a
//! simulated one, with the faults `Faults::set_log_fault` injects.

use std::io;
use std::path::Path;

use super::config::{SinkConfig, LOG_DIR};
use super::log::io::RealFs;
use super::log::LogReader;
use super::Faults;

/// The file system the sink's log is on.
#[cfg(not(any(test, feature = "testing")))]
pub(crate) type Fs = RealFs;

/// The file system the sink's log is on: with injected faults, maybe simulated.
#[cfg(any(test, feature = "testing"))]
pub(crate) type Fs = super::fault_fs::FaultFs;

/// The reader of the sink's log.
pub(crate) type Reader = LogReader<Fs>;

/// Opens the log's directory of `config` (creating it), with the switches of `faults`.
pub(crate) fn open(config: &SinkConfig, faults: &Faults) -> io::Result<Fs> {
    let real = RealFs::open(config.path.join(LOG_DIR))?;
    #[cfg(any(test, feature = "testing"))]
    let fs = super::fault_fs::FaultFs::new(real, config.log_sim.clone(), faults.clone());
    #[cfg(not(any(test, feature = "testing")))]
    let fs = {
        let _no_faults = faults;
        real
    };
    Ok(fs)
}

/// The log's directory on the real disk (`None` when simulated).
pub(crate) fn real_dir(fs: &Fs) -> Option<&Path> {
    #[cfg(any(test, feature = "testing"))]
    let dir = fs.dir();
    #[cfg(not(any(test, feature = "testing")))]
    let dir = Some(fs.dir());
    dir
}
