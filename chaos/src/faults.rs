//! Injecting a fault for the drill's duration and restoring afterwards.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fleet::Fleet;
use crate::procs::NatsProc;
use crate::proxy::{Proxy, ProxyMode};
use crate::{err, CutMode, Fault, Res, SinkMode};

/// Something that happened during the drill, at `t` seconds after the load started.
#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    /// Seconds since the load started.
    pub t: f64,
    /// What happened.
    pub what: String,
}

/// The parts a fault acts on.
pub struct Rig<'a> {
    /// The server.
    pub server: &'a mut NatsProc,
    /// The proxy (net-cut only).
    pub proxy: Option<&'a Proxy>,
    /// The emitters.
    pub fleet: &'a mut Fleet,
    /// When the load started.
    pub t0: Instant,
    /// The timeline.
    pub marks: &'a mut Vec<Mark>,
}

impl Rig<'_> {
    fn mark(&mut self, what: impl Into<String>) {
        let what = what.into();
        eprintln!(
            "dlq-chaos: [{:7.1}s] {what}",
            self.t0.elapsed().as_secs_f64()
        );
        self.marks.push(Mark {
            t: self.t0.elapsed().as_secs_f64(),
            what,
        });
    }
}

fn switch(mode: SinkMode) -> &'static str {
    match mode {
        SinkMode::FailWrites => "FAIL_WRITES",
        SinkMode::FailFlush => "FAIL_FLUSH",
    }
}

/// Injects `fault`, keeps it for `duration`, restores. Returns the instants the fault began
/// and ended (the bus or network is back and healthy).
pub async fn run(
    rig: &mut Rig<'_>,
    fault: Fault,
    duration: Duration,
    cut: CutMode,
    sink_mode: SinkMode,
) -> Res<(Instant, Instant)> {
    let start = Instant::now();
    match fault {
        Fault::BusKill => {
            rig.server.kill().await;
            rig.mark("nats-server SIGKILLed");
            tokio::time::sleep(duration).await;
            rig.server.restart().await?;
            rig.mark("nats-server restarted (same port and store)");
        }
        Fault::BusFreeze => {
            rig.server.freeze().await?;
            rig.mark("nats-server SIGSTOPped");
            tokio::time::sleep(duration).await;
            rig.server.thaw().await?;
            rig.mark("nats-server SIGCONTed and healthy");
        }
        Fault::NetCut => {
            let proxy = rig.proxy.ok_or_else(|| err("net-cut needs the proxy"))?;
            let (mode, name) = match cut {
                CutMode::Blackhole => (ProxyMode::Blackhole, "blackholes"),
                CutMode::Reset => (ProxyMode::Reset, "resets"),
            };
            proxy.set(mode);
            rig.mark(format!("network cut: the proxy {name} every connection"));
            tokio::time::sleep(duration).await;
            proxy.set(ProxyMode::Pass);
            rig.mark("network restored: the proxy forwards again");
        }
        Fault::EmitterKill => {
            rig.server.kill().await;
            rig.mark("nats-server SIGKILLed");
            tokio::time::sleep(duration / 3).await;
            rig.fleet.kill(0).await?;
            rig.mark("emitter chaos-0 SIGKILLed");
            tokio::time::sleep(duration / 3).await;
            rig.fleet.restart(0)?;
            rig.mark("emitter chaos-0 restarted on its data dir");
            let left = duration.saturating_sub(start.elapsed());
            tokio::time::sleep(left).await;
            rig.server.restart().await?;
            rig.mark("nats-server restarted (same port and store)");
        }
        Fault::SinkFail => {
            let name = switch(sink_mode);
            rig.fleet.set_switch(name, true)?;
            rig.mark(format!("sinks failing ({name}); bus up"));
            tokio::time::sleep(duration).await;
            rig.fleet.set_switch(name, false)?;
            // The emitters poll the switch every 100 ms.
            tokio::time::sleep(Duration::from_millis(200)).await;
            rig.mark("sinks healthy again");
        }
    }
    Ok((start, Instant::now()))
}
