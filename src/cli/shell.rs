//! `dlq completions SHELL` and `dlq man`: shell completions and the man page, generated from
//! the command line's own definition, so they never drift from `--help`.

use std::io::Write;

use clap::{Args, CommandFactory, ValueEnum};

use super::{Cli, CliError, EXIT_OK};

/// A shell `dlq completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash: `dlq completions bash > ~/.local/share/bash-completion/completions/dlq`.
    Bash,
    /// zsh: `dlq completions zsh > "${fpath[1]}/_dlq"`.
    Zsh,
    /// fish: `dlq completions fish > ~/.config/fish/completions/dlq.fish`.
    Fish,
}

/// Options of `dlq completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    pub shell: Shell,
}

/// Prints the completion script of `args.shell` on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<u8, CliError> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    // Generated into memory first: the generator panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "dlq", &mut script);
    write_out(&script)
}

/// Prints the man page (roff) on stdout: `dlq man > dlq.1; man ./dlq.1`.
pub fn man() -> Result<u8, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    write_out(&page)
}

fn write_out(bytes: &[u8]) -> Result<u8, CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(EXIT_OK)
}
