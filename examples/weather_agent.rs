//! The LMOS draft's WeatherAgent, as a runnable agent behind lmos-sidecar.
//!
//! ```sh
//! cargo run --release --example weather_agent -- --sidecar ws://127.0.0.1:8080/lmos
//! ```
//!
//! It connects to the sidecar's WebSocket gateway declaring that it hosts
//! `urn:uuid:6f1d3a7a-1f97-4e6b-b45f-f3c2e1c84c77` (`?host=...`), registers
//! its Thing Description (`weather_agent.td.json`) on the same socket, and
//! serves:
//! - property `modelConfiguration` (read, write, observe);
//! - action `getWeather`: `pending`, three `running` updates with partial
//!   output over about a second, then `completed` (or `cancelled`); asked
//!   with `"stream": true` on the invokeAction, it also streams the forecast
//!   token by token (`running` statuses with a `stream` chunk each) before
//!   the `completed` that ends the stream and still carries the whole text;
//! - event `userFeedbackReceived`, sent after every completed forecast.
//!
//! Deterministic: no LLM, the forecast is made up from the question. When
//! the sidecar goes away (a restart, say) the agent connects again, waiting
//! 100 ms, then twice as long each time up to 5 s, until it is stopped.
//!
//! The agent itself is `lmos_testkit::weather_agent` (`testkit/src/weather_agent.rs`),
//! shared with the tests that run it against a real sidecar.

use lmos_testkit::weather_agent;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sidecar = "ws://127.0.0.1:8080/lmos".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sidecar" => sidecar = args.next().ok_or("--sidecar needs a URL")?,
            "-h" | "--help" => {
                println!("weather_agent [--sidecar ws://HOST:PORT/lmos]");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let runtime = tokio::runtime::Runtime::new()?;
    // The sidecar may still be starting, or restart later: the agent
    // connects again (backing off up to 5 s) until it is stopped.
    runtime.block_on(async {
        tokio::select! {
            () = weather_agent::serve_reconnecting(&sidecar, |why| eprintln!("{why}")) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    });
    Ok(())
}
