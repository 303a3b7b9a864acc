//! How a scheduler embeds dlq: build one emitter at start, clone it into workers, call
//! `dead_letter` on the failure path, shut down at exit.
//!
//! Run: `cargo run --example scheduler -- [--data-dir DIR] [NATS_URL]`. It works without a NATS
//! server too: the failure is then stored only, and published once a server is reachable.
//! Without `--data-dir` it writes under a new directory in the system's temporary directory,
//! prints where, and removes it at the end unless `DLQ_EXAMPLE_KEEP` is set.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlq::{
    BusConfig, DeadLetteredItem, EmitError, EmitterBuilder, FailureDetail, LocalSink, NatsBus,
    SinkConfig, TopicPolicies, TopicPolicy,
};

/// Where the example writes, and whether it removes the directory at the end.
struct DataDir {
    path: PathBuf,
    remove: bool,
}

impl DataDir {
    /// `--data-dir DIR` (kept), or a per-run directory under the temporary directory (removed
    /// unless `DLQ_EXAMPLE_KEEP` is set).
    fn choose(given: Option<String>) -> DataDir {
        if let Some(dir) = given {
            return DataDir {
                path: dir.into(),
                remove: false,
            };
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("dlq-example-{}-{nanos}", std::process::id());
        DataDir {
            path: std::env::temp_dir().join(name),
            remove: std::env::var_os("DLQ_EXAMPLE_KEEP").is_none(),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "nats://127.0.0.1:4222".to_owned();
    let mut data_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => data_dir = Some(args.next().ok_or("--data-dir needs a directory")?),
            _ => url = arg,
        }
    }
    let dir = DataDir::choose(data_dir);
    println!("data directory: {}", dir.path.display());
    let result = run(&dir, url).await;
    if dir.remove {
        std::fs::remove_dir_all(&dir.path)?;
        println!("removed it (set DLQ_EXAMPLE_KEEP=1 or pass --data-dir to keep it)");
    }
    result
}

async fn run(dir: &DataDir, url: String) -> Result<(), Box<dyn std::error::Error>> {
    let sink = LocalSink::open(SinkConfig::new(&dir.path))?;
    let bus = NatsBus::connect(BusConfig {
        url,
        ..BusConfig::default()
    })
    .await?;
    let policies = TopicPolicies {
        default: TopicPolicy {
            retry_attempts: 2,
            retry_delay: Duration::from_millis(200),
            ..TopicPolicy::default()
        },
        ..TopicPolicies::default()
    };
    // What an operator's redrive (`dlq redrive`, the page) hands back: the item, with its data
    // after any edit. A real scheduler re-runs or re-enqueues the work and answers its outcome.
    let emitter = EmitterBuilder::new(sink, bus)
        .policies(policies)
        .redrive_handler(|item: DeadLetteredItem| async move {
            println!("redriven: {} of {}", item.item_id, item.job_id);
            match item.item_data.get("file") {
                Some(_) => Ok(()),
                None => Err(format!("{} has no file to work on", item.item_id)),
            }
        })
        .build();

    // A worker's failure path: describe the failed attempt, hand it over, move on. The error
    // type is classified from the message and exit code: CommandFailed { exit_code: 101 }.
    let failure = FailureDetail::builder("cargo test failed with exit code 101")
        .exit_code(101)
        .agent("worker-1")
        .step("shell: cargo test")
        .duration(Duration::from_millis(4200))
        .build();
    let data = serde_json::json!({ "file": "src/main.rs" });
    let item = DeadLetteredItem::new("job-42", "item-7", data, vec![failure])?;
    match emitter.dead_letter("mapreduce", item).await {
        Ok(receipt) => println!(
            "durable as {:?}; published now: {}",
            receipt.event_ids, receipt.published
        ),
        Err(err @ EmitError::NotStored { .. }) => eprintln!("not durable, log it yourself: {err}"),
        // The sink has it and stores it late; the reconciler publishes it. Do not emit again.
        Err(err @ EmitError::Unconfirmed { .. }) => eprintln!("stored late: {err}"),
        Err(err) => eprintln!("refused: {err}"),
    }
    emitter.shutdown().await?;
    Ok(())
}
