use anyhow::Result;
use farcache_client::Client;

use crate::size::human;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// Also list every region of every cache.
    #[arg(long)]
    regions: bool,
    #[command(flatten)]
    creds: super::Credentials,
}

pub fn run(a: Args) -> Result<()> {
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    let s = client.status()?;
    println!("servers ({}):", s.servers.len());
    println!(
        "  {:>3}  {:<22} {:<9} {:>10} {:>10} {:>5} {:<9} {:>8}",
        "id", "address", "state", "memory", "used", "cores", "class", "$/GiB-h"
    );
    for v in &s.servers {
        println!(
            "  {:>3}  {:<22} {:<9} {:>10} {:>10} {:>5} {:<9} {:>8.4}",
            v.id,
            v.addr,
            format!("{:?}", v.state).to_lowercase(),
            human(v.memory),
            human(v.used),
            v.cores,
            v.price_class.to_string(),
            v.price_per_gib_hour
        );
    }
    println!("caches ({}):", s.caches.len());
    println!(
        "  {:>3}  {:<20} {:>10} {:>10} {:>7} {:>6}  servers",
        "id", "name", "capacity", "region", "regions", "epoch"
    );
    for c in &s.caches {
        let mut per: Vec<(u32, usize)> = Vec::new();
        for r in &c.regions {
            match per.iter_mut().find(|(s, _)| s == r) {
                Some(e) => e.1 += 1,
                None => per.push((*r, 1)),
            }
        }
        let spread: Vec<String> = per.iter().map(|(s, n)| format!("#{s}×{n}")).collect();
        println!(
            "  {:>3}  {:<20} {:>10} {:>10} {:>7} {:>6}  {}",
            c.id,
            c.name,
            human(c.capacity),
            human(c.region_size),
            c.regions.len(),
            c.epoch,
            spread.join(" ")
        );
        if a.regions {
            for (i, r) in c.regions.iter().enumerate() {
                let start = i as u64 * c.region_size;
                println!(
                    "       region {i:>4} [{start:#x}, {:#x}) -> server {r}",
                    start + c.region_size
                );
            }
        }
    }
    Ok(())
}
