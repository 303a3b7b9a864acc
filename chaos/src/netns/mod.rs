//! The `net-partition` drill's own network: two namespaces joined by a veth link, nats-server
//! in one, the emitters in the other, and faults put on that link with the kernel's tools
//! (`nft` for loss, `tc tbf` for a slow link, `ip link set down` for a full cut).
//!
//! [`Partition::create`] first deletes what a killed drill left behind (namespaces and links
//! named after a drill runner that no longer runs), then builds the plan of [`plan::Plan`].
//! Dropping the [`Partition`] deletes its namespaces and links, on every exit path of the
//! drill (error, interrupt, panic); a drill killed by SIGKILL is cleaned up by the next one.
//! Every command is bounded by [`COMMAND_TIMEOUT`]. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN),
//! `ip` and `tc` (iproute2) and `nft` (nftables).

pub mod plan;

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{err, Res};
pub use plan::{Phase, Plan};

/// Longest wait for one `ip`, `tc` or `nft` command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// The drill's namespaces and links; dropped, they are deleted.
pub struct Partition {
    plan: Plan,
}

impl Partition {
    /// Cleans up after earlier drills that died, then creates this one's namespaces and links.
    /// Fails with what to do if the machine does not allow it (not root, no iproute2).
    pub fn create() -> Res<Partition> {
        remove_stale();
        let taken = root_addresses()?;
        let plan = Plan::new(std::process::id(), &taken)
            .ok_or_else(|| err("no free /30 left in 10.231.0.0/16 for the drill's control link"))?;
        // From here on, dropping the guard removes whatever part was built.
        let partition = Partition { plan };
        for command in partition.plan.setup() {
            run(&command).map_err(|e| {
                let e = e.to_string();
                let denied = ["not permitted", "Permission denied", "cannot run"]
                    .iter()
                    .any(|s| e.contains(s));
                let hint = if denied {
                    "; net-partition needs network namespaces and veth links: run it as root \
                     (in a container, with CAP_NET_ADMIN and CAP_SYS_ADMIN) with iproute2 installed"
                } else {
                    ""
                };
                err(format!("cannot build the drill's network: {e}{hint}"))
            })?;
        }
        Ok(partition)
    }

    /// Names and addresses.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The namespace nats-server runs in.
    pub fn bus_ns(&self) -> &str {
        &self.plan.bus_ns
    }

    /// The namespace the emitters run in.
    pub fn emit_ns(&self) -> &str {
        &self.plan.emit_ns
    }

    /// The URL the emitters use: the bus's address on their link.
    pub fn emit_url(&self, port: u16) -> String {
        format!("nats://{}:{port}", self.plan.bus_emit_ip)
    }

    /// Starts `phase` on the emitters' link; returns the commands run, for the timeline.
    pub fn start(&self, phase: Phase) -> Res<String> {
        let commands = self.plan.start(phase);
        for command in &commands {
            run(command).map_err(|e| {
                let hint = match phase {
                    Phase::Loss { .. } => " (packet loss needs nft: apt-get install nftables)",
                    _ => "",
                };
                err(format!("cannot start the {phase:?} phase{hint}: {e}"))
            })?;
        }
        Ok(shown(&commands))
    }

    /// Ends `phase`: the link is healthy again.
    pub fn heal(&self, phase: Phase) -> Res<String> {
        let commands = self.plan.heal(phase);
        for command in &commands {
            run(command).map_err(|e| err(format!("cannot heal the {phase:?} phase: {e}")))?;
        }
        Ok(shown(&commands))
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for command in self.plan.teardown() {
            // The root link is usually gone with its namespace already.
            let _ = run(&command);
        }
    }
}

fn shown(commands: &[Vec<String>]) -> String {
    commands
        .iter()
        .map(|c| format!("`{}`", c.join(" ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Deletes namespaces and root links of [`plan::PREFIX`] whose drill runner is gone.
fn remove_stale() {
    let netns = run(&["ip", "netns", "list"].map(String::from)).unwrap_or_default();
    let links = run(&["ip", "-o", "link", "show"].map(String::from)).unwrap_or_default();
    let (namespaces, links) = plan::stale(&netns, &links, drill_running);
    for ns in namespaces {
        eprintln!("dlq-chaos: deleting namespace {ns} left by a drill that is gone");
        let _ = run(&["ip", "netns", "del", &ns].map(String::from));
    }
    for link in links {
        eprintln!("dlq-chaos: deleting link {link} left by a drill that is gone");
        let _ = run(&["ip", "link", "del", &link].map(String::from));
    }
}

/// Whether `pid` is a running `dlq-chaos` (a recycled pid of another program is not).
fn drill_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.trim_end() == "dlq-chaos")
}

/// IPv4 addresses of the root namespace.
fn root_addresses() -> Res<Vec<Ipv4Addr>> {
    let out = run(&["ip", "-o", "-4", "addr", "show"].map(String::from))?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect())
}

/// Runs `command`, at most [`COMMAND_TIMEOUT`]; returns its stdout, or its stderr as the error.
fn run(command: &[String]) -> Res<String> {
    let (program, args) = command.split_first().ok_or_else(|| err("empty command"))?;
    let shown = command.join(" ");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("`{shown}`: cannot run {program}: {e}")))?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err(format!("`{shown}` took more than {COMMAND_TIMEOUT:?}")));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = child.wait_with_output()?;
    if status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(err(format!(
            "`{shown}` failed ({status}): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}
