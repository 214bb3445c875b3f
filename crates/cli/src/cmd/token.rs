use anyhow::Result;
use farcache_client::{Client, Rights};

use super::Credentials;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// The cache the token reaches.
    #[arg(long)]
    cache: String,
    /// Reads and procedures only.
    #[arg(long)]
    read_only: bool,
    #[command(flatten)]
    creds: Credentials,
}

/// Prints a token for one cache (needs the cluster secret).
pub fn run(a: Args) -> Result<()> {
    a.creds.require_secret("issuing a token")?;
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    let rights = if a.read_only {
        Rights::ReadOnly
    } else {
        Rights::ReadWrite
    };
    outln!("{}", client.issue_token(&a.cache, rights)?)?;
    Ok(())
}
