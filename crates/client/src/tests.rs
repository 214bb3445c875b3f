//! The transport driven through the API against fake servers: pauses, redirects to a
//! region's new owner, runs of whole ops answered in pieces, silent and mute servers,
//! and work a dropped ticket leaves behind.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use farcache_proto::blocking::{read_frame, write_frame};
use farcache_proto::control::{CacheInfo, PriceClass, ServerInfo, ServerState};
use farcache_proto::{
    Authority, ClusterSecret, FrameKind, Hello, MAX_FRAME_DEFAULT, Op, OpCode, RequestDecoder,
    ResponseEncoder, ServerId, Status, reply,
};

use crate::cache::{Cache, CacheShared};
use crate::config::ClientConfig;
use crate::error::{ClientError, OpError};
use crate::lane::{RouteTable, Transport};
use crate::results::BatchResults;
use crate::ticket::Ticket;

/// A one-connection server that answers each op with `answer(op index, op)`.
fn fake_server(
    secret: ClusterSecret,
    answer: impl Fn(u32, &Op<'_>) -> Status + Send + 'static,
) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = serve(&mut s, &Authority::new(secret), &answer);
    });
    addr
}

fn serve(
    s: &mut TcpStream,
    auth: &Authority,
    answer: &dyn Fn(u32, &Op<'_>) -> Status,
) -> Result<(), Box<dyn std::error::Error>> {
    s.set_nodelay(true)?;
    let ch = auth.challenge();
    write_frame(s, FrameKind::Challenge, 0, &ch.encode())?;
    let (_, hello) = read_frame(s, MAX_FRAME_DEFAULT)?;
    let v = auth.verify(&ch, &Hello::decode(&hello)?)?;
    let ack = auth.ack(&v, &ch, 1, MAX_FRAME_DEFAULT);
    write_frame(s, FrameKind::HelloAck, 0, &ack.encode())?;
    let mut n = 0;
    loop {
        let (h, payload) = read_frame(s, MAX_FRAME_DEFAULT)?;
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, h.seq);
        for op in RequestDecoder::new(&payload)? {
            let op = op?;
            let status = answer(n, &op);
            n += 1;
            match (status, &op) {
                (Status::Ok, Op::Read { len, .. }) => {
                    enc.data(&mut out, op.code(), &vec![7; *len as usize])
                }
                (s, _) => enc.status(&mut out, op.code(), s),
            }
        }
        enc.finish(&mut out);
        std::io::Write::write_all(s, &out)?;
    }
}

fn server_info(id: ServerId, addr: String) -> ServerInfo {
    ServerInfo {
        id,
        addr,
        memory: 1 << 30,
        used: 0,
        cores: 1,
        threads: 1,
        price_class: PriceClass::OnDemand,
        price_per_gib_hour: 0.0,
        state: ServerState::Alive,
        tls_addr: None,
    }
}

/// 16 regions of 64 KiB, all on server 1 at `addr`.
fn table(addr: String) -> CacheInfo {
    CacheInfo {
        id: 1,
        name: "t".into(),
        capacity: 1 << 20,
        region_size: 1 << 16,
        epoch: 1,
        regions: vec![1; 16],
        servers: vec![server_info(1, addr)],
        replicas: 1,
        backups: vec![],
        from_file: None,
        slo: None,
    }
}

fn route_on(addr: String, secret: ClusterSecret, op_timeout: Duration) -> Arc<RouteTable> {
    let cfg = ClientConfig::new("127.0.0.1:1")
        .secret(secret)
        .op_timeout(op_timeout);
    RouteTable::new(Transport::for_test(cfg), table(addr))
}

/// A cache handle on `route` (as `Client::open` makes one).
fn cache_of(route: Arc<RouteTable>) -> Cache {
    Cache::new(CacheShared::new(route, None))
}

fn cache_on(addr: String, secret: ClusterSecret, op_timeout: Duration) -> Cache {
    cache_of(route_on(addr, secret, op_timeout))
}

