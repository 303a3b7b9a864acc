//! A scheduler that embeds the emitter and serves the admin API and the operators' page on it,
//! so that `dlq list` (and the rest) work on the data directory it holds.
//!
//! Run: `cargo run --example scheduler_serving -- [--data-dir DIR] [--for 5s] [NATS_URL]`. It
//! builds the emitter as `core/examples/scheduler.rs` does, serves the API on a free loopback
//! port (printed), dead-letters a few items and runs until Ctrl-C (or for `--for`), then shuts
//! the API and the emitter down. Meanwhile, in another terminal:
//! `dlq --data-dir DIR list` forwards to it, `dlq --data-dir DIR redrive job-42/item-1` hands
//! the item back to this scheduler's redrive handler, and the printed address opens the page.
//! A token set in `DLQ_API_TOKEN` protects the API; give the CLI the same variable.
//! Without `--data-dir` it writes under a new directory in the system's temporary directory and
//! removes it at the end unless `DLQ_EXAMPLE_KEEP` is set. Works without a NATS server too.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlq::{
    BusConfig, DeadLetteredItem, EmitterBuilder, FailureDetail, LocalSink, NatsBus, SinkConfig,
};
use dlq_ops::serve::client::token::token_text;
use dlq_ops::serve::{serve_emitter, ServeOptions, Token};

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
    let mut run_for = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => data_dir = Some(args.next().ok_or("--data-dir needs a directory")?),
            "--for" => {
                let text = args.next().ok_or("--for needs a duration, e.g. 5s")?;
                run_for = Some(humantime::parse_duration(&text)?);
            }
            _ => url = arg,
        }
    }
    let dir = DataDir::choose(data_dir);
    println!("data directory: {}", dir.path.display());
    let result = run(&dir, url, run_for).await;
    if dir.remove {
        std::fs::remove_dir_all(&dir.path)?;
        println!("removed it (set DLQ_EXAMPLE_KEEP=1 or pass --data-dir to keep it)");
    }
    result
}

async fn run(
    dir: &DataDir,
    url: String,
    run_for: Option<Duration>,
) -> Result<(), Box<dyn std::error::Error>> {
    let sink = LocalSink::open(SinkConfig::new(&dir.path))?;
    let bus = NatsBus::connect(BusConfig {
        url,
        ..BusConfig::default()
    })
    .await?;
    // Items an operator redrives from the page or `dlq redrive` come back here; this one
    // succeeds for any item whose data names a file.
    let emitter = EmitterBuilder::new(sink, bus)
        .redrive_handler(|item: DeadLetteredItem| async move {
            println!("redriven: {}/{}", item.job_id, item.item_id);
            match item.item_data.get("file") {
                Some(_) => Ok(()),
                None => Err("no file in the item's data".to_owned()),
            }
        })
        .build();

    // The admin API and page of `dlq serve`, on this emitter: loopback, a free port, the
    // token of DLQ_API_TOKEN if set (never printed).
    let token = token_text(None)?;
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        token: token.as_deref().map(Token::new),
        ..ServeOptions::default()
    };
    let api = serve_emitter(&emitter, &dir.path, options).await?;
    println!("admin API and page at {}/", api.url());
    println!(
        "try: dlq --data-dir {} list   (it asks this process)",
        dir.path.display()
    );

    for (item_id, message, exit_code) in [
        ("item-1", "cargo test failed with exit code 101", 101),
        ("item-2", "cargo test failed with exit code 101", 101),
        ("item-3", "cargo build: linker not found", 1),
    ] {
        let failure = FailureDetail::builder(message)
            .exit_code(exit_code)
            .agent("worker-1")
            .step("shell: cargo test")
            .build();
        let data = serde_json::json!({ "file": format!("src/{item_id}.rs") });
        let item = DeadLetteredItem::new("job-42", item_id, data, vec![failure])?;
        if let Err(err) = emitter.dead_letter("mapreduce", item).await {
            eprintln!("{item_id}: {err}");
        }
    }
    println!("dead-lettered 3 items of job-42");

    match run_for {
        Some(duration) => {
            println!("serving for {}", humantime::format_duration(duration));
            tokio::time::sleep(duration).await;
        }
        None => {
            println!("serving until Ctrl-C");
            tokio::signal::ctrl_c().await?;
        }
    }
    // The API first: once it returns, no request holds the emitter any more.
    api.shutdown().await?;
    emitter.shutdown().await?;
    println!("stopped");
    Ok(())
}
