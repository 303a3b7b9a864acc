//! The files the plan reads: NKey seeds, credentials, TLS certificates and keys; and the
//! warning about secret key files that group or others may read.

use std::path::Path;

use tracing::warn;

use crate::bus::BusError;

pub(super) fn require_file(path: &Path, what: &str) -> Result<(), BusError> {
    std::fs::metadata(path).map(|_| ()).map_err(|err| {
        BusError::config(format!("cannot read the {what} {}: {err}", path.display())).caused_by(err)
    })
}

/// The NKey seed in `path`: the first line that starts with `S` (a seed file may also hold
/// the public key or comments).
pub(super) fn read_seed(path: &Path) -> Result<String, BusError> {
    warn_if_readable_by_others(path);
    let text = std::fs::read_to_string(path).map_err(|err| {
        BusError::config(format!(
            "cannot read the NKey seed file {}: {err} (--nkey, NATS_NKEY)",
            path.display()
        ))
        .caused_by(err)
    })?;
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with('S'))
        .map(str::to_owned)
        .ok_or_else(|| {
            BusError::config(format!(
                "no NKey seed (a line starting with `S`) in {} (--nkey, NATS_NKEY)",
                path.display()
            ))
        })
}

/// Whether group or others may read the file at `path` (Unix mode bits `0o077`).
pub fn readable_by_others(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

pub(super) fn warn_if_readable_by_others(path: &Path) {
    if readable_by_others(path) {
        warn!(
            "{} holds a secret key but group or others may read it: chmod 600 {}",
            path.display(),
            path.display()
        );
    }
}
