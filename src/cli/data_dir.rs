//! Which commands may create the data directory, and the refusal of the others when it is
//! missing: a typo in `--data-dir` must not show an empty DLQ (and leave a new directory
//! behind), it must say that there is no such directory.

use super::{Cli, CliError, Command};

/// What a command does with the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirUse {
    /// Writes to it and creates it when it is missing (`demo`, `run`, `serve`, `import`,
    /// `generate`, `tour`).
    Creates,
    /// Reads (or changes) what it holds: it must exist.
    Needs,
    /// Like [`DataDirUse::Needs`], but goes to the API of `--api` instead when it is given.
    NeedsUnlessApi,
    /// Does not open it (`consume`, `stream`).
    Ignores,
}

impl Command {
    /// What this command does with the data directory.
    pub fn data_dir_use(&self) -> DataDirUse {
        use DataDirUse::*;
        match self {
            Command::Tour(_)
            | Command::Demo(_)
            | Command::Run(_)
            | Command::Serve(_)
            | Command::Import(_)
            | Command::Generate(_) => Creates,
            Command::List(_)
            | Command::Inspect(_)
            | Command::Stats(_)
            | Command::Analyze(_)
            | Command::Clear(_)
            | Command::Purge(_)
            | Command::Delete(_)
            | Command::Redrive(_)
            | Command::Retry(_) => NeedsUnlessApi,
            Command::Status
            | Command::Reconcile(_)
            | Command::Rebuild
            | Command::Verify(_)
            | Command::Republish(_)
            | Command::Export(_)
            | Command::Resume(_)
            | Command::Events(_)
            | Command::Jobs => Needs,
            Command::Consume(_)
            | Command::Console(_)
            | Command::Stream(_)
            | Command::Completions(_)
            | Command::Man => Ignores,
        }
    }
}

/// Refuses a command that needs the data directory when it does not exist, before anything
/// opens (and so creates) it. A directory held by a running `dlq serve` or job exists, so the
/// commands that go through its API are not affected.
pub fn check(cli: &Cli) -> Result<(), CliError> {
    let needed = match cli.command.data_dir_use() {
        DataDirUse::Needs => true,
        DataDirUse::NeedsUnlessApi => cli.api.is_none(),
        DataDirUse::Creates | DataDirUse::Ignores => false,
    };
    // An error other than "not found" (a directory we may not search) is left to the open,
    // which names it.
    if !needed || !matches!(cli.data_dir.try_exists(), Ok(false)) {
        return Ok(());
    }
    // A configuration that cannot be used is the first thing to fix: say that one first.
    super::open::config(cli)?;
    Err(CliError::NotFound(format!(
        "no data directory at {}: pass --data-dir (DLQ_DATA_DIR) with an existing one, or run a \
         command that writes (demo, run, serve, import) to create it",
        cli.data_dir.display()
    )))
}
