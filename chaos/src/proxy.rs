//! A loopback TCP proxy between the emitters and nats-server that can cut the network.
//!
//! * `Pass`: forwards both ways.
//! * `Blackhole`: accepts connections, reads and drops every byte in both directions and never
//!   forwards (new connections get no upstream at all). A connection that lost bytes cannot
//!   carry the NATS protocol any more, so it is closed when the cut ends; clients reconnect.
//! * `Reset`: every connection is aborted with a TCP RST (`SO_LINGER` 0), and so is every new
//!   one, until the cut ends.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Res;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward.
    Pass,
    /// Read and drop, never forward.
    Blackhole,
    /// Reset connections.
    Reset,
}

/// A running proxy; dropped, it stops accepting (open connections end with the drill).
pub struct Proxy {
    port: u16,
    mode: Arc<watch::Sender<ProxyMode>>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Res<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let (tx, _) = watch::channel(ProxyMode::Pass);
        let mode = Arc::new(tx);
        let task = tokio::spawn(accept_loop(listener, upstream, mode.clone()));
        Ok(Proxy { port, mode, task })
    }

    /// `nats://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Switches the mode; connections react at once.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: u16, mode: Arc<watch::Sender<ProxyMode>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let rx = mode.subscribe();
        tokio::spawn(async move {
            let _ = connection(client, upstream, rx).await;
        });
    }
}

fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn connection(
    mut client: TcpStream,
    upstream: u16,
    mut mode: watch::Receiver<ProxyMode>,
) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let initial = *mode.borrow_and_update();
    let mut server = match initial {
        ProxyMode::Reset => {
            reset(&client);
            return Ok(());
        }
        ProxyMode::Blackhole => None,
        ProxyMode::Pass => match TcpStream::connect(("127.0.0.1", upstream)).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                Some(s)
            }
            Err(_) => return Ok(()),
        },
    };
    let mut tainted = server.is_none();
    let (mut a, mut b) = (vec![0u8; 32 * 1024], vec![0u8; 32 * 1024]);
    loop {
        let current = *mode.borrow();
        tokio::select! {
            read = client.read(&mut a) => {
                let n = read?;
                if n == 0 {
                    return Ok(());
                }
                match (current, server.as_mut()) {
                    (ProxyMode::Pass, Some(s)) if !tainted => s.write_all(&a[..n]).await?,
                    _ => tainted = true,
                }
            }
            read = async {
                match server.as_mut() {
                    Some(s) => s.read(&mut b).await,
                    None => std::future::pending().await,
                }
            } => {
                let n = read?;
                if n == 0 {
                    return Ok(());
                }
                match current {
                    ProxyMode::Pass if !tainted => client.write_all(&b[..n]).await?,
                    _ => tainted = true,
                }
            }
            changed = mode.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                match *mode.borrow_and_update() {
                    ProxyMode::Reset => {
                        reset(&client);
                        if let Some(s) = &server {
                            reset(s);
                        }
                        return Ok(());
                    }
                    ProxyMode::Pass if tainted => return Ok(()),
                    _ => {}
                }
            }
        }
    }
}
