//! `farcache`: one binary for every role. Each subcommand is a thin layer over a library.

#[macro_use]
mod stdout;
mod cmd;
mod size;

use std::process::ExitCode;

// Every role allocates per request (frames, replies, batches); the system
// allocator's locks and consolidation showed in the front end's profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "farcache",
    version,
    about = "A distributed, computable remote-memory cache"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a cache server.
    Server(cmd::server::Args),
    /// Run the manager (catalogue of servers, caches and regions).
    Manager(cmd::manager::Args),
    /// Start a manager and N servers on 127.0.0.1 as child processes.
    Up(cmd::up::Args),
    /// Run a local 3-server cluster, fill, verify and exercise a cache, print results.
    Demo(cmd::demo::Args),
    /// A cluster in a network lab (a namespace per process, one switch): cut links,
    /// make hosts vanish, heal, shape bandwidth, from a prompt. Needs root.
    Lab(cmd::lab::Args),
    /// Show servers, caches and regions.
    Status(cmd::status::Args),
    /// Create a cache (with backups, or read-only from a file).
    Create(cmd::create::Args),
    /// Delete a cache and free its memory.
    Delete(cmd::create::DeleteArgs),
    /// Create a new cluster secret (the key every member proves it holds).
    Secret(cmd::secret::Args),
    /// Issue a token that reaches one cache (read-write, or --read-only).
    Token(cmd::token::Args),
    /// Take a server back: move its regions to other servers within a grace period.
    Reclaim(cmd::reclaim::Args),
    /// Reclaim, kill and add servers under a verifying load; report what was lost.
    Chaos(cmd::chaos::Args),
    /// Benchmarks against Redis and raw TCP.
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Graphs in a cache: generate or load one, count k-hop neighbourhoods next to it.
    #[command(subcommand)]
    Graph(cmd::graph::GraphCommand),
    /// Serve a keyed store over the Redis protocol (redis-cli, redis-benchmark, redis-py).
    Resp(cmd::resp::Args),
    /// Measure the SLO performance model on this machine (for `manager --slo-model`).
    #[cfg(feature = "bench")]
    Calibrate(cmd::calibrate::Args),
    /// Project the graph traversal on 16 to 1,024 servers with the model `bench
    /// model` calibrated in the lab: latency, throughput and traffic, and a chart.
    #[cfg(feature = "bench")]
    Simulate(cmd::simulate::Args),
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FARCACHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // `farcache status | head`: the reader has what it wanted.
        Err(e) if stdout::closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // What `main() -> anyhow::Result` printed.
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Server(a) => {
            init_logging("info");
            cmd::server::run(a)
        }
        Command::Manager(a) => {
            init_logging("info");
            cmd::manager::run(a)
        }
        Command::Up(a) => {
            init_logging("info");
            cmd::up::run(a)
        }
        Command::Lab(a) => {
            init_logging("warn");
            cmd::lab::run(a)
        }
        Command::Demo(a) => {
            init_logging("warn");
            cmd::demo::run(a)
        }
        Command::Status(a) => {
            init_logging("warn");
            cmd::status::run(a)
        }
        Command::Create(a) => {
            init_logging("warn");
            cmd::create::run(a)
        }
        Command::Delete(a) => {
            init_logging("warn");
            cmd::create::delete(a)
        }
        Command::Secret(a) => cmd::secret::run(a),
        Command::Token(a) => {
            init_logging("warn");
            cmd::token::run(a)
        }
        Command::Chaos(a) => {
            init_logging("warn");
            cmd::chaos::run(a)
        }
        Command::Graph(c) => {
            init_logging("warn");
            cmd::graph::run(c)
        }
        Command::Reclaim(a) => {
            init_logging("warn");
            cmd::reclaim::run(a)
        }
        #[cfg(feature = "bench")]
        Command::Bench(b) => {
            init_logging("warn");
            cmd::bench::run(b)
        }
        Command::Resp(a) => {
            init_logging("info");
            cmd::resp::run(a)
        }
        #[cfg(feature = "bench")]
        Command::Calibrate(a) => {
            init_logging("warn");
            cmd::calibrate::run(a)
        }
        #[cfg(feature = "bench")]
        Command::Simulate(a) => {
            init_logging("warn");
            cmd::simulate::run(a)
        }
    }
}
