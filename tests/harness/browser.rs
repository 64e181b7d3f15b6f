//! Headless Chromium driven through WebDriver (chromedriver and fantoccini), for the
//! dashboard's browser tests. Chromium is required, never skipped: `apt-get install -y chromium
//! chromium-driver`. Screenshots land in `tests/artifacts/` (gitignored).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::host::{free_port, which};

/// What to install when Chromium or chromedriver is missing.
pub const INSTALL: &str = "headless Chromium and chromedriver are required for the dashboard's \
    browser tests (they are never skipped): install them with \
    `apt-get update && apt-get install -y chromium chromium-driver`";

/// `tests/artifacts/`, created when missing.
pub fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts");
    std::fs::create_dir_all(&dir).expect("create tests/artifacts");
    dir
}

/// A headless Chromium session and its chromedriver. Dropped — after [`quit`](Self::quit), or
/// when a test panics before it — chromedriver and every process of the session's profile are
/// killed and the profile removed, so a failed test leaves no browser behind.
pub struct Browser {
    /// The WebDriver session.
    pub client: fantoccini::Client,
    _process: tokio::process::Child,
    _profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium with a fresh profile.
    pub async fn start() -> Self {
        let chromium = which(&["chromium", "chromium-browser", "google-chrome"])
            .unwrap_or_else(|| panic!("chromium not found; {INSTALL}"));
        let chromedriver =
            which(&["chromedriver"]).unwrap_or_else(|| panic!("chromedriver not found; {INSTALL}"));
        let port = free_port();
        let process = tokio::process::Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", chromedriver.display()));
        let profile = std::env::temp_dir().join(format!(
            "mysqlq-dash-chromium-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let caps = json!({
            "browserName": "chrome",
            // Element look-ups wait for a page that is still loading after a click.
            "timeouts": {"implicit": 5000},
            "goog:chromeOptions": {
                "binary": chromium.to_string_lossy(),
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-background-networking", "--disable-component-update",
                         "--disable-sync", "--no-first-run", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.display())]
            }
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let mut builder = fantoccini::ClientBuilder::new(HttpConnector::new());
        builder.capabilities(caps);
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            match builder.connect(&url).await {
                Ok(c) => break c,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "chromedriver did not start ({e}); {INSTALL}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Self {
            client,
            _process: process,
            _profile: profile,
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("WebDriver goto {url} failed: {e}"));
    }

    /// The element `css` selects (waiting up to the implicit 5 s).
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Clicks the element `css` selects. A live page may have swapped the element between the
    /// find and the click (a stale reference): it is found again, at most three times.
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            match self.find(css).await.click().await {
                Ok(()) => return,
                Err(e) if tries < 3 && e.to_string().contains("stale element") => tries += 1,
                Err(e) => panic!("WebDriver click on {css} failed: {e}"),
            }
        }
    }

    /// The rendered text of the element `css` selects. A live page may swap the element between
    /// the find and the read (a stale reference): it is found again, at most three times.
    pub async fn text(&self, css: &str) -> String {
        let mut tries = 0;
        loop {
            match self.find(css).await.text().await {
                Ok(text) => return text,
                Err(e) if tries < 3 && e.to_string().contains("stale element") => tries += 1,
                Err(e) => panic!("WebDriver text of {css} failed: {e}"),
            }
        }
    }

    /// Waits (up to 10 s) until the text of `css` contains `needle`: after a click the old page
    /// may still be there, or its elements already stale.
    pub async fn wait_contains(&self, css: &str, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            if let Ok(el) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = el.text().await
            {
                last = text;
                if last.contains(needle) {
                    return last;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{css}` never contained `{needle}`; last text: `{last}`");
    }

    /// Runs `js` in the page and returns its value.
    pub async fn script(&self, js: &str) -> Value {
        self.client
            .execute(js, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("WebDriver script failed: {e}"))
    }

    /// Waits until the text of `css` is `want` (the page's script refreshes it).
    pub async fn wait_text(&self, css: &str, want: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.text(css).await;
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css}: want {want:?}, still {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a screenshot of the window as `tests/artifacts/<name>`.
    pub async fn screenshot(&self, name: &str) {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("WebDriver screenshot failed: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(artifacts().join(name), png).expect("write the screenshot");
    }

    /// Ends the session (Chromium exits); dropping the browser then removes the profile.
    pub async fn quit(self) {
        let _ = self.client.clone().close().await;
    }

    /// Runs `js` with `args` (`arguments[0]`, …) in the page and returns its value.
    pub async fn script_with(&self, js: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(js, args)
            .await
            .unwrap_or_else(|e| panic!("WebDriver script failed: {e}"))
    }

    /// Sends a Chrome DevTools Protocol command through chromedriver
    /// (`POST /session/{id}/goog/cdp/execute`) and returns its result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.client
            .issue_cmd(Cdp {
                cmd: cmd.to_owned(),
                params,
            })
            .await
            .unwrap_or_else(|e| panic!("CDP {cmd} failed: {e}"))
    }

    /// Emulates `prefers-color-scheme: dark` (or light) for this tab, through CDP's
    /// `Emulation.setEmulatedMedia`; it holds across navigations.
    pub async fn color_scheme(&self, dark: bool) {
        let value = if dark { "dark" } else { "light" };
        self.cdp(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": value}]}),
        )
        .await;
    }

    /// Presses and releases each character of `keys` on whatever has the focus (the page's
    /// body when nothing has), as a user typing: key events reach the page's handlers.
    pub async fn press(&self, keys: &str) {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        let mut actions = KeyActions::new("keyboard".to_owned());
        for c in keys.chars() {
            actions = actions
                .then(KeyAction::Down { value: c })
                .then(KeyAction::Up { value: c });
        }
        self.client
            .perform_actions(actions)
            .await
            .unwrap_or_else(|e| panic!("WebDriver key actions {keys:?} failed: {e}"));
    }
}

/// A CDP command sent through chromedriver's `goog/cdp/execute` extension.
#[derive(Debug)]
struct Cdp {
    cmd: String,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (axum::http::Method::POST, Some(body.to_string()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver dies with `_process` (kill_on_drop), but the Chromium it started would
        // outlive it, reparented to init, when the test panicked before `quit`.
        kill_processes_of(&self._profile);
        let _ = std::fs::remove_dir_all(&self._profile);
    }
}

/// Kills (SIGKILL) every process whose command line names `profile`: this session's Chromium,
/// its helpers and crash handler, and no other browser (each session has its own profile).
fn kill_processes_of(profile: &std::path::Path) {
    let needle = profile.to_string_lossy().into_owned();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}
