pub mod bench;
pub mod demo;
pub mod manager;
pub mod server;
pub mod status;
pub mod up;

/// Writes `addr` and a newline to `path` (how test harnesses learn an ephemeral port).
pub fn write_addr_file(path: Option<&std::path::Path>, addr: &str) -> anyhow::Result<()> {
    if let Some(p) = path {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{addr}\n"))?;
        std::fs::rename(&tmp, p)?;
    }
    Ok(())
}
