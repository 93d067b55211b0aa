//! FANOUT_STARVE=N: the consumers CPU-starved, as on a busy machine (issue
//! 48): N busy loops (`sh -c 'while :; do :; done'`, N = the cores when the
//! value is `cores`) run beside the bench at the normal priority, and every
//! consumer (WebSocket and MQTT alike, connected and reading) runs on a
//! runtime of its own whose threads are at nice 19. The sidecar and the
//! publisher keep the normal priority: the consumers fall behind, which is
//! what the slow-consumer policy meets. The WebSocket and MQTT rows of the
//! same run are starved alike.

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tokio::runtime::{Handle, Runtime};

/// The consumers' runtime, when starved; never dropped (a runtime may not
/// be dropped inside another's task).
static CONSUMERS: OnceLock<Runtime> = OnceLock::new();

/// The busy loops; killed (each by its own ID) when dropped.
pub struct BusyLoops(Vec<Child>);

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads FANOUT_STARVE; with a count, starts the busy loops and the
/// consumers' runtime. A description for the header, when starved.
pub fn start() -> Result<Option<(BusyLoops, String)>> {
    let Ok(value) = std::env::var("FANOUT_STARVE") else {
        return Ok(None);
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n: usize = match value.as_str() {
        "cores" => cores,
        v => v
            .parse()
            .context("FANOUT_STARVE: a count of busy loops, or `cores`")?,
    };
    if n == 0 {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .on_thread_start(nice_19)
        .build()?;
    let _ = CONSUMERS.set(runtime);
    let mut busy = BusyLoops(Vec::new());
    for _ in 0..n {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .context("a busy loop")?;
        busy.0.push(child);
    }
    let about = format!(
        "consumers CPU-starved: at nice 19, beside {n} busy loop(s) at nice 0 on {cores} core(s)"
    );
    Ok(Some((busy, about)))
}

/// This thread at the lowest priority (Linux: a thread's nice is its own).
#[allow(unsafe_code)]
fn nice_19() {
    // SAFETY: plain system calls on this thread's own ID.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

/// Where consumers run: the starved runtime, else this one.
fn consumers() -> Handle {
    CONSUMERS
        .get()
        .map_or_else(Handle::current, |rt| rt.handle().clone())
}

/// Runs `task` where consumers run.
pub async fn on_consumers<T: Send + 'static>(
    task: impl Future<Output = T> + Send + 'static,
) -> Result<T> {
    Ok(consumers().spawn(task).await?)
}

/// Spawns `task` where consumers run.
pub fn spawn_consumer<T: Send + 'static>(
    task: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    consumers().spawn(task)
}

/// The process's peak RSS (every row's sidecar, the clients and the bench
/// together): what the consumers' queues held at most is below it.
pub fn peak_rss() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map_or("unknown".to_owned(), |v| v.trim().to_owned());
    format!("peak RSS of the whole run (VmHWM): {peak}")
}
