//! Agents isolated in git worktrees of their own.

use super::*;
use dlq::domain::model::ErrorType;
use dlq::domain::signature::{classify, Outcome};

/// A git repository with one commit holding `tracked.txt`.
fn git_repo() -> TempDir {
    let repo = TempDir::new().unwrap();
    std::fs::write(repo.path().join("tracked.txt"), "v1\n").unwrap();
    for args in [
        vec!["init", "-q"],
        vec!["add", "tracked.txt"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    ] {
        let ok = Command::new("git")
            .arg("-C")
            .arg(repo.path())
            .args(args)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    repo
}

fn branches(repo: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["branch", "--list", "dlq/*"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn isolated(repo: &TempDir, work: &Path, steps: Vec<Step>) -> AgentSpec {
    let mut s = spec(work, steps);
    s.isolation = Isolation::Worktree;
    s.repo_dir = repo.path().to_path_buf();
    s
}

#[tokio::test]
async fn a_successful_isolated_agent_leaves_no_worktree() {
    let (repo, dir) = (git_repo(), TempDir::new().unwrap());
    let s = isolated(
        &repo,
        dir.path(),
        vec![sh("pwd > \"$DLQ_WORK_DIR/pwd\"; echo x > new.txt")],
    );
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Success);
    assert_eq!(result.worktree, None);
    let tree = dir.path().join("worktree");
    assert_eq!(
        read(dir.path().join("pwd")).trim(),
        tree.display().to_string()
    );
    assert!(!tree.exists());
    assert_eq!(branches(repo.path()), "");
    assert!(!repo.path().join("new.txt").exists());
}

#[tokio::test]
async fn a_failed_isolated_agent_keeps_its_worktree_and_a_retry_replaces_it() {
    let (repo, dir) = (git_repo(), TempDir::new().unwrap());
    let step = "echo v2 > tracked.txt; echo x > new.txt; echo 'tests failed' >&2; exit 2";
    let mut s = isolated(&repo, dir.path(), vec![sh(step)]);
    let result = run(&s).await;
    assert_eq!(result.exit_code, Some(2));
    let kept = result.worktree.unwrap();
    let tree = dir.path().join("worktree");
    assert_eq!(kept.worktree_path, tree.display().to_string());
    assert_eq!(kept.branch_name, "dlq/job-1/item-1");
    assert_eq!(
        kept.uncommitted_changes.as_deref(),
        Some(" M tracked.txt\n?? new.txt")
    );
    assert_eq!(kept.error_logs.as_deref(), Some("tests failed\n"));
    assert_eq!(read(tree.join("tracked.txt")), "v2\n");
    assert_eq!(branches(repo.path()).trim(), "+ dlq/job-1/item-1");

    s.steps = vec![sh("cat tracked.txt > \"$DLQ_WORK_DIR/seen\"")];
    assert_eq!(run(&s).await.status, AgentStatus::Success);
    assert_eq!(
        read(dir.path().join("seen")),
        "v1\n",
        "the retry starts from a fresh worktree"
    );
    assert!(!tree.exists());
    assert_eq!(branches(repo.path()), "");
}

#[tokio::test]
async fn a_timed_out_isolated_agent_keeps_its_worktree() {
    let (repo, dir) = (git_repo(), TempDir::new().unwrap());
    let mut s = isolated(&repo, dir.path(), vec![sh("touch wip; sleep 100")]);
    s.timeout = Some(Duration::from_secs(2));
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Timeout);
    let kept = result.worktree.unwrap();
    assert_eq!(kept.uncommitted_changes.as_deref(), Some("?? wip"));
    assert_eq!(kept.error_logs, None);
}

#[tokio::test]
async fn a_worktree_that_cannot_be_created_is_a_worktree_error() {
    let (not_repo, dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let s = isolated(&not_repo, dir.path(), vec![sh("touch ran")]);
    let result = run(&s).await;
    let AgentStatus::Failed(message) = result.status else {
        panic!("{result:?}")
    };
    assert!(
        message.starts_with("worktree: ") && message.contains("not a git repository"),
        "{message}"
    );
    assert_eq!(
        classify(&Outcome {
            message: &message,
            exit_code: result.exit_code,
            timed_out: false,
        }),
        ErrorType::WorktreeError
    );
    assert_eq!(result.worktree, None);
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn branch_names_are_valid_refs_and_distinct() {
    let ids = [
        "item-1", "a/b", "a_b", "..", ".hidden", "x.lock", "end.", "a b$(x)", "", "é", "@{u}",
    ];
    let names: Vec<String> = ids
        .iter()
        .map(|id| worktree::branch_name("job 1", id))
        .collect();
    assert_eq!(names[0], format!("dlq/job_1-{}/item-1", &names[0][10..18]));
    for name in &names {
        let ok = Command::new("git")
            .args(["check-ref-format", "--branch", name])
            .output()
            .unwrap();
        assert!(ok.status.success(), "{name} is not a valid branch name");
    }
    let distinct: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), names.len());
}

#[tokio::test]
async fn steps_run_in_cwd_when_set_and_logs_stay_in_the_work_dir() {
    let (work, elsewhere) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let mut s = spec(work.path(), vec![sh("pwd > here; echo out")]);
    s.cwd = Some(elsewhere.path().to_path_buf());
    let result = run(&s).await;
    assert_eq!(result.status, AgentStatus::Success);
    let here = read(elsewhere.path().join("here"));
    assert_eq!(
        Path::new(here.trim()).canonicalize().unwrap(),
        elsewhere.path().canonicalize().unwrap()
    );
    assert!(read(work.path().join("stdout.log")).contains("out"));
}
