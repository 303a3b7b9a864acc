//! What the `net-partition` drill builds and runs, as data: the names and addresses of its
//! namespaces and links, the commands of each fault phase, and which leftovers of earlier
//! drills are stale. No I/O here; [`super::Partition`] runs these commands.
//!
//! ```text
//!   root namespace                 dlqc-PID-bus                   dlqc-PID-emit
//!   drill runner, subscriber,      nats-server                    the emitters
//!   dlq verify / republish         (listens on 0.0.0.0)
//!   dlqcPIDr 10.231.C.1 ──veth── dlqcPIDs 10.231.C.2
//!                                  dlqcPIDb 10.231.255.2 ──veth── dlqcPIDe 10.231.255.1
//!                                  └──────── faults applied here only ────────┘
//! ```
//!
//! The control link (root to bus) is never faulted, so the subscriber and the end-of-drill
//! reads see the bus as it is; only the emitters' link is.

use std::net::Ipv4Addr;

/// Every namespace and root-side link of a drill starts with this, followed by the pid of
/// the drill runner that owns it.
pub const PREFIX: &str = "dlqc";
/// The nftables table that drops packets during the loss phase.
const NFT_TABLE: &str = "dlqchaos";
/// Third octet of the emitters' link: it lives between two of the drill's namespaces only,
/// so it cannot collide with the root namespace's addresses.
const EMIT_NET: u8 = 255;

/// Names and addresses of one drill's namespaces and links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The namespace nats-server runs in.
    pub bus_ns: String,
    /// The namespace the emitters run in.
    pub emit_ns: String,
    /// Control link, root side (the drill runner reaches the bus through it).
    pub root_if: String,
    /// Control link, bus side.
    pub bus_ctl_if: String,
    /// Emitters' link, bus side.
    pub bus_emit_if: String,
    /// Emitters' link, emitter side.
    pub emit_if: String,
    /// Root side address of the control link (/30).
    pub root_ip: Ipv4Addr,
    /// The bus's address on the control link.
    pub bus_ctl_ip: Ipv4Addr,
    /// The bus's address on the emitters' link.
    pub bus_emit_ip: Ipv4Addr,
    /// The emitters' address.
    pub emit_ip: Ipv4Addr,
}

impl Plan {
    /// The plan of the drill runner `pid`; the control link takes the first /30
    /// `10.231.C.0/30` (C from `pid`, 0..=254) whose third octet no root address in `taken`
    /// uses. `None` if all 255 are taken.
    pub fn new(pid: u32, taken: &[Ipv4Addr]) -> Option<Plan> {
        let start = pid % u32::from(EMIT_NET);
        let c = (0..u32::from(EMIT_NET))
            .map(|i| u8::try_from((start + i) % u32::from(EMIT_NET)).unwrap_or(0))
            .find(|c| !taken.iter().any(|ip| ip.octets()[..3] == [10, 231, *c]))?;
        Some(Plan {
            bus_ns: format!("{PREFIX}-{pid}-bus"),
            emit_ns: format!("{PREFIX}-{pid}-emit"),
            root_if: format!("{PREFIX}{pid}r"),
            bus_ctl_if: format!("{PREFIX}{pid}s"),
            bus_emit_if: format!("{PREFIX}{pid}b"),
            emit_if: format!("{PREFIX}{pid}e"),
            root_ip: Ipv4Addr::new(10, 231, c, 1),
            bus_ctl_ip: Ipv4Addr::new(10, 231, c, 2),
            bus_emit_ip: Ipv4Addr::new(10, 231, EMIT_NET, 2),
            emit_ip: Ipv4Addr::new(10, 231, EMIT_NET, 1),
        })
    }

