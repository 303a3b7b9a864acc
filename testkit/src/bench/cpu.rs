//! CPU time of a process, from `/proc/PID/stat`: what the benches report per event.

/// Clock ticks per second of `/proc/PID/stat`'s times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// CPU seconds (user + system, all threads) process `pid` has used; this process's with
/// `None`. 0 when the file cannot be read (the process ended).
pub fn seconds(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / TICKS_PER_SEC // utime and stime, fields 14 and 15
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_used_some_cpu() {
        let spin = std::time::Instant::now();
        while super::seconds(None) == 0.0 && spin.elapsed().as_secs() < 5 {}
        assert!(super::seconds(None) > 0.0);
        assert_eq!(super::seconds(Some(u32::MAX)), 0.0);
    }
}
