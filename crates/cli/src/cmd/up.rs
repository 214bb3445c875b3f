use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, Result};
use farcache_client::{ClientConfig, ClusterSecret};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Memory per server.
    #[arg(long, default_value = "1GiB")]
    memory: String,
    /// Default region size for new caches.
    #[arg(long, default_value = "64MiB")]
    region_size: String,
    /// Worker threads per server.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Manager port; servers take the following ports.
    #[arg(long, default_value_t = 7400)]
    port: u16,
    /// Holds the catalogue and the cluster's secret key (created on first start).
    #[arg(long, default_value = "farcache-data")]
    data_dir: String,
    /// Servers may load files under this directory into read-only caches
    /// (`farcache create --from-file`); none without it.
    #[arg(long)]
    load_dir: Option<String>,
    /// The manager answers `farcache create --slo-throughput ...` from this model
    /// (`farcache calibrate` writes one).
    #[arg(long)]
    slo_model: Option<String>,
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the farcache binary")?;
    let manager = format!("127.0.0.1:{}", a.port);
    std::fs::create_dir_all(&a.data_dir)?;
    let secret_path = Path::new(&a.data_dir).join("cluster.secret");
    let secret = ClusterSecret::load_or_create(&secret_path)?;
    let secret_file = secret_path.display().to_string();
    let mut kids = Children(Vec::new());
    let mut manager_cmd = Command::new(&exe);
    manager_cmd.arg("manager");
    if let Some(m) = &a.slo_model {
        manager_cmd.args(["--slo-model", m]);
    }
    kids.0.push(
        manager_cmd
            .args([
                "--listen",
                &manager,
                "--data-dir",
                &a.data_dir,
                "--region-size",
                &a.region_size,
                "--secret-file",
                &secret_file,
            ])
            .spawn()
            .context("starting the manager")?,
    );
    for i in 0..a.servers {
        let port = u16::try_from(usize::from(a.port) + 1 + i).map_err(|_| {
            anyhow::anyhow!("--port {} leaves no room for {} servers", a.port, a.servers)
        })?;
        let listen = format!("127.0.0.1:{port}");
        kids.0.push(
            Command::new(&exe)
                .args([
                    "server",
                    "--listen",
                    &listen,
                    "--manager",
                    &manager,
                    "--memory",
                    &a.memory,
                    "--secret-file",
                    &secret_file,
                ])
                .args(["--threads", &a.threads.to_string()])
                // Each server keeps its id there: a restarted one rejoins as itself.
                .arg("--data-dir")
                .arg(Path::new(&a.data_dir).join(format!("server{i}")))
                .args(
                    a.load_dir
                        .iter()
                        .flat_map(|d| ["--load-dir".to_string(), d.clone()]),
                )
                .spawn()
                .with_context(|| format!("starting server {i}"))?,
        );
    }
    let client = connect(&manager, &secret)?;
    farcache_testkit::wait_for_alive(&client, a.servers, Duration::from_secs(20))?;
    outln!(
        "\nfarcache is up: manager {manager}, {} servers.",
        a.servers
    )?;
    outln!("  key:     export FARCACHE_SECRET_FILE={secret_file}")?;
    outln!("  status:  farcache status --manager {manager}")?;
    outln!(
        "  connect: farcache_client::Client::connect(\"{manager}\")  (reads FARCACHE_SECRET_FILE)"
    )?;
    outln!("Press Ctrl-C to stop.")?;
    loop {
        for (i, c) in kids.0.iter_mut().enumerate() {
            if let Some(st) = c.try_wait()? {
                anyhow::bail!("child {i} exited with {st}; stopping the cluster");
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Connects once the manager listens (it may take a moment to start).
fn connect(manager: &str, secret: &ClusterSecret) -> Result<farcache_client::Client> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let cfg = ClientConfig::new(manager).secret(secret.clone());
        match farcache_client::Client::with_config(cfg) {
            Ok(c) => return Ok(c),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!("manager not reachable yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
