//! The sink's errors keep their cause: the source chain of a real failure reaches the error
//! the operating system reported, and the message still says what to do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error;
use std::io;

use super::{CheckpointError, LocalSink, SinkConfig, SinkError};
use crate::sink::writer::seq_floor::SeqFloor;

/// The first `io::Error` in `err`'s source chain (`err` itself included).
fn io_error_in<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a io::Error> {
    std::iter::successors(Some(err), |&err| err.source())
        .find_map(|err| err.downcast_ref::<io::Error>())
}

#[test]
fn opening_a_sink_on_a_file_keeps_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "x").unwrap();
    let Err(err) = LocalSink::open(SinkConfig::new(&file)) else {
        panic!("a sink opened on a regular file");
    };
    assert!(matches!(err, SinkError::Open { .. }), "{err:?}");
    let shown = err.to_string();
    assert!(
        shown.contains("Check that the directory is writable."),
        "{shown}"
    );
    let io = io_error_in(&err).unwrap_or_else(|| panic!("no io::Error behind: {err:?}"));
    assert!(
        shown.contains(&io.to_string()),
        "{shown} does not show {io}"
    );
}

#[test]
fn an_unreadable_sequence_floor_keeps_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: reading it fails with EISDIR, as root too.
    std::fs::create_dir(dir.path().join("seq.floor")).unwrap();
    let err = SeqFloor::open(dir.path()).unwrap_err();
    assert!(matches!(err, SinkError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("sink I/O failed: cannot read "),
        "{err}"
    );
    let io = io_error_in(&err).unwrap_or_else(|| panic!("no io::Error behind: {err:?}"));
    assert_eq!(io.kind(), io::ErrorKind::IsADirectory, "{io}");
}

#[test]
fn a_checkpoint_error_and_its_clone_keep_the_io_error() {
    const ENOSPC: i32 = 28;
    let original = CheckpointError::SyncLog(io::Error::from_raw_os_error(ENOSPC));
    let cloned = original.clone();
    for err in [original, cloned] {
        let err = SinkError::from(err);
        assert_eq!(
            err.to_string(),
            format!(
                "sink I/O failed: fdatasync of sled's log failed: {}",
                io::Error::from_raw_os_error(ENOSPC)
            )
        );
        let io = io_error_in(&err).unwrap_or_else(|| panic!("no io::Error behind: {err:?}"));
        assert_eq!(io.kind(), io::ErrorKind::StorageFull, "{io}");
        assert!(err.class() == crate::ErrorClass::Failure && !err.may_be_stored());
    }
}

#[test]
fn a_cache_below_a_mebibyte_is_refused_before_anything_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let config = SinkConfig {
        cache_capacity_bytes: 0,
        ..SinkConfig::new(&path)
    };
    let err = LocalSink::open(config).err().unwrap();
    assert!(matches!(err, SinkError::Rejected(_)), "{err}");
    assert!(err.to_string().contains("sink.cache_capacity_mb"), "{err}");
    assert!(!path.exists(), "nothing is created");
}
