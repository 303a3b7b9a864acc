//! `dlq_ops::fuzzing::log_segment`: a broken invariant is a panic, which libFuzzer reports as a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = dlq_ops::fuzzing::log_segment(data) {
        panic!("log_segment: {broken}");
    }
});