#[test]
fn a_paused_part_follows_the_region_to_its_new_server() {
    let secret = ClusterSecret::generate();
    let to = fake_server(secret.clone(), |_, _| Status::Ok);
    let shared: Arc<std::sync::OnceLock<Arc<RouteTable>>> = Arc::default();
    let (seen, to_addr) = (shared.clone(), to.clone());
    // The source pauses the write and, meanwhile, the region moves to server 2.
    let from = fake_server(secret.clone(), move |_, _| {
        if let Some(c) = seen.get() {
            let mut next = CacheInfo::clone(&c.info());
            next.regions[0] = 2;
            next.epoch += 1;
            next.servers.push(server_info(2, to_addr.clone()));
            c.install(next);
        }
        Status::Paused
    });
    let s = route_on(from, secret, Duration::from_secs(10));
    assert!(shared.set(s.clone()).is_ok());
    cache_of(s)
        .write(8, b"moved")
        .expect("lands on the new owner");
}

#[test]
fn paused_writes_are_sent_again_until_they_land() {
    let secret = ClusterSecret::generate();
    let seen = Arc::new(AtomicU32::new(0));
    let counter = seen.clone();
    let addr = fake_server(secret.clone(), move |n, op| {
        counter.fetch_add(1, Ordering::Relaxed);
        match op {
            Op::Write { .. } if n < 4 => Status::Paused,
            _ => Status::Ok,
        }
    });
    let cache = cache_on(addr, secret, Duration::from_secs(10));
    let t = Instant::now();
    cache
        .write(4096, b"hello")
        .expect("write lands after the pause");
    // Backoffs of 100, 200, 400 and 800 µs came first.
    assert!(t.elapsed() >= Duration::from_micros(1500));
    assert_eq!(seen.load(Ordering::Relaxed), 5);
    // The lane is usable (and nothing stays parked) afterwards.
    assert_eq!(&cache.read(4096, 5).expect("read")[..], &[7; 5]);
}

#[test]
fn answers_inside_a_run_that_need_a_second_send_land_in_their_own_cells() {
    let secret = ClusterSecret::generate();
    // Every op whose address is a multiple of 7 × 64 is answered `paused` the
    // first time: the rest of its run completes on the fast road, it goes again.
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let addr = fake_server(secret.clone(), move |_, op| {
        let at = match op {
            Op::Read { addr, .. } | Op::Write { addr, .. } => *addr,
            _ => return Status::Ok,
        };
        let first = seen.lock().map(|mut s| s.insert(at)).unwrap_or(false);
        if at % (7 * 64) == 0 && first {
            Status::Paused
        } else {
            Status::Ok
        }
    });
    let cache = cache_on(addr, secret, Duration::from_secs(10));
    let mut b = cache.batch();
    for i in 0..300u64 {
        // Runs of reads, then of writes, then reads of another length.
        match i / 100 {
            0 => b.read(i * 64, 8),
            1 => b.write(i * 64, b"abcd"),
            _ => b.read(i * 64, 3),
        };
    }
    let r = b.submit().wait();
    assert_eq!(r.failed(), 0, "{:?}", r.first_error());
    for i in 0..300usize {
        match i / 100 {
            0 => assert_eq!(r.data(i).unwrap(), &[7; 8], "op {i}"),
            1 => assert_eq!(r.get(i), Some(Ok(crate::OpOutput::Done)), "op {i}"),
            _ => assert_eq!(r.data(i).unwrap(), &[7; 3], "op {i}"),
        }
    }
}

