//! The tour's own `nats-server`: a child process on a free loopback port with its store in the
//! data directory, which the tour stops and starts again to show an outage.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::TourError;

/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Where `nats-server` is: `NATS_SERVER_BIN`, else on `PATH`, else Debian's `/usr/sbin`.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN") {
        let bin = PathBuf::from(bin);
        return bin.is_file().then_some(bin);
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file());
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/sbin/nats-server");
        debian.is_file().then_some(debian)
    })
}

/// A `nats-server -js` owned by the tour; killed when dropped.
pub struct PrivateBus {
    bin: PathBuf,
    store: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl PrivateBus {
    /// Starts `bin` on a free loopback port, storing under `store`; waits until it listens.
    pub async fn start(bin: PathBuf, store: &Path) -> Result<PrivateBus, TourError> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(TourError::Port)?;
        let mut bus = PrivateBus {
            bin,
            store: store.to_path_buf(),
            port,
            child: None,
        };
        bus.resume().await?;
        Ok(bus)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL: the bus goes away as in a crash).
    pub async fn stop(&mut self) -> Result<(), TourError> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.map_err(TourError::Server)?;
        }
        Ok(())
    }

    /// Starts the server again on the same port and store; waits until it listens.
    pub async fn resume(&mut self) -> Result<(), TourError> {
        std::fs::create_dir_all(&self.store).map_err(TourError::Server)?;
        let log =
            std::fs::File::create(self.store.join("nats-server.log")).map_err(TourError::Server)?;
        let child = Command::new(&self.bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(TourError::Server)?;
        self.child = Some(child);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if tokio::time::Instant::now() > deadline {
                return Err(TourError::NotReady(self.store.join("nats-server.log")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}
