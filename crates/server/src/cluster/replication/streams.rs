//! The backup's side: which replication stream of each owner is current.
//!
//! An owner opens a new connection (a new *stream*) to a backup after a write timeout
//! or a failure, and sends again everything unacknowledged. Frames of the old
//! connection may still sit in this server's buffers and be applied later by another
//! worker, after the newer frames sent again: an older snapshot would land over a
//! newer, acknowledged one. So each stream carries a generation (the Hello's
//! `client_id` on a server connection; strictly increasing per owner), announced at
//! the handshake, before any of its frames is sent; a batch from a stream older than
//! the owner's newest is refused, and applied batches hold the owner's entry shared
//! while they run, so an announcement waits for batches already admitted.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

#[derive(Default)]
pub struct Streams {
    owners: Mutex<HashMap<String, Arc<RwLock<u64>>>>,
}

impl Streams {
    /// The owner's newest generation. A batch reads it, and runs only if its own
    /// stream is not older, holding the read guard while it runs.
    pub fn of(&self, owner: &str) -> Arc<RwLock<u64>> {
        self.owners
            .lock()
            .entry(owner.to_owned())
            .or_default()
            .clone()
    }

    /// A new stream of `owner` with `generation` begins: older streams' batches are
    /// refused from now on (once those already running finish). False if a newer
    /// stream was announced already (this one is refused as a whole).
    pub fn announce(&self, owner: &str, generation: u64) -> bool {
        let e = self.of(owner);
        let mut g = e.write();
        if generation < *g {
            return false;
        }
        *g = generation;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_stream_is_refused_once_a_newer_one_is_announced() {
        let s = Streams::default();
        let admits = |g: u64| *s.of("a:1").read() <= g;
        assert!(s.announce("a:1", 10));
        assert!(admits(10));
        assert!(s.announce("a:1", 11));
        assert!(!admits(10), "the old stream still applies");
        assert!(admits(11));
        assert!(!s.announce("a:1", 10), "an old stream announced late wins");
        // Owners are independent.
        assert_eq!(*s.of("b:1").read(), 0);
    }

    #[test]
    fn an_announcement_waits_for_batches_already_admitted() {
        let s = Arc::new(Streams::default());
        s.announce("a:1", 1);
        let e = s.of("a:1");
        let running = e.read();
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.announce("a:1", 2));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!t.is_finished(), "announced while an old batch still ran");
        drop(running);
        assert!(t.join().expect("thread"));
    }
}
