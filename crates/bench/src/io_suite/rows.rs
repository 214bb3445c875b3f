//! `bench io`'s rows: a farcache run's figures beside the best peer, the Redis
//! sweep, the in-process ceiling and the raw-TCP floors, with the issue's targets.

use super::{
    TARGET_BANDWIDTH_RATIO, TARGET_CEILING_FRACTION, TARGET_LATENCY_RATIO, TARGET_THROUGHPUT_RATIO,
};
use crate::baseline::peers::PeerOp;
use crate::io::{IoOp, IoOutcome, IoSpec};
use crate::report::{BenchReport, BenchRow};
use crate::workload::KeyDistribution;

fn base_row(name: String, op: &str, size: usize, dist: String, c: usize, s: usize) -> BenchRow {
    BenchRow {
        name,
        system: "farcache".into(),
        op: op.into(),
        record_size: size,
        distribution: dist,
        c: Some(c),
        s: Some(s),
        ..BenchRow::default()
    }
}

/// How a throughput row was run, beyond its spec.
pub(super) struct Shape {
    pub c: usize,
    pub s: usize,
    /// Working-set suffix of the row name.
    pub suffix: String,
    /// Mops of the same batches in-process, if measured.
    pub ceiling: Option<f64>,
}

pub(super) fn throughput_row(
    report: &BenchReport,
    spec: &IoSpec,
    out: &IoOutcome,
    shape: &Shape,
) -> BenchRow {
    let (c, s) = (shape.c, shape.s);
    let size = spec.record_size;
    let mut row = BenchRow {
        b: Some(spec.batch),
        q: Some(spec.depth),
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        p999_us: out.latency.p999_us,
        working_set_bytes: Some(spec.records * size as u64),
        ..base_row(
            format!(
                "farcache {} {size}B {}{}",
                spec.op.name(),
                spec.dist,
                shape.suffix
            ),
            spec.op.name(),
            size,
            spec.dist.to_string(),
            c,
            s,
        )
    };
    if out.errors > 0 {
        row.name.push_str(&format!(" ({} errors)", out.errors));
    }
    // Runs with op errors still get their targets, marked as missed.
    let issue_shape = c == 1 && s == 1 && spec.dist == KeyDistribution::Uniform;
    let clean = out.errors == 0;
    let baselines = &report.baselines;
    if let Some(redis) = baselines
        .redis_for(size)
        .filter(|r| r.keyspace == spec.records)
    {
        let (label, mops) = match spec.op {
            IoOp::Read => (redis.best_get.label(), redis.best_get_mops()),
            IoOp::Write => (redis.best_set.label(), redis.best_set_mops()),
        };
        row = row.with_redis_baseline(label, mops);
    }
    let peer_op = match spec.op {
        IoOp::Read => PeerOp::Get,
        IoOp::Write => PeerOp::Set,
    };
    if let Some((peer, mops)) = baselines.best_peer(peer_op, size, spec.records) {
        row = row.with_best_peer(peer, mops);
    }
    if let Some(ceiling) = shape.ceiling {
        row = row.with_ceiling(ceiling);
    }
    let mut targets: Vec<(String, bool)> = Vec::new();
    if size == 8 && issue_shape && row.best_peer.is_some() {
        let met = row
            .ratio_vs_best_peer
            .is_some_and(|r| r >= TARGET_THROUGHPUT_RATIO);
        targets.push((format!(">= {TARGET_THROUGHPUT_RATIO}x best peer"), met));
    }
    if size == 8 && issue_shape && spec.op == IoOp::Read && row.fraction_of_ceiling.is_some() {
        let met = row
            .fraction_of_ceiling
            .is_some_and(|f| f >= TARGET_CEILING_FRACTION);
        targets.push((
            format!(">= {:.0}% ceiling", TARGET_CEILING_FRACTION * 100.0),
            met,
        ));
    }
    let gbps = out.bytes_per_sec * 8.0 / 1e9;
    // Bandwidth is a fair yardstick only where records are big enough to be
    // bound by bytes rather than by per-op work.
    if let Some(sp) = baselines.sockperf.as_ref().filter(|_| size >= 1024) {
        row = row.with_bandwidth(gbps, sp.throughput.gbps);
    }
    if let Some(t) = baselines.raw_tcp.as_ref().filter(|_| size >= 1024) {
        row.bandwidth_gbps = Some(gbps);
        row.bandwidth_ratio_vs_stream = (t.gbps > 0.0).then(|| gbps / t.gbps);
        if size == 4096 && spec.op == IoOp::Read && issue_shape {
            let met = row
                .bandwidth_ratio_vs_stream
                .is_some_and(|r| r >= TARGET_BANDWIDTH_RATIO);
            targets.push((
                format!(
                    ">= {:.0}% of the TCP stream",
                    TARGET_BANDWIDTH_RATIO * 100.0
                ),
                met,
            ));
        }
    }
    if !targets.is_empty() {
        let label = targets
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let met = clean && targets.iter().all(|(_, m)| *m);
        row = row.with_target(label, met);
    }
    row
}

pub(super) fn latency_row(
    report: &BenchReport,
    size: usize,
    out: &IoOutcome,
    c: usize,
    s: usize,
) -> BenchRow {
    let mut row = BenchRow {
        b: Some(1),
        q: Some(1),
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        p999_us: out.latency.p999_us,
        ..base_row(
            format!("farcache unbatched read {size}B"),
            "read",
            size,
            "uniform".into(),
            c,
            s,
        )
    };
    let baselines = &report.baselines;
    if let Some(rtt) = baselines.raw_rtt_p50_us() {
        row = row.with_latency_baseline(rtt);
    }
    // What the latency is compared with, named: the spinning RTT the ratio uses,
    // sockperf's blocking RTT, and Redis's unpipelined GET from a spinning client.
    let mut refs = Vec::new();
    if let Some(v) = baselines.spin_rtt_p50_us() {
        refs.push(format!("spin RTT p50 {v:.1}us"));
    }
    if let Some(sp) = &baselines.sockperf {
        refs.push(format!(
            "sockperf RTT p50 {:.1}us (blocking)",
            sp.rtt_p50_us()
        ));
    }
    if let Some(v) = baselines.redis_spin_get_p50_us(size) {
        refs.push(format!("redis spin GET p50 {v:.1}us"));
    }
    if !refs.is_empty() {
        row.baseline = Some(refs.join("; "));
    }
    if size == 8 && s == 1 && row.latency_ratio_vs_raw_tcp.is_some() {
        let met = out.errors == 0
            && row
                .latency_ratio_vs_raw_tcp
                .is_some_and(|r| r <= TARGET_LATENCY_RATIO);
        row = row.with_target(format!("p50 <= {TARGET_LATENCY_RATIO}x spin RTT"), met);
    }
    row
}
