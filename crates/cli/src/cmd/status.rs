use anyhow::Result;
use farcache_client::{
    CacheId, CacheInfo, Client, ClusterStatus, LostRegion, MigrationMode, MigrationRecord,
    ServerId, ServerInfo, ServerState,
};

use crate::size::human;

/// The latest migrations and losses `status` shows (the manager keeps a bounded list).
const RECENT_MIGRATIONS: usize = 5;
const RECENT_LOST: usize = 10;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// Also list every region of every cache.
    #[arg(long)]
    regions: bool,
    #[command(flatten)]
    creds: super::Credentials,
}

pub fn state_name(s: ServerState) -> &'static str {
    match s {
        ServerState::Alive => "alive",
        ServerState::Unknown => "unknown",
        ServerState::Dead => "dead",
        ServerState::Leaving => "leaving",
    }
}

pub fn mode_name(m: MigrationMode) -> &'static str {
    match m {
        MigrationMode::DirtyTracking => "dirty_tracking",
        MigrationMode::PauseRegion => "pause_region",
        MigrationMode::PauseAll => "pause_all",
    }
}

/// Regions of every cache that `server` holds.
pub fn regions_on(s: &ClusterStatus, server: ServerId) -> usize {
    s.caches
        .iter()
        .map(|c| {
            c.regions
                .iter()
                .chain(c.backups.iter().flatten())
                .filter(|&&r| r == server)
                .count()
        })
        .sum()
}

fn cache_name(s: &ClusterStatus, id: CacheId) -> String {
    s.caches
        .iter()
        .find(|c| c.id == id)
        .map_or_else(|| format!("#{id}"), |c| c.name.clone())
}

/// What a cache costs per hour: each copy's GiB at its server's price.
pub fn cost_per_hour(c: &CacheInfo, servers: &[ServerInfo]) -> f64 {
    let gib = c.region_size as f64 / (1u64 << 30) as f64;
    c.regions
        .iter()
        .chain(c.backups.iter().flatten())
        .filter_map(|r| {
            // The cluster list first (current prices), the cache's own copy otherwise.
            servers
                .iter()
                .chain(&c.servers)
                .find(|s| s.id == *r)
                .map(|s| s.price_per_gib_hour)
        })
        .map(|price| gib * price)
        .sum()
}

/// One line per migration, with a header.
pub fn print_migrations(s: &ClusterStatus, list: &[&MigrationRecord]) -> Result<()> {
    outln!(
        "  {:<20} {:>6} {:>9} {:>9} {:>9} {:>13} {:>6}  mode",
        "cache",
        "region",
        "from → to",
        "MiB",
        "copy ms",
        "max pause ms",
        "rounds"
    )?;
    for m in list {
        outln!(
            "  {:<20} {:>6} {:>9} {:>9.1} {:>9.1} {:>13.3} {:>6}  {}",
            cache_name(s, m.cache),
            m.region,
            format!("#{} → #{}", m.from, m.to),
            m.bytes as f64 / f64::from(1u32 << 20),
            m.copy_us as f64 / 1e3,
            m.max_pause_us as f64 / 1e3,
            m.rounds,
            mode_name(m.mode)
        )?;
    }
    Ok(())
}

pub fn print_lost(s: &ClusterStatus, list: &[&LostRegion]) -> Result<()> {
    for l in list {
        outln!(
            "  LOST: cache {} region {} (was on #{}, {}; now empty on #{})",
            cache_name(s, l.cache),
            l.region,
            l.was_on,
            l.reason,
            l.now_on
        )?;
    }
    Ok(())
}

/// The last `n` of `v`, oldest first.
fn last<T>(v: &[T], n: usize) -> Vec<&T> {
    v[v.len().saturating_sub(n)..].iter().collect()
}

