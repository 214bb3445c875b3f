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
use farcache_proto::blocking::{RpcError, read_frame, write_frame};
use farcache_proto::control::{
    ClusterStatus, ControlErrorCode, ControlRequest, ControlResponse, PriceClass, ServerInfo,
};
use farcache_proto::{CacheId, FrameKind, HelloAck, MAX_FRAME_DEFAULT, PROTOCOL_VERSION, ServerId};
use parking_lot::Mutex;

/// Small regions keep the numbers readable.
pub const R: u64 = 1 << 20;

pub fn config(dir: &Path) -> ManagerConfig {
    let mut c = ManagerConfig::new(([127, 0, 0, 1], 0).into(), dir);
    c.region_size = R;
    // Long enough that no test server is declared dead unless a test wants it.
    c.heartbeat_timeout = Duration::from_secs(60);
    c
}

pub fn start(dir: &Path) -> ManagerHandle {
    Manager::start(config(dir)).expect("manager starts")
}

/// A cache server stand-in: answers Hello and Alloc/Free/Drop, recording each call.
pub struct FakeServer {
    pub addr: SocketAddr,
    calls: Arc<Mutex<Vec<ControlRequest>>>,
    fail_alloc: Arc<AtomicBool>,
}

impl FakeServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake server");
        let addr = listener.local_addr().expect("fake server addr");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let fail_alloc = Arc::new(AtomicBool::new(false));
        let (c, f) = (Arc::clone(&calls), Arc::clone(&fail_alloc));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (c, f) = (Arc::clone(&c), Arc::clone(&f));
                thread::spawn(move || {
                    let _ = fake_connection(stream, &c, &f);
                });
            }
        });
        Self {
            addr,
            calls,
            fail_alloc,
        }
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
) -> Result<(), RpcError> {
    loop {
        let (h, payload) = read_frame(&mut s, MAX_FRAME_DEFAULT)?;
        match h.kind {
            FrameKind::Hello => {
                let ack = HelloAck {
                    version: PROTOCOL_VERSION,
                    server_id: 0,
                    max_frame: 1 << 20,
                };
                write_frame(&mut s, FrameKind::HelloAck, h.seq, &ack.encode())?;
            }
            FrameKind::Control => {
                let req = ControlRequest::from_json(&payload)?;
                let fail = matches!(req, ControlRequest::AllocRegion { .. })
                    && fail_alloc.load(Ordering::SeqCst);
                calls.lock().push(req);
                let resp = if fail {
                    ControlResponse::error(ControlErrorCode::InsufficientMemory, "fake failure")
                } else {
                    ControlResponse::Ok
                };
                write_frame(&mut s, FrameKind::ControlReply, h.seq, &resp.to_json())?;
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
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect to manager");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("set timeout");
        Self { stream, seq: 0 }
    }

    pub fn raw(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn call(&mut self, req: &ControlRequest) -> ControlResponse {
        self.seq += 1;
        write_frame(
            &mut self.stream,
            FrameKind::Control,
            self.seq,
            &req.to_json(),
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
        ControlResponse::from_json(&payload).expect("reply JSON")
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
            price_class: PriceClass::OnDemand,
            price_per_gib_hour: price,
        };
        match self.call(&req) {
            ControlResponse::Registered { server_id, .. } => server_id,
            other => panic!("register: {other:?}"),
        }
    }

    pub fn create(&mut self, name: &str, capacity: u64) -> ControlResponse {
        self.call(&ControlRequest::CreateCache {
            name: name.into(),
            capacity,
            region_size: None,
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
