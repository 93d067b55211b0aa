//! The LMOS draft's WeatherAgent, as a runnable agent behind lmos-sidecar:
//! the same as `lmos-sidecar demo-agent` (its code is `src/demo_agent.rs`),
//! kept for configurations that run it as an example. Building an example
//! builds the library again with the dev-dependencies' features (a second,
//! larger binary): `lmos-sidecar demo-agent` needs no build of its own.
//!
//! ```sh
//! cargo run --release --example weather_agent -- --sidecar ws://127.0.0.1:8080/lmos
//! ```
//!
//! When the sidecar goes away (a restart, say) the agent connects again,
//! waiting 100 ms, then twice as long each time up to 5 s, until it is
//! stopped.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sidecar = "ws://127.0.0.1:8080/lmos".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sidecar" | "--url" => sidecar = args.next().ok_or("--sidecar needs a URL")?,
            "-h" | "--help" => {
                println!(
                    "weather_agent [--sidecar ws://HOST:PORT/lmos]   (or: lmos-sidecar demo-agent)"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    tokio::runtime::Runtime::new()?.block_on(lmos_sidecar::demo_agent::run(&sidecar));
    Ok(())
}
