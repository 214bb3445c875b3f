use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use farcache_proto::control::{MigrationMode, PriceClass};
use farcache_server::{Server, ServerConfig};

use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Address to serve clients and the manager on.
    #[arg(long, default_value = "127.0.0.1:7401")]
    listen: SocketAddr,
    /// Address to register with the manager, if different from --listen.
    #[arg(long)]
    advertise: Option<String>,
    /// Worker threads (`s`): each owns its connections and runs requests in place.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Memory this server may promise to regions.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    memory: u64,
    /// Manager to register with. Without it the server is never given regions (the
    /// manager places regions only on registered servers); useful for protocol tests.
    #[arg(long)]
    manager: Option<String>,
    #[arg(long, default_value = "on-demand")]
    price_class: PriceClass,
    /// Price per GiB-hour, used to place regions on the cheapest servers first.
    #[arg(long, default_value_t = 0.01)]
    price: f64,
    /// Largest frame accepted or sent.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    max_frame: u64,
    /// Busy-poll window in µs after serving before a worker sleeps (0 = never spin).
    #[arg(long, default_value_t = 50)]
    busy_poll_us: u64,
    /// Serve Prometheus metrics over HTTP on this address (e.g. 127.0.0.1:9401).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// How long a procedure handed to other servers may take before its caller gets
    /// an error.
    #[arg(long, default_value_t = 5000)]
    flow_timeout_ms: u64,
    /// Send one frame per message to other servers instead of one per destination and
    /// event-loop turn (to measure what batching buys).
    #[arg(long)]
    no_peer_batching: bool,
    /// Keep each region's first and last write acknowledgement, reported in status
    /// (`ack_windows`) for split-brain checks; costs small random writes a few percent.
    #[arg(long)]
    ack_windows: bool,
    /// Address to register for TLS clients, if different from --tls-listen.
    #[arg(long)]
    tls_advertise: Option<String>,
    /// Stop reading from every connection while this much reply data is unsent.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    max_output: u64,
    /// Write the bound address (and TLS address) to this file once listening.
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// Keep the server's id here, so a restart rejoins as the same server.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Files under this directory may be loaded into read-only caches
    /// (`farcache create --from-file`); without it, no file is.
    #[arg(long)]
    load_dir: Option<PathBuf>,
    /// On SIGTERM, ask the manager to move this server's regions away and wait up to
    /// this long before exiting (a reclamation notice). SIGINT exits at once.
    #[arg(long, default_value = "30s", value_parser = crate::size::parse_duration)]
    grace: std::time::Duration,
    /// What SIGTERM means: `reclaim` (the notice above) or `exit` (shut down at once;
    /// `farcache up` runs its servers so, as the whole cluster stops together).
    #[arg(long, value_enum, default_value_t = OnSigterm::Reclaim)]
    on_sigterm: OnSigterm,
    /// How regions move on SIGTERM: `dirty_tracking` or `pause_region`.
    #[arg(long, default_value = "dirty_tracking")]
    migration_mode: MigrationMode,
    #[command(flatten)]
    net: super::Listening,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnSigterm {
    Reclaim,
    Exit,
}

pub fn run(a: Args) -> Result<()> {
    farcache_server::failpoints::from_env();
    let mut c = ServerConfig::new(a.listen, a.memory, a.net.secret()?);
    if let Some((at, t)) = a.net.tls()? {
        c.tls_listen = Some(at);
        c.tls = Some(t);
    }
    c.tls_advertise = a.tls_advertise;
    c.guard = a.net.guard();
    c.max_output_total = usize::try_from(a.max_output).unwrap_or(usize::MAX);
    c.advertise = a.advertise;
    c.threads = a.threads;
    c.manager = a.manager;
    c.price_class = a.price_class;
    c.price_per_gib_hour = a.price;
    c.metrics_listen = a.metrics_listen;
    c.busy_poll = std::time::Duration::from_micros(a.busy_poll_us);
    c.flow_timeout = std::time::Duration::from_millis(a.flow_timeout_ms.max(1));
    c.peer_batching = !a.no_peer_batching;
    c.ack_windows = a.ack_windows;
    c.max_frame = u32::try_from(a.max_frame).context("--max-frame must be below 4GiB")?;
    c.data_dir = a.data_dir;
    c.load_dir = a.load_dir;
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term))
        .context("cannot handle SIGTERM")?;
    let h = Server::start(c)?;
    super::announce("server", h.addr(), h.tls_addr(), a.addr_file.as_deref())?;
    if let Some(m) = h.metrics_addr() {
        outln!("metrics: http://{m}/metrics")?;
    }
    while !term.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if a.on_sigterm == OnSigterm::Exit {
        tracing::info!("SIGTERM: shutting down");
        h.shutdown();
        return Ok(());
    }
    tracing::info!(grace = ?a.grace, "SIGTERM: reclaimed, moving regions away before exiting");
    match h.leave(a.grace, a.migration_mode) {
        Ok(l) if l.regions_left == 0 => {
            tracing::info!(took = ?l.took, "every region moved away; exiting");
        }
        Ok(l) => {
            tracing::warn!(
                regions = l.regions_left,
                "grace over with regions still here; the manager reports them lost"
            );
        }
        Err(e) => tracing::error!("could not announce the reclamation, exiting anyway: {e}"),
    }
    h.shutdown();
    Ok(())
}
