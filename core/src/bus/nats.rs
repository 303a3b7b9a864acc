//! [`NatsBus`]: publishes events on NATS, by default through JetStream with a PubAck.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use async_nats::HeaderMap;
use tokio::sync::Mutex;
use tracing::{debug, error, info, warn};

use super::auth::{explain_connect_error, is_refusal, is_unreachable, redact_url, Plan};
use super::config::{BusConfig, BusMode};
use super::denials::Denials;
use super::stream::{check, wanted};
use super::{Bus, BusError, Published, HEADER_JOB, HEADER_KIND, HEADER_MSG_ID, HEADER_NODE};
use crate::domain::event::{EncodedEvent, Event};

/// Connects once to the servers of `config`, with its credentials and TLS, failing at once
/// (with a line naming the cause and the fix) instead of retrying: for readers of the stream
/// (`dlq consume`, `verify`, `republish`) and tools. A server that does not answer is
/// [`BusError::Unreachable`], one that refuses the settings (or a host that does not resolve)
/// [`BusError::Refused`].
pub async fn connect_client(
    config: &BusConfig,
    timeout: Duration,
) -> Result<async_nats::Client, BusError> {
    connect_watched(config, timeout)
        .await
        .map(|(client, _)| client)
}

/// [`connect_client`], also recording the permissions the server denies the connection later
/// (see [`Denials`]).
pub async fn connect_watched(
    config: &BusConfig,
    timeout: Duration,
) -> Result<(async_nats::Client, Denials), BusError> {
    let plan = Plan::new(config)?;
    let denials = Denials::default();
    let watch = denials.clone();
    let base = async_nats::ConnectOptions::new()
        .name("dlq")
        .event_callback(move |event| {
            let watch = watch.clone();
            async move {
                if let async_nats::Event::ServerError(async_nats::ServerError::Other(message)) =
                    &event
                {
                    watch.record(message);
                }
            }
        });
    let options = plan.apply(config, base).await?.connection_timeout(timeout);
    let client = options.connect(plan.servers.clone()).await.map_err(|err| {
        let message = explain_connect_error(&err, &plan, &config.url);
        let unreachable = is_unreachable(&err);
        let source = Some(err.into());
        if unreachable {
            BusError::Unreachable { message, source }
        } else {
            BusError::Refused { message, source }
        }
    })?;
    Ok((client, denials))
}

/// Why the bus is not connected, when the server refused it (credentials, TLS, permissions),
/// shared with the client's event callback.
type Refusal = Arc<std::sync::Mutex<Option<String>>>;

/// The NATS bus. Connects in the background, so it can be built while the server is down.
pub struct NatsBus {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    config: BusConfig,
    stream_ready: AtomicBool,
    stream_setup: Mutex<()>,
    refusal: Refusal,
}

impl NatsBus {
    /// Starts connecting to `config.url`: waits at most one publish timeout for a server
    /// that accepts the connection to answer, and returns at once when none does (refused,
    /// down): the client keeps reconnecting in the background, and what is emitted meanwhile
    /// is stored and left to the reconciler, so a bus outage adds no wait to the caller.
    ///
    /// In JetStream mode, once connected, it also gets the stream ready
    /// ([`NatsBus::ensure_stream`]): creates it when it is missing, otherwise checks it and
    /// changes nothing. A stream that cannot hold dlq's events fails the connect with
    /// [`BusError::StreamUnfit`]; any other failure (server down, slow) is left to the first
    /// publish or the reconciler to try again.
    pub async fn connect(config: BusConfig) -> Result<Self, BusError> {
        let bus = NatsBus::open(config).await?;
        if bus.config.mode == BusMode::Jetstream && bus.is_healthy() {
            match bus.ensure_stream().await {
                Err(err @ BusError::StreamUnfit(_)) => return Err(err),
                Err(err) => debug!(error = %err, "stream not ready yet; publishing will retry"),
                Ok(()) => {}
            }
        }
        Ok(bus)
    }

