//! Git worktrees that isolate one agent's changes from the repository and from other agents.
//!
//! Each isolated agent gets a worktree on its own branch `dlq/<job_id>/<item_id>` (both
//! sanitised to what git accepts in a ref, see [`branch_name`]). Only that branch name and our
//! own paths reach git; work-item data never does. Every git call runs in its own process group
//! under a time limit, so a stuck git (a stale lock, a hanging hook) cannot hold the agent.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::runner::process_group::{self, Output};

/// Time limit of one git command.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of `git status --porcelain` kept in the artifacts.
const MAX_STATUS_BYTES: usize = 16 * 1024;

/// Longest sanitised job or item id kept in a branch name, before the hash suffix.
const MAX_REF_COMPONENT: usize = 80;

/// Why a git command failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum GitError {
    /// git could not be started at all.
    #[error("could not run git ({0}): install git or put it on PATH")]
    Spawn(#[source] std::io::Error),
    /// git ran past [`GIT_TIMEOUT`] and was killed.
    #[error("`git {args}` did not finish within {secs} s: look for a stale `.lock` file in the repository")]
    TimedOut {
        /// The git arguments, for the message.
        args: String,
        /// The limit that passed.
        secs: u64,
    },
    /// git exited non-zero; the message is git's own stderr.
    #[error("{stderr}")]
    Failed {
        /// git's stderr, trimmed.
        stderr: String,
    },
}

/// One item's worktree: its path and branch, and the repository it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Worktree {
    /// Absolute path of the worktree.
    pub path: PathBuf,
    /// The branch checked out in it.
    pub branch: String,
    repo: PathBuf,
}

/// The branch of an item's worktree: `dlq/<job_id>/<item_id>`, each id sanitised by
/// [`ref_component`].
pub(super) fn branch_name(job_id: &str, item_id: &str) -> String {
    format!("dlq/{}/{}", ref_component(job_id), ref_component(item_id))
}

/// `raw` as one git ref component: characters outside `[A-Za-z0-9._-]` become `_`, and so does
/// a `.` that git forbids (leading, doubled, trailing); a trailing `.lock` gets a `_`. When
/// anything changed, 8 hex digits of the SHA-256 of `raw` are appended so that distinct ids
/// keep distinct branches.
fn ref_component(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars().take(MAX_REF_COMPONENT) {
        let allowed = c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        let dot_forbidden = c == '.' && (out.is_empty() || out.ends_with('.'));
        out.push(if allowed && !dot_forbidden { c } else { '_' });
    }
    if out.ends_with('.') {
        out.pop();
        out.push('_');
    }
    if out.ends_with(".lock") || out.is_empty() {
        out.push('_');
    }
    if out != raw {
        let hash = Sha256::digest(raw.as_bytes());
        let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
        out.push('-');
        out.push_str(&hex);
    }
    out
}

/// Creates a worktree of `repo`'s `HEAD` at `path` (absolute) on the new branch `branch`.
///
/// A worktree or branch left at the same place by an earlier attempt of the same item (kept for
/// debugging after a failure) is discarded and the creation retried once: the new attempt's
/// state replaces it. The error is git's stderr from the last try.
pub(super) async fn create(repo: &Path, path: &Path, branch: &str) -> Result<Worktree, GitError> {
    let tree = Worktree {
        path: path.to_path_buf(),
        branch: branch.to_string(),
        repo: repo.to_path_buf(),
    };
    let add = || {
        let args: [&OsStr; 6] = [
            "worktree".as_ref(),
            "add".as_ref(),
            "-b".as_ref(),
            branch.as_ref(),
            path.as_os_str(),
            "HEAD".as_ref(),
        ];
        async move { git(repo, &args).await }
    };
    match add().await {
        Ok(_) => Ok(tree),
        Err(GitError::Failed { .. }) => {
            tree.discard_stale().await;
            add().await.map(|_| tree)
        }
        Err(e) => Err(e),
    }
}

impl Worktree {
    /// Removes the worktree and deletes its branch.
    pub(super) async fn remove(&self) -> Result<(), GitError> {
        let path = self.path.as_os_str();
        git(
            &self.repo,
            &[
                "worktree".as_ref(),
                "remove".as_ref(),
                "--force".as_ref(),
                path,
            ],
        )
        .await?;
        git(
            &self.repo,
            &["branch".as_ref(), "-D".as_ref(), self.branch.as_ref()],
        )
        .await?;
        Ok(())
    }

    /// `git status --porcelain` of the worktree, `None` when clean; cut to [`MAX_STATUS_BYTES`].
    pub(super) async fn uncommitted_changes(&self) -> Result<Option<String>, GitError> {
        let out = git(&self.path, &["status".as_ref(), "--porcelain".as_ref()]).await?;
        let text = String::from_utf8_lossy(&out);
        let text = text.trim_end();
        if text.is_empty() {
            return Ok(None);
        }
        if text.len() <= MAX_STATUS_BYTES {
            return Ok(Some(text.to_string()));
        }
        let mut cut = MAX_STATUS_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let kept = text[..cut].rfind('\n').unwrap_or(cut);
        let more = text[kept..].lines().filter(|l| !l.is_empty()).count();
        Ok(Some(format!("{}\n... and {more} more", &text[..kept])))
    }

    /// Best-effort removal of a leftover worktree at our path and of our branch.
    async fn discard_stale(&self) {
        let path = self.path.as_os_str();
        let remove = [
            "worktree".as_ref(),
            "remove".as_ref(),
            "--force".as_ref(),
            path,
        ];
        if let Err(e) = git(&self.repo, &remove).await {
            tracing::debug!(error = %e, "no stale worktree to remove");
        }
        if self.path.exists() {
            if let Err(e) = tokio::fs::remove_dir_all(&self.path).await {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot clear worktree path");
            }
        }
        for args in [
            vec!["worktree".as_ref(), "prune".as_ref()],
            vec!["branch".as_ref(), "-D".as_ref(), self.branch.as_ref()],
        ] {
            if let Err(e) = git(&self.repo, &args).await {
                tracing::debug!(error = %e, "stale worktree cleanup step failed");
            }
        }
    }
}

/// Runs `git -C dir args...` in its own process group, stdin closed, under [`GIT_TIMEOUT`];
/// returns its stdout, or its stderr as the error. What git leaves running in its group (hooks)
/// is killed when it exits or times out.
async fn git(dir: &Path, args: &[&OsStr]) -> Result<Vec<u8>, GitError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    let run = process_group::output(&mut cmd, |out, _| read_all(out), read_all);
    let Ok(finished) = tokio::time::timeout(GIT_TIMEOUT, run).await else {
        let args: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        return Err(GitError::TimedOut {
            args: args.join(" "),
            secs: GIT_TIMEOUT.as_secs(),
        });
    };
    let Output {
        status,
        stdout,
        stderr,
    } = finished.map_err(GitError::Spawn)?;
    let status = status.map_err(GitError::Spawn)?;
    if status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
    let stderr = if stderr.is_empty() {
        format!("git exited with {status}")
    } else {
        stderr
    };
    Err(GitError::Failed { stderr })
}

async fn read_all(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Err(e) = pipe.read_to_end(&mut buf).await {
        tracing::debug!(error = %e, "reading git output failed");
    }
    buf
}