#[test]
fn a_reply_that_does_not_decode_mid_run_fails_the_rest_and_keeps_the_answers() {
    let secret = ClusterSecret::generate();
    let addr = scripted_server(secret.clone(), |payload, seq| {
        let n = RequestDecoder::new(payload).map_or(0, |d| d.count());
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, seq);
        for _ in 0..10 {
            enc.data(&mut out, farcache_proto::OpCode::Read, &[5; 8]);
        }
        // The 11th reply has an opcode no server sends; the count still says n.
        out.extend_from_slice(&[0xEE, 0]);
        for _ in 11..n {
            enc.placeholder();
        }
        enc.placeholder();
        enc.finish(&mut out);
        out
    });
    let cache = cache_on(addr, secret, Duration::from_secs(10));
    let mut b = cache.batch();
    for i in 0..40u64 {
        b.read(i * 8, 8);
    }
    let r = b.submit().wait();
    for i in 0..10 {
        assert_eq!(r.data(i).unwrap(), &[5; 8], "op {i} was answered");
    }
    for i in 10..40 {
        let e = r.error(i).map(ToString::to_string).unwrap_or_default();
        assert!(
            e.contains("op code 0xee"),
            "op {i} fails with the frame's error: {e}"
        );
    }
}

/// A server that completes the handshake, then answers each request frame with
/// the response `respond(request payload, seq)` builds.
fn scripted_server(
    secret: ClusterSecret,
    respond: impl Fn(&[u8], u64) -> Vec<u8> + Send + 'static,
) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let auth = Authority::new(secret);
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let ch = auth.challenge();
        let _ = write_frame(&mut s, FrameKind::Challenge, 0, &ch.encode());
        let Ok((_, hello)) = read_frame(&mut s, MAX_FRAME_DEFAULT) else {
            return;
        };
        let Ok(Ok(v)) = Hello::decode(&hello).map(|h| auth.verify(&ch, &h)) else {
            return;
        };
        let ack = auth.ack(&v, &ch, 1, MAX_FRAME_DEFAULT);
        let _ = write_frame(&mut s, FrameKind::HelloAck, 0, &ack.encode());
        while let Ok((h, payload)) = read_frame(&mut s, MAX_FRAME_DEFAULT) {
            let out = respond(&payload, h.seq);
            if std::io::Write::write_all(&mut s, &out).is_err() {
                return;
            }
        }
    });
    addr
}

/// 60 calls of one procedure (sent as one EXECUTE_RUN) answered by `respond`.
fn sixty_calls(respond: impl Fn(&[u8], u64) -> Vec<u8> + Send + 'static) -> BatchResults {
    let secret = ClusterSecret::generate();
    let addr = scripted_server(secret.clone(), respond);
    let cache = cache_on(addr, secret, Duration::from_secs(10));
    let mut b = cache.batch();
    for i in 0..60u64 {
        b.execute("p", i * 8, &[1]);
    }
    b.submit().wait()
}

#[test]
fn done_runs_answer_each_call_in_its_own_cell() {
    let r = sixty_calls(|payload, seq| {
        let n = RequestDecoder::new(payload).map_or(0, |d| d.count());
        assert_eq!(n, 60);
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, seq);
        for i in 0..60u8 {
            match i {
                // A failure and a plain done reply break the runs.
                20 => enc.data(&mut out, OpCode::Execute, &reply::failed("no")),
                30 => {
                    let mut d = Vec::new();
                    reply::push_done(&mut d, b"plain");
                    enc.data(&mut out, OpCode::Execute, &d);
                }
                i if i < 40 => enc.done(&mut out, &[i; 8]),
                i => enc.done(&mut out, &[i; 3]),
            }
        }
        enc.finish(&mut out);
        out
    });
    for i in 0..60u8 {
        let k = usize::from(i);
        match i {
            20 => assert!(r.error(k).is_some_and(|e| e.to_string().contains("no"))),
            30 => assert_eq!(r.data(k).unwrap(), b"plain"),
            i if i < 40 => assert_eq!(r.data(k).unwrap(), &[i; 8], "call {i}"),
            i => assert_eq!(r.data(k).unwrap(), &[i; 3], "call {i}"),
        }
    }
}