    /// Like [`NatsBus::connect`], without touching the stream: for `dlq stream`, which shows,
    /// creates and updates it on purpose.
    ///
    /// Settings that cannot work (see [`super::auth`]) are an error ([`BusError::Config`]).
    /// A server that refuses the credentials or the TLS handshake is not: the bus is built,
    /// stays disconnected and keeps trying, [`NatsBus::refusal`] says why in one line, and
    /// every event stays durable and unpublished until the settings are fixed.
    pub async fn open(config: BusConfig) -> Result<Self, BusError> {
        let plan = Plan::new(&config)?;
        let refusal: Refusal = Arc::default();
        // Give the first connection up to one publish timeout, so that a process that emits
        // right after starting does not fail its first publishes for nothing; a server that is
        // frozen does not block longer than that. A failed attempt is not waited on: the
        // retrying client below connects in the background (issue 36: a refused bus cost
        // every `dlq run` the whole publish timeout before its first item).
        let deadline = tokio::time::Instant::now() + config.publish_timeout;
        // First one direct attempt: its error has the details (which certificate, which
        // credentials) that the retrying client only reports as a kind.
        let direct = plan
            .apply(&config, Self::options(&config, &refusal))
            .await?
            .connect(plan.servers.clone());
        let client = match tokio::time::timeout_at(deadline, direct).await {
            Ok(Ok(client)) => client,
            failed => {
                match failed {
                    Ok(Err(err)) if is_refusal(&err) => {
                        let explained = explain_connect_error(&err, &plan, &config.url);
                        error!("cannot connect to the bus: {explained}; events stay stored and unpublished until this is fixed");
                        set_refusal(&refusal, Some(explained));
                    }
                    Ok(Err(err)) => debug!(
                        "bus not reachable yet: {}",
                        explain_connect_error(&err, &plan, &config.url)
                    ),
                    Err(_) if plan.tls && !config.tls.first => {
                        // A server with `handshake_first` waits for our TLS hello while we wait
                        // for its greeting: nothing ever fails, it only times out.
                        let line = format!(
                            "no TLS handshake with {} within {}: if the server sets handshake_first, pass --tlsfirst (bus.tls.first); otherwise check that nats-server runs there and answers",
                            redact_url(&config.url),
                            humantime::format_duration(config.publish_timeout)
                        );
                        warn!("{line}");
                        set_refusal(&refusal, Some(line));
                    }
                    _ => debug!("bus not reachable within the publish timeout"),
                }
                plan.apply(&config, Self::options(&config, &refusal))
                    .await?
                    .retry_on_initial_connect()
                    .connect(plan.servers.clone())
                    .await
                    .map_err(|err| {
                        BusError::transport(format!(
                            "invalid bus address {}: {err}",
                            redact_url(&config.url)
                        ))
                        .caused_by(err)
                    })?
            }
        };
        let mut jetstream = jetstream::new(client.clone());
        jetstream.set_timeout(config.publish_timeout);
        Ok(NatsBus {
            client,
            jetstream,
            config,
            stream_ready: AtomicBool::new(false),
            stream_setup: Mutex::new(()),
            refusal,
        })
    }

