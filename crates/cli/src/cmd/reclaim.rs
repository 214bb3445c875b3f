//! `farcache reclaim`: take a server back, moving its regions to the others first.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use farcache_client::{Client, ClusterStatus, MigrationMode, ServerId, ServerState};
use indicatif::{ProgressBar, ProgressStyle};

use super::Credentials;
use super::status::{mode_name, print_lost, print_migrations, regions_on, state_name};
use crate::size::parse_duration;

/// How often `--wait` asks the manager where the regions are.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long `--wait` keeps waiting past the grace period: by then the manager should
/// have moved or written off every region.
const WAIT_PAST_GRACE: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// The server to take back (its id in `farcache status`).
    #[arg(long)]
    server: ServerId,
    /// How long until the server goes away: regions still on it then are lost
    /// (e.g. 30s, 500ms, 2m).
    #[arg(long, value_parser = parse_duration)]
    grace: Duration,
    /// How writes wait while a region is copied: `dirty_tracking` pauses them only for
    /// the last dirty chunks, `pause_region` for the whole copy.
    #[arg(long, default_value = "dirty_tracking")]
    mode: MigrationMode,
    /// Follow the regions until the server holds none, then list the moves (default).
    #[arg(long, overrides_with = "no_wait")]
    wait: bool,
    /// Return as soon as the manager accepted the reclaim.
    #[arg(long, overrides_with = "wait")]
    no_wait: bool,
    #[command(flatten)]
    creds: Credentials,
}

/// Sends the reclaim and, unless `--no-wait`, reports how the regions moved.
pub fn run(a: Args) -> Result<()> {
    a.creds.require_secret("reclaiming a server")?;
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    let before = client.status()?;
    let Some(server) = before.servers.iter().find(|s| s.id == a.server) else {
        bail!(
            "the manager lists no server {} (see `farcache status`)",
            a.server
        );
    };
    let total = regions_on(&before, a.server);
    outln!(
        "reclaiming server {} ({}, {}): {total} regions to move within {:?}, mode {}",
        a.server,
        server.addr,
        state_name(server.state),
        a.grace,
        mode_name(a.mode)
    )?;
    client
        .reclaim(a.server, a.grace, a.mode)
        .with_context(|| format!("reclaiming server {}", a.server))?;
    // `overrides_with` leaves only the last of --wait / --no-wait set.
    if !a.wait && a.no_wait {
        outln!("accepted; follow it with `farcache status`")?;
        return Ok(());
    }
    let started = Instant::now();
    let deadline = started + a.grace + WAIT_PAST_GRACE;
    let (after, done) = follow(&client, a.server, total, deadline)?;
    report(&before, &after, a.server, started.elapsed())?;
    if !done {
        bail!(
            "server {} still holds {} regions {:?} after the reclaim",
            a.server,
            regions_on(&after, a.server),
            started.elapsed()
        );
    }
    Ok(())
}

/// Polls the manager until `server` holds no region or is no longer alive or leaving,
/// or until `deadline`. Returns the last status and whether the server finished.
fn follow(
    client: &Client,
    server: ServerId,
    total: usize,
    deadline: Instant,
) -> Result<(ClusterStatus, bool)> {
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} regions moved ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(format!("server {server}"));
    loop {
        let s = client.status().context("asking the manager for progress")?;
        let left = regions_on(&s, server);
        // Regions placed meanwhile (before the manager saw the reclaim) count too.
        let len = pb.length().unwrap_or(0).max(pb.position() + left as u64);
        pb.set_length(len);
        pb.set_position(len.saturating_sub(left as u64));
        let state = s.servers.iter().find(|v| v.id == server).map(|v| v.state);
        let staying = matches!(state, Some(ServerState::Leaving | ServerState::Alive));
        if left == 0 || !staying {
            pb.finish();
            return Ok((s, true));
        }
        if Instant::now() >= deadline {
            pb.abandon();
            return Ok((s, false));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Lists the migrations off `server` and the regions it lost since `before`.
fn report(
    before: &ClusterStatus,
    after: &ClusterStatus,
    server: ServerId,
    took: Duration,
) -> Result<()> {
    let moved: Vec<_> = after
        .migrations
        .iter()
        .filter(|m| m.from == server && !before.migrations.contains(m))
        .collect();
    let lost: Vec<_> = after
        .lost
        .iter()
        .filter(|l| l.was_on == server && !before.lost.contains(l))
        .collect();
    let state = after
        .servers
        .iter()
        .find(|v| v.id == server)
        .map_or("gone", |v| state_name(v.state));
    outln!(
        "server {server} is {state} after {took:.1?}: {} regions moved, {} lost",
        moved.len(),
        lost.len()
    )?;
    if !moved.is_empty() {
        print_migrations(after, &moved)?;
    }
    if !lost.is_empty() {
        print_lost(after, &lost)?;
        outln!(
            "  reads of lost regions fail with DATA_LOST until the bytes are overwritten \
             or the loss is cleared (Cache::clear_lost)"
        )?;
    }
    Ok(())
}
