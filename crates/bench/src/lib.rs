//! farcache benchmark harness: Redis / raw-TCP baselines, workload
//! generators, latency histograms and report output (table, JSON, PNG).
//!
//! The farcache-side runner lives alongside these modules and compares its
//! rows against the baselines here.

pub mod baseline;
pub mod calibrate;
pub mod ceiling;
pub mod chaos_chart;
pub mod drain;
pub mod error;
pub mod histogram;
pub mod io;
pub mod io_suite;
pub mod migrate;
pub mod model_suite;
pub mod replication;
pub mod report;
pub mod resp_suite;
pub mod row;
pub mod slo_suite;
pub mod sproc_suite;
pub mod store_suite;
pub mod tools;
pub mod workload;

pub use baseline::free_port;
pub use baseline::redis::{
    RedisBaseline, RedisBaselineOpts, RedisOpts, RedisResult, RedisServer, parse_redis_csv,
    redis_baseline, redis_get_set,
};
pub use baseline::sockperf::{
    PingPongResult, SockperfBaseline, SockperfOpts, SockperfServer, ThroughputResult,
    parse_pingpong, parse_throughput, sockperf_baseline,
};
pub use chaos_chart::write_chaos_chart;
pub use error::{BenchError, Result};
pub use histogram::{LatencyHistogram, LatencySummary};
pub use report::{
    Baselines, BenchReport, BenchRow, DEFAULT_RESULTS_DIR, MachineInfo, ReportHead, format_table,
    print_table, write_chart, write_chart_with_font, write_json,
};
pub use tools::{Tool, ensure_tools};
pub use workload::{
    Access, DEFAULT_ZIPF_THETA, KeyDistribution, KeyGen, Mix, Op, Scramble, WorkloadGen,
};
