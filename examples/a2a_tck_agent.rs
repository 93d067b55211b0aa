//! The A2A TCK's scripted agent, as a runnable agent behind lmos-sidecar:
//! for running the TCK (a2aproject/a2a-tck, branch `1.0-dev`) by hand
//! against the sidecar's `/a2a` face (`benches/a2a-tck/run-by-hand.sh`).
//!
//! ```sh
//! cargo run --example a2a_tck_agent -- --sidecar ws://127.0.0.1:8080/lmos
//! ```
//!
//! It hosts `urn:lmos:test:a2a-tck-agent`, an `lmos:Agent` whose one
//! action answers every A2A message as the TCK's scenarios expect, keyed
//! on the message's `messageId` prefix (`tck-complete-task`,
//! `tck-input-required`, `tck-stream-001`, …). The agent itself is
//! `lmos_testkit::tck_agent` (`testkit/src/tck_agent.rs`), shared with the
//! tests of the TCK's requirements (`tests/interop/a2a_tck.rs`). Set
//! `TCK_STREAMING_TIMEOUT` as for the TCK (seconds, 2 by default): the
//! long-running scenario lasts twice that.

use lmos_testkit::tck_agent;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sidecar = "ws://127.0.0.1:8080/lmos".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sidecar" => sidecar = args.next().ok_or("--sidecar needs a URL")?,
            "-h" | "--help" => {
                println!("a2a_tck_agent [--sidecar ws://HOST:PORT/lmos]");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let authorization = std::env::var("LMOS_TOKEN")
        .ok()
        .map(|t| format!("Bearer {t}"));
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        println!("A2A TCK agent serving {} through {sidecar}.", tck_agent::THING_ID);
        tokio::select! {
            r = tck_agent::serve(&sidecar, authorization.as_deref(), None) => r.map_err(|e| e.into()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
