//! What a test process has only once: its global logger and its resident
//! memory. The integration tests share a few test binaries (`tests/*/main.rs`),
//! so tests that observe either take turns through [`alone`], and the
//! logger is installed once and pointed at the test that holds the turn.

use std::sync::{Arc, Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One test at a time among those that measure the whole process (its
/// `/proc/self` memory) or read its logs: held for the test's length.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.lock().await
}

/// [`alone`] for a caller that cannot await: polls, blocking its thread
/// (a test's own; the holder runs on another).
fn alone_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    loop {
        if let Ok(turn) = TURN.try_lock() {
            return turn;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The process's one logger: what it writes and the filter to change.
struct Logger {
    written: Arc<Mutex<Vec<u8>>>,
    filter: reload::Handle<EnvFilter, Registry>,
}

impl Logger {
    /// Installed at the first capture, with everything off; the global
    /// logger cannot be removed, only filtered.
    fn get() -> &'static Logger {
        static LOGGER: OnceLock<Logger> = OnceLock::new();
        LOGGER.get_or_init(|| {
            let written = Arc::new(Mutex::new(Vec::new()));
            let (filter, handle) = reload::Layer::new(EnvFilter::new("off"));
            let writer = Buffer(written.clone());
            tracing_subscriber::registry()
                .with(filter)
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(move || writer.clone())
                        .with_ansi(false)
                        .fmt_fields(lmos_sidecar::telemetry::EscapedFields),
                )
                .init();
            Logger {
                written,
                filter: handle,
            }
        })
    }

    fn set(&self, filter: &str) {
        self.written.lock().unwrap().clear();
        let filter = EnvFilter::new(filter);
        self.filter
            .reload(filter)
            .expect("the logger's filter can be replaced");
    }
}

/// Everything the process logs while the test holding it runs, for tests
/// that check what operators see. Holds [`alone`]'s turn until the last
/// clone is dropped; then the logger is off again and its text freed.
#[derive(Clone)]
pub struct CapturedLogs {
    _capture: Arc<Capture>,
}

struct Capture {
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Drop for Capture {
    fn drop(&mut self) {
        let logger = Logger::get();
        logger.set("off");
        logger.written.lock().unwrap().shrink_to_fit();
    }
}

impl CapturedLogs {
    /// Takes the turn, then logs what `filter` (an `EnvFilter` directive)
    /// lets through until dropped.
    pub fn install(filter: &str) -> CapturedLogs {
        let turn = alone_blocking();
        Logger::get().set(filter);
        CapturedLogs {
            _capture: Arc::new(Capture { _turn: turn }),
        }
    }

    pub fn text(&self) -> String {
        let written = Logger::get().written.lock().unwrap();
        String::from_utf8_lossy(&written).into_owned()
    }
}

/// The logger's writer: appends to the shared text.
#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
