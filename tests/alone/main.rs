//! Tests that need the test process to themselves: they measure its
//! resident memory (`budgets`, `auth_flood`: the sidecar runs in the test
//! process), capture its one global logger (`lmos_testkit::CapturedLogs`:
//! `bad_input`, `broker_alerts`, `export_failures`, `log_injection`), or
//! panic a broker thread, which every sidecar in the process would notice
//! (`broker_failure`: the panic hook is process-wide), or fill a filesystem
//! (`full_disk`: it mounts a small tmpfs). Every test here
//! takes `lmos_testkit::alone()`'s turn for its whole length
//! (`CapturedLogs::install` takes it too), so they run one at a time.
//!
//! One test binary of six (`cargo test --test alone`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`budgets::...`). A new test that reads `/proc/self`, captures logs or
//! breaks something process-wide belongs here, and takes `alone()`;
//! everything else goes by part to the other five.

mod auth_flood;
mod bad_input;
mod broker_alerts;
mod broker_failure;
mod budgets;
mod export_failures;
mod full_disk;
mod keeps;
mod log_injection;

/// This process's resident set in MiB: the sidecar under test runs in it.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb / 1024.0
}
