//! A 3-node JetStream cluster on loopback, started from the shipped `deploy/nats/cluster-node-N.conf`.
//!
//! The shipped files fix their ports (clients 4231–4233, routes 6231–6233). nats-server lets flags
//! override a configuration file's values, so each node runs its file exactly as shipped — the include
//! of `single.conf` with its accounts, permissions and encryption at rest, the node's name, the cluster
//! name — with only the client port (`-p`), the route listener (`--cluster`) and the route list
//! (`--routes`) replaced by free loopback ports, so tests run side by side. The secrets the files read
//! from the environment are given to each node's process.
//!
//! ```text
//! start ─▶ node 1, 2, 3 (own store dir, own log per start) ─▶ wait: each "Server is ready",
//!          then a JetStream metadata leader elected
//! kill(i) ─▶ SIGKILL, reaped ─▶ start_node(i): same ports, same store, a fresh log file
//! drop ─▶ SIGKILL every node, delete the stores
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{nats_server_bin, workspace_root};

/// Nodes in the cluster: the smallest that keeps an R3 stream writable with one node down.
pub const CLUSTER_SIZE: usize = 3;

/// How long a node may take to say it is ready (a restarted node recovers its store first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One node: its fixed ports and store, and the process while it runs.
struct Node {
    client_port: u16,
    route_port: u16,
    store_dir: PathBuf,
    child: Option<Child>,
    /// Starts so far; each start logs to its own file so readiness is read from this start's log.
    starts: usize,
}

/// Three nats-server processes forming one JetStream cluster. Dropping it kills them and deletes
/// their stores.
pub struct NatsCluster {
    // Declared before `dir` so the servers die before their store directories are removed.
    nodes: Vec<Node>,
    env: Vec<(String, String)>,
    dir: TempDir,
}

impl NatsCluster {
    /// Starts the shipped `deploy/nats/cluster-node-{1,2,3}.conf` on free loopback ports, with `env`
    /// (the `TOOLLEDGER_JS_KEY` and `TOOLLEDGER_NATS_*_PASSWORD` variables the files read) in each
    /// node's environment, and waits until the cluster has a JetStream metadata leader.
    ///
    /// Panics with the reason when the cluster cannot start: a fixture failing is a test failing.
    pub fn start(env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("toolledger-cluster-")
            .tempdir()
            .expect("temp dir for the cluster");
        let ports = free_ports(2 * CLUSTER_SIZE);
        let nodes = (0..CLUSTER_SIZE)
            .map(|i| Node {
                client_port: ports[i],
                route_port: ports[CLUSTER_SIZE + i],
                store_dir: dir.path().join(format!("node-{}", i + 1)),
                child: None,
                starts: 0,
            })
            .collect();
        let mut cluster = Self {
            nodes,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            dir,
        };
        // Start all three before waiting: a clustered node is ready only once it can reach its routes.
        for i in 0..CLUSTER_SIZE {
            cluster.spawn(i);
        }
        for i in 0..CLUSTER_SIZE {
            cluster.wait_ready(i);
        }
        cluster.wait_for_meta_leader();
        cluster
    }

    /// The shipped configuration file of node `i` (0-based).
    pub fn config_file(i: usize) -> PathBuf {
        workspace_root().join(format!("deploy/nats/cluster-node-{}.conf", i + 1))
    }

    /// The server name node `i` has in its configuration (`toolledger-1` …), as stream info names a leader.
    pub fn server_name(i: usize) -> String {
        format!("toolledger-{}", i + 1)
    }

    /// The node whose server name is `name`, if any.
    pub fn node_named(name: &str) -> Option<usize> {
        (0..CLUSTER_SIZE).find(|&i| Self::server_name(i) == name)
    }

    /// A client URL listing all three nodes: `nats://127.0.0.1:<p1>,nats://127.0.0.1:<p2>,…`.
    pub fn url(&self) -> String {
        self.urls_with("")
    }

    /// [`NatsCluster::url`] logging in as `user` with `password` at every node.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        self.urls_with(&format!("{user}:{password}@"))
    }

    fn urls_with(&self, credentials: &str) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://{credentials}127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `nats://127.0.0.1:<port>` of node `i` alone.
    pub fn node_url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// The client port of node `i`, the same across restarts.
    pub fn client_port(&self, i: usize) -> u16 {
        self.nodes[i].client_port
    }

    /// Node `i`'s JetStream store directory, the same across restarts.
    pub fn store_dir(&self, i: usize) -> &Path {
        &self.nodes[i].store_dir
    }

    /// Node `i`'s process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// Everything node `i` logged, over all its starts.
    pub fn log(&self, i: usize) -> String {
        (1..=self.nodes[i].starts)
            .map(|start| std::fs::read_to_string(self.log_file(i, start)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("")
    }

    /// Kills node `i` with SIGKILL, as a crash would, and reaps it. A node already down stays down.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again on its ports and store and waits until it is ready.
    pub fn start_node(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {} is running", i + 1);
        self.spawn(i);
        self.wait_ready(i);
    }

    /// [`NatsCluster::kill`] then [`NatsCluster::start_node`].
    pub fn kill_and_restart(&mut self, i: usize) {
        self.kill(i);
        self.start_node(i);
    }

    fn log_file(&self, i: usize, start: usize) -> PathBuf {
        self.dir.path().join(format!("node-{}.{start}.log", i + 1))
    }

    fn spawn(&mut self, i: usize) {
        self.nodes[i].starts += 1;
        let log = self.log_file(i, self.nodes[i].starts);
        let routes = self
            .nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.route_port))
            .collect::<Vec<_>>()
            .join(",");
        let node = &self.nodes[i];
        std::fs::create_dir_all(&node.store_dir).expect("node store dir");
        let child = Command::new(nats_server_bin())
            .arg("-c")
            .arg(Self::config_file(i))
            .arg("-sd")
            .arg(&node.store_dir)
            .arg("-p")
            .arg(node.client_port.to_string())
            .arg("--cluster")
            .arg(format!("nats://127.0.0.1:{}", node.route_port))
            .arg("--routes")
            .arg(routes)
            .arg("-l")
            .arg(&log)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "start {}: {e} (run scripts/setup to install the pinned server)",
                    nats_server_bin().display()
                )
            });
        self.nodes[i].child = Some(child);
    }

    fn wait_ready(&mut self, i: usize) {
        let log = self.log_file(i, self.nodes[i].starts);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Server is ready") {
                return;
            }
            let exited = self.nodes[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.nodes[i].child = None;
                panic!("cluster node {} exited with {status}:\n{text}", i + 1);
            }
            assert!(
                Instant::now() < deadline,
                "cluster node {} not ready in {READY_TIMEOUT:?}:\n{text}",
                i + 1
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn wait_for_meta_leader(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !(0..CLUSTER_SIZE).any(|i| self.log(i).contains("JetStream cluster metadata leader")) {
            assert!(
                Instant::now() < deadline,
                "no JetStream metadata leader elected:\n{}",
                self.log(0)
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..CLUSTER_SIZE {
            self.kill(i);
        }
    }
}

/// `count` distinct free loopback ports. All are held at once while choosing, so they differ; another
/// process could take one before the node binds it, which the node's start then reports.
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound address").port())
        .collect()
}