#[test]
fn a_done_run_longer_than_the_frame_fails_the_rest_and_keeps_the_answers() {
    let r = sixty_calls(|_, seq| {
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, seq);
        for i in 0..10u8 {
            enc.done(&mut out, &[i; 8]);
        }
        enc.status(&mut out, OpCode::Execute, Status::NoSuchProc);
        // A run claiming 60 outputs where 49 replies are left.
        out.extend_from_slice(&[farcache_proto::response::DONE_RUN, Status::Ok as u8]);
        out.extend_from_slice(&60u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&[9; 60]);
        for _ in 11..60 {
            enc.placeholder();
        }
        enc.finish(&mut out);
        out
    });
    for i in 0..10u8 {
        assert_eq!(
            r.data(usize::from(i)).unwrap(),
            &[i; 8],
            "call {i} was answered"
        );
    }
    let e = r.error(10).map(ToString::to_string).unwrap_or_default();
    assert!(
        e.contains("procedure"),
        "call 10 fails with its status: {e}"
    );
    for i in 11..60 {
        let e = r.error(i).map(ToString::to_string).unwrap_or_default();
        assert!(
            e.contains("done run of 60"),
            "call {i} fails with the frame's error: {e}"
        );
    }
}

/// A server that completes the handshake, then reads frames and never answers
/// (a SIGSTOPped process, as the client sees it once connected).
fn silent_server(secret: ClusterSecret) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = serve(&mut s, &Authority::new(secret), &|_, _| {
            std::thread::sleep(Duration::from_secs(3600));
            Status::Ok
        });
    });
    addr
}

/// A cache whose regions 0..8 are on a silent server and 8..16 (from address
/// `8 << 16`) on one that answers every read with 7s; op timeout 20 s.
fn silent_and_live(tune: impl FnOnce(ClientConfig) -> ClientConfig) -> Cache {
    let secret = ClusterSecret::generate();
    let silent = silent_server(secret.clone());
    let live = fake_server(secret.clone(), |_, _| Status::Ok);
    let mut info = table(silent);
    info.servers.push(server_info(2, live));
    for r in 8..16 {
        info.regions[r] = 2;
    }
    let cfg = tune(
        ClientConfig::new("127.0.0.1:1")
            .secret(secret)
            .op_timeout(Duration::from_secs(20)),
    );
    cache_of(RouteTable::new(Transport::for_test(cfg), info))
}

/// With `q` frames in flight to a silent server and its open batch full, more
/// parts for it wait in the backlog: the calling thread is not held up, and a
/// read from another server completes at once.
#[test]
fn a_silent_server_does_not_hold_up_calls_to_others() {
    let cache = silent_and_live(|cfg| cfg.batch_size(1).queue_depth(1));
    let t = Instant::now();
    // One frame in flight, one open batch, then the backlog: none may block.
    let abandoned: Vec<Ticket> = (0..8)
        .map(|i| {
            let mut b = cache.batch();
            b.read(i * 64, 8);
            b.submit()
        })
        .collect();
    drop(abandoned);
    let live_addr = 8 << 16;
    assert_eq!(&cache.read(live_addr, 4).expect("live server")[..], &[7; 4]);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held up for {:?}",
        t.elapsed()
    );
}

/// `wait_until` hands the ticket back at its deadline while a server is silent,
/// and returns the results at once from one that answers.
#[test]
fn wait_until_returns_the_ticket_at_its_deadline() {
    let cache = silent_and_live(|cfg| cfg);
    let mut b = cache.batch();
    b.read(0, 8);
    let t = Instant::now();
    let Err(ticket) = b.submit().wait_until(t + Duration::from_millis(100)) else {
        panic!("a silent server answered");
    };
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    drop(ticket);
    let mut b = cache.batch();
    b.read(8 << 16, 4);
    let r = b
        .submit()
        .wait_until(Instant::now() + Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("the live server did not answer"));
    assert_eq!(r.data(0).expect("read"), &[7; 4]);
}

