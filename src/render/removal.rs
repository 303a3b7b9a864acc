//! The answer of `dlq clear` and `dlq purge`.

use std::io::Write;

use super::Format;
use dlq::removal::Removal;

/// Writes a removal in `format`: its line for a table, else its JSON summary.
pub fn write_removal(
    out: &mut impl Write,
    format: Format,
    removal: &Removal,
) -> std::io::Result<()> {
    match format {
        Format::Table => writeln!(out, "{}", removal.line),
        _ => writeln!(out, "{}", removal.summary),
    }
}
