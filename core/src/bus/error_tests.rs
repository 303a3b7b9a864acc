//! The bus's errors keep their cause: the source chain of a real failure reaches the
//! async-nats or I/O error, and the message is the one operators know.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error;
use std::time::Duration;

use super::context::NatsContext;
use super::{connect_client, BusConfig, BusError};

/// The first error of type `E` in `err`'s source chain (`err` itself included).
fn find_in_chain<'a, E: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a E> {
    std::iter::successors(Some(err), |&err| err.source()).find_map(|err| err.downcast_ref::<E>())
}

#[test]
fn a_missing_context_file_keeps_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = NatsContext::load(&dir.path().join("absent.json")).unwrap_err();
    assert!(matches!(err, BusError::Config { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("invalid bus settings: cannot read the nats context "),
        "{err}"
    );
    let io = find_in_chain::<std::io::Error>(&err)
        .unwrap_or_else(|| panic!("no io::Error behind: {err:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[tokio::test]
async fn a_server_nobody_answers_keeps_the_connect_error() {
    // A loopback port nothing listens on once the listener is gone.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = BusConfig::at(format!("nats://127.0.0.1:{port}"));
    let err = connect_client(&config, Duration::from_secs(5))
        .await
        .expect_err("connected to a port nothing listens on");
    assert!(matches!(err, BusError::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("cannot connect to the bus: "),
        "{err}"
    );
    let connect = find_in_chain::<async_nats::ConnectError>(&err)
        .unwrap_or_else(|| panic!("no async-nats ConnectError behind: {err:?}"));
    assert_eq!(
        connect.kind(),
        async_nats::ConnectErrorKind::Io,
        "{connect:?}"
    );
}
