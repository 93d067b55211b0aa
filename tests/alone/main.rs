//! Tests that observe the whole test process: its resident memory
//! (`budgets`, `auth_flood`: the sidecar runs in the test process) or its
//! one global logger (`lmos_testkit::CapturedLogs`: `bad_input`,
//! `broker_alerts`, `export_failures`, `log_injection`). They take turns
//! through `lmos_testkit::alone()` (which `CapturedLogs::install` takes
//! too), so that no two of them measure or log into each other; the other
//! tests here are few and light.
//!
//! One test binary of six (`cargo test --test alone`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`budgets::...`). A new test that reads `/proc/self` or captures logs
//! belongs here, and takes `alone()`; everything else goes by part to the
//! other five.

mod auth_flood;
mod bad_input;
mod broker_alerts;
mod budgets;
mod export_failures;
mod log_injection;
