//! `farcache lab`: a cluster in the network lab (each process on a host of its own
//! behind a switch), and a prompt to cut links, make hosts vanish, heal, shape, kill
//! and look at the cluster meanwhile. Needs root, `ip` and `nft`.

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use farcache_client::ClientConfig;
use farcache_testkit::{ClusterOptions, Lab, ProcessCluster};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Memory per server.
    #[arg(long, default_value = "256MiB")]
    memory: String,
    /// Default region size for new caches.
    #[arg(long, default_value = "1MiB")]
    region_size: String,
    /// Heartbeat interval.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// Silence after which a server is declared dead (servers' leases are 0.8 of it).
    #[arg(long, default_value_t = 1000)]
    dead_after_ms: u64,
    /// Run these commands (one per `;`) instead of reading them from standard input.
    #[arg(long)]
    script: Option<String>,
}

const HELP: &str = "\
commands (hosts: manager, s0, s1, ..., client):
  status                 servers, their state, and the faults in force
  cut A B                drop packets from A to B (one way)
  partition A B          cut both ways
  vanish H               H goes silent: nothing in, nothing out, no RST
  heal [H]               lift every fault (or those involving H)
  shape H MBIT           limit H's link to MBIT Mbit/s each way
  delay H US [JITTER]    hold every frame to and from H US µs (+ up to JITTER µs)
  rtt A B                the lab's round trip from A to B
  kill sN | restart sN   SIGKILL server N | start it again
  sleep MS               wait (for scripts)
  quit";

pub fn run(a: Args) -> Result<()> {
    Lab::check().context("`farcache lab` cannot run here")?;
    let exe = std::env::current_exe().context("cannot find the farcache binary")?;
    let mut opts = ClusterOptions::default()
        .servers(a.servers)
        .server_memory(crate::size::parse_size(&a.memory).map_err(anyhow::Error::msg)?)
        .region_size(crate::size::parse_size(&a.region_size).map_err(anyhow::Error::msg)?)
        // Status shows each region's acknowledgement window (split-brain checks).
        .server_args(["--ack-windows"]);
    opts.heartbeat_interval = Duration::from_millis(a.heartbeat_ms);
    opts.heartbeat_timeout = Duration::from_millis(a.dead_after_ms);
    let lab = Arc::new(Lab::create(&["client"])?);
    let l = lab.clone();
    let script = a.script.clone();
    lab.run_on("client", move || {
        session(&l, &exe, &opts, script.as_deref())
    })?
}

/// Runs on a thread inside the lab's `client` host.
fn session(
    lab: &Arc<Lab>,
    exe: &std::path::Path,
    opts: &ClusterOptions,
    script: Option<&str>,
) -> Result<()> {
    let t0 = Instant::now();
    let mut cluster = ProcessCluster::start_in_lab(exe, opts, lab.clone())?;
    let client = cluster.client_with(ClientConfig::new("").op_timeout(Duration::from_secs(5)))?;
    outln!(
        "lab up in {:.1} s: manager {} on host manager; lab round trip client -> manager {:?}",
        t0.elapsed().as_secs_f64(),
        cluster.manager_addr(),
        lab.rtt("client", "manager", 100)?
    )?;
    for h in lab.hosts() {
        outln!("  {:<8} {:<15} ip netns exec {} ...", h.name, h.ip, h.netns)?;
    }
    outln!(
        "from another terminal: ip netns exec {} {} status --manager {} --secret-file {}",
        lab.host("client")?.netns,
        exe.display(),
        cluster.manager_addr(),
        cluster.secret_path().display()
    )?;
    outln!("{HELP}")?;
    let lines: Box<dyn Iterator<Item = String>> = match script {
        Some(s) => Box::new(
            s.split(';')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<_>>()
                .into_iter(),
        ),
        None => Box::new(std::io::stdin().lock().lines().map_while(Result::ok)),
    };
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&cmd, args)) = words.split_first() else {
            continue;
        };
        outln!("> {line}")?;
        let r = (|| -> Result<bool> {
            match (cmd, args) {
                ("quit" | "exit", _) => return Ok(false),
                ("status", _) => {
                    let st = client.status()?;
                    for s in &st.servers {
                        outln!("  server {} {} {:?}", s.id, s.addr, s.state)?;
                    }
                    for p in st.promotions.iter().rev().take(5) {
                        outln!(
                            "  promoted: cache {} region {} from {} to {}",
                            p.cache,
                            p.region,
                            p.from,
                            p.to
                        )?;
                    }
                    outln!("  faults: {:?}", lab.faults())?;
                }
                ("cut", [a, b]) => lab.cut(a, b)?,
                ("partition", [a, b]) => lab.partition(a, b)?,
                ("vanish", [h]) => lab.vanish(h)?,
                ("heal", []) => lab.heal()?,
                ("heal", [h]) => lab.heal_host(h)?,
                ("shape", [h, mbit]) => lab.shape(h, mbit.parse()?)?,
                ("delay", [h, us, rest @ ..]) if rest.len() <= 1 => {
                    let jitter = rest.first().map(|j| j.parse()).transpose()?.unwrap_or(0);
                    let us = Duration::from_micros(us.parse()?);
                    lab.delay(h, us, Duration::from_micros(jitter))?
                }
                ("rtt", [a, b]) => outln!("  {:?}", lab.rtt(a, b, 100)?)?,
                ("kill", [s]) => cluster.kill_server(server_index(s)?)?,
                ("restart", [s]) => cluster.restart_server(server_index(s)?)?,
                ("sleep", [ms]) => std::thread::sleep(Duration::from_millis(ms.parse()?)),
                _ => outln!("{HELP}")?,
            }
            Ok(true)
        })();
        match r {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => outln!("  error: {e:#}")?,
        }
    }
    outln!("tearing the lab down")?;
    Ok(())
}

fn server_index(s: &str) -> Result<usize> {
    match s.strip_prefix('s').map(str::parse::<usize>) {
        Some(Ok(i)) => Ok(i),
        _ => bail!("servers are named s0, s1, ...; not '{s}'"),
    }
}
