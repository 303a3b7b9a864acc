//! A real headless Chromium driven through chromedriver (WebDriver), for the web page's tests.
//!
//! [`Browser::start`] starts Debian's `chromedriver` on a free loopback port in its own process
//! group (tied to this process), and opens a session on `chromium` with a fresh profile
//! directory and no network beyond what the page asks for. Dropping the browser kills the
//! whole group (chromedriver and every Chromium process) and removes the profile.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;

use crate::{free_port, poll_until, spawn_tied};

/// Where Debian installs chromedriver (`CHROMEDRIVER` overrides).
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Where Debian installs Chromium (`CHROMIUM_BIN` overrides).
const CHROMIUM: &str = "/usr/bin/chromium";

/// A headless Chromium session.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    log: PathBuf,
}

fn configured(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Whether chromedriver and Chromium are installed (`scripts/install-chromium.sh` installs them).
pub fn installed() -> bool {
    configured("CHROMEDRIVER", CHROMEDRIVER).is_file()
        && configured("CHROMIUM_BIN", CHROMIUM).is_file()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a 1280×900 window.
    pub async fn start() -> Browser {
        Browser::start_with(&[]).await
    }

    /// [`Browser::start`] with more Chromium flags (e.g. `--force-dark-mode`).
    pub async fn start_with(flags: &[&str]) -> Browser {
        assert!(
            installed(),
            "chromium and chromedriver are missing: run scripts/install-chromium.sh \
             (or set CHROMIUM_BIN and CHROMEDRIVER)"
        );
        let profile = tempfile::tempdir().unwrap();
        let log = profile.path().with_extension("chromedriver.log");
        let port = free_port(0);
        let mut cmd = Command::new(configured("CHROMEDRIVER", CHROMEDRIVER));
        cmd.arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let driver = spawn_tied(cmd).unwrap();
        // chromedriver keeps connections open, so wait for its port rather than an answer.
        let up = poll_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "chromedriver never answered on port {port}");
        let mut args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,1000".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        args.extend(flags.iter().map(|f| (*f).to_owned()));
        let caps = json!({
            "goog:chromeOptions": {
                "binary": configured("CHROMIUM_BIN", CHROMIUM),
                "args": args,
            },
            "unhandledPromptBehavior": "ignore",
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "cannot open a Chromium session: {err}\n{}",
                    crate::process::tail(&log, 30)
                )
            });
        Browser {
            client,
            driver,
            _profile: profile,
            log,
        }
    }

    /// Waits (up to 30 s) for the element `css` and answers it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("no element '{css}' on the page: {err}"))
    }

    /// Waits (up to 60 s) until the text of `css` satisfies `ok`; answers it.
    pub async fn text_until(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            if let Ok(el) = self.client.find(Locator::Css(css)).await {
                if let Ok(text) = el.text().await {
                    if ok(&text) {
                        return text;
                    }
                    last = text;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Ok(alert) = self.client.get_alert_text().await {
            panic!("'{css}' never showed the expected text: an alert is open ({alert:?})");
        }
        panic!("'{css}' never showed the expected text; last: {last:?}")
    }

    /// Scrolls the element `css` to the top of the viewport (before a screenshot).
    pub async fn scroll_to(&self, css: &str) {
        let el = self.find(css).await;
        let arg = serde_json::to_value(&el).unwrap();
        self.client
            .execute("arguments[0].scrollIntoView({block: 'start'});", vec![arg])
            .await
            .unwrap();
    }

    /// Saves a PNG of the viewport as `dir/name.png`; answers its path.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let png = self.client.screenshot().await.unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// chromedriver's log so far (for failure messages).
    pub fn log_tail(&self) -> String {
        crate::process::tail(&self.log, 40)
    }

    /// Ends the session (Chromium exits); the drop then stops chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.driver.id() as i32), Signal::SIGKILL);
        let _ = self.driver.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `target/web-screenshots/`: next to the test binary's `debug` directory.
pub fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "target"))
        .map_or_else(std::env::temp_dir, Path::to_path_buf);
    target.join("web-screenshots")
}
