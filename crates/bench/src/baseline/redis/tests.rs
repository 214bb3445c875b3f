use super::*;

/// Captured from redis-benchmark 7.0.15 on the dev machine
/// (`-t get,set -n 100000 -d 64 -c 1 -P 64 -r 1000 --csv`).
const REDIS7_CSV: &str = r#""test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","602602.44","0.093","0.056","0.095","0.135","0.151","0.271"
"GET","826710.75","0.063","0.048","0.063","0.087","0.111","1.695"
"#;

/// Format of redis-benchmark before Redis 6.2 (no header, 2 columns).
const OLD_CSV: &str = "\"SET\",\"26881.72\"\r\n\"GET\",\"28612.30\"\r\n";

fn opts() -> RedisOpts {
    RedisOpts {
        value_size: 64,
        clients: 1,
        pipeline: 64,
        requests: 100_000,
        keyspace: 1000,
        threads: 1,
    }
}

#[test]
fn parses_redis7_csv() {
    let r = parse_redis_csv(REDIS7_CSV, &opts()).expect("parse");
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].test, "SET");
    assert_eq!(r[1].test, "GET");
    assert!((r[1].ops_per_sec - 826_710.75).abs() < 1e-6);
    assert!((r[1].p50_us - 63.0).abs() < 1e-9);
    assert!((r[1].p99_us - 111.0).abs() < 1e-9);
    assert!((r[1].avg_us - 63.0).abs() < 1e-9);
    assert!((r[0].p50_us - 95.0).abs() < 1e-9);
    assert_eq!(r[0].pipeline, 64);
    assert_eq!(r[0].value_size, 64);
    assert!((r[1].mops() - 0.82671075).abs() < 1e-9);
}

#[test]
fn parses_old_two_column_csv() {
    let r = parse_redis_csv(OLD_CSV, &opts()).expect("parse");
    assert_eq!(r.len(), 2);
    assert!((r[0].ops_per_sec - 26_881.72).abs() < 1e-6);
    assert!(r[0].p50_us.is_nan() && r[0].p99_us.is_nan() && r[0].avg_us.is_nan());
}

#[test]
fn rejects_garbage() {
    assert!(parse_redis_csv("ERROR: connection refused\n", &opts()).is_err());
    assert!(parse_redis_csv("\"GET\",\"fast\"\n", &opts()).is_err());
}

#[test]
fn baseline_opts_scaling() {
    let o = RedisBaselineOpts::new(64, true);
    assert_eq!(o.pipelined_requests, 100_000);
    assert_eq!(o.unpipelined_requests, 10_000);
    assert_eq!(o.run_opts(1, 4).requests, 40_000);
    assert_eq!(o.run_opts(64, 4).requests, 100_000);
}

#[test]
fn sweep_adds_threaded_pipelined_runs() {
    let o = RedisBaselineOpts::new(64, true);
    let runs = o.sweep();
    // 4 pipelines x 2 client counts, then threads=2 for P>1 with c=4.
    assert_eq!(runs.len(), 8 + 3);
    let threaded: Vec<(usize, usize)> = runs
        .iter()
        .filter(|r| r.threads == 2)
        .map(|r| (r.pipeline, r.clients))
        .collect();
    assert_eq!(threaded, vec![(16, 4), (64, 4), (128, 4)]);
    let only_single = RedisBaselineOpts {
        bench_threads: vec![1],
        ..o.clone()
    };
    assert_eq!(only_single.sweep().len(), 8);
    // Old JSON without the new fields still parses.
    let mut v = serde_json::to_value(&o).expect("json");
    v.as_object_mut().map(|m| m.remove("bench_threads"));
    let back: RedisBaselineOpts = serde_json::from_value(v).expect("parse");
    assert_eq!(back.bench_threads, vec![1, 2]);
}

#[test]
fn threaded_label_and_default() {
    let mut r = parse_redis_csv(REDIS7_CSV, &opts())
        .expect("parse")
        .remove(1);
    assert_eq!(r.label(), "redis GET P=64 c=1");
    r.threads = 2;
    assert_eq!(r.label(), "redis GET P=64 c=1 threads=2");
    let mut v = serde_json::to_value(&r).expect("json");
    v.as_object_mut().map(|m| m.remove("threads"));
    let back: RedisResult = serde_json::from_value(v).expect("parse");
    assert_eq!(back.threads, 1);
}

#[test]
#[ignore = "runs redis-server and redis-benchmark (several seconds)"]
fn live_redis_baseline() {
    let mut o = RedisBaselineOpts::new(64, true).scaled(0.2);
    o.pipelines = vec![1, 64];
    o.clients = vec![1, 2];
    let b = redis_baseline(&o).expect("redis baseline");
    assert!(
        b.runs
            .iter()
            .any(|r| r.threads == 2 && r.label() == "redis GET P=64 c=2 threads=2"),
        "{b:?}"
    );
    assert!(b.best_get_mops() > 0.01, "{b:?}");
    assert!(b.best_get.ops_per_sec >= b.unpipelined_get.ops_per_sec);
    assert!(b.unpipelined_get_p50_us() > 0.0);
    let single = redis_get_set(&RedisOpts {
        requests: 2000,
        keyspace: 1000,
        ..RedisOpts::default()
    })
    .expect("redis_get_set");
    assert_eq!(single.len(), 2);
}