    /// The connected server's `max_payload` in bytes (0 while never connected).
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// The client options of the bus, without credentials and TLS (see [`Plan::apply`]).
    fn options(config: &BusConfig, refusal: &Refusal) -> async_nats::ConnectOptions {
        let max_delay = config.reconnect_max_delay;
        let subject = config.subject.clone();
        let refusal = refusal.clone();
        async_nats::ConnectOptions::new()
            .name("dlq")
            .max_reconnects(None)
            .connection_timeout(config.publish_timeout.max(Duration::from_millis(500)))
            .reconnect_delay_callback(move |attempts| {
                let exp = u32::try_from(attempts.min(10)).unwrap_or(10);
                (Duration::from_millis(50) * 2u32.pow(exp)).min(max_delay)
            })
            .event_callback(move |event| {
                let refusal = refusal.clone();
                let subject = subject.clone();
                async move {
                    use async_nats::{Event, ServerError};
                    match &event {
                        Event::Connected => set_refusal(&refusal, None),
                        Event::ServerError(ServerError::AuthorizationViolation) => {
                            keep_first_refusal(&refusal, "the server refused the credentials (authorization violation): check --user/--password, --nkey or --creds".into());
                        }
                        Event::ServerError(ServerError::Other(message))
                            if is_control_denial(message) =>
                        {
                            // The control subject a console acts through: publishing is not
                            // affected, only consoles cannot reach this node.
                            warn!("the server denied this node's control subject ({message}): a fleet console cannot act on this node; grant the node's user subscribe on its own dlq.control.<node> (deploy/nats-permissions.conf)");
                        }
                        Event::ServerError(ServerError::Other(message))
                            if message.to_ascii_lowercase().contains("permissions violation") =>
                        {
                            let line = format!("the server denied a permission ({message}): grant this user publish on that subject (the permissions of each role: deploy/nats-permissions.conf, \"Least privilege\" in docs/operations.md; an emitter needs {subject} and $JS.API.STREAM.INFO.<stream>)");
                            error!("{line}");
                            set_refusal(&refusal, Some(line));
                        }
                        _ => {}
                    }
                    info!(%event, "bus connection event");
                }
            })
    }

