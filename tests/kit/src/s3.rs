use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::nats::workspace_root;

/// How long moto may take to start answering.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The moto server binary `scripts/setup` installs into the project venv.
pub fn moto_server_bin() -> PathBuf {
    workspace_root().join(".venv/bin/moto_server")
}

/// A real S3-compatible server (moto) on a free loopback port, with one bucket, for one test.
/// Dropping it stops the server (its data lives in memory and goes with it).
pub struct S3Fixture {
    child: Child,
    port: u16,
    bucket: String,
    paused: bool,
}

impl S3Fixture {
    /// Starts `moto_server` and creates the bucket `toolledger-test`.
    ///
    /// Panics with the reason when the server cannot start: a fixture failing is a test failing.
    pub fn start() -> Self {
        Self::start_with_bucket("toolledger-test")
    }

    /// Starts `moto_server` and creates `bucket`.
    pub fn start_with_bucket(bucket: &str) -> Self {
        let bin = moto_server_bin();
        assert!(bin.exists(), "{} is missing: run scripts/setup", bin.display());
        let port = free_port();
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("s3 fixture: starting {}: {e}", bin.display()));
        let mut fixture = Self {
            child,
            port,
            bucket: bucket.to_owned(),
            paused: false,
        };
        fixture.wait_ready();
        let status = fixture.request("PUT", &format!("/{bucket}"));
        assert!(
            (200..300).contains(&status),
            "s3 fixture: creating bucket {bucket} answered {status}"
        );
        fixture
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("s3 fixture: moto_server exited early: {status}");
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok()
                && self.try_request("GET", "/").is_some()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "s3 fixture: moto_server not ready in time"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// A minimal unsigned HTTP/1.1 request (moto accepts them); returns the status code.
    fn try_request(&self, method: &str, path: &str) -> Option<u16> {
        let mut stream = TcpStream::connect_timeout(&self.addr(), Duration::from_secs(2)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).ok()?;
        let head = String::from_utf8_lossy(&response);
        head.split_whitespace().nth(1)?.parse().ok()
    }

    fn request(&self, method: &str, path: &str) -> u16 {
        self.try_request(method, path)
            .unwrap_or_else(|| panic!("s3 fixture: {method} {path} got no answer"))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// `s3://<bucket>/<prefix>`: the store URL for a `BlobStore` (pass [`S3Fixture::options`] with it).
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{}", self.bucket, prefix.trim_matches('/'))
    }

    /// The store options (`object_store` S3 config keys) that reach this server.
    pub fn options(&self) -> Vec<(String, String)> {
        self.env()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect()
    }

    /// The standard AWS environment variables that reach this server, for child processes.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".to_owned(), self.endpoint()),
            ("AWS_ALLOW_HTTP".to_owned(), "true".to_owned()),
            ("AWS_ACCESS_KEY_ID".to_owned(), "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "testing".to_owned()),
            ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
        ]
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the server (SIGSTOP): connections are accepted by the kernel but never answered.
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.paused = true;
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT);
        self.paused = false;
    }

    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.child.id()).expect("pid fits i32");
        kill(Pid::from_raw(pid), signal).unwrap_or_else(|e| panic!("s3 fixture: {signal}: {e}"));
    }
}

impl Drop for S3Fixture {
    fn drop(&mut self) {
        if self.paused {
            self.signal(Signal::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
