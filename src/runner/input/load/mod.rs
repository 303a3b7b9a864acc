//! Reading a job's input document from a file or from a command's stdout, bounded in size.
//!
//! This is the I/O half of [`super`]; picking items out of the document is pure and lives there.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{InputError, InputSource, MAX_INPUT_BYTES};
use crate::runner::process_group::{self, kill_group, Output};

/// How much of a failing command's stderr an error quotes.
const STDERR_TAIL_BYTES: usize = 2048;
/// How many leading bytes of a non-JSON document an error quotes.
const HEAD_BYTES: usize = 60;

/// Reads the input document: a JSON file (relative to `base_dir`), or the stdout of
/// `sh -c command` run in `base_dir` with `env` added to the environment. Documents over
/// [`MAX_INPUT_BYTES`] are refused.
///
/// The command runs in its own process group; when the shell exits, whatever it left running in
/// that group is killed so its pipes close.
pub(in crate::runner) async fn load_input(
    source: InputSource<'_>,
    base_dir: &Path,
    env: &BTreeMap<String, String>,
) -> Result<Value, InputError> {
    match source {
        InputSource::File(path) => {
            let path = base_dir.join(path);
            let origin = format!("input file {}", path.display());
            let bytes = read_file(&path, &origin).await?;
            parse_json(&bytes, &origin)
        }
        InputSource::Command(command) => {
            let origin = format!("the output of input command `{command}`");
            let bytes = run_command(command, base_dir, env, &origin).await?;
            parse_json(&bytes, &origin)
        }
    }
}

async fn read_file(path: &Path, origin: &str) -> Result<Vec<u8>, InputError> {
    let read_err = |source| InputError::ReadFile {
        path: path.to_path_buf(),
        source,
    };
    let file = tokio::fs::File::open(path).await.map_err(read_err)?;
    let len = file.metadata().await.map_err(read_err)?.len();
    if len > MAX_INPUT_BYTES as u64 {
        return Err(too_large(origin));
    }
    let (bytes, overflow) = read_bounded(file, MAX_INPUT_BYTES)
        .await
        .map_err(read_err)?;
    if overflow {
        return Err(too_large(origin));
    }
    Ok(bytes)
}

fn too_large(origin: &str) -> InputError {
    InputError::TooLarge {
        origin: origin.to_string(),
        limit: MAX_INPUT_BYTES,
    }
}

async fn run_command(
    command: &str,
    base_dir: &Path,
    env: &BTreeMap<String, String>,
    origin: &str,
) -> Result<Vec<u8>, InputError> {
    let spawn_err = |source| InputError::Spawn {
        command: command.to_string(),
        source,
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(command).current_dir(base_dir).envs(env);
    let read_stdout = |stdout, group| async move {
        let result = read_bounded(stdout, MAX_INPUT_BYTES).await;
        if matches!(result, Ok((_, true))) {
            kill_group(group);
        }
        result
    };
    let read_stderr = |stderr| read_tail(stderr, STDERR_TAIL_BYTES);
    let Output {
        status,
        stdout: out,
        stderr: err_tail,
    } = process_group::output(&mut cmd, read_stdout, read_stderr)
        .await
        .map_err(spawn_err)?;
    let status = status.map_err(spawn_err)?;
    let (bytes, overflow) = out.map_err(spawn_err)?;
    if overflow {
        return Err(too_large(origin));
    }
    if !status.success() {
        let status = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => format!("failed ({status})"),
        };
        let tail = String::from_utf8_lossy(&err_tail);
        let tail = tail.trim();
        return Err(InputError::CommandFailed {
            command: command.to_string(),
            status,
            stderr_tail: if tail.is_empty() {
                "(nothing)".to_string()
            } else {
                tail.to_string()
            },
            dir: base_dir.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Reads at most `limit` bytes; the flag says whether there was more.
async fn read_bounded<R: AsyncRead + Unpin>(
    reader: R,
    limit: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut bytes).await?;
    let overflow = bytes.len() > limit;
    bytes.truncate(limit);
    Ok((bytes, overflow))
}

/// Reads to the end, keeping only the last `keep` bytes. Read errors end the read.
async fn read_tail<R: AsyncRead + Unpin>(mut reader: R, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = reader.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
    }
    tail
}

fn parse_json(bytes: &[u8], origin: &str) -> Result<Value, InputError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let message = if bytes.iter().all(u8::is_ascii_whitespace) {
            "it is empty".to_string()
        } else {
            let text = e.to_string();
            // serde_json appends " at line L column C"; we report those separately.
            match text.rfind(" at line ") {
                Some(at) => text[..at].to_string(),
                None => text,
            }
        };
        let head_len = bytes.len().min(HEAD_BYTES);
        let mut head = format!("{:?}", String::from_utf8_lossy(&bytes[..head_len]));
        if bytes.len() > HEAD_BYTES {
            head.push_str("...");
        }
        InputError::NotJson {
            origin: origin.to_string(),
            message,
            line: e.line(),
            column: e.column(),
            head,
        }
    })
}

#[cfg(test)]
mod tests;