    /// Why the server refused this bus (credentials, TLS, a permission), in one line naming
    /// the fix; `None` while the server is simply unreachable or nothing was refused. A
    /// refused connection clears it once a connection succeeds; a denied permission stays
    /// until the next connection.
    pub fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The state of the connection to the server: `connected`, `disconnected` or
    /// `connecting`.
    pub fn connection(&self) -> &'static str {
        match self.client.connection_state() {
            State::Connected => "connected",
            State::Disconnected => "disconnected",
            State::Pending => "connecting",
        }
    }

    /// The underlying client (for subscribers in tests and tools).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The configuration in use.
    pub fn config(&self) -> &BusConfig {
        &self.config
    }

    /// The JetStream context (for the stream reads of sibling modules).
    pub(super) fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// Gets the stream ready for publishing, once per bus (again after the server lost it):
    /// creates it from the configuration when it is missing; otherwise reads it and never
    /// changes it. Refuses ([`BusError::StreamUnfit`]) a stream that cannot hold dlq's events
    /// and warns once about settings weaker than configured ([`stream::check`](super::stream::check)).
    pub async fn ensure_stream(&self) -> Result<(), BusError> {
        if self.stream_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Boxed: the set-up runs once, and its future would otherwise swell every publish's
        // (and so every emit's) future.
        Box::pin(self.set_up_stream()).await
    }

    /// [`NatsBus::ensure_stream`] once the stream is not known ready: one set-up at a time.
    async fn set_up_stream(&self) -> Result<(), BusError> {
        let _guard = self.stream_setup.lock().await;
        if self.stream_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let timeout = self.config.publish_timeout;
        let setup = async {
            let existing = match self.stream_info().await? {
                Some(info) => info,
                None => match self.create_stream().await {
                    Ok(_) => {
                        info!(stream = %self.config.stream, "stream created");
                        return Ok(());
                    }
                    // Another node may have created it meanwhile: check that one.
                    Err(err) => self.stream_info().await?.ok_or(err)?,
                },
            };
            let fit = check(&existing.config, &self.config);
            if !fit.is_usable() {
                return Err(BusError::StreamUnfit(fit.refusals.join("; ")));
            }
            for warning in &fit.warnings {
                warn!(stream = %self.config.stream, "{warning}");
            }
            info!(stream = %self.config.stream, "stream exists; its configuration is kept");
            Ok(())
        };
        match tokio::time::timeout(timeout, setup).await {
            Ok(Ok(())) => {
                self.stream_ready.store(true, Ordering::SeqCst);
                Ok(())
            }
            Ok(Err(err)) => Err(err),
            Err(_) => Err(BusError::Timeout(timeout)),
        }
    }

    /// The configured stream's configuration and state, `None` when it does not exist.
    pub async fn stream_info(&self) -> Result<Option<stream::Info>, BusError> {
        use async_nats::jetstream::context::GetStreamErrorKind as Kind;
        use async_nats::jetstream::ErrorCode;
        match self.jetstream.get_stream(&self.config.stream).await {
            Ok(stream) => Ok(Some(stream.cached_info().clone())),
            Err(err) => match err.kind() {
                Kind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND => Ok(None),
                _ => Err(BusError::stream_setup(format!(
                    "cannot read stream {}: {err}",
                    self.config.stream
                ))
                .caused_by(err)),
            },
        }
    }

    /// Creates the stream from the configuration ([`wanted`]); fails when it exists with
    /// another configuration.
    pub async fn create_stream(&self) -> Result<stream::Info, BusError> {
        let created = self
            .jetstream
            .create_stream(wanted(&self.config))
            .await
            .map_err(|err| {
                BusError::stream_setup(format!(
                    "cannot create stream {}: {err}",
                    self.config.stream
                ))
                .caused_by(err)
            })?;
        Ok(created.cached_info().clone())
    }

    /// Replaces the stream's configuration with `config` (`dlq stream update`, on purpose).
    pub async fn update_stream(&self, config: &stream::Config) -> Result<stream::Info, BusError> {
        self.jetstream.update_stream(config).await.map_err(|err| {
            BusError::stream_setup(format!(
                "cannot update stream {}: {err}",
                self.config.stream
            ))
            .caused_by(err)
        })
    }

    fn headers(event: &EncodedEvent, msg_id: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_MSG_ID, msg_id);
        headers.insert(HEADER_KIND, event.kind);
        headers.insert(HEADER_JOB, event.job_id.as_str());
        headers.insert(HEADER_NODE, event.node_id.as_str());
        headers
    }

    /// Publishes `event` to the stream under another `Nats-Msg-Id` than its event id, so that
    /// the stream's duplicate window cannot drop it: the repair of an event the stream lost
    /// (`dlq republish`). Consumers still drop it if they hold it, by event id. JetStream only.
    pub(crate) async fn publish_as(
        &self,
        event: &Event,
        msg_id: &str,
    ) -> Result<Published, BusError> {
        let encoded = EncodedEvent::encode(event).map_err(BusError::Encode)?;
        self.publish_encoded_under(&encoded, msg_id).await
    }

    /// [`NatsBus::publish_as`] for an event as stored.
    async fn publish_encoded_under(
        &self,
        event: &EncodedEvent,
        msg_id: &str,
    ) -> Result<Published, BusError> {
        if self.config.mode != BusMode::Jetstream {
            return Err(BusError::rejected(
                "re-publishing under a new id needs a JetStream stream (bus mode is core)",
            ));
        }
        if !self.is_healthy() {
            return Err(BusError::Disconnected);
        }
        let timeout = self.config.publish_timeout;
        tokio::time::timeout(timeout, self.publish_jetstream(event, msg_id))
            .await
            .unwrap_or(Err(BusError::Timeout(timeout)))
    }

    async fn publish_jetstream(
        &self,
        event: &EncodedEvent,
        msg_id: &str,
    ) -> Result<Published, BusError> {
        self.ensure_stream().await?;
        let message = PublishMessage::build()
            .payload(event.json.clone())
            .headers(Self::headers(event, msg_id));
        let ack = self
            .jetstream
            .send_publish(self.config.subject.clone(), message)
            .await
            .map_err(|err| self.publish_error(err))?
            .await;
        match ack {
            Ok(ack) => {
                if ack.duplicate {
                    // Expected after a timeout or a crash between publish and mark-published;
                    // also what a failover that lost the message looks like (`dlq republish`).
                    debug!(
                        msg_id,
                        stream_seq = ack.sequence,
                        "acknowledged as a duplicate: the stream already had this message id"
                    );
                }
                Ok(Published {
                    stream_seq: Some(ack.sequence),
                    duplicate: ack.duplicate,
                })
            }
            Err(err) => Err(self.publish_error(err)),
        }
    }

    /// What a JetStream publish error means for us: an event over the server's `max_payload`
    /// (refused by the client before sending) is rejected for good, not a transport failure.
    fn publish_error(&self, err: async_nats::jetstream::context::PublishError) -> BusError {
        use async_nats::jetstream::context::PublishErrorKind as Kind;
        match err.kind() {
            Kind::TimedOut => BusError::Timeout(self.config.publish_timeout),
            Kind::StreamNotFound => {
                self.stream_ready.store(false, Ordering::SeqCst);
                BusError::stream_setup("stream not found").caused_by(err)
            }
            Kind::MaxPayloadExceeded => BusError::rejected(err.to_string()).caused_by(err),
            _ => BusError::transport(err.to_string()).caused_by(err),
        }
    }

    async fn publish_core(&self, event: &EncodedEvent) -> Result<Published, BusError> {
        self.client
            .publish_with_headers(
                self.config.subject.clone(),
                Self::headers(event, &event.event_id),
                event.json.clone(),
            )
            .await
            .map_err(|err| match err.kind() {
                async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                    BusError::rejected(err.to_string()).caused_by(err)
                }
                _ => BusError::transport(err.to_string()).caused_by(err),
            })?;
        self.client
            .flush()
            .await
            .map_err(|err| BusError::transport(err.to_string()).caused_by(err))?;
        Ok(Published {
            stream_seq: None,
            duplicate: false,
        })
    }
}

