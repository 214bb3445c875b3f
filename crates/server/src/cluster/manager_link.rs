//! Registration with the manager and periodic heartbeats. Survives manager restarts
//! and changes of leader: it reconnects (to the next address, when several managers
//! are given) and re-registers under the same server id.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use farcache_proto::blocking::{RpcError, control_call};
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse, region_digest};
use tracing::{info, warn};

use crate::cluster::Shared;
use crate::cluster::dial::{Dialer, Timeouts, resolve};

const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects and proves this server's role (the cluster secret, with its advertised
/// address as identity).
fn connect(dialer: &Dialer, addr: &str) -> Result<TcpStream, RpcError> {
    dialer.dial(resolve(addr)?, Timeouts::all(IO_TIMEOUT), 0)
}

/// The managers' addresses in a comma-separated list (one leads; the others stand by).
pub fn manager_addrs(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

fn register(sh: &Shared, stream: &mut TcpStream) -> Result<Duration, RpcError> {
    let c = &sh.config;
    let id = sh.server_id();
    let req = ControlRequest::RegisterServer {
        server_id: (id != 0).then_some(id),
        addr: sh.advertise.clone(),
        memory: c.memory,
        cores: c.cores,
        threads: u32::try_from(c.threads).unwrap_or(u32::MAX),
        price_class: c.price_class,
        price_per_gib_hour: c.price_per_gib_hour,
        tls_addr: sh.tls_advertise.clone(),
    };
    // What this server held before asking: if the manager says it was declared dead,
    // exactly these copies are stale (regions placed after the answer are not).
    let held_before = sh.store.held();
    let sent_at = sh.lease.clock();
    match control_call(stream, &req)? {
        ControlResponse::Registered {
            server_id,
            heartbeat_ms,
            lease_ms,
            fenced,
        } => {
            sh.set_server_id(server_id);
            if fenced {
                drop_stale(sh, &held_before);
            }
            sh.lease.grant(sent_at, Duration::from_millis(lease_ms));
            info!(server_id, addr = %sh.advertise, lease_ms, fenced, "registered with manager");
            if let Err(e) = crate::identity::save(&sh.config, server_id) {
                warn!("cannot keep the server id: {e}");
            }
            Ok(Duration::from_millis(heartbeat_ms.clamp(10, 60_000)))
        }
        other => Err(RpcError::Unexpected(format!(
            "reply to RegisterServer: {other:?}"
        ))),
    }
}

/// The manager declared this server dead and gave its regions to others: the copies
/// it still holds are stale and go before it serves again.
fn drop_stale(sh: &Shared, held: &[farcache_proto::control::HeldRegion]) {
    sh.lease.revoke();
    sh.metrics.guard.fenced.fetch_add(1, Ordering::Relaxed);
    sh.replicator.fail_all(sh, "this server was fenced");
    for r in held {
        sh.migrations.abort(sh, r.cache, r.region, "server fenced");
        sh.store.free(r.cache, r.region, None);
    }
    crate::cluster::control::refresh_peers(sh);
    warn!(
        dropped = held.len(),
        "the manager had declared this server dead: dropped every region it held"
    );
}

/// Tells the manager this server will be reclaimed within `grace` (it then moves
/// the regions away).
pub fn announce_reclaim(
    sh: &Shared,
    grace: Duration,
    mode: farcache_proto::control::MigrationMode,
) -> Result<(), RpcError> {
    let manager = sh
        .config
        .manager
        .as_deref()
        .ok_or_else(|| RpcError::Unexpected("no manager configured".into()))?;
    let id = sh.server_id();
    if id == 0 {
        return Err(RpcError::Unexpected(
            "not registered with the manager yet".into(),
        ));
    }
    let req = ControlRequest::ReclaimServer {
        server_id: id,
        grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        mode,
    };
    // The leader answers; a standby names it (asked next, if not in the list) and a
    // deposed one says NotLeader.
    let mut last = RpcError::Unexpected("no manager address configured".into());
    let mut queue: std::collections::VecDeque<String> = manager_addrs(manager).into();
    // Bounds the asks when standbys keep naming each other during a change of leader.
    let mut asks = 0;
    while let Some(addr) = queue.pop_front()
        && asks < 16
    {
        asks += 1;
        let answer = connect(&sh.dialer, &addr).and_then(|mut s| control_call(&mut s, &req));
        match answer {
            Ok(ControlResponse::Ok) => return Ok(()),
            Ok(other) => {
                return Err(RpcError::Unexpected(format!(
                    "reply to ReclaimServer: {other:?}"
                )));
            }
            Err(RpcError::Remote {
                code: ControlErrorCode::NotLeader,
                message,
            }) => {
                last = RpcError::Remote {
                    code: ControlErrorCode::NotLeader,
                    message,
                }
            }
            Err(RpcError::Redirect { leader, leader_tls }) => {
                queue.push_front(leader.clone());
                last = RpcError::Redirect { leader, leader_tls };
            }
            Err(e @ RpcError::Remote { .. }) => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Reports backups whose writes have waited `after` (two leases) without an
/// acknowledgement: the manager drops them
/// from this server's regions, so their writes stop waiting for a link that may not
/// heal. Reported again each heartbeat while it lasts (the table may lag).
fn report_stalled(
    sh: &Shared,
    s: &mut TcpStream,
    after: Duration,
    reported: &mut Vec<String>,
) -> Result<(), RpcError> {
    let stalled = sh.replicator.stalled(after);
    // Warned once per stall, not once per heartbeat.
    reported.retain(|b| stalled.iter().any(|(s, _)| s == b));
    for (backup, waited) in stalled {
        let req = ControlRequest::BackupStalled {
            server_id: sh.server_id(),
            backup: backup.clone(),
            stalled_ms: waited.as_millis() as u64,
        };
        match control_call(s, &req) {
            Ok(_) if !reported.contains(&backup) => {
                warn!(%backup, ?waited, "writes wait for a backup: reported it to the manager");
                reported.push(backup);
            }
            Ok(_) => {}
            Err(RpcError::Remote { code, message }) => {
                warn!(%backup, ?code, "the manager kept a stalled backup: {message}");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs until shutdown: register, then heartbeat; on any failure reconnect with backoff
/// (to the next manager in the list, if several are given).
pub fn run(sh: Arc<Shared>, managers: String) {
    let mut addrs = manager_addrs(&managers);
    if addrs.is_empty() {
        warn!(%managers, "no manager address: not registering");
        return;
    }
    let mut at = 0;
    // With standbys, a new leader is looked for more often: the lease runs meanwhile.
    let cap = if addrs.len() > 1 {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(1)
    };
    let mut backoff = Duration::from_millis(50);
    let mut warned = false;
    let mut reported: Vec<String> = Vec::new();
    // The leader a standby named last.
    let mut named: Option<String> = None;
    while !sh.shutdown.load(Ordering::Acquire) {
        let manager = &addrs[at % addrs.len()];
        let r = (|| -> Result<(), RpcError> {
            let mut s = connect(&sh.dialer, manager)?;
            let every = register(&sh, &mut s)?;
            warned = false;
            named = None;
            backoff = Duration::from_millis(50);
            while !sh.shutdown.load(Ordering::Acquire) {
                sh.sleep(every);
                let held = sh.store.held();
                let hb = ControlRequest::Heartbeat {
                    server_id: sh.server_id(),
                    used: sh.store.used(),
                    regions: held.len() as u64,
                    digest: region_digest(held),
                };
                let sent_at = sh.lease.clock();
                match control_call(&mut s, &hb) {
                    Ok(ControlResponse::Lease { lease_ms }) => {
                        sh.lease.grant(sent_at, Duration::from_millis(lease_ms));
                        // Two leases: a backup that is only slow (a loaded machine)
                        // is not dropped and copied again for nothing.
                        let after = 2 * Duration::from_millis(lease_ms);
                        report_stalled(&sh, &mut s, after, &mut reported)?;
                    }
                    Ok(_) => {}
                    Err(RpcError::Remote {
                        code: ControlErrorCode::UnknownServer | ControlErrorCode::Fenced,
                        ..
                    }) => {
                        // Stop serving at once: registering again says whether the
                        // regions held here are still this server's.
                        sh.lease.revoke();
                        register(&sh, &mut s)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })();
        if let Err(RpcError::Redirect { leader, .. }) = &r {
            // A standby named the leader: ask it next, at once, unless it named it
            // before and it did not answer (it just died: the standbys name the
            // next one once it leads).
            if named.as_deref() == Some(leader.as_str()) {
                sh.sleep(Duration::from_millis(20));
            }
            named = Some(leader.clone());
            at = match addrs.iter().position(|a| a == leader) {
                Some(i) => i,
                // Bounded: past the cap, a named leader replaces the last one added.
                None if addrs.len() < 64 => {
                    addrs.push(leader.clone());
                    addrs.len() - 1
                }
                None => {
                    let last = addrs.len() - 1;
                    addrs[last].clone_from(leader);
                    last
                }
            };
            continue;
        }
        if let Err(e) = r {
            if !warned {
                warn!(%manager, "manager unreachable, retrying: {e}");
                warned = true;
            }
            at += 1;
            // A full round of the list without an answer: back off before the next.
            if at.is_multiple_of(addrs.len()) {
                sh.sleep(backoff);
                backoff = (backoff * 2).min(cap);
            }
        }
    }
}
