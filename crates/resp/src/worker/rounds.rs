//! A turn's rounds: each connection's leading run of GETs/MGETs, plain SETs or
//! edits (counters, `APPEND`, `SETRANGE`) joins one multi-get, multi-put or
//! multi-edit; other commands run one by one. Replies stay in each connection's command order.

use super::*;

impl Worker {
    /// Runs every queued command.
    pub(super) fn rounds(&mut self) {
        loop {
            let mut r = Round::default();
            let ids: Vec<usize> = self
                .conns
                .iter()
                .filter(|(_, c)| !c.queue.is_empty() && c.busy.is_none())
                .map(|(i, _)| i)
                .collect();
            if ids.is_empty() {
                return;
            }
            for id in ids {
                self.take_from(id, &mut r);
            }
            if r.gets.is_empty() && r.sets.is_empty() && r.edits.is_empty() {
                return;
            }
            let t = std::time::Instant::now();
            let ops: usize = r.gets.iter().map(|g| g.args.len() - 1).sum::<usize>()
                + r.sets.iter().map(|(_, a)| a.len() / 2).sum::<usize>()
                + r.edits.len();
            self.run_gets(&r);
            self.run_sets(&r.sets);
            self.run_edits(&r.edits);
            self.shared.rounds.fetch_add(1, Ordering::Relaxed);
            self.shared
                .round_ops
                .fetch_add(ops as u64, Ordering::Relaxed);
            self.shared
                .round_store_us
                .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// Answers `id`'s leading commands that are not batched, then moves its leading
    /// run of plain GETs or SETs into the round.
    fn take_from(&mut self, id: usize, r: &mut Round) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        while let Some(front) = c.queue.front() {
            if c.s.quit {
                c.queue.clear();
                return;
            }
            if c.s.batched_read(front) {
                while c.queue.front().is_some_and(|a| c.s.batched_read(a)) {
                    let Some(args) = c.queue.pop_front() else {
                        break;
                    };
                    let multi = !args[0].eq_ignore_ascii_case(b"get");
                    r.gets.push(GetItem {
                        conn: id,
                        args,
                        multi,
                    });
                }
                return;
            }
            if c.s.batched_edit(front) {
                while c.queue.front().is_some_and(|a| c.s.batched_edit(a)) {
                    let Some(args) = c.queue.pop_front() else {
                        break;
                    };
                    r.edits.push((id, args));
                }
                return;
            }
            if c.s.plain_set(front) {
                // A key set twice in the round is written once, with its last value
                // (see `run_sets`).
                while c.queue.front().is_some_and(|a| c.s.plain_set(a)) {
                    let Some(args) = c.queue.pop_front() else {
                        break;
                    };
                    r.sets.push((id, args));
                }
                return;
            }
            let Some(a) = c.queue.pop_front() else {
                return;
            };
            if c.s.heavy(&a) {
                self.send_off(id, a);
                return;
            }
            let mut out = Out {
                buf: &mut c.out,
                proto: c.s.proto,
            };
            cmd::dispatch(&mut c.s, &a, &mut out);
        }
    }

    fn run_gets(&mut self, r: &Round) {
        if r.gets.is_empty() {
            return;
        }
        let keys: Vec<&[u8]> = r
            .gets
            .iter()
            .flat_map(|g| g.args[1..].iter().map(|k| &k[..]))
            .collect();
        let res = self.shared.store.mget(&keys);
        let mut first = 0;
        for g in &r.gets {
            let n = g.args.len() - 1;
            let span = first..first + n;
            first += n;
            let Some(c) = self.conns.get_mut(g.conn) else {
                continue;
            };
            let mut out = Out {
                buf: &mut c.out,
                proto: c.s.proto,
            };
            let vals = match &res {
                Ok(v) => match v.get(span) {
                    Some(vals) if !vals.is_empty() => vals,
                    _ => {
                        out.error("ERR the store answered fewer keys than asked");
                        continue;
                    }
                },
                Err(e) => {
                    out.error(&store_error_line(e));
                    continue;
                }
            };
            if !g.multi {
                match &vals[0] {
                    Ok(v) => out.opt_bulk(v.as_deref()),
                    Err(e) => out.error(&store_error_line(e)),
                }
                continue;
            }
            // A key that cannot be read fails its MGET: a nil would claim the key
            // is absent.
            if let Some(e) = vals.iter().find_map(|v| v.as_ref().err()) {
                out.error(&store_error_line(e));
                continue;
            }
            out.array(vals.len());
            for v in vals.iter().flatten() {
                out.opt_bulk(v.as_deref());
            }
        }
    }

    /// The round's plain SETs and MSETs as one multi-put. None of them has been
    /// answered, so they are concurrent and any order is theirs: a key set several
    /// times is written once, with the value of the last one taken (which is what
    /// applying them in that order leaves), and each command gets the answer of the
    /// writes it asked for (an MSET: OK if all of its keys were written).
    fn run_sets(&mut self, sets: &[(usize, Args)]) {
        if sets.is_empty() {
            return;
        }
        // Every (command, key, value) in the order taken.
        let flat: Vec<(usize, &[u8], &[u8])> = sets
            .iter()
            .enumerate()
            .flat_map(|(c, (_, a))| {
                a[1..]
                    .chunks_exact(2)
                    .map(move |p| (c, &p[0][..], &p[1][..]))
            })
            .collect();
        let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(flat.len());
        for (i, (_, k, _)) in flat.iter().enumerate() {
            last.insert(k, i);
        }
        let mut writes: Vec<usize> = last.values().copied().collect();
        writes.sort_unstable();
        let pairs: Vec<(&[u8], &[u8])> = writes.iter().map(|&i| (flat[i].1, flat[i].2)).collect();
        let results = {
            let _held = self.shared.lock_keys(pairs.iter().map(|p| &p.0));
            self.shared.store.mput(&pairs)
        };
        let by_write: HashMap<usize, &farcache_store::Result<()>> =
            writes.iter().copied().zip(results.iter()).collect();
        // Per command: the first failure among its keys' writes.
        let mut failed: Vec<Option<String>> = vec![None; sets.len()];
        for (c, k, _) in &flat {
            let r = last.get(k).and_then(|w| by_write.get(w));
            let err = match r {
                Some(Ok(())) => continue,
                Some(Err(e)) => store_error_line(e),
                None => "ERR the store answered fewer keys than asked".into(),
            };
            failed[*c].get_or_insert(err);
        }
        for ((id, _), f) in sets.iter().zip(failed) {
            let Some(c) = self.conns.get_mut(*id) else {
                continue;
            };
            let mut out = Out {
                buf: &mut c.out,
                proto: c.s.proto,
            };
            match f {
                None => out.ok(),
                Some(e) => out.error(&e),
            }
        }
    }

    /// The round's edits (the `INCR` family, `APPEND`, `SETRANGE`): their keys are
    /// locked, and each key's edits run where it lives
    /// ([`farcache_store::Store::edit_values`]: one round trip for the round, a
    /// read-modify-write for keys that need one), in the order the commands were
    /// taken (each answered with the value or length after its own edit), keeping
    /// the key's expiry. An edit that fails (not an integer, overflow, too large)
    /// changes nothing and fails only its own command; a failed read or write fails
    /// the commands of its key.
    fn run_edits(&mut self, edits: &[(usize, Args)]) {
        if edits.is_empty() {
            return;
        }
        // Per key: the commands editing it, in order.
        let mut slot_of: HashMap<&[u8], usize> = HashMap::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut per_key: Vec<Vec<usize>> = Vec::new();
        let mut programs: Vec<Vec<Edit<'_>>> = Vec::new();
        for (c, (_, a)) in edits.iter().enumerate() {
            let Some(e) = crate::edit::edit_of(a) else {
                continue;
            };
            let k = *slot_of.entry(&a[1][..]).or_insert_with(|| {
                keys.push(&a[1][..]);
                per_key.push(Vec::new());
                programs.push(Vec::new());
                keys.len() - 1
            });
            per_key[k].push(c);
            programs[k].push(e);
        }
        let shared = self.shared.clone();
        let _held = shared.lock_keys(keys.iter());
        let mut replies: Vec<Result<Edited, String>> =
            vec![Err("ERR the store answered no edit".into()); edits.len()];
        let results = shared.store.edit_values(&keys, &programs);
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(done) => {
                    for (&c, d) in per_key[k].iter().zip(done) {
                        replies[c] = Ok(d);
                    }
                }
                Err(e) => {
                    for &c in &per_key[k] {
                        replies[c] = Err(store_error_line(&e));
                    }
                }
            }
        }
        for ((id, _), reply) in edits.iter().zip(replies) {
            let Some(c) = self.conns.get_mut(*id) else {
                continue;
            };
            let mut out = Out {
                buf: &mut c.out,
                proto: c.s.proto,
            };
            crate::edit::edit_reply(reply, &mut out);
        }
    }
}
