use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use farcache_manager::{
    CatalogueBackend, EtcdSettings, Manager, ManagerConfig, ManagerError, SloSettings,
};

/// How long a manager that cannot reach etcd waits before campaigning again.
const ETCD_RETRY_FIRST: Duration = Duration::from_millis(200);
const ETCD_RETRY_MAX: Duration = Duration::from_secs(5);

use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: SocketAddr,
    /// Where the catalogue is stored (survives restarts).
    #[arg(long, default_value = "farcache-data")]
    data_dir: PathBuf,
    /// Default region size for new caches.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    region_size: u64,
    /// Heartbeat interval asked of servers.
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// A server silent this long is marked dead (servers' leases are 0.8 of it).
    /// Default: 3000, or with --etcd long enough that leases outlast a failover.
    #[arg(long)]
    dead_after_ms: Option<u64>,
    /// Write the bound address (and TLS address) to this file once listening.
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// Keep the catalogue in etcd at these client URLs (comma-separated) instead of
    /// a file in --data-dir. Any number of managers may share one etcd: one leads,
    /// the others stand by (answering every request with the leader's address) and
    /// take over when its lease lapses.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    /// Key prefix in etcd (several clusters may share one etcd).
    #[arg(long, default_value = "/farcache")]
    etcd_prefix: String,
    /// The leader's etcd lease in seconds: a dead leader is replaced this long after
    /// it last renewed it.
    #[arg(long, default_value_t = 2)]
    etcd_lease_secs: u64,
    #[command(flatten)]
    net: super::Listening,
    #[command(flatten)]
    slo: SloArgs,
}

/// How the manager answers caches created from an SLO.
#[derive(clap::Args)]
struct SloArgs {
    /// The performance model `farcache calibrate` wrote; without one, caches cannot
    /// be created from an SLO.
    #[arg(long)]
    slo_model: Option<PathBuf>,
    /// Accept a model measured on another machine.
    #[arg(long)]
    slo_model_any_machine: bool,
    /// Margin on predictions: latency × (1 + h) within the bound, throughput
    /// ≥ SLO × (1 + h).
    #[arg(long, default_value_t = farcache_slo::DEFAULT_HEADROOM)]
    slo_headroom: f64,
    /// $/hour of one server core on spot servers.
    #[arg(long, default_value_t = 0.012)]
    spot_core_price: f64,
    /// $/hour of one server core on on-demand servers.
    #[arg(long, default_value_t = 0.04)]
    on_demand_core_price: f64,
    /// $/hour of one client core.
    #[arg(long, default_value_t = 0.04)]
    client_core_price: f64,
}

pub fn run(a: Args) -> Result<()> {
    // FAILPOINTS, in a build with them (the manager's own points are listed in
    // farcache-manager's `failpoints` module).
    farcache_server::failpoints::from_env();
    let dead_after = dead_after_ms(&a);
    let mut c = ManagerConfig::new(a.listen, a.data_dir, a.net.secret()?);
    if let Some((at, t)) = a.net.tls()? {
        c.tls_listen = Some(at);
        c.tls = Some(t);
    }
    c.guard = a.net.guard();
    c.region_size = a.region_size;
    c.heartbeat_interval = Duration::from_millis(a.heartbeat_ms);
    c.heartbeat_timeout = Duration::from_millis(dead_after);
    c.slo = SloSettings {
        model: a.slo.slo_model,
        any_machine: a.slo.slo_model_any_machine,
        headroom: a.slo.slo_headroom,
        spot_core_hour: a.slo.spot_core_price,
        on_demand_core_hour: a.slo.on_demand_core_price,
        client_core_hour: a.slo.client_core_price,
    };
    if !a.etcd.is_empty() {
        let mut e = EtcdSettings::new(a.etcd);
        e.prefix = a.etcd_prefix;
        e.lease_ttl = Duration::from_secs(a.etcd_lease_secs);
        c.catalogue = CatalogueBackend::Etcd(e);
    }
    let on_etcd = matches!(c.catalogue, CatalogueBackend::Etcd(_));
    let mut backoff = ETCD_RETRY_FIRST;
    loop {
        // On etcd this waits until this manager leads. etcd being unreachable (or
        // losing its quorum) is a reason to wait, not to exit: a standby that quit
        // would leave the cluster without one when etcd comes back.
        let h = match Manager::start(c.clone()) {
            Ok(h) => h,
            Err(ManagerError::Etcd(e)) if on_etcd => {
                tracing::warn!(retry_in = ?backoff, "etcd: {e}; campaigning again");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(ETCD_RETRY_MAX);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        backoff = ETCD_RETRY_FIRST;
        super::announce("manager", h.addr(), h.tls_addr(), a.addr_file.as_deref())?;
        // Never, on the embedded catalogue.
        let why = loop {
            if let Some(why) = h.wait_deposed(Duration::from_secs(3600)) {
                break why;
            }
        };
        tracing::warn!(%why, "lost the lead: closing the listener and standing by again");
        h.shutdown();
    }
}

/// The shortest heartbeat timeout whose leases outlast a change of leader: the etcd
/// lease running out, the standby's campaign and load, and a server's next
/// heartbeat finding the new leader (two intervals), with half a second to spare.
fn failover_safe_dead_after_ms(etcd_lease_secs: u64, heartbeat_ms: u64) -> u64 {
    let failover_ms = etcd_lease_secs * 1000 + 2 * heartbeat_ms + 500;
    (failover_ms as f64 / farcache_manager::LEASE_SHARE).ceil() as u64
}

/// `--dead-after-ms`, or its default: 3 s, longer on etcd if leases need it. A
/// value given shorter than that on etcd is kept, with a warning.
fn dead_after_ms(a: &Args) -> u64 {
    let safe = (!a.etcd.is_empty())
        .then(|| failover_safe_dead_after_ms(a.etcd_lease_secs, a.heartbeat_ms));
    match (a.dead_after_ms, safe) {
        (Some(ms), Some(safe)) if ms < safe => {
            tracing::warn!(
                dead_after_ms = ms,
                failover_safe = safe,
                "servers' leases are shorter than a change of leader can take: when a leader \
                 dies, servers stop serving until the new one renews them; raise \
                 --dead-after-ms to {safe} or lower --etcd-lease-secs"
            );
            ms
        }
        (Some(ms), _) => ms,
        (None, Some(safe)) => safe.max(DEFAULT_DEAD_AFTER_MS),
        (None, None) => DEFAULT_DEAD_AFTER_MS,
    }
}

const DEFAULT_DEAD_AFTER_MS: u64 = 3000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_outlast_a_failover_by_default_on_etcd() {
        // etcd lease 2 s, heartbeats every 500 ms: a failover takes up to 3.5 s.
        let ms = failover_safe_dead_after_ms(2, 500);
        assert_eq!(ms, 4375);
        let lease = Duration::from_millis(ms).mul_f64(farcache_manager::LEASE_SHARE);
        assert!(lease >= Duration::from_millis(3500), "{lease:?}");
    }
}
