//! Test helpers: a fake cache server that records the manager's calls, and a small
//! control-plane client.
#![allow(dead_code)]

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use farcache_manager::{Manager, ManagerConfig, ManagerHandle};
use farcache_proto::blocking::{RpcError, handshake, read_frame, write_frame};
use farcache_proto::control::{
    ClusterStatus, ControlErrorCode, ControlRequest, ControlResponse, HeldRegion, PriceClass,
    ServerInfo,
};
use farcache_proto::{
    Authority, CacheId, Challenge, ClusterSecret, Credential, FrameKind, Hello, MAX_FRAME_DEFAULT,
    Role, ServerId,
};
use parking_lot::Mutex;

/// Small regions keep the numbers readable.
pub const R: u64 = 1 << 20;

/// The secret every manager, fake server and connection of these tests shares.
pub fn secret() -> ClusterSecret {
    static S: std::sync::OnceLock<ClusterSecret> = std::sync::OnceLock::new();
    S.get_or_init(ClusterSecret::generate).clone()
}

pub fn config(dir: &Path) -> ManagerConfig {
    let mut c = ManagerConfig::new(([127, 0, 0, 1], 0).into(), dir, secret());
    c.region_size = R;
    // Long enough that no test server is declared dead unless a test wants it.
    c.heartbeat_timeout = Duration::from_secs(60);
    c
}

pub fn start(dir: &Path) -> ManagerHandle {
    Manager::start(config(dir)).expect("manager starts")
}

/// A cache server stand-in: authenticates the manager like a server does, answers
/// Alloc/Free/Drop/Resize, reports `held` regions, and records each call.
pub struct FakeServer {
    pub addr: SocketAddr,
    calls: Arc<Mutex<Vec<ControlRequest>>>,
    fail_alloc: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<HeldRegion>>>,
}

impl FakeServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake server");
        let addr = listener.local_addr().expect("fake server addr");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let fail_alloc = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let (c, f, h) = (
            Arc::clone(&calls),
            Arc::clone(&fail_alloc),
            Arc::clone(&held),
        );
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (c, f, h) = (Arc::clone(&c), Arc::clone(&f), Arc::clone(&h));
                thread::spawn(move || {
                    let _ = fake_connection(stream, &c, &f, &h);
                });
            }
        });
        Self {
            addr,
            calls,
            fail_alloc,
            held,
        }
    }

    /// What the fake answers to ListRegions.
    pub fn set_held(&self, regions: Vec<HeldRegion>) {
        *self.held.lock() = regions;
    }

    pub fn set_fail_alloc(&self, fail: bool) {
        self.fail_alloc.store(fail, Ordering::SeqCst);
    }

    pub fn calls(&self) -> Vec<ControlRequest> {
        self.calls.lock().clone()
    }

    pub fn clear(&self) {
        self.calls.lock().clear();
    }

    /// (cache, region) of every AllocRegion, in order.
    pub fn allocs(&self) -> Vec<(CacheId, u32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ControlRequest::AllocRegion { cache, region, .. } => Some((cache, region)),
                _ => None,
            })
            .collect()
    }

    pub fn frees(&self) -> Vec<(CacheId, u32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ControlRequest::FreeRegion { cache, region, .. } => Some((cache, region)),
                _ => None,
            })
            .collect()
    }

    pub fn drops(&self) -> Vec<CacheId> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ControlRequest::DropCache { cache } => Some(cache),
                _ => None,
            })
            .collect()
    }
}

