//! `farcache resp`: a Redis-protocol front end for one keyed store.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use farcache_client::{Client, Rights};
use farcache_resp::{AuthPolicy, Frontend, FrontendConfig};
use farcache_store::{StoreExt, StoreOptions};

use super::Credentials;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// Where redis-cli, redis-benchmark and redis-py connect.
    #[arg(long, default_value = "127.0.0.1:6380")]
    listen: String,
    /// The keyed store to serve (created with --capacity if it does not exist).
    #[arg(long, default_value = "resp")]
    store: String,
    /// Capacity of a store this command creates.
    #[arg(long, default_value = "256MiB", value_parser = crate::size::parse_size)]
    capacity: u64,
    /// Expected bytes per value, to size a new store's index.
    #[arg(long, default_value_t = 128)]
    avg_value_size: u64,
    /// Copies of every region of a store this command creates (2: a server can die
    /// without losing a key).
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Serve without `AUTH` (every connection may read and write). Without it,
    /// clients `AUTH` with the cache's read-write or read-only token.
    #[arg(long)]
    no_auth: bool,
    /// Event-loop threads (each batches the commands of its connections; two let
    /// one build a round while the other waits on the store).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Ops per batch to a farcache server (a round of many connections' commands
    /// is one large multi-get or multi-put).
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Batches in flight per farcache connection.
    #[arg(long, default_value_t = 8)]
    queue_depth: usize,
    /// Most client connections.
    #[arg(long, default_value_t = 1024)]
    max_clients: usize,
    /// Write the bound address here once listening (for scripts and tests).
    #[arg(long)]
    addr_file: Option<PathBuf>,
    #[command(flatten)]
    creds: Credentials,
}

pub fn run(a: Args) -> Result<()> {
    // One farcache connection per event loop, so the loops never share a lane.
    let config = a
        .creds
        .config(&a.manager)?
        .connections(a.threads.max(1))
        .batch_size(a.batch_size)
        .queue_depth(a.queue_depth);
    let client = Client::with_config(config)
        .with_context(|| format!("cannot reach the manager at {}", a.manager))?;
    let store = match client.open_store(&a.store) {
        Ok(s) => s,
        Err(open_err) => {
            let opts = StoreOptions {
                avg_value_size: a.avg_value_size,
                replicas: a.replicas,
                ..StoreOptions::default()
            };
            client
                .create_store(&a.store, a.capacity, &opts)
                .with_context(|| {
                    format!(
                        "store {:?} could not be opened ({open_err}) nor created",
                        a.store
                    )
                })?
        }
    };
    let auth = if a.no_auth {
        let loopback = a
            .listen
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|s| s.ip().is_loopback());
        if !loopback {
            tracing::warn!(listen = %a.listen, "serving without AUTH on a non-loopback address");
        }
        AuthPolicy::Open
    } else {
        match store.cache().tokens() {
            Some(t) => AuthPolicy::Tokens {
                read_write: t.read_write.clone(),
                read_only: Some(t.read_only.clone()),
            },
            // An existing store: the cluster secret issues its tokens again (they
            // are derived from the secret, so they equal the ones handed out).
            None => match (
                client.issue_token(&a.store, Rights::ReadWrite),
                client.issue_token(&a.store, Rights::ReadOnly),
            ) {
                (Ok(read_write), Ok(read_only)) => AuthPolicy::Tokens {
                    read_write,
                    read_only: Some(read_only),
                },
                (Err(e), _) | (_, Err(e)) => bail!(
                    "cannot learn the store's tokens ({e}); start the front end with the \
                     cluster secret (--secret-file), or pass --no-auth"
                ),
            },
        }
    };
    let mut cfg = FrontendConfig::new(a.listen.clone(), auth);
    cfg.max_clients = a.max_clients;
    cfg.threads = a.threads;
    let fe = Frontend::start(store, cfg)?;
    super::write_addr_file(a.addr_file.as_deref(), &fe.local_addr().to_string(), None)?;
    outln!(
        "farcache resp serving store {:?} on {} ({})",
        a.store,
        fe.local_addr(),
        if a.no_auth {
            "no AUTH".to_string()
        } else {
            format!("AUTH with `farcache token --cache {}`", a.store)
        }
    )?;
    fe.wait();
    Ok(())
}
