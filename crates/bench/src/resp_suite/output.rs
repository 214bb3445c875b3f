//! The table and JSON of `bench resp`.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::report::{BenchRow, MachineInfo, write_json_to};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RespReport {
    pub bench: String,
    pub timestamp_unix: u64,
    pub build: String,
    pub machine: MachineInfo,
    pub value_size: usize,
    pub keyspace: u64,
    pub clients: usize,
    pub note: String,
    pub rows: Vec<BenchRow>,
}

pub fn format_resp_table(r: &RespReport) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "farcache RESP front end vs Redis, same redis-benchmark, {} B values, {} keys, {} connections",
        r.value_size, r.keyspace, r.clients
    );
    let _ = writeln!(
        t,
        "{:<40} {:>12} {:>9} {:>9} {:>10}",
        "row", "req/s*", "p50 µs", "p99 µs", "vs redis"
    );
    for row in &r.rows {
        let ratio = row
            .ratio_vs_redis
            .map_or_else(String::new, |x| format!("{x:.2}×"));
        let _ = writeln!(
            t,
            "{:<40} {:>12.0} {:>9.0} {:>9.0} {:>10}",
            row.name,
            row.mops * 1e6,
            row.p50_us,
            row.p99_us,
            ratio
        );
    }
    let _ = writeln!(
        t,
        "* keys/s for the driver rows; redis-benchmark's p50/p99 are per command, the driver's per MGET"
    );
    let _ = writeln!(t, "{}", r.note);
    t
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_resp_json_to(r: &RespReport, path: &Path) -> Result<()> {
    write_json_to(r, path)
}