fn fake_connection(
    mut s: TcpStream,
    calls: &Mutex<Vec<ControlRequest>>,
    fail_alloc: &AtomicBool,
    held: &Mutex<Vec<HeldRegion>>,
) -> Result<(), RpcError> {
    // The acceptor's side of the handshake, as a real server does it.
    let auth = Authority::new(secret());
    let ch = auth.challenge();
    write_frame(&mut s, FrameKind::Challenge, 0, &ch.encode())?;
    let (h, payload) = read_frame(&mut s, MAX_FRAME_DEFAULT)?;
    if h.kind != FrameKind::Hello {
        return Err(RpcError::Unexpected(format!("{:?} before Hello", h.kind)));
    }
    let hello = Hello::decode(&payload)?;
    let v = auth.verify(&ch, &hello)?;
    if v.role != Role::Manager {
        return Err(RpcError::Unexpected(format!("{:?} connected", v.role)));
    }
    write_frame(
        &mut s,
        FrameKind::HelloAck,
        h.seq,
        &auth.ack(&v, &ch, 0, 1 << 20).encode(),
    )?;
    loop {
        let (h, payload) = read_frame(&mut s, MAX_FRAME_DEFAULT)?;
        match h.kind {
            FrameKind::Control => {
                let req = ControlRequest::decode(&payload)?;
                let fail = matches!(req, ControlRequest::AllocRegion { .. })
                    && fail_alloc.load(Ordering::SeqCst);
                let list = matches!(req, ControlRequest::ListRegions);
                calls.lock().push(req);
                let resp = if fail {
                    ControlResponse::error(ControlErrorCode::InsufficientMemory, "fake failure")
                } else if list {
                    ControlResponse::Regions {
                        regions: held.lock().clone(),
                    }
                } else {
                    ControlResponse::Ok
                };
                write_frame(&mut s, FrameKind::ControlReply, h.seq, &resp.encode())?;
            }
            other => return Err(RpcError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// A control-plane connection to the manager that returns replies as they are,
/// errors included.
pub struct Conn {
    stream: TcpStream,
    seq: u64,
    manager: SocketAddr,
    role: Role,
}

fn tcp(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect to manager");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("set timeout");
    stream
}

impl Conn {
    /// A client holding the cluster secret.
    pub fn connect(addr: SocketAddr) -> Self {
        Self::with(addr, Role::Client, "", &Credential::Cluster(secret()))
    }

    /// A connection that proved `role` with `cred` (and `identity`).
    pub fn with(addr: SocketAddr, role: Role, identity: &str, cred: &Credential) -> Self {
        let mut stream = tcp(addr);
        handshake(&mut stream, role, 1, identity, cred).expect("handshake");
        Self {
            stream,
            seq: 0,
            manager: addr,
            role,
        }
    }

    /// A server that proved it is at `identity`.
    pub fn as_server(addr: SocketAddr, identity: &str) -> Self {
        Self::with(addr, Role::Server, identity, &Credential::Cluster(secret()))
    }

    /// Connected, challenged, and nothing sent yet.
    pub fn unauthenticated(addr: SocketAddr) -> (TcpStream, Challenge) {
        let mut stream = tcp(addr);
        let (h, payload) = read_frame(&mut stream, MAX_FRAME_DEFAULT).expect("challenge");
        assert_eq!(h.kind, FrameKind::Challenge);
        (
            stream,
            Challenge::decode(&payload).expect("challenge decodes"),
        )
    }

    pub fn raw(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends `req` and returns the reply. Server requests (registration, heartbeats)
    /// from a client connection go over a server connection proving the address the
    /// request names, as a real server's would.
    pub fn call(&mut self, req: &ControlRequest) -> ControlResponse {
        if self.role == Role::Client {
            match req {
                ControlRequest::RegisterServer { addr, .. } => {
                    return Self::as_server(self.manager, addr).call(req);
                }
                ControlRequest::Heartbeat { .. } => {
                    return Self::as_server(self.manager, "").call(req);
                }
                _ => {}
            }
        }
        self.call_raw(req)
    }

    /// Sends `req` on this connection as it is.
    pub fn call_raw(&mut self, req: &ControlRequest) -> ControlResponse {
        self.seq += 1;
        write_frame(
            &mut self.stream,
            FrameKind::Control,
            self.seq,
            &req.encode(),
        )
        .expect("send request");
        let (h, payload) = read_frame(&mut self.stream, MAX_FRAME_DEFAULT).expect("read reply");
        assert_eq!(
            h.kind,
            FrameKind::ControlReply,
            "{}",
            String::from_utf8_lossy(&payload)
        );
        assert_eq!(h.seq, self.seq, "reply echoes the request seq");
        ControlResponse::decode(&payload).expect("reply JSON")
    }

    pub fn register(
        &mut self,
        id: Option<ServerId>,
        fake: &FakeServer,
        memory: u64,
        price: f64,
    ) -> ServerId {
        let req = ControlRequest::RegisterServer {
            server_id: id,
            addr: fake.addr.to_string(),
            memory,
            cores: 4,
            threads: 1,
            price_class: PriceClass::OnDemand,
            price_per_gib_hour: price,
            tls_addr: None,
        };
        match self.call(&req) {
            ControlResponse::Registered { server_id, .. } => server_id,
            other => panic!("register: {other:?}"),
        }
    }

    /// Creates a cache; the reply is `Created` (or an error).
    pub fn create(&mut self, name: &str, capacity: u64) -> ControlResponse {
        self.call(&ControlRequest::CreateCache {
            slo: None,
            name: name.into(),
            capacity,
            region_size: None,
            replicas: 1,
            from_file: None,
        })
    }

    pub fn status(&mut self) -> ClusterStatus {
        match self.call(&ControlRequest::Status) {
            ControlResponse::Status(s) => s,
            other => panic!("status: {other:?}"),
        }
    }

    pub fn server(&mut self, id: ServerId) -> ServerInfo {
        self.status()
            .servers
            .into_iter()
            .find(|s| s.id == id)
            .expect("server in status")
    }
}

pub fn error_code(resp: &ControlResponse) -> Option<ControlErrorCode> {
    match resp {
        ControlResponse::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// Polls `f` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    f()
}

pub fn is_eof(e: &RpcError) -> bool {
    matches!(e, RpcError::Io(e) if matches!(e.kind(), io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset))
}
