//! Rendering the answers of operator requests in every output format. Both front ends use it:
//! the CLI prints with it and the admin API answers with it, so a command forwarded to
//! `dlq serve` prints byte for byte what it prints on its own.

pub mod items;
pub mod removal;
pub mod report;
pub(crate) mod retry;
pub mod table;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// Human-readable.
    Table,
    /// One JSON document.
    Json,
    /// One JSON document per line (list, export; others print one line).
    Jsonl,
    /// Comma-separated values with a header row (list, export).
    Csv,
    /// One JSON file per item in a directory per job, the layout of the runner dlq replaces
    /// (export only).
    Dir,
}

impl Format {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [Format; 5] = [
        Format::Table,
        Format::Json,
        Format::Jsonl,
        Format::Csv,
        Format::Dir,
    ];

    /// The format's name on the command line and in query strings.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Dir => "dir",
        }
    }

    /// The format called `name` (any case).
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL
            .into_iter()
            .find(|format| format.name().eq_ignore_ascii_case(name))
    }
}