/// Whether a server error denies a subscription other than the replies' inbox: the control
/// subject of `dlq-ops` (the only other subject a node's client subscribes to). It does not
/// stop publishing, so it is no refusal of the bus.
fn is_control_denial(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("permissions violation for subscription") && !lower.contains("_inbox")
}

fn set_refusal(refusal: &Refusal, value: Option<String>) {
    *refusal.lock().unwrap_or_else(PoisonError::into_inner) = value;
}

/// Records `line` unless a refusal (with more detail, from the direct attempt) is known.
fn keep_first_refusal(refusal: &Refusal, line: String) {
    let mut held = refusal.lock().unwrap_or_else(PoisonError::into_inner);
    if held.is_none() {
        *held = Some(line);
    }
}

impl Bus for NatsBus {
    async fn publish_encoded(&self, event: &EncodedEvent) -> Result<Published, BusError> {
        if !self.is_healthy() {
            return Err(BusError::Disconnected);
        }
        let timeout = self.config.publish_timeout;
        let attempt = async {
            match self.config.mode {
                BusMode::Jetstream => self.publish_jetstream(event, &event.event_id).await,
                BusMode::Core => self.publish_core(event).await,
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => {
                warn!(event_id = %event.event_id, ?timeout, "publish not acknowledged in time");
                Err(BusError::Timeout(timeout))
            }
        }
    }

    fn is_healthy(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    async fn prepare(&self) -> Result<(), BusError> {
        match self.config.mode {
            BusMode::Jetstream => self.ensure_stream().await,
            BusMode::Core => Ok(()),
        }
    }

    fn can_probe(&self) -> bool {
        self.config.mode == BusMode::Jetstream
    }

    async fn probe(&self, probes: &[super::Probe]) -> Result<Vec<super::Presence>, BusError> {
        if !self.is_healthy() {
            return Err(BusError::Disconnected);
        }
        self.probe_stream(probes).await
    }

    async fn scan_ids(
        &self,
        from: u64,
        to: u64,
        visit: &mut (dyn FnMut(u64, &str) + Send),
    ) -> Result<super::Extent, BusError> {
        if !self.is_healthy() {
            return Err(BusError::Disconnected);
        }
        self.scan_stream_ids(from, to, visit).await
    }

    async fn publish_encoded_as(
        &self,
        event: &EncodedEvent,
        msg_id: &str,
    ) -> Result<Published, BusError> {
        self.publish_encoded_under(event, msg_id).await
    }
}
