#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::output::{failure_message, log_location, utf8_tail, MESSAGE_LINE_CHARS};
use super::*;
use nix::errno::Errno;
use nix::unistd::Pid;
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::process::ExitStatus;
use tempfile::TempDir;

fn spec(work_dir: &Path, steps: Vec<Step>) -> AgentSpec {
    AgentSpec {
        job_id: "job-1".into(),
        item_id: "item-1".into(),
        agent_id: "agent-7".into(),
        steps,
        item: json!({}),
        map_vars: BTreeMap::new(),
        env: BTreeMap::new(),
        work_dir: work_dir.to_path_buf(),
        cwd: None,
        timeout: None,
        isolation: Isolation::None,
        repo_dir: work_dir.to_path_buf(),
        agent_command: Vec::new(),
    }
}

fn sh(template: &str) -> Step {
    Step::Shell(template.into())
}

async fn run(spec: &AgentSpec) -> AgentResult {
    run_agent(spec, &CancellationToken::new()).await
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Whether `pid` is dead: gone, or a zombie left for PID 1 to reap (some container init
/// processes never reap orphans; a zombie runs nothing and holds no resources but its pid).
fn is_dead(pid: i32) -> bool {
    match nix::sys::signal::kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => true,
        Ok(()) => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// Polls (bounded) for the kernel to finish killing `pid`; returns whether it died.
async fn dies(pid: i32) -> bool {
    for _ in 0..250 {
        if is_dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A step that starts a background child and a grandchild, records their pids, and blocks.
const TREE_OF_SLEEPERS: &str = "sleep 100 & echo $! > \"$DLQ_WORK_DIR/child.pid\"; \
    sh -c 'sleep 100 & echo $! > \"$DLQ_WORK_DIR/grandchild.pid\"; wait' & \
    sleep 100";

async fn assert_sleepers_dead(dir: &Path) {
    for file in ["child.pid", "grandchild.pid"] {
        let pid: i32 = read(dir.join(file)).trim().parse().unwrap();
        assert!(dies(pid).await, "{file} {pid} survived the agent");
    }
}

#[tokio::test]
async fn successful_steps_run_in_order_with_the_agent_environment() {
    let dir = TempDir::new().unwrap();
    let work = dir.path().join("work");
    let mut s =
        spec(
            &work,
            vec![
        sh("echo first > order; echo to-stderr >&2"),
        sh("echo second >> order; printf '%s|%s|%s|%s|%s' \"$DLQ_JOB_ID\" \"$DLQ_ITEM_ID\" \
            \"$DLQ_AGENT_ID\" \"$DLQ_WORK_DIR\" \"$FROM_WORKFLOW\" > env.txt; echo out"),
    ],
        );
    s.env.insert("FROM_WORKFLOW".into(), "yes".into());
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Success);
    assert_eq!(
        (result.exit_code, result.step_failed, result.worktree),
        (None, None, None)
    );
    assert_eq!(result.item_id, "item-1");
    assert_eq!(read(work.join("order")), "first\nsecond\n");
    let env = format!("job-1|item-1|agent-7|{}|yes", work.display());
    assert_eq!(read(work.join("env.txt")), env);
    assert_eq!(read(work.join("stdout.log")), "out\n");
    assert_eq!(result.stderr_tail.as_deref(), Some("to-stderr\n"));
}

#[tokio::test]
async fn the_first_failing_step_stops_the_agent() {
    let dir = TempDir::new().unwrap();
    let s = spec(
        dir.path(),
        vec![
            sh("echo ok"),
            sh("echo early >&2; echo '  boom: it broke  ' >&2; echo >&2; exit 101"),
            sh("touch later"),
        ],
    );
    let result = run(&s).await;
    let template = "echo early >&2; echo '  boom: it broke  ' >&2; echo >&2; exit 101";
    let want = format!("boom: it broke (step \"shell: {template}\" exited with code 101)");
    assert_eq!(result.status, AgentStatus::Failed(want));
    assert_eq!(result.exit_code, Some(101));
    assert_eq!(result.step_failed, Some(format!("shell: {template}")));
    assert!(result.stderr_tail.unwrap().contains("boom: it broke"));
    assert!(!dir.path().join("later").exists());
}

#[tokio::test]
async fn a_step_killed_by_a_signal_names_it() {
    let dir = TempDir::new().unwrap();
    let result = run(&spec(dir.path(), vec![sh("kill -SEGV $$")])).await;
    let AgentStatus::Failed(message) = result.status else {
        panic!("{result:?}")
    };
    assert_eq!(
        message,
        "step \"shell: kill -SEGV $$\" was killed by signal SIGSEGV"
    );
    assert_eq!(result.exit_code, Some(139));
}

#[tokio::test]
async fn step_failed_names_the_template_not_the_item_data() {
    let dir = TempDir::new().unwrap();
    let mut s = spec(dir.path(), vec![sh("test ${item.x} = nope")]);
    s.item = json!({"x": "SECRET-DATA"});
    let result = run(&s).await;
    assert_eq!(
        result.step_failed.as_deref(),
        Some("shell: test ${item.x} = nope")
    );
    assert_eq!(result.exit_code, Some(1));
}

#[tokio::test]
async fn hostile_item_data_in_a_shell_step_runs_nothing() {
    let dir = TempDir::new().unwrap();
    let pwned = dir.path().join("pwned");
    let p = pwned.display();
    let value = format!("$(touch {p})`touch {p}`; touch {p}' ; touch {p} ; '\" ; touch {p} ; \"\n");
    let mut s = spec(
        dir.path(),
        vec![sh(
            "printf '%s' ${item.x} > a; printf '%s' '${item.x}' > b; printf '%s' \"${item.x}\" > c",
        )],
    );
    s.item = json!({ "x": value });
    assert_eq!(run(&s).await.status, AgentStatus::Success);
    for file in ["a", "b", "c"] {
        assert_eq!(read(dir.path().join(file)), value);
    }
    assert!(!pwned.exists());
}

#[tokio::test]
async fn a_template_error_fails_before_any_step_runs() {
    let dir = TempDir::new().unwrap();
    let s = spec(dir.path(), vec![sh("touch first"), sh("echo ${item.nope}")]);
    let result = run(&s).await;
    let want = crate::runner::template::TemplateError::MissingField {
        path: "item.nope".into(),
    };
    assert_eq!(result.status, AgentStatus::Failed(want.to_string()));
    assert_eq!(
        result.step_failed.as_deref(),
        Some("shell: echo ${item.nope}")
    );
    assert_eq!(result.exit_code, None);
    assert!(!dir.path().join("first").exists());
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = TempDir::new().unwrap();
    let mut s = spec(dir.path(), vec![sh(TREE_OF_SLEEPERS), sh("touch after")]);
    s.timeout = Some(Duration::from_secs(1));
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Timeout);
    assert_eq!(
        result.step_failed,
        Some(format!("shell: {TREE_OF_SLEEPERS}"))
    );
    assert_eq!(result.exit_code, None);
    assert_sleepers_dead(dir.path()).await;
    assert!(!dir.path().join("after").exists());
}

#[tokio::test]
async fn cancellation_kills_the_whole_process_group() {
    let dir = TempDir::new().unwrap();
    let s = spec(dir.path(), vec![sh(TREE_OF_SLEEPERS)]);
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (s, cancel) = (s.clone(), cancel.clone());
        async move { run_agent(&s, &cancel).await }
    });
    let grandchild = dir.path().join("grandchild.pid");
    while !grandchild.exists() || read(&grandchild).trim().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    let result = task.await.unwrap();
    assert_eq!(result.status, AgentStatus::Cancelled);
    assert_sleepers_dead(dir.path()).await;
}

#[tokio::test]
async fn background_processes_die_when_the_agent_ends() {
    let dir = TempDir::new().unwrap();
    let step = "sleep 100 > /dev/null 2>&1 & echo $! > \"$DLQ_WORK_DIR/child.pid\"";
    let result = run(&spec(
        dir.path(),
        vec![sh(step), sh("kill -0 $(cat child.pid)")],
    ))
    .await;
    assert_eq!(
        result.status,
        AgentStatus::Success,
        "the second step saw the first's child"
    );
    let pid: i32 = read(dir.path().join("child.pid")).trim().parse().unwrap();
    assert!(dies(pid).await);
}

#[tokio::test]
async fn an_already_cancelled_agent_starts_nothing() {
    let dir = TempDir::new().unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = run_agent(&spec(dir.path(), vec![sh("touch ran")]), &cancel).await;
    assert_eq!(result.status, AgentStatus::Cancelled);
    assert!(!dir.path().join("ran").exists());
}

/// A fake agent command that records its arguments and reports log locations.
fn fake_agent(dir: &Path) -> Vec<String> {
    let script = dir.join("agent.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
        printf '%s' \"$#\" > \"$DLQ_WORK_DIR/argc\"\n\
        printf '%s' \"$2\" > \"$DLQ_WORK_DIR/prompt\"\n\
        echo 'json_log_location: /tmp/first.json'\n\
        echo '{\"type\":\"result\",\"session_log\":\"/tmp/session.json\"}'\n\
        echo 'done'\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    vec![script.display().to_string(), "--print".into()]
}

#[tokio::test]
async fn a_claude_step_gets_the_prompt_as_one_argument_and_reports_its_log() {
    let dir = TempDir::new().unwrap();
    let pwned = dir.path().join("pwned");
    let hostile = format!(
        "$(touch {0}) `touch {0}` ; touch {0} ' \" \n x",
        pwned.display()
    );
    let mut s = spec(dir.path(), vec![Step::Claude("Fix ${item.f} now".into())]);
    s.agent_command = fake_agent(dir.path());
    s.item = json!({ "f": hostile });
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Success);
    assert_eq!(read(dir.path().join("argc")), "2");
    assert_eq!(
        read(dir.path().join("prompt")),
        format!("Fix {hostile} now")
    );
    assert_eq!(
        result.json_log_location.as_deref(),
        Some("/tmp/session.json")
    );
    assert!(!pwned.exists());
}

#[tokio::test]
async fn claude_step_problems_are_reported() {
    let dir = TempDir::new().unwrap();
    let s = spec(dir.path(), vec![Step::Claude("hi".into())]);
    let AgentStatus::Failed(message) = run(&s).await.status else {
        panic!()
    };
    assert!(message.contains("agent command"), "{message}");
    let mut s = s;
    s.agent_command = vec![dir.path().join("no-such-agent").display().to_string()];
    let result = run(&s).await;
    let AgentStatus::Failed(message) = result.status else {
        panic!()
    };
    assert!(
        message.starts_with("step \"claude: hi\" could not start"),
        "{message}"
    );
    assert_eq!(result.exit_code, Some(127));
}

#[tokio::test]
async fn a_large_stderr_keeps_a_4096_byte_tail_of_this_run() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("stderr.log"), "an earlier attempt\n").unwrap();
    let step = "head -c 10000 /dev/zero | tr '\\0' a >&2; printf END >&2; exit 1";
    let result = run(&spec(dir.path(), vec![sh(step)])).await;
    let tail = result.stderr_tail.unwrap();
    assert_eq!(tail.len(), STDERR_TAIL_BYTES);
    assert!(tail.ends_with("aaaEND"));
    let small = TempDir::new().unwrap();
    std::fs::write(small.path().join("stderr.log"), "an earlier attempt\n").unwrap();
    let result = run(&spec(small.path(), vec![sh("echo now >&2")])).await;
    assert_eq!(result.stderr_tail.as_deref(), Some("now\n"));
}

