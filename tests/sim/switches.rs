//! The generator's scenario switches: which operations that reach the bugs of issue 33 it may
//! make. CI runs with the unfixed ones off; `DLQ_SIM_SWITCHES` chooses others.

use std::fmt;

/// Which operations whose bugs issue 33 names may be generated. Each switch turns on the
/// operations (or the mix of operations) one scenario needs; with all off the generator only
/// makes what holds on today's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Switches {
    /// Scenario 1: rebuilds after retention deleted (or is about to delete) segments, and the
    /// oracle's own rebuild without a checkpoint first.
    pub rebuild_after_retention: bool,
    /// Scenario 2: failed appends in a seed that also runs retention.
    pub failed_write_with_retention: bool,
    /// Scenario 3: failed appends while the bus is down (their sequences burn unpublished),
    /// and a write the caller was told is `Unconfirmed` that then fails.
    pub failed_write_bus_down: bool,
    /// Scenario 4: oversized events and failed log reads (parked events).
    pub parked_events: bool,
    /// Scenario 5: failed appends while the bus is up (published though not stored).
    pub failed_write_bus_up: bool,
    /// Found by this simulation (not one of the five): a message lost from the stream
    /// and put back by anti-entropy (under a repair id), then a power cut before the next
    /// checkpoint: the reconciler publishes the event again under its own id, and the stream
    /// holds it twice. Off, every lost message is followed by a checkpoint.
    pub repair_then_crash: bool,
}

impl Switches {
    /// Every switch on: what the simulation runs once the fixes of issue 33 are merged.
    pub const ALL: Switches = Switches {
        rebuild_after_retention: true,
        failed_write_with_retention: true,
        failed_write_bus_down: true,
        parked_events: true,
        failed_write_bus_up: true,
        repair_then_crash: true,
    };

    /// Reads `all`, `none` or a comma-separated list of `s1`..`s6`.
    pub fn parse(text: &str) -> Option<Switches> {
        let mut switches = Switches::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => switches = Switches::ALL,
                "none" => {}
                "s1" => switches.rebuild_after_retention = true,
                "s2" => switches.failed_write_with_retention = true,
                "s3" => switches.failed_write_bus_down = true,
                "s4" => switches.parked_events = true,
                "s5" => switches.failed_write_bus_up = true,
                "s6" => switches.repair_then_crash = true,
                _ => return None,
            }
        }
        Some(switches)
    }
}

impl fmt::Display for Switches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (self.rebuild_after_retention, "s1"),
            (self.failed_write_with_retention, "s2"),
            (self.failed_write_bus_down, "s3"),
            (self.parked_events, "s4"),
            (self.failed_write_bus_up, "s5"),
            (self.repair_then_crash, "s6"),
        ];
        let on: Vec<&str> = names
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        if on.is_empty() {
            write!(f, "none")
        } else {
            write!(f, "{}", on.join(","))
        }
    }
}
