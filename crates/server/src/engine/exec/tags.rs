//! Tagged ops in a batch: an op sent again after a failover is answered from its
//! completion record instead of being applied twice; new answers are recorded once
//! the batch ends.

use std::sync::Arc;

use super::*;
use crate::engine::completions::MAX_BODY;

/// The tagged ops of one batch: repeats answered from their records, new answers
/// recorded together when the batch ends (one lock per session, not per op).
pub(super) struct BatchTags<'a> {
    completions: &'a Completions,
    /// The batch comes from a server (an owner's replication stream, a migration's
    /// copy): its ops always apply, and record the answer the owner gave.
    replica: bool,
    /// The session last asked about, and the highest op number recorded for it
    /// when asked: ops above it are new (a client numbers upwards).
    known: Option<(u64, u64)>,
    records: Vec<Record>,
}

impl<'a> BatchTags<'a> {
    pub(super) fn new(cx: &BatchCtx<'a>) -> Self {
        Self {
            completions: cx.completions,
            // A server's tag (a backup's stream, a migration's copy) carries the
            // answer its owner recorded.
            replica: cx.from_server,
            known: None,
            records: Vec::new(),
        }
    }

    /// Whether a tagged client op may have run here before (a server's stream
    /// always applies).
    fn may_repeat(&mut self, t: Tag) -> bool {
        if self.replica {
            return false;
        }
        let max = match self.known {
            Some((s, m)) if s == t.session => m,
            _ => {
                let m = self.completions.max_seq(t.session);
                self.known = Some((t.session, m));
                m
            }
        };
        t.seq <= max
    }

    fn count_repeat(&self) {
        self.completions
            .repeats
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A tagged client op that already ran here (or reached here from its owner):
    /// its recorded answer.
    pub(super) fn repeated(&mut self, t: Tag, addr: u64) -> Option<u64> {
        if !self.may_repeat(t) {
            return None;
        }
        let r = self.completions.get(t.session, t.seq, addr);
        if r.is_some() {
            self.count_repeat();
        }
        r
    }

    /// A tagged writing EXECUTE that already ran here (or reached here from its
    /// owner): its recorded reply body.
    pub(super) fn repeated_body(&mut self, t: Tag, addr: u64) -> Option<Arc<[u8]>> {
        if !self.may_repeat(t) {
            return None;
        }
        let r = self.completions.body(t.session, t.seq, addr);
        if r.is_some() {
            self.count_repeat();
        }
        r
    }

    /// A tagged WRITE: answered from its record if it ran before, else run. From a
    /// server, `answer` is the reply of the EXECUTE whose write this is.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write(
        &mut self,
        look: &Lookup<'a>,
        t: Tag,
        answer: Option<(u64, &[u8])>,
        (r, off, addr): (&'a Region, usize, u64),
        data: &[u8],
        written: &mut Vec<Written>,
        touched: &mut Touched<'a>,
    ) -> Status {
        let from = written.len();
        let again = self.repeated(t, addr).is_some();
        if !again && !r.write_from(off, data) {
            return Status::Internal;
        }
        look.wrote(addr, data.len() as u64, !again, written);
        look.touch(touched, addr, r);
        self.remember(t, addr, 0, written, from);
        if let (true, Some((at, body))) = (self.replica, answer) {
            self.remember_body(t, at, body, written, from);
        }
        Status::Ok
    }

    /// After a tagged writing EXECUTE at `addr` ran: keeps its reply body for the
    /// batch's end and for the backups, with the first range it wrote
    /// (`written[from..]`). A body past [`MAX_BODY`] is not kept.
    pub(super) fn remember_body(
        &mut self,
        tag: Tag,
        addr: u64,
        body: &[u8],
        written: &mut [Written],
        from: usize,
    ) {
        if body.len() > MAX_BODY {
            self.completions
                .unrecorded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let body: Arc<[u8]> = Arc::from(body);
        self.records.push(Record {
            tag,
            addr,
            result: 0,
            body: Some(body.clone()),
        });
        if let Some(w) = written.get_mut(from) {
            w.tag.get_or_insert(tag);
            w.answer = Some((addr, body));
        }
    }

    /// After a tagged op ran (or was answered from its record): keeps its answer for
    /// the batch's end, and hands it to the backups with the range the op wrote, if
    /// it has backups (`written[from..]`: what `Lookup::wrote` added for this op).
    #[inline(never)]
    pub(super) fn remember(
        &mut self,
        tag: Tag,
        addr: u64,
        result: u64,
        written: &mut [Written],
        from: usize,
    ) {
        // A backup records what its owner answered.
        let result = if self.replica { tag.result } else { result };
        let tag = Tag { result, ..tag };
        self.records.push(Record {
            tag,
            addr,
            result,
            body: None,
        });
        if let Some(w) = written.get_mut(from) {
            w.tag = Some(tag);
        }
    }

    pub(super) fn finish(self) {
        self.completions.record_many(&self.records);
    }
}
