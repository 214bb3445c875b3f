use std::path::PathBuf;

use anyhow::Result;
use farcache_client::ClusterSecret;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the new key (created readable by its owner only; never
    /// overwritten).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    ClusterSecret::create(&a.out)?;
    outln!(
        "wrote a new cluster secret to {}\ngive it to the manager and every server (--secret-file), and to trusted clients (FARCACHE_SECRET_FILE)",
        a.out.display()
    )?;
    Ok(())
}
