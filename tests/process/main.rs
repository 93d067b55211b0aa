//! The sidecar as a process and as documented: the binary and its command
//! line, the client commands, restarts and crashes on a data directory, the
//! configuration reference, the manifests under deploy/, and the README's
//! and docs/' links and commands.
//!
//! One test binary of six (`cargo test --test process`); a module per former
//! `tests/<name>.rs`, each test keeping its name under that module
//! (`restart::...`). Tests that run `env!("CARGO_BIN_EXE_lmos-sidecar")` or
//! read the tree's files belong here: add the file and a `mod` line below.

mod a2a_restart;
mod binary;
mod cli_exits;
mod cli_first_hour;
mod client;
mod config_reference;
mod crash_torture;
mod deploy;
mod docs;
mod docs_commands;
mod docs_examples;
mod first_hour;
mod imports_restart;
mod queued_bytes;
mod restart;
mod restart_keeps;
mod restart_state;

/// A `[[auth.principals]]` entry named `name` with password `{name}-pw`
/// (hashed) and `extra` TOML lines (rights), for a sidecar's config file.
fn principal_toml(name: &str, extra: &str) -> String {
    let hash = lmos_sidecar::auth::credentials::hash_password(&format!("{name}-pw"));
    format!("[[auth.principals]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n{extra}\n")
}

/// Writes `toml` as the sidecar's config file in `dir`; each call of what
/// it returns starts the sidecar on it, with its data in `dir/data` (the
/// same data again after a restart).
fn configured(
    dir: &lmos_testkit::process::DataDir,
    toml: &str,
) -> impl Fn() -> lmos_testkit::process::Started {
    let config = dir.0.join("sidecar.toml");
    std::fs::write(&config, toml).unwrap();
    let data = dir.0.join("data");
    move || {
        let mut cmd = lmos_testkit::sidecar_command!();
        cmd.arg("--config").arg(&config);
        lmos_testkit::process::Started::start(lmos_testkit::process::on_directory(&mut cmd, &data))
    }
}
