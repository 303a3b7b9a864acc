//! `dlq demo`: emit sample failures, the smallest end-to-end run of the product.

use std::io::Write;
use std::time::Duration;

use chrono::Utc;
use clap::Args;
use serde_json::json;

use super::drain::drain;
use super::open::{self, NodeEmitter};
use super::{Cli, CliError, Format, EXIT_OK};
use dlq::bus::Bus;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::domain::signature::{classify, Outcome};
use dlq::emitter::EmitError;
use dlq::sink::Sink;

/// Options of `dlq demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many sample failures to emit.
    #[arg(long, default_value_t = 20)]
    pub count: u64,
    /// Job id to file them under (default: demo-<unix time>).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Scheduler topic the failures come from (selects the retry policy, labels metrics).
    #[arg(long, default_value = "demo")]
    pub source_topic: String,
    /// Keep emitting until killed (used by crash drills); --count is ignored.
    #[arg(long = "loop")]
    pub forever: bool,
    /// Print `ACK <event_id>` on stdout as soon as each event is durable.
    #[arg(long)]
    pub print_acked: bool,
    /// After emitting, wait up to this long for the reconciler to publish the backlog (not
    /// at all while the bus is down).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// Sample failure messages: (message, exit code, timed out).
const SAMPLES: &[(&str, Option<i32>, bool)] = &[
    (
        "cargo test failed with exit code 101 after {n}.2s in /tmp/w{n}",
        Some(101),
        false,
    ),
    ("agent timed out after {n}s", None, true),
    (
        "permission denied: /srv/repo/{n}/.git/index.lock",
        Some(1),
        false,
    ),
    (
        "out of memory: killed process {n} (rustc)",
        Some(137),
        false,
    ),
    ("merge conflict in src/module_{n}.rs", Some(1), false),
];

/// Runs the demo.
///
/// While the bus is connected each item is dead-lettered as a scheduler would, waiting for
/// its publish ([`dlq::emitter::Emitter::dead_letter`]); while it is not, each is only
/// stored ([`dlq::emitter::Emitter::store`]: durable, publishing left to the reconciler), so
/// an outage adds no retry delays per item and no warning per item, only the one line of the
/// summary ([`super::drain::Drained::line`]).
pub async fn run(cli: &Cli, args: &DemoArgs) -> Result<u8, CliError> {
    let emitter = open::emitter(cli).await?;
    let job_id = args
        .job_id
        .clone()
        .unwrap_or_else(|| format!("demo-{}", Utc::now().timestamp()));
    let mut stdout = std::io::stdout();
    let (mut emitted, mut published, mut failed) = (0u64, 0u64, 0u64);
    let mut n = 0u64;
    while args.forever || n < args.count {
        let Some(item) = sample_item(&job_id, n) else {
            break;
        };
        n += 1;
        match emit(&emitter, &args.source_topic, item).await {
            Ok((event_ids, on_emit)) => {
                emitted += 1;
                published += u64::from(on_emit);
                if args.print_acked {
                    for id in &event_ids {
                        writeln!(stdout, "ACK {id}")?;
                    }
                    stdout.flush()?;
                }
            }
            Err(err) => {
                failed += 1;
                eprintln!("dlq demo: emit failed: {err}");
            }
        }
    }
    let drained = drain(&emitter, args.drain_timeout).await?;
    let summary = json!({
        "job_id": job_id,
        "node_id": emitter.sink().node_id(),
        "emitted": emitted,
        "failed": failed,
        "published_on_emit": published,
        "unpublished": drained.unpublished(),
        "drained": drained.drained(),
    });
    emitter.shutdown().await?;
    match cli.format {
        Format::Json | Format::Jsonl | Format::Csv | Format::Dir => {
            println!("{summary}");
            if let Some(line) = drained.line() {
                eprintln!("dlq: {line}");
            }
        }
        Format::Table => {
            println!("job {job_id} on node {}", summary["node_id"]);
            println!("  emitted (durable): {emitted}, failed: {failed}");
            println!("  published on emit: {published}");
            println!("  still unpublished: {}", drained.unpublished());
            if let Some(line) = drained.line() {
                println!("  {line}");
            }
        }
    }
    Ok(EXIT_OK)
}

/// Emits one item: dead-lettered (waiting for its publish) while the bus is connected, only
/// stored while it is not. The event ids, and whether the bus acknowledged them.
async fn emit(
    emitter: &NodeEmitter,
    topic: &str,
    item: DeadLetteredItem,
) -> Result<(Vec<String>, bool), EmitError> {
    if emitter.bus().is_healthy() {
        let receipt = emitter.dead_letter(topic, item).await?;
        Ok((receipt.event_ids, receipt.published))
    } else {
        let receipt = emitter.store(topic, item).await?;
        Ok((receipt.event_ids, false))
    }
}

/// The `n`-th sample item of `job_id` (also used by `dlq generate`).
pub(super) fn sample_item(job_id: &str, n: u64) -> Option<dlq::domain::model::DeadLetteredItem> {
    let index = usize::try_from(n).unwrap_or(0) % SAMPLES.len();
    let (template, exit_code, timed_out) =
        SAMPLES
            .get(index)
            .copied()
            .unwrap_or(("unknown failure", None, false));
    let message = template.replace("{n}", &n.to_string());
    let error_type = classify(&Outcome {
        message: &message,
        exit_code,
        timed_out,
    });
    let step = if matches!(error_type, ErrorType::Timeout) {
        "claude: /process '${item}'"
    } else {
        "shell: cargo test"
    };
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type,
        error_message: message,
        stack_trace: Some(format!("thread 'main' panicked at src/lib.rs:{n}")),
        agent_id: format!("agent-{}", n % 4),
        step_failed: step.into(),
        duration_ms: 1000 + n % 5000,
        json_log_location: None,
    };
    let data = json!({ "file": format!("src/module_{n}.rs"), "priority": n % 10 });
    let item_id = format!("item-{n}");
    DeadLetteredItem::new(job_id, &item_id, data, vec![failure]).ok()
}