    /// The `ip` commands that build it (namespaces, both veth pairs, addresses, links up).
    pub fn setup(&self) -> Vec<Vec<String>> {
        let (bus, emit) = (self.bus_ns.as_str(), self.emit_ns.as_str());
        let addr = |ip: Ipv4Addr| format!("{ip}/30");
        let mut commands = vec![
            argv(&["ip", "netns", "add", bus]),
            argv(&["ip", "netns", "add", emit]),
            argv(&["ip", "-n", bus, "link", "set", "lo", "up"]),
            argv(&["ip", "-n", emit, "link", "set", "lo", "up"]),
            argv(&[
                "ip",
                "link",
                "add",
                &self.root_if,
                "type",
                "veth",
                "peer",
                "name",
                &self.bus_ctl_if,
                "netns",
                bus,
            ]),
            argv(&[
                "ip",
                "link",
                "add",
                &self.emit_if,
                "netns",
                emit,
                "type",
                "veth",
                "peer",
                "name",
                &self.bus_emit_if,
                "netns",
                bus,
            ]),
            argv(&[
                "ip",
                "addr",
                "add",
                &addr(self.root_ip),
                "dev",
                &self.root_if,
            ]),
        ];
        for (ns, dev, ip) in [
            (bus, &self.bus_ctl_if, self.bus_ctl_ip),
            (bus, &self.bus_emit_if, self.bus_emit_ip),
            (emit, &self.emit_if, self.emit_ip),
        ] {
            commands.push(argv(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &addr(ip),
                "dev",
                dev,
            ]));
        }
        commands.push(argv(&["ip", "link", "set", &self.root_if, "up"]));
        commands.extend(self.links_up());
        commands
    }

    /// Deleting both namespaces removes the links inside them and their peers; the root end
    /// of the control link is deleted too in case its namespace is still held by a process.
    pub fn teardown(&self) -> Vec<Vec<String>> {
        vec![
            argv(&["ip", "netns", "del", &self.emit_ns]),
            argv(&["ip", "netns", "del", &self.bus_ns]),
            argv(&["ip", "link", "del", &self.root_if]),
        ]
    }

    /// Commands that start `phase` on the emitters' link.
    pub fn start(&self, phase: Phase) -> Vec<Vec<String>> {
        match phase {
            Phase::Loss { percent } => {
                let iface = &self.emit_if;
                let ruleset = format!(
                    "add table inet {NFT_TABLE}; \
                     add chain inet {NFT_TABLE} in {{ type filter hook input priority 0; policy accept; }}; \
                     add chain inet {NFT_TABLE} out {{ type filter hook output priority 0; policy accept; }}; \
                     add rule inet {NFT_TABLE} in iifname \"{iface}\" numgen random mod 100 < {percent} drop; \
                     add rule inet {NFT_TABLE} out oifname \"{iface}\" numgen random mod 100 < {percent} drop"
                );
                vec![argv(&[
                    "ip",
                    "netns",
                    "exec",
                    &self.emit_ns,
                    "nft",
                    &ruleset,
                ])]
            }
            Phase::Slow { kbit, latency_ms } => self
                .emit_link_ends()
                .map(|(ns, dev)| {
                    argv(&[
                        "tc",
                        "-n",
                        ns,
                        "qdisc",
                        "replace",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        &format!("{kbit}kbit"),
                        "burst",
                        "3000",
                        "latency",
                        &format!("{latency_ms}ms"),
                    ])
                })
                .collect(),
            Phase::Cut => self
                .emit_link_ends()
                .map(|(ns, dev)| argv(&["ip", "-n", ns, "link", "set", dev, "down"]))
                .collect(),
        }
    }

    /// Commands that end `phase` (the link is as before it started).
    pub fn heal(&self, phase: Phase) -> Vec<Vec<String>> {
        match phase {
            Phase::Loss { .. } => vec![argv(&[
                "ip",
                "netns",
                "exec",
                &self.emit_ns,
                "nft",
                "delete",
                "table",
                "inet",
                NFT_TABLE,
            ])],
            Phase::Slow { .. } => self
                .emit_link_ends()
                .map(|(ns, dev)| argv(&["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"]))
                .collect(),
            Phase::Cut => self.links_up(),
        }
    }

    fn emit_link_ends(&self) -> impl Iterator<Item = (&str, &str)> {
        [
            (self.emit_ns.as_str(), self.emit_if.as_str()),
            (self.bus_ns.as_str(), self.bus_emit_if.as_str()),
        ]
        .into_iter()
    }

    fn links_up(&self) -> Vec<Vec<String>> {
        [
            (self.bus_ns.as_str(), self.bus_ctl_if.as_str()),
            (self.bus_ns.as_str(), self.bus_emit_if.as_str()),
            (self.emit_ns.as_str(), self.emit_if.as_str()),
        ]
        .into_iter()
        .map(|(ns, dev)| argv(&["ip", "-n", ns, "link", "set", dev, "up"]))
        .collect()
    }
}

/// One phase of the fault on the emitters' link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// nftables drops `percent` % of the packets, each direction, at random.
    Loss {
        /// Percent of packets dropped (1..=100).
        percent: u8,
    },
    /// A slow, congested link: `tc tbf` limits each direction to `kbit` and queues up to
    /// `latency_ms` (then drops).
    Slow {
        /// Rate, kbit/s.
        kbit: u32,
        /// Longest queueing delay.
        latency_ms: u32,
    },
    /// Both ends of the link down: nothing passes, new connections are refused by the routing
    /// table, open ones stall.
    Cut,
}

