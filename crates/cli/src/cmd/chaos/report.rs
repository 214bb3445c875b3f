//! The chaos run's report: what was lost or unavailable, by kind of event, and the
//! split-brain measure; printed as a table and JSON.

use super::*;

#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) duration_s: f64,
    pub(super) replicas: u32,
    pub(super) servers: usize,
    pub(super) reclaims: u32,
    pub(super) kills: u32,
    pub(super) added: u32,
    pub(super) ops: u64,
    pub(super) wrong_reads: u64,
    pub(super) acked_writes_lost: u64,
    pub(super) acked_writes_lost_reported: u64,
    pub(super) op_errors: u64,
    pub(super) max_unavailable_ms: u64,
    /// Servers heartbeat this often; failover should take under three intervals.
    pub(super) heartbeat_interval_ms: u64,
    /// Backups that took a region over from a killed owner.
    pub(super) promotions: usize,
    /// Longest wait, before a kill, for every region to have all its copies again.
    pub(super) max_rereplication_wait_ms: u64,
    pub(super) migrations: usize,
    pub(super) migrated_gib: f64,
    pub(super) migration_gib_per_s: f64,
    pub(super) max_write_pause_ms: f64,
    pub(super) lost_regions: usize,
    /// Network faults (with --lab).
    pub(super) partitions: u32,
    pub(super) vanishes: u32,
    /// The lab's own round trip, client to manager (0 without --lab).
    pub(super) lab_rtt_us: f64,
    /// The history check over every op (reads and writes of slots never lost).
    pub(super) checked_ops: u64,
    pub(super) stale_reads: u64,
    /// Reads of bytes no write put there, or of a write not yet invoked.
    pub(super) history_wrong_reads: u64,
    pub(super) reads_back_in_time: u64,
    /// Longest unavailability of a region, by the kind of the last event before it.
    pub(super) max_unavailable_ms_by_kind: BTreeMap<String, u64>,
    /// Total time two servers acknowledged writes to one region at once, from the
    /// servers' own acknowledgement windows (polled every second): must be 0.
    pub(super) split_brain_ms: f64,
    /// Acknowledgement windows compared (server, region, ownership period).
    pub(super) ack_windows: usize,
    /// With two copies or more: fetch-adds on counters in a cache of their own,
    /// each checked to count once (no add applied twice, none acknowledged lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) counters: Option<farcache_testkit::counters::CounterReport>,
    /// Managers (2 or more: on etcd, one leading).
    pub(super) managers: usize,
    pub(super) leader_kills: u32,
    /// Times another manager took the lead after a kill.
    pub(super) manager_failovers: u32,
    /// Longest time from a leader's kill until another manager listened.
    pub(super) max_failover_ms: u64,
    /// Longest stretch in which no manager answered a status call (probed every
    /// 50 ms; from the last answer before to the first after).
    pub(super) max_control_unavailable_ms: u64,
    pub(super) control_probes: u64,
    pub(super) events: Vec<Event>,
    /// Ops per 100 ms.
    pub(super) timeline: Vec<u64>,
    pub(super) samples: Vec<String>,
}

/// The longest unavailability per kind of event: each stretch of failing ops is
/// put down to the last event at or before its start.
fn unavailable_by_kind(v: &VerifyReport, events: &[Event]) -> BTreeMap<String, u64> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for &(start, len) in &v.unavailable {
        let kind = events
            .iter()
            .rev()
            .find(|e| e.at_ms <= start + 50)
            .map_or("none".to_string(), partition_class);
        let m = by.entry(kind).or_default();
        *m = (*m).max(len);
    }
    by
}

/// An event's kind, a partition's with the link it cut: only one from the manager
/// can be failed over (the manager alone moves regions); one from the client or
/// between servers lasts as long as the cut, plus TCP's retransmission backoff.
fn partition_class(e: &Event) -> String {
    if e.kind != "partition" {
        return e.kind.to_string();
    }
    let class = if e.what.contains("manager") {
        "manager"
    } else if e.what.contains("client") {
        "client"
    } else {
        "servers"
    };
    format!("partition:{class}")
}