pub fn run(a: Args) -> Result<()> {
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    let s = client.status()?;
    outln!("servers ({}):", s.servers.len())?;
    outln!(
        "  {:>3}  {:<22} {:<9} {:>10} {:>10} {:>7} {:>5} {:<9} {:>8}",
        "id",
        "address",
        "state",
        "memory",
        "used",
        "regions",
        "cores",
        "class",
        "$/GiB-h"
    )?;
    for v in &s.servers {
        outln!(
            "  {:>3}  {:<22} {:<9} {:>10} {:>10} {:>7} {:>5} {:<9} {:>8.4}",
            v.id,
            v.addr,
            state_name(v.state),
            human(v.memory),
            human(v.used),
            regions_on(&s, v.id),
            v.cores,
            v.price_class.to_string(),
            v.price_per_gib_hour
        )?;
    }
    let leaving = s
        .servers
        .iter()
        .filter(|v| v.state == ServerState::Leaving)
        .count();
    if leaving > 0 {
        outln!("  ({leaving} leaving: taking no new regions while theirs move elsewhere)")?;
    }
    outln!("caches ({}):", s.caches.len())?;
    outln!(
        "  {:>3}  {:<20} {:>10} {:>10} {:>7} {:>6} {:>6} {:>9}  servers",
        "id",
        "name",
        "capacity",
        "region",
        "regions",
        "copies",
        "epoch",
        "$/h"
    )?;
    for c in &s.caches {
        let mut per: Vec<(u32, usize)> = Vec::new();
        for r in &c.regions {
            match per.iter_mut().find(|(s, _)| s == r) {
                Some(e) => e.1 += 1,
                None => per.push((*r, 1)),
            }
        }
        let spread: Vec<String> = per.iter().map(|(s, n)| format!("#{s}×{n}")).collect();
        let short = (0..c.regions.len())
            .filter(|&i| 1 + c.backups.get(i).map_or(0, Vec::len) < c.replicas as usize)
            .count();
        let copies = if short > 0 {
            format!("{}({short}↓)", c.replicas)
        } else {
            c.replicas.to_string()
        };
        outln!(
            "  {:>3}  {:<20} {:>10} {:>10} {:>7} {:>6} {:>6} {:>9.4}  {}{}",
            c.id,
            c.name,
            human(c.capacity),
            human(c.region_size),
            c.regions.len(),
            copies,
            c.epoch,
            cost_per_hour(c, &s.servers),
            spread.join(" "),
            c.from_file
                .as_deref()
                .map_or_else(String::new, |f| format!("  (read-only, from {f})"))
        )?;
        if let Some(slo) = &c.slo {
            outln!(
                "       SLO {}: {} predicted {:.1} us {}, {:.3} Mops/s; ${:.4}/h with cores",
                slo.slo,
                slo.transport,
                slo.predicted_latency_us,
                slo.slo.percentile,
                slo.predicted_throughput / 1e6,
                slo.dollars_per_hour
            )?;
        }
        if a.regions {
            for (i, r) in c.regions.iter().enumerate() {
                let start = i as u64 * c.region_size;
                let backups = c.backups.get(i).map_or_else(String::new, |b| {
                    if b.is_empty() {
                        String::new()
                    } else {
                        let ids: Vec<String> = b.iter().map(|s| s.to_string()).collect();
                        format!(", backups on {}", ids.join(", "))
                    }
                });
                outln!(
                    "       region {i:>4} [{start:#x}, {:#x}) -> server {r}{backups}",
                    start + c.region_size
                )?;
            }
        }
    }
    if !s.migrations.is_empty() {
        let recent = last(&s.migrations, RECENT_MIGRATIONS);
        outln!(
            "recent migrations ({} of {}):",
            recent.len(),
            s.migrations.len()
        )?;
        print_migrations(&s, &recent)?;
    }
    if !s.promotions.is_empty() {
        let recent = last(&s.promotions, RECENT_LOST);
        outln!(
            "promotions ({} of {}; a backup took over from a dead owner):",
            recent.len(),
            s.promotions.len()
        )?;
        for p in recent {
            outln!(
                "  {} region {:>4}: server {} -> server {} (epoch {})",
                cache_name(&s, p.cache),
                p.region,
                p.from,
                p.to,
                p.epoch
            )?;
        }
    }
    if !s.lost.is_empty() {
        let recent = last(&s.lost, RECENT_LOST);
        outln!(
            "lost regions ({} of {}; they read as DATA_LOST until overwritten or cleared):",
            recent.len(),
            s.lost.len()
        )?;
        print_lost(&s, &recent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(id: ServerId, price: f64) -> ServerInfo {
        ServerInfo {
            id,
            addr: format!("127.0.0.1:{id}"),
            memory: 1 << 34,
            used: 0,
            cores: 1,
            threads: 1,
            price_class: farcache_proto::control::PriceClass::Spot,
            price_per_gib_hour: price,
            state: ServerState::Alive,
            tls_addr: None,
        }
    }

    #[test]
    fn cost_sums_each_region_at_its_servers_price() {
        let c = CacheInfo {
            id: 1,
            name: "c".into(),
            capacity: 3 << 29,
            region_size: 1 << 29,
            epoch: 1,
            // 1 GiB on server 1, 0.5 GiB on server 2, 0.5 GiB on an unknown server.
            regions: vec![1, 1, 2, 9],
            servers: vec![server(1, 0.0), server(2, 0.04)],
            replicas: 1,
            backups: vec![],
            from_file: None,
            slo: None,
        };
        // The cluster list's price wins over the cache's copy.
        let cost = cost_per_hour(&c, &[server(1, 0.01), server(2, 0.04)]);
        assert!((cost - (0.01 + 0.02)).abs() < 1e-12, "{cost}");
        let s = ClusterStatus {
            servers: vec![],
            caches: vec![c],
            migrations: vec![],
            lost: vec![],
            promotions: vec![],
        };
        assert_eq!(regions_on(&s, 1), 2);
        assert_eq!(regions_on(&s, 3), 0);
        assert_eq!(last(&[1, 2, 3], 2), vec![&2, &3]);
        assert_eq!(last(&[1], 5), vec![&1]);
    }
}
