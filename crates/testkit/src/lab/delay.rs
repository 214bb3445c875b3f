//! The lab's delay line, standing in for `netem` (which these kernels lack).
//!
//! A delayed host's port is taken off the switch's bridge and joined to it through
//! a relay: a veth pair `<port>r` (relay side) / `<port>b` (bridge side), and two
//! threads in the switch's namespace that copy every frame between `<port>` and
//! `<port>r` with AF_PACKET sockets, each frame held until its due time. Frames keep
//! their order (a frame is never due before the one ahead of it), so jitter never
//! reorders a TCP stream. Sockets use `PACKET_VNET_HDR`, so a 64 KiB GSO frame
//! crosses in one piece with its offload state, as it would through the kernel.
//!
//! The relay costs a copy and two system calls per frame; [`super::Lab::rtt`]
//! measured with the relay at 0 µs gives that cost, to state results beside it.

use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::TestkitError;

/// `struct virtio_net_hdr` (without the mergeable-buffers field) precedes every frame.
const VNET_HDR: usize = 10;
/// Room for a GSO frame (64 KiB) and its header.
const FRAME: usize = 65_536 + VNET_HDR + 64;
/// Frames held at most per direction; past it the line drops, as a full queue does.
const QUEUE: usize = 4096;

/// Delay and jitter of one host's line, changeable while it runs.
#[derive(Debug, Default)]
pub struct Settings {
    delay_ns: AtomicU64,
    jitter_ns: AtomicU64,
    /// Frames dropped because the line was full.
    pub dropped: AtomicU64,
    /// Frames relayed.
    pub frames: AtomicU64,
}

impl Settings {
    pub fn set(&self, delay: Duration, jitter: Duration) {
        self.delay_ns.store(
            delay.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        self.jitter_ns.store(
            jitter.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed))
    }
}

/// A running delay line between a host's port and the bridge.
pub struct Line {
    pub settings: Arc<Settings>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Line {
    /// Starts relaying between `port` and `relay` (both in the calling process's
    /// view of `netns`): one thread each way.
    pub fn start(netns: &str, port: &str, relay: &str) -> Result<Self, TestkitError> {
        let settings = Arc::new(Settings::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (from, to) in [(port, relay), (relay, port)] {
            let (ns, from, to) = (netns.to_owned(), from.to_owned(), to.to_owned());
            let (settings, stop) = (settings.clone(), stop.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name(format!("lab-delay-{from}"))
                .spawn(move || {
                    let ready = open_pair(&ns, &from, &to);
                    let ok = ready.is_ok();
                    let _ = tx.send(ready.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                    if let (true, Ok((rx_fd, tx_fd))) = (ok, ready) {
                        relay_loop(rx_fd, tx_fd, &settings, &stop);
                        // SAFETY: both descriptors were opened by `open_pair` and are
                        // closed once, here.
                        unsafe {
                            libc::close(rx_fd);
                            libc::close(tx_fd);
                        }
                    }
                })?;
            threads.push(t);
            rx.recv_timeout(Duration::from_secs(5))
                .map_err(|_| TestkitError::Other("the delay line did not start".into()))?
                .map_err(TestkitError::Other)?;
        }
        Ok(Self {
            settings,
            stop,
            threads,
        })
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Enters `netns` (this thread only) and opens a socket reading frames that arrive
/// on `from` and one sending on `to`.
fn open_pair(netns: &str, from: &str, to: &str) -> Result<(i32, i32), TestkitError> {
    let f = std::fs::File::open(format!("/run/netns/{netns}"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: `f` is an open namespace file; setns changes this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // Sleeps end within a microsecond of their due time (the default slack is 50 µs).
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    let rx = packet_socket(from)?;
    let tx = match packet_socket(to) {
        Ok(fd) => fd,
        Err(e) => {
            // SAFETY: `rx` was opened above and is closed once.
            unsafe { libc::close(rx) };
            return Err(e);
        }
    };
    Ok((rx, tx))
}

/// An AF_PACKET socket bound to interface `dev`, with virtio-net headers.
fn packet_socket(dev: &str) -> Result<i32, TestkitError> {
    let os = |what: &str| {
        TestkitError::Other(format!(
            "delay line on {dev}: {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    let name = CString::new(dev).map_err(|_| TestkitError::Other("bad device name".into()))?;
    // SAFETY: plain system calls on values owned here; every result is checked.
    unsafe {
        let ifindex = libc::if_nametoindex(name.as_ptr());
        if ifindex == 0 {
            return Err(os("if_nametoindex"));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
        if fd < 0 {
            return Err(os("socket"));
        }
        let one: libc::c_int = 1;
        let sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let opt = (&one as *const libc::c_int).cast();
        if libc::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, opt, sz) != 0 {
            libc::close(fd);
            return Err(os("PACKET_VNET_HDR"));
        }
        let buf: libc::c_int = 8 << 20;
        let bopt = (&buf as *const libc::c_int).cast();
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bopt, sz);
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        let addr = (&sll as *const libc::sockaddr_ll).cast();
        let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        if libc::bind(fd, addr, len) != 0 {
            libc::close(fd);
            return Err(os("bind"));
        }
        // Frames for any address: the host's MAC is not the port's.
        let mut mreq: libc::packet_mreq = std::mem::zeroed();
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        let m = (&mreq as *const libc::packet_mreq).cast();
        let ml = std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t;
        libc::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, m, ml);
        Ok(fd)
    }
}

/// Reads frames arriving on `rx` and sends each on `tx` once due, until `stop`.
fn relay_loop(rx: i32, tx: i32, settings: &Settings, stop: &AtomicBool) {
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut last_due = Instant::now();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let Some((due, _)) = held.front() {
            if *due > now {
                break;
            }
            if let Some((_, f)) = held.pop_front() {
                // SAFETY: `f` is a whole frame with its header; `tx` is open.
                unsafe { libc::send(tx, f.as_ptr().cast(), f.len(), 0) };
                settings.frames.fetch_add(1, Ordering::Relaxed);
                spare.push(f);
            }
        }
        // Wait for a frame, or until the next one is due (at most 50 ms, to see stop).
        let wait = held
            .front()
            .map(|(d, _)| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(50))
            .min(Duration::from_millis(50));
        let mut pfd = libc::pollfd {
            fd: rx,
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd and a timespec, both on the stack.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if n <= 0 {
            continue;
        }
        loop {
            let mut f = spare.pop().unwrap_or_default();
            f.resize(FRAME, 0);
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `f` has FRAME bytes of room; `from` is a sockaddr_ll.
            let got = unsafe {
                libc::recvfrom(
                    rx,
                    f.as_mut_ptr().cast(),
                    f.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut flen,
                )
            };
            if got <= 0 {
                spare.push(f);
                break;
            }
            // Frames this line sent out of the interface come back as outgoing.
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                spare.push(f);
                continue;
            }
            f.truncate(got as usize);
            if held.len() >= QUEUE {
                settings.dropped.fetch_add(1, Ordering::Relaxed);
                spare.push(f);
                continue;
            }
            let delay = settings.delay_ns.load(Ordering::Relaxed);
            let jitter = settings.jitter_ns.load(Ordering::Relaxed);
            let extra = if jitter == 0 {
                0
            } else {
                // xorshift: jitter needs no better randomness.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % (jitter + 1)
            };
            let due = (Instant::now() + Duration::from_nanos(delay + extra)).max(last_due);
            last_due = due;
            held.push_back((due, f));
        }
    }
}
