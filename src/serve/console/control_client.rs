//! The console's side of the control subject: one request to one node, and what a node that
//! does not answer means.

use std::time::Duration;

use crate::serve::control::{self, ControlReply, ControlRequest};

/// How long a node has to answer an action (a delete waits up to its drain timeout, 5 s by
/// default, for the removal events to be published).
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node has to answer `GET /healthz` for the overview.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a node's answer is missing.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Nobody subscribes to the node's subject, or it did not answer in time.
    #[error("node {node} is not answering on {subject}: is it running? ({why})")]
    NotAnswering {
        /// The node.
        node: String,
        /// Its control subject.
        subject: String,
        /// No responders, or the timeout.
        why: String,
    },
    /// The node answered something that is not a control reply.
    #[error(
        "node {node} answered on {subject} with something that is not a control reply: {reason}"
    )]
    Garbled {
        /// The node.
        node: String,
        /// Its control subject.
        subject: String,
        /// What is wrong.
        reason: String,
    },
}

/// Sends requests on the nodes' control subjects.
#[derive(Debug, Clone)]
pub struct ControlClient {
    client: async_nats::Client,
    prefix: String,
}

impl ControlClient {
    /// Requests through `client` on `<prefix>.<node>`.
    pub fn new(client: async_nats::Client, prefix: impl Into<String>) -> Self {
        ControlClient {
            client,
            prefix: prefix.into(),
        }
    }

    /// The subject of `node`.
    pub fn subject(&self, node: &str) -> String {
        control::subject(&self.prefix, node)
    }

    /// Sends `request` to `node` and waits up to `timeout` for its reply.
    pub async fn send(
        &self,
        node: &str,
        request: &ControlRequest,
        timeout: Duration,
    ) -> Result<ControlReply, NodeError> {
        let subject = self.subject(node);
        let payload = serde_json::to_vec(request).unwrap_or_default();
        let sent = self.client.send_request(
            subject.clone(),
            async_nats::Request::new()
                .payload(payload.into())
                .timeout(Some(timeout)),
        );
        let message = sent.await.map_err(|err| NodeError::NotAnswering {
            node: node.to_owned(),
            subject: subject.clone(),
            why: match err.kind() {
                async_nats::RequestErrorKind::NoResponders => "no responders".to_owned(),
                async_nats::RequestErrorKind::TimedOut => {
                    format!("no answer within {}", humantime::format_duration(timeout))
                }
                _ => err.to_string(),
            },
        })?;
        serde_json::from_slice(&message.payload).map_err(|err| NodeError::Garbled {
            node: node.to_owned(),
            subject,
            reason: err.to_string(),
        })
    }
}
