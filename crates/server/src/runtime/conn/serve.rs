//! Serving a connection's frames: requests run on the engine (or are refused without
//! a lease), peer messages go to the worker's flow engine within the turn's budget,
//! control requests to the control pool.

use super::*;

impl Conn {
    /// Serves the whole frames at the start of `data`; returns the bytes they took.
    pub(super) fn serve_frames(
        &mut self,
        sh: &Shared,
        ctx: &mut WorkerCtx<'_>,
        data: &[u8],
    ) -> usize {
        let max = sh.config.max_frame;
        let mut at = 0;
        while !self.closing && !self.blocked && !self.yielded && self.paused(sh) != Some(Turn::Idle)
        {
            if self.work >= TURN_WORK && at > 0 {
                self.yielded = true;
                break;
            }
            let avail = &data[at..];
            let hdr = match FrameHeader::decode(avail, max) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    self.fatal(sh, &e.to_string());
                    return data.len();
                }
            };
            if !self.is_authenticated()
                && let Err(e) = Greeting::admit(&hdr)
            {
                self.fatal(sh, &e.to_string());
                return data.len();
            }
            if avail.len() < hdr.frame_len() {
                break;
            }
            at += hdr.frame_len();
            let payload = &avail[HEADER_LEN..hdr.frame_len()];
            if let Err(e) = self.serve_frame(sh, ctx, hdr, payload) {
                self.fatal(sh, &e.to_string());
                return data.len();
            }
        }
        at
    }

    fn serve_frame(
        &mut self,
        sh: &Shared,
        ctx: &mut WorkerCtx<'_>,
        hdr: FrameHeader,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        let (kind, peer) = match &self.auth {
            Auth::Challenged(g) => {
                let g = *g;
                return self.handshake(sh, &g, hdr, payload);
            }
            Auth::Ready(p) => (hdr.kind, p),
        };
        match (kind, peer.role) {
            (FrameKind::Request, _) if let Some(newest) = &peer.newest => {
                let (stream, access) = (peer.stream, peer.access);
                let (newest, owner) = (newest.clone(), peer.identity.clone());
                // A newer stream of this owner took over: this one's frames are sent
                // again there, and applying them here too could land them late.
                fail::fail_point!("backup-before-stream-check");
                let g = newest.read();
                if stream < *g {
                    drop(g);
                    return self.refuse(sh, hdr.seq, payload);
                }
                let r = self.serve_request(sh, ctx, hdr.seq, payload, access, Some(&owner));
                drop(g);
                r
            }
            (FrameKind::Request, role) => {
                let access = peer.access;
                let server = (role == Role::Server).then_some("");
                self.serve_request(sh, ctx, hdr.seq, payload, access, server)
            }
            (FrameKind::Peer, Role::Server) => {
                let from = peer.identity.clone();
                self.serve_peer(sh, ctx, &from, payload)
            }
            (FrameKind::Control, role) => {
                let req = ControlRequest::decode(payload)?;
                let job = Job {
                    worker: ctx.worker,
                    conn: ctx.key,
                    serial: self.serial,
                    seq: hdr.seq,
                    role,
                    access: peer.access,
                    req,
                };
                if sh.control.submit(job) {
                    self.awaiting_control = true;
                } else {
                    let r = ControlResponse::error(
                        ControlErrorCode::Unavailable,
                        "the server is shutting down",
                    );
                    encode_frame(
                        &mut self.out.buf,
                        FrameKind::ControlReply,
                        hdr.seq,
                        &r.encode(),
                    );
                }
                Ok(())
            }
            (FrameKind::Peer, role) => {
                GuardCounters::bump(&sh.metrics.guard.forbidden);
                Err(DecodeError::NotAllowed(format!(
                    "Peer frames are accepted only from servers that proved the cluster secret; this connection is a {role:?}"
                )))
            }
            (kind, _) => Err(DecodeError::NotAllowed(format!(
                "a {kind:?} frame after the handshake"
            ))),
        }
    }

    /// Serves the messages of a `Peer` frame while the turn's work budget lasts and
    /// while the sessions their answers go on have room; the rest is re-framed and
    /// kept for a later turn (a frame of thousands of 1 MiB FETCHes is a lot of work).
    fn serve_peer(
        &mut self,
        sh: &Shared,
        ctx: &mut WorkerCtx<'_>,
        from: &str,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        // A frame this connection carried over was validated whole when it came.
        if !std::mem::take(&mut self.carried_valid) {
            PeerDecoder::validate(payload)?;
        }
        let mut dec = PeerDecoder::new(payload)?;
        let mut served = 0;
        while let Some(m) = dec.next() {
            let m = m?;
            let (cost, answer) = match m {
                PeerMsg::Fetch { origin, len, .. } => {
                    let len = len as usize;
                    (len, Some((origin, len)))
                }
                PeerMsg::Forward { state, .. } => (state.len(), None),
                PeerMsg::Result { body, .. } => (body.len(), None),
                PeerMsg::Fetched { data, .. } => (data.len(), None),
            };
            let full = answer.is_some_and(|(to, len)| !ctx.engine.sessions.has_room(sh, to, len));
            let over = served > 0 && self.work + cost > TURN_WORK;
            // Answering a FETCH while clients wait spends the worker's peer budget;
            // one it cannot pay waits like one whose session is full.
            let metered = !full
                && !over
                && answer.is_some_and(|(_, len)| !ctx.peer_budget.take(len, Instant::now()));
            if full || over || metered {
                // The rest goes back as a frame of its own, copied as it came (it
                // was validated): re-encoding it message by message made a frame of
                // thousands of FETCHes served one per turn cost a quadratic amount.
                let mut rest = Vec::new();
                let mut enc = PeerEncoder::begin(&mut rest);
                enc.push(&mut rest, &m);
                let (count, tail) = dec.rest();
                enc.push_encoded_many(&mut rest, count, tail);
                enc.finish(&mut rest);
                self.carry = Some(rest);
                self.carried_valid = true;
                if full || metered {
                    self.blocked = true;
                } else {
                    self.yielded = true;
                }
                return Ok(());
            }
            self.work += cost;
            served += 1;
            ctx.engine.on_peer_msg(sh, ctx.reg, from, m);
        }
        Ok(())
    }

    /// Answers a batch `NOT_SERVING` op by op and runs none of it (no lease, or a
    /// replication stream a newer one replaced).
    fn refuse(&mut self, sh: &Shared, seq: u64, payload: &[u8]) -> Result<(), DecodeError> {
        let mut tally = Tally::default();
        let start = self.out.buf.len();
        let r = refuse_batch(
            payload,
            seq,
            Status::NotServing,
            &mut self.out.buf,
            &mut tally,
        );
        sh.metrics.publish(&tally);
        r?;
        self.work += self.out.buf.len() - start;
        if !self.pending.is_empty() {
            // Replies leave in request order: behind the ones still held.
            let frame = self.out.buf.split_off(start);
            self.pending.push_held(frame, &[], 0);
            self.pending.drain_ready(&mut self.out.buf);
        }
        Ok(())
    }

    fn serve_request(
        &mut self,
        sh: &Shared,
        ctx: &mut WorkerCtx<'_>,
        seq: u64,
        payload: &[u8],
        access: Access,
        // `Some` for a server peer: its replication stream's owner, or "" for
        // another server connection (a migration's copy).
        server: Option<&str>,
    ) -> Result<(), DecodeError> {
        let from_server = server.is_some();
        if !from_server {
            ctx.peer_budget.client_served(Instant::now());
        }
        // Clients' ops run only under the manager's lease; servers' (a backup's
        // replicated writes, a migration's copy) are ordered by their owner's.
        if !from_server && !sh.lease.valid() {
            GuardCounters::bump(&sh.metrics.guard.unleased);
            return self.refuse(sh, seq, payload);
        }
        let map = sh.store.snapshot();
        let cx = BatchCtx {
            map: &map,
            procs: &sh.procs,
            access,
            me: &sh.advertise,
            from_server,
            replica_of: server.filter(|o| !o.is_empty()),
            completions: &sh.completions,
            note_acks: sh.config.ack_windows,
            max_frame: sh.config.max_frame as usize,
        };
        let mut tally = Tally::default();
        let start = self.out.buf.len();
        let mut spawned = Vec::new();
        let mut written = Vec::new();
        let mut touched = crate::engine::exec::Touched::default();
        let r = execute_batch(
            &cx,
            payload,
            seq,
            &mut self.out.buf,
            &mut tally,
            &mut spawned,
            &mut written,
            &mut touched,
        );
        sh.metrics.publish(&tally);
        r?;
        if !from_server && spawned.is_empty() && !sh.lease.valid() {
            // The lease ran out while the batch ran (a stalled process): its reads
            // may be stale, so no reply of it leaves. Its writes were applied here
            // and still go to the backups below; as failed writes they may show.
            self.out.buf.truncate(start);
            refuse_batch(
                payload,
                seq,
                Status::NotServing,
                &mut self.out.buf,
                &mut tally,
            )?;
            GuardCounters::bump(&sh.metrics.guard.unleased);
        } else if !from_server && !touched.is_empty() {
            // The writes stand: note when, for the split-brain check.
            let now_us = wall_us();
            for r in touched.regions() {
                r.note_ack(now_us);
            }
        }
        self.work += self.out.buf.len() - start;
        // Writes to regions with backups: the reply waits for every backup.
        let parts = if written.is_empty() {
            Vec::new()
        } else {
            sh.replicator.plan(ctx.shared, &map, &written)
        };
        if !spawned.is_empty() || !self.pending.is_empty() || !parts.is_empty() {
            // Replies leave in request order: this one waits, or queues behind.
            let frame = self.out.buf.split_off(start);
            let holes: Vec<usize> = spawned.iter().map(|s| s.offset).collect();
            let resp = self.pending.push_held(frame, &holes, parts.len());
            if !parts.is_empty() {
                let waiter = Waiter {
                    worker: ctx.worker,
                    conn: ctx.key,
                    serial: self.serial,
                    resp,
                };
                sh.replicator.send(sh, &map, parts, waiter);
            }
            for (i, s) in spawned.into_iter().enumerate() {
                let hole = HoleRef {
                    conn: ctx.key,
                    serial: self.serial,
                    resp,
                    hole: i as u32,
                };
                let inv = Invocation {
                    cache: s.cache,
                    proc_name: s.proc_name,
                    addr: s.addr,
                    state: Vec::new(),
                    hops: 0,
                    pulled: Default::default(),
                    target: Target::Local(hole),
                };
                ctx.engine.start(sh, ctx.reg, inv, s.step);
            }
            self.pending.drain_ready(&mut self.out.buf);
        }
        Ok(())
    }
}
