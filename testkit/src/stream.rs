//! Reading what reached the bus, and reading metrics, for the integration tests.

use std::sync::OnceLock;
use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Every message in `stream`, in stream order, as `(Nats-Msg-Id header, parsed JSON body)`.
/// An independent reader: it goes straight to the server, not through the emitter. Sequences
/// deleted from the middle of the stream are skipped.
pub async fn stream_messages(url: &str, stream: &str) -> Vec<(String, serde_json::Value)> {
    let client = async_nats::connect(url)
        .await
        .expect("connect to read the stream");
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(stream).await.expect("stream exists");
    let state = stream.info().await.expect("stream info").state.clone();
    let mut messages = Vec::new();
    if state.messages == 0 {
        return messages;
    }
    for seq in state.first_sequence..=state.last_sequence {
        let message = tokio::time::timeout(Duration::from_secs(5), stream.get_raw_message(seq))
            .await
            .expect("get message in time");
        let message = match message {
            Err(err) if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) => continue,
            other => other.expect("get message"),
        };
        let id = message
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        let body = serde_json::from_slice(&message.payload).expect("JSON event on the bus");
        messages.push((id, body));
    }
    messages
}

/// Just the message ids of [`stream_messages`].
pub async fn stream_ids(url: &str, stream: &str) -> Vec<String> {
    stream_messages(url, stream)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// The test binary's Prometheus recorder (installed once per process).
pub fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("install the Prometheus recorder")
    })
}

/// The value of a counter or gauge with exactly these labels (0 when never recorded).
pub fn metric_value(name: &str, labels: &[(&str, &str)]) -> f64 {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let series = if wanted.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", wanted.join(","))
    };
    metrics()
        .render()
        .lines()
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}

/// How many messages `stream` holds (0 while it does not exist yet).
pub async fn stream_len(url: &str, stream: &str) -> u64 {
    let Ok(client) = async_nats::connect(url).await else {
        return 0;
    };
    let js = async_nats::jetstream::new(client);
    match js.get_stream(stream).await {
        Ok(mut stream) => stream.info().await.map_or(0, |info| info.state.messages),
        Err(_) => 0,
    }
}