/// A server that accepts connections and never says a word (a stopped process
/// whose kernel still completes TCP handshakes).
fn mute_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept() {
            held.push(s);
        }
    });
    addr
}

/// Dialing a server that never answers its handshake happens on a dialing
/// thread: a read from another server completes meanwhile, and the mute one's
/// read fails once the connect timeout passes.
#[test]
fn a_dial_to_a_mute_server_holds_up_no_other_call() {
    let secret = ClusterSecret::generate();
    let live = fake_server(secret.clone(), |_, _| Status::Ok);
    let mut info = table(mute_server());
    info.servers.push(server_info(2, live));
    for r in 8..16 {
        info.regions[r] = 2;
    }
    let mut cfg = ClientConfig::new("127.0.0.1:1")
        .secret(secret)
        .op_timeout(Duration::from_secs(20));
    cfg.connect_timeout = Duration::from_millis(1500);
    let cache = cache_of(RouteTable::new(Transport::for_test(cfg), info));
    let t = Instant::now();
    let mut b = cache.batch();
    b.read(0, 8);
    let mute = b.submit();
    assert_eq!(&cache.read(8 << 16, 4).expect("live server")[..], &[7; 4]);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "held up for {:?}",
        t.elapsed()
    );
    let r = mute.wait();
    assert!(
        matches!(r.error(0), Some(OpError::ServerUnavailable { .. })),
        "{:?}",
        r.error(0)
    );
    assert!(t.elapsed() >= Duration::from_millis(1500));
    assert!(t.elapsed() < Duration::from_secs(10));
}

/// A ticket dropped unfinished still has its writes applied, though most of them
/// were waiting in the backlog and the caller never touches the client again:
/// the async driver takes over the lane's orphaned work.
#[test]
fn writes_of_a_dropped_ticket_all_land_without_a_caller() {
    let secret = ClusterSecret::generate();
    let seen = Arc::new(AtomicU32::new(0));
    let counter = seen.clone();
    let addr = fake_server(secret.clone(), move |_, op| {
        if let Op::Write { .. } = op {
            // A slow server: frames queue up behind each other.
            std::thread::sleep(Duration::from_millis(5));
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Status::Ok
    });
    let cfg = ClientConfig::new("127.0.0.1:1")
        .secret(secret)
        .batch_size(1)
        .queue_depth(1)
        .op_timeout(Duration::from_secs(20));
    let info = table(addr);
    let cache = cache_of(RouteTable::new(Transport::for_test(cfg), info));
    let mut b = cache.batch();
    for i in 0..40 {
        b.write(i * 8, b"12345678");
    }
    drop(b.submit());
    let t = Instant::now();
    while seen.load(Ordering::Relaxed) < 40 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(seen.load(Ordering::Relaxed), 40, "writes left unsent");
}

#[test]
fn a_pause_longer_than_the_op_timeout_fails_the_op() {
    let secret = ClusterSecret::generate();
    let addr = fake_server(secret.clone(), |_, _| Status::Paused);
    let cache = cache_on(addr, secret, Duration::from_millis(50));
    let t = Instant::now();
    let e = cache.write(0, b"x").expect_err("stays paused");
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(e, ClientError::Op(OpError::Status(Status::Paused))),
        "{e}"
    );
}

#[test]
fn lost_bytes_fail_with_their_range() {
    let secret = ClusterSecret::generate();
    let addr = fake_server(secret.clone(), |_, op| match op {
        Op::Read { .. } => Status::DataLost,
        _ => Status::Ok,
    });
    let cache = cache_on(addr, secret, Duration::from_secs(10));
    // Two regions: each part reports its own range, the first failure wins.
    let e = cache.read((1 << 16) - 8, 16).expect_err("lost");
    assert!(
        matches!(
            e,
            ClientError::Op(OpError::DataLost {
                addr: 0xfff8,
                len: 8
            })
        ),
        "{e}"
    );
    cache.write(0, b"ok").expect("writes still work");
}
