//! Plain-text tables and bars for the human output of the operator commands.

use std::io::Write;

/// Widest a cell is shown; longer text is cut with `…`.
pub const MAX_CELL: usize = 60;

/// Cuts `text` to at most `width` characters (on one line), marking the cut with `…`.
pub fn cut(text: &str, width: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= width {
        return one_line;
    }
    let mut short: String = one_line.chars().take(width.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// Writes `rows` under `headers`, columns padded to their widest cell (at most [`MAX_CELL`]).
pub fn write_table(
    out: &mut impl Write,
    headers: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| cut(cell, MAX_CELL)).collect())
        .collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for row in &rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// A bar of `#` for `value` out of `max`, at most `width` long (at least one `#` when
/// `value > 0`).
pub fn bar(value: u64, max: u64, width: usize) -> String {
    if value == 0 || max == 0 {
        return String::new();
    }
    let len = (value as f64 / max as f64 * width as f64).round() as usize;
    "#".repeat(len.clamp(1, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_cut_and_columns_aligned() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("a\nb", 10), "a b");
        let mut out = Vec::new();
        let rows = vec![vec!["x".to_owned(), "long value".to_owned()]];
        write_table(&mut out, &["A", "B"], &rows).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "A  B\nx  long value\n");
        assert_eq!(bar(1, 100, 40), "#");
        assert_eq!(bar(100, 100, 40).len(), 40);
    }
}
