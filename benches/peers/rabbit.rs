//! RabbitMQ as the dead-letter store: each failure a persistent message published to a quorum
//! queue (replicated, fsynced before the confirm) of the machine's RabbitMQ, waiting for the
//! publisher confirm before the next. The queue is this run's own and is deleted at the end.

use std::time::Duration;

type AmqpResult<T> = std::result::Result<T, amqprs::error::Error>;

use amqprs::callbacks::{ChannelCallback, DefaultConnectionCallback};
use amqprs::channel::{
    BasicPublishArguments, Channel, ConfirmSelectArguments, QueueDeclareArguments,
    QueueDeleteArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, FieldTable, FieldValue, Nack, Return};
use std::sync::Arc;
use tokio::sync::{mpsc, Mutex};

use crate::contenders::Contender;

/// Forwards confirms (`true` = ack) to the publisher.
struct Confirms(mpsc::UnboundedSender<bool>);

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(&mut self, _: &Channel, _: CloseChannel) -> AmqpResult<()> {
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> AmqpResult<()> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> AmqpResult<bool> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, _: Ack) {
        let _ = self.0.send(true);
    }
    async fn publish_nack(&mut self, _: &Channel, _: Nack) {
        let _ = self.0.send(false);
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// Opens a quorum queue of this run on the machine's RabbitMQ for the contender, or says why
/// it cannot (no RabbitMQ on 127.0.0.1:5672).
pub async fn contender(event: &[u8]) -> Result<Contender, String> {
    let args = OpenConnectionArguments::new("127.0.0.1", 5672, "guest", "guest");
    let connection = tokio::time::timeout(Duration::from_secs(5), Connection::open(&args))
        .await
        .map_err(|_| "no answer from RabbitMQ on 127.0.0.1:5672".to_string())?
        .map_err(|e| format!("no RabbitMQ on 127.0.0.1:5672 (guest/guest): {e}"))?;
    connection
        .register_callback(DefaultConnectionCallback)
        .await
        .map_err(|e| e.to_string())?;
    let channel = connection
        .open_channel(None)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::unbounded_channel();
    channel
        .register_callback(Confirms(tx))
        .await
        .map_err(|e| e.to_string())?;
    channel
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .map_err(|e| e.to_string())?;
    let queue = format!("dlq-peers-{}", std::process::id());
    let mut arguments = FieldTable::new();
    arguments.insert(
        "x-queue-type".try_into().map_err(|_| "field name")?,
        FieldValue::S("quorum".try_into().map_err(|_| "field value")?),
    );
    channel
        .queue_declare(
            QueueDeclareArguments::durable_client_named(&queue)
                .arguments(arguments)
                .finish(),
        )
        .await
        .map_err(|e| format!("declare quorum queue: {e}"))?;

    let state = Arc::new(Mutex::new((channel.clone(), rx)));
    let (body, name) = (event.to_vec(), queue.clone());
    Ok(Contender {
        call: Box::new(move |_| {
            let (state, body, name) = (state.clone(), body.clone(), name.clone());
            Box::pin(async move {
                let mut guard = state.lock().await;
                let (channel, confirms) = &mut *guard;
                let mut props = BasicProperties::default();
                props.with_persistence(true);
                channel
                    .basic_publish(props, body, BasicPublishArguments::new("", &name))
                    .await
                    .map_err(|e| e.to_string())?;
                match confirms.recv().await {
                    Some(true) => Ok(()),
                    Some(false) => Err("nacked".into()),
                    None => Err("channel closed".into()),
                }
            })
        }),
        keep: Vec::new(),
        close: Some(Box::pin(async move {
            let _ = channel
                .queue_delete(QueueDeleteArguments::new(&queue))
                .await;
            let _ = channel.close().await;
            let _ = connection.close().await;
            Ok(())
        })),
    })
}
