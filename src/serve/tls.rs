//! TLS for the admin API (`--tls-cert`, `--tls-key`): the operator's PEM certificate chain and
//! private key, served with rustls (the version async-nats already brings in, with ring).
//!
//! [`TlsListener`] is what `axum::serve` accepts from: a background task accepts TCP
//! connections and runs each TLS handshake in its own task, bounded in time and in number, so a
//! client that connects and says nothing holds up no one else. A connection that fails its
//! handshake (plain HTTP sent to the TLS port, an untrusted client, a timeout) is closed and
//! logged at debug level; only finished handshakes reach the server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::ServeError;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many handshakes run at once; more connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// The server side of TLS: certificate chain and key, checked when loaded.
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig(..)")
    }
}

impl TlsConfig {
    /// Reads the PEM certificate chain `cert` (leaf first) and the PEM private key `key`
    /// (PKCS#8, PKCS#1 or SEC1), and checks that they belong together.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, ServeError> {
        let bad = |path: &Path, reason: String| ServeError::Tls {
            path: path.to_owned(),
            reason,
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|err| bad(cert, err.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| bad(cert, err.to_string()))?;
        if chain.is_empty() {
            return Err(bad(
                cert,
                "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
            ));
        }
        let private = PrivateKeyDer::from_pem_file(key).map_err(|err| {
            bad(
                key,
                format!("{err} (give a PEM private key: PKCS#8, PKCS#1 or SEC1)"),
            )
        })?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| bad(cert, err.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|err| {
                bad(
                    key,
                    format!("{err} (is it the key of --tls-cert {}?)", cert.display()),
                )
            })?;
        Ok(TlsConfig {
            config: Arc::new(config),
        })
    }
}

/// The files of `--tls-cert` and `--tls-key`, as given.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The PEM certificate chain.
    pub cert: PathBuf,
    /// The PEM private key.
    pub key: PathBuf,
}

/// A listener whose connections have finished their TLS handshake.
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` with `tls`.
    pub fn new(listener: TcpListener, tls: &TlsConfig) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, accepted) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = TlsAcceptor::from(tls.config.clone());
        let acceptor = tokio::spawn(accept_loop(listener, acceptor, sender));
        Ok(TlsListener {
            accepted,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    sender: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // As axum does: errors such as too many open files pass; wait a little.
                tracing::debug!("accepting a connection failed: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let sender = sender.clone();
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            drop(permit);
            match handshake {
                Ok(Ok(tls)) => {
                    let _ = sender.send((tls, peer)).await;
                }
                Ok(Err(err)) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when aborted by our own drop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The address of the client of a request, with or without TLS (what failed authentications
/// are counted by).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}