pub(super) fn build(
    a: &Args,
    took: Duration,
    v: &VerifyReport,
    st: &ClusterStatus,
    events: Vec<Event>,
    added: u32,
) -> Report {
    let bytes: u64 = st.migrations.iter().map(|m| m.bytes).sum();
    let copy_s: f64 = st.migrations.iter().map(|m| m.copy_us as f64 / 1e6).sum();
    let gib = bytes as f64 / f64::from(1u32 << 30);
    Report {
        duration_s: took.as_secs_f64(),
        replicas: a.replicas,
        servers: a.servers,
        reclaims: events.iter().filter(|e| e.kind == "reclaim").count() as u32,
        kills: events.iter().filter(|e| e.kind == "kill").count() as u32,
        partitions: events.iter().filter(|e| e.kind == "partition").count() as u32,
        vanishes: events.iter().filter(|e| e.kind == "vanish").count() as u32,
        lab_rtt_us: 0.0,
        checked_ops: 0,
        stale_reads: 0,
        history_wrong_reads: 0,
        reads_back_in_time: 0,
        max_unavailable_ms_by_kind: unavailable_by_kind(v, &events),
        split_brain_ms: 0.0,
        ack_windows: 0,
        counters: None,
        managers: 1,
        leader_kills: 0,
        manager_failovers: 0,
        max_failover_ms: 0,
        max_control_unavailable_ms: 0,
        control_probes: 0,
        added,
        ops: v.reads + v.writes,
        wrong_reads: v.wrong_reads,
        acked_writes_lost: v.acked_writes_lost,
        acked_writes_lost_reported: v.acked_writes_lost_reported,
        op_errors: v.op_errors,
        max_unavailable_ms: v.max_unavailable_ms,
        heartbeat_interval_ms: 0,
        promotions: st.promotions.len(),
        max_rereplication_wait_ms: 0,
        migrations: st.migrations.len(),
        migrated_gib: gib,
        migration_gib_per_s: if copy_s > 0.0 { gib / copy_s } else { 0.0 },
        max_write_pause_ms: st
            .migrations
            .iter()
            .map(|m| m.max_pause_us as f64 / 1e3)
            .fold(0.0, f64::max),
        lost_regions: st.lost.len(),
        events,
        timeline: v.timeline.clone(),
        samples: v.samples.clone(),
    }
}

pub(super) fn print(r: &Report) -> Result<()> {
    outln!(
        "chaos: {:.0} s, {} servers, {} replica(s)",
        r.duration_s,
        r.servers,
        r.replicas
    )?;
    outln!(
        "  events      {} reclaims, {} kills, {} partitions, {} vanishes, {} servers added",
        r.reclaims,
        r.kills,
        r.partitions,
        r.vanishes,
        r.added
    )?;
    outln!(
        "  managers    {} ({} leader kills, {} failovers, longest {} ms); longest control-plane \
         outage {} ms ({} status probes)",
        r.managers,
        r.leader_kills,
        r.manager_failovers,
        r.max_failover_ms,
        r.max_control_unavailable_ms,
        r.control_probes
    )?;
    if r.lab_rtt_us > 0.0 {
        outln!(
            "  lab         round trip client -> manager {:.0} µs",
            r.lab_rtt_us
        )?;
    }
    outln!(
        "  ops         {} ({} failed: unreachable servers)",
        r.ops,
        r.op_errors
    )?;
    outln!("  wrong reads {}", r.wrong_reads)?;
    outln!(
        "  split brain {:.1} ms with two servers acknowledging writes to one region ({} \
         acknowledgement windows compared)",
        r.split_brain_ms,
        r.ack_windows
    )?;
    outln!(
        "  history     {} ops checked as linearizable registers: {} stale reads, {} reads of \
         bytes no write put there, {} reads back in time",
        r.checked_ops,
        r.stale_reads,
        r.history_wrong_reads,
        r.reads_back_in_time
    )?;
    outln!(
        "  acknowledged writes lost: {} silently, {} reported as DataLost ({} regions lost)",
        r.acked_writes_lost,
        r.acked_writes_lost_reported,
        r.lost_regions
    )?;
    outln!(
        "  longest unavailability of a region: {} ms (heartbeats every {} ms); by the last \
         event before it: {:?}",
        r.max_unavailable_ms,
        r.heartbeat_interval_ms,
        r.max_unavailable_ms_by_kind
    )?;
    if r.replicas > 1 {
        outln!(
            "  promotions  {} (backups that took over from killed owners); longest wait for \
             re-replication before a kill: {} ms",
            r.promotions,
            r.max_rereplication_wait_ms
        )?;
    }
    outln!(
        "  migrations  {} ({:.2} GiB at {:.2} GiB/s, longest write pause {:.1} ms)",
        r.migrations,
        r.migrated_gib,
        r.migration_gib_per_s,
        r.max_write_pause_ms
    )?;
    if let Some(c) = &r.counters {
        outln!(
            "  fetch-adds  {} acknowledged, {} of unknown outcome on {} counters: {} applied \
             twice, {} acknowledged and lost, {} counters unreadable",
            c.adds,
            c.adds_unknown,
            c.counters,
            c.double_adds,
            c.lost_adds,
            c.unreadable
        )?;
    }
    for s in r.samples.iter().take(5) {
        outln!("  sample: {s}")?;
    }
    Ok(())
}
