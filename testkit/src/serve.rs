//! `dlq serve` on a data directory, with a token, on a free loopback port; and a job whose
//! items fail until they are "fixed", to give it something to serve.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::cli::Env;
use crate::{free_port, http_get, poll_until, spawn_tied};

/// A MapReduce workflow whose items fail until `fixed-<id>` exists in the flow directory; each
/// failing item prints its `msg` on stderr (its error message). One attempt per item.
pub const FAIL_UNTIL_FIXED: &str = r#"
name: fail-until-fixed
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 4
  agent_template:
    - shell: "test -f \"$DLQ_WORKFLOW_DIR/fixed-${item.id}\" && exit 0; echo \"${item.msg}\" >&2; exit 1"
error_policy:
  retry_config:
    max_attempts: 1
    backoff:
      fixed:
        delay: 10ms
"#;

/// A running `dlq serve`; killed on drop.
pub struct Serve {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    log: PathBuf,
}

impl Serve {
    /// Starts `dlq serve --token-file` (holding `token`) on `env`'s data directory and waits
    /// for `/healthz`. Its stderr goes to `serve.log` in the work directory.
    pub fn start(env: &Env, token: &str) -> Serve {
        Serve::start_with(env, token, &[])
    }

    /// [`Serve::start`] with more arguments of `dlq serve` (e.g. `--tokens-file FILE`).
    pub fn start_with(env: &Env, token: &str, extra: &[&str]) -> Serve {
        let port = free_port(0);
        let token_file = env.path("token");
        std::fs::write(&token_file, token).unwrap();
        let listen = format!("127.0.0.1:{port}");
        let log = env.path("serve.log");
        let mut cmd = env.command(&[
            "serve",
            "--listen",
            &listen,
            "--token-file",
            token_file.to_str().unwrap(),
        ]);
        cmd.args(extra);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let server = Serve {
            child: spawn_tied(cmd).unwrap(),
            port,
            log,
        };
        let up = poll_until(Duration::from_secs(60), || {
            http_get(port, "/healthz").filter(|(status, _)| *status == 200)
        });
        assert!(
            up.is_some(),
            "dlq serve never answered /healthz: {}",
            server.log()
        );
        server
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
