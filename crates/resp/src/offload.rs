//! Commands too big for an event loop — a `DEL`, `EXISTS`, `MGET` or `MSET` of
//! hundreds of keys, a full pass over the keyspace (`KEYS`, `DBSIZE`, `FLUSHDB`), or a
//! Lua script —
//! run on a small pool of their own while the loop goes on serving its other
//! connections. Their connection waits (its later commands stay queued and it is not
//! read meanwhile), so its replies keep their order.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;

use mio::Waker;
use parking_lot::Mutex;

use crate::cmd;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

/// A command handed to the pool, with its connection's session.
pub struct Job {
    /// The connection's slot in its worker.
    pub conn: usize,
    pub s: Session,
    pub args: Args,
    pub done: Sender<Done>,
    pub waker: Arc<Waker>,
}

/// A finished command: the session back, and the reply to send.
pub struct Done {
    pub conn: usize,
    pub s: Session,
    pub out: Vec<u8>,
}

/// Starts `threads` pool threads; they end when every sender of `jobs` is gone.
pub fn start(threads: usize, jobs: Receiver<Job>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let jobs = Arc::new(Mutex::new(jobs));
    (0..threads.max(1))
        .map(|i| {
            let jobs = jobs.clone();
            std::thread::Builder::new()
                .name(format!("resp-offload-{i}"))
                .spawn(move || run(&jobs))
        })
        .collect()
}

fn run(jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = match jobs.lock().recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let Job {
            conn,
            mut s,
            args,
            done,
            waker,
        } = job;
        s.shared.offloaded.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        let proto = s.proto;
        cmd::dispatch(
            &mut s,
            &args,
            &mut Out {
                buf: &mut out,
                proto,
            },
        );
        // The worker may be gone (stopping): then so is the connection.
        if done.send(Done { conn, s, out }).is_ok() {
            let _ = waker.wake();
        }
    }
}
