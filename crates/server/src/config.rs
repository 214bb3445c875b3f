use std::net::SocketAddr;

use farcache_net::{GuardConfig, TlsAcceptor};
use farcache_proto::ClusterSecret;
use farcache_proto::control::PriceClass;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Address registered with the manager; defaults to the bound listen address.
    pub advertise: Option<String>,
    /// The cluster's shared key: peers prove they hold it (or a cache token derived
    /// from it) before anything else is accepted.
    pub secret: ClusterSecret,
    /// Serve clients over TLS on this address too (with `tls`).
    pub tls_listen: Option<SocketAddr>,
    pub tls: Option<TlsAcceptor>,
    /// Address registered for TLS clients; defaults to the bound TLS address.
    pub tls_advertise: Option<String>,
    /// Worker threads (`s` in the Redy model).
    pub threads: usize,
    /// Upper bound on memory promised to regions.
    pub memory: u64,
    pub cores: u32,
    pub manager: Option<String>,
    /// Where the server keeps its identity (`server.id`), so a restart rejoins under
    /// the same id. Region bytes are never kept: a restarted server holds nothing.
    pub data_dir: Option<std::path::PathBuf>,
    /// Files under this directory may be loaded into regions of read-only caches (on
    /// the manager's request); without it the server loads no file.
    pub load_dir: Option<std::path::PathBuf>,
    pub price_class: PriceClass,
    pub price_per_gib_hour: f64,
    pub max_frame: u32,
    /// Stop reading from a connection while this much response data is unsent.
    pub max_pending_write: usize,
    /// Stop reading from every connection while this much response data is unsent in
    /// the whole server (peers that do not read their replies are cut off later).
    pub max_output_total: usize,
    /// Connection caps and timeouts.
    pub guard: GuardConfig,
    /// After serving, a worker polls without sleeping for this long before it blocks:
    /// a request arriving in the window skips a thread wake-up (several µs).
    pub busy_poll: std::time::Duration,
    /// Serve Prometheus text metrics over HTTP here.
    pub metrics_listen: Option<SocketAddr>,
    /// How long an invocation handed to another server (FFlow) or waiting for pulled
    /// bytes (DFlow) may take before its caller gets an error.
    pub flow_timeout: std::time::Duration,
    /// Send everything queued for one server in one frame per event-loop turn (off:
    /// one frame and one write per message; for measuring what batching buys).
    pub peer_batching: bool,
    /// Most bytes queued for one other server (per worker) before new messages for it
    /// fail: a server that stops reading cannot make this one buffer without bound.
    pub max_peer_queue: usize,
    /// Enables fault-injection hooks for tests (`FARCACHE_FAULT_INJECTION=1`): the
    /// procedure `__panic` panics the worker that runs it.
    pub fault_injection: bool,
    /// Keep each region's first and last write acknowledgement (wall clock), for the
    /// split-brain check of `chaos` and the lab tests. Off by default: noting the
    /// regions a batch wrote costs random 8 B writes about 20 instructions each.
    pub ack_windows: bool,
}

impl ServerConfig {
    pub fn new(listen: SocketAddr, memory: u64, secret: ClusterSecret) -> Self {
        Self {
            listen,
            advertise: None,
            secret,
            tls_listen: None,
            tls: None,
            tls_advertise: None,
            threads: 1,
            memory,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            manager: None,
            data_dir: None,
            load_dir: None,
            price_class: PriceClass::OnDemand,
            price_per_gib_hour: 0.01,
            max_frame: farcache_proto::MAX_FRAME_DEFAULT,
            max_pending_write: 8 << 20,
            max_output_total: 1 << 30,
            guard: GuardConfig::default(),
            busy_poll: std::time::Duration::from_micros(50),
            metrics_listen: None,
            flow_timeout: std::time::Duration::from_secs(5),
            peer_batching: true,
            max_peer_queue: 16 << 20,
            fault_injection: std::env::var_os("FARCACHE_FAULT_INJECTION").is_some_and(|v| v == "1"),
            ack_windows: false,
        }
    }
}
