//! Local clusters for tests, demos and benchmarks.
//!
//! - [`LocalCluster`]: manager and servers as threads of this process (fast; used by
//!   `farcache demo` and by tests that need no process boundary).
//! - [`ProcessCluster`]: manager and servers as child processes of the `farcache`
//!   binary, so tests can SIGKILL a server or restart the manager for real; with a
//!   [`Lab`], each process runs on a host of its own behind a switch that can cut
//!   links one way or both, make hosts vanish and shape bandwidth; with several
//!   managers, their catalogue lives on an [`etcd::EtcdCluster`] it starts.

pub mod counters;
mod error;
pub mod etcd;
pub mod history;
pub mod lab;
mod local;
mod options;
mod process;
pub mod verify;

pub use error::TestkitError;
pub use etcd::EtcdCluster;
pub use lab::Lab;
pub use local::{IN_PROCESS_HEARTBEAT_TIMEOUT, LocalCluster};
pub use options::ClusterOptions;
pub use process::ProcessCluster;
pub use verify::{Verifier, VerifyReport};

use std::time::{Duration, Instant};

use farcache_client::Client;
use farcache_proto::control::ServerState;

/// Polls the manager until `n` servers are alive.
pub fn wait_for_alive(client: &Client, n: usize, timeout: Duration) -> Result<(), TestkitError> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive = match client.status() {
            Ok(s) => s
                .servers
                .iter()
                .filter(|s| s.state == ServerState::Alive)
                .count(),
            Err(_) => 0,
        };
        if alive >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(TestkitError::Timeout(format!(
                "{alive} of {n} servers alive"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