#[test]
fn tails_start_at_a_character_boundary() {
    let text = "é".repeat(3000);
    let tail = utf8_tail(text.as_bytes(), 4095);
    assert_eq!(tail.len(), 4094);
    assert!(tail.chars().all(|c| c == 'é'));
    assert_eq!(utf8_tail(b"abc", 4096), "abc");
    assert!(utf8_tail(&[0xff; 5000], 4096).len() <= 4096);
}

#[test]
fn log_locations_follow_the_protocol() {
    assert_eq!(
        log_location(b"json_log_location: /a/b.json\n").as_deref(),
        Some("/a/b.json")
    );
    assert_eq!(
        log_location(br#"{"json_log_location":"/x"}"#).as_deref(),
        Some("/x")
    );
    assert_eq!(
        log_location(br#" {"session_log":"/y","a":1}"#).as_deref(),
        Some("/y")
    );
    assert_eq!(log_location(br#"{"session_log":5}"#), None);
    assert_eq!(log_location(b"json_log_location:   "), None);
    assert_eq!(log_location(b"see json_log_location: /z"), None);
    assert_eq!(log_location(b"{not json"), None);
}

#[test]
fn failure_messages_are_one_line_and_bounded() {
    let status = ExitStatus::from_raw(2 << 8);
    let long = "y".repeat(500);
    let (message, code) = failure_message("shell: make\nmake install", status, Some(&long));
    assert_eq!(code, Some(2));
    assert!(message.starts_with("yyy"), "{message}");
    assert!(
        message.ends_with("… (step \"shell: make …\" exited with code 2)"),
        "{message}"
    );
    assert_eq!(
        message.chars().filter(|c| *c == 'y').count(),
        MESSAGE_LINE_CHARS
    );
    assert!(!message.contains('\n'));
    let (message, code) = failure_message("shell: x", ExitStatus::from_raw(9), None);
    assert_eq!(
        (message.as_str(), code),
        ("step \"shell: x\" was killed by signal SIGKILL", Some(137))
    );
}

mod isolation;
