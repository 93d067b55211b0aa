//! Headless Chromium driven over the WebDriver protocol (chromedriver,
//! spoken here over plain HTTP), for the tests that need a real browser
//! (`tests/interop/console.rs`, `tests/interop/browser.rs`). Needs Debian's `chromium` and
//! `chromium-driver` (`.ci/run` installs them).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver, stopped when the test ends however it ends.
pub struct Driver {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Driver {
    /// Ends chromedriver and the Chromium it started: they share a process
    /// group of their own, so a test that panicked before closing its
    /// session leaves no browser running into the next tests.
    fn drop(&mut self) {
        crate::process::signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 exchange with chromedriver: JSON in, JSON out.
pub async fn wd(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("chromedriver listens");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // chromedriver keeps the connection open after answering: read the
    // head, then exactly Content-Length bytes.
    let read = async {
        let mut raw = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = stream.read(&mut chunk).await.unwrap();
            raw.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if body.len() >= length || n == 0 {
                    return text;
                }
            }
            if n == 0 {
                return text;
            }
        }
    };
    let text = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("chromedriver answers in time");
    let (_, body) = text.split_once("\r\n\r\n").unwrap_or(("", ""));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub async fn start_driver() -> Driver {
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .process_group(0)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if TcpStream::connect(driver.addr).await.is_ok() {
            let status = wd(driver.addr, "GET", "/status", None).await;
            if status["value"]["ready"] == true {
                return driver;
            }
        }
        assert!(Instant::now() < deadline, "chromedriver never got ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One browser window.
pub struct Browser {
    driver: SocketAddr,
    pub session: String,
}

impl Browser {
    /// A window whose every request that is not to loopback (which
    /// Chromium never proxies) goes to a port nobody listens on: the page
    /// must work with the sidecar alone.
    pub async fn open(driver: &Driver, width: u32, height: u32) -> Browser {
        Browser::open_with(
            driver,
            width,
            height,
            &["--proxy-server=http://127.0.0.1:9"],
        )
        .await
    }

    /// A window with more Chromium switches (e.g. `--host-resolver-rules`).
    pub async fn open_with(driver: &Driver, width: u32, height: u32, extra: &[&str]) -> Browser {
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-extensions".to_owned(),
            format!("--window-size={width},{height}"),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let answer = wd(driver.addr, "POST", "/session", Some(caps)).await;
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Browser {
            driver: driver.addr,
            session,
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let answer = self.answer(method, path, body).await;
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {method} {path}: {answer}");
        }
        answer["value"].clone()
    }

    /// WebDriver's whole answer to a command of this session, errors too.
    async fn answer(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        wd(self.driver, method, &path, body).await
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    pub async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_owned()
    }

    /// Clicks the element `css` selects. Pages that re-render a list on a
    /// timer (the console's topic tree and client lists) may replace the
    /// element between finding and clicking it; then it is found again.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let e = self.find(css).await;
            let path = format!("/element/{e}/click");
            let answer = self.answer("POST", &path, Some(json!({}))).await;
            let error = &answer["value"]["error"];
            if !error.is_string() {
                return;
            }
            if error != "stale element reference" || Instant::now() >= deadline {
                panic!("WebDriver click on {css}: {answer}");
            }
        }
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Types `text` into the field `name` of `form` (a CSS selector) and
    /// submits the form with its submit button.
    pub async fn submit(&self, form: &str, name: &str, text: &str) {
        self.type_into(&format!(r#"{form} [name="{name}"]"#), text)
            .await;
        self.click(&format!(r#"{form} button[type="submit"]"#))
            .await;
    }

    /// Opens the console at `url` and waits (`what`) until `css` is on the
    /// page and the console says it is live.
    pub async fn open_console(&self, url: &str, what: &str, css: &str) {
        self.goto(url).await;
        let live = format!(
            r#"return document.querySelector('{css}') !== null && document.querySelector('#who').textContent.includes('live');"#
        );
        self.wait_for(what, Duration::from_secs(5), &live).await;
    }

    /// Polls `script` until it returns something other than null/false.
    pub async fn wait_for(&self, what: &str, within: Duration, script: &str) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.js(script).await;
            if !v.is_null() && v != false {
                return v;
            }
            if Instant::now() >= deadline {
                let page = self
                    .js("return location.href + '\\n' + document.body.innerText.slice(0, 1500);")
                    .await;
                panic!(
                    "{what}: not within {within:?}; the page:\n{}",
                    page.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn close(self) {
        let path = format!("/session/{}", self.session);
        wd(self.driver, "DELETE", &path, None).await;
    }
}

pub fn browser_available() -> bool {
    let present = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if present {
        return true;
    }
    if std::env::var("LMOS_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        println!(
            "SKIPPED: this test needs {CHROMIUM} and {CHROMEDRIVER} (Debian: apt-get install chromium chromium-driver); LMOS_SKIP_BROWSER_TESTS=1 allows skipping."
        );
        return false;
    }
    panic!(
        "this test needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver (or set LMOS_SKIP_BROWSER_TESTS=1 to skip it)"
    );
}
