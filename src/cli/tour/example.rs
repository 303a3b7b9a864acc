//! The example job of the tour: `examples/workflows/process-items.yml` and its items, built
//! into the binary so that the tour runs from any directory.

use std::path::{Path, PathBuf};

use super::TourError;

const WORKFLOW: &str = include_str!("../../../examples/workflows/process-items.yml");
const ITEMS: &str = include_str!("../../../examples/workflows/items.json");

/// Writes the workflow and its items into `dir` (without the `fixed` marker, so that the
/// broken items fail); returns the workflow's path.
pub fn write(dir: &Path) -> Result<PathBuf, TourError> {
    let failed = |source| TourError::Example {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    match std::fs::remove_file(dir.join("fixed")) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(failed(err)),
        _ => {}
    }
    std::fs::write(dir.join("items.json"), ITEMS).map_err(failed)?;
    let workflow = dir.join("process-items.yml");
    std::fs::write(&workflow, WORKFLOW).map_err(failed)?;
    Ok(workflow)
}