impl Phase {
    /// What the phase does, for the timeline.
    pub fn describe(self) -> String {
        match self {
            Phase::Loss { percent } => {
                format!("packet loss: nftables drops {percent}% each way on the emitters' link")
            }
            Phase::Slow { kbit, latency_ms } => format!(
                "slow link: tc tbf {kbit} kbit/s each way, up to {latency_ms} ms queued, then dropped"
            ),
            Phase::Cut => "full cut: both ends of the emitters' veth link down".into(),
        }
    }
}

/// Namespace names (`ip netns list`, first word per line) and root links (`ip -o link show`,
/// the second field without `@peer` and `:`) owned by a drill runner that is gone: the names
/// of [`PREFIX`] whose pid `alive` says is not running. Returns `(namespaces, links)`.
pub fn stale(
    netns_list: &str,
    link_list: &str,
    alive: impl Fn(u32) -> bool,
) -> (Vec<String>, Vec<String>) {
    let owner = |name: &str| -> Option<u32> {
        let rest = name.strip_prefix(PREFIX)?;
        let rest = rest.strip_prefix('-').unwrap_or(rest);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let dead = |name: &&str| owner(name).is_some_and(|pid| !alive(pid));
    let namespaces = netns_list
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(dead)
        .map(str::to_owned)
        .collect();
    let links = link_list
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|name| name.trim_end_matches(':'))
        .map(|name| name.split('@').next().unwrap_or(name))
        .filter(dead)
        .map(str::to_owned)
        .collect();
    (namespaces, links)
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_interface_limits_and_addresses_avoid_taken_subnets() {
        let plan = Plan::new(4_194_303, &[]).unwrap();
        for name in [
            &plan.root_if,
            &plan.bus_ctl_if,
            &plan.bus_emit_if,
            &plan.emit_if,
        ] {
            assert!(name.len() <= 15, "{name} too long for an interface");
        }
        let c = 4_194_303 % 255;
        assert_eq!(plan.root_ip.octets(), [10, 231, c as u8, 1]);
        let taken = [
            Ipv4Addr::new(10, 231, c as u8, 1),
            Ipv4Addr::new(192, 0, 2, 2),
        ];
        let other = Plan::new(4_194_303, &taken).unwrap();
        assert_eq!(other.root_ip.octets(), [10, 231, (c as u8) + 1, 1]);
        assert_ne!(other.root_ip.octets()[2], EMIT_NET);
        let all: Vec<Ipv4Addr> = (0..=254).map(|c| Ipv4Addr::new(10, 231, c, 1)).collect();
        assert_eq!(Plan::new(7, &all), None);
    }

    #[test]
    fn every_phase_is_healed_on_the_same_devices() {
        let plan = Plan::new(42, &[]).unwrap();
        let loss = plan.start(Phase::Loss { percent: 20 });
        assert!(loss[0]
            .join(" ")
            .contains("numgen random mod 100 < 20 drop"));
        assert!(plan.heal(Phase::Loss { percent: 20 })[0]
            .join(" ")
            .contains("delete table"));
        let slow = Phase::Slow {
            kbit: 256,
            latency_ms: 400,
        };
        assert_eq!(plan.start(slow).len(), plan.heal(slow).len());
        let cut = plan.start(Phase::Cut);
        assert_eq!(cut.len(), 2);
        assert!(cut
            .iter()
            .all(|c| c.last().map(String::as_str) == Some("down")));
        assert!(plan
            .heal(Phase::Cut)
            .iter()
            .any(|c| c.contains(&plan.emit_if) && c.last().map(String::as_str) == Some("up")));
    }

    #[test]
    fn only_leftovers_of_dead_runners_are_stale() {
        let netns = "dlqc-10-bus (id: 3)\ndlqc-10-emit\ndlqc-20-bus\nother-ns\n";
        let links = "1: lo: <LOOPBACK,UP> mtu 65536\n\
                     7: dlqc10r@if6: <BROADCAST> mtu 1500\n\
                     9: dlqc20r@if8: <BROADCAST> mtu 1500\n\
                     2: eth0: <BROADCAST> mtu 1500\n";
        let (namespaces, links) = stale(netns, links, |pid| pid == 20);
        assert_eq!(namespaces, ["dlqc-10-bus", "dlqc-10-emit"]);
        assert_eq!(links, ["dlqc10r"]);
    }
}
