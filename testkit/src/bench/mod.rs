//! What the benches share: concurrent load with latency histograms ([`load`]), a process's CPU
//! time ([`cpu`]) and the one row format every bench writes with `--json` and `suite_table`
//! merges ([`suite`]).

pub mod cpu;
pub mod load;
pub mod suite;
