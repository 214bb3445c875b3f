//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! `MULTI` queues commands (refusing unknown ones, wrong arities and forbidden
//! writes at once, which dooms the transaction); `EXEC` takes the key-stripe locks
//! of every key its commands and its `WATCH`es name, checks that no watched key was
//! written through this front end since `WATCH`, then runs the commands in order.
//! Every other write of this front end to those keys waits for it, so a transaction
//! on one key (check-and-set, a lock's release) is atomic and isolated. Across keys
//! it is atomic for writers, but a plain read of another connection may see some of
//! its writes and not yet others (reads take no lock); see docs/resp.md.

use super::{keys_of, run_queued};
use crate::parse::Args;
use crate::reply::Out;
use crate::session::{Session, Transaction};

pub fn multi(s: &mut Session, _: &Args, out: &mut Out) {
    if s.tx.is_some() {
        return out.error("ERR MULTI calls can not be nested");
    }
    s.tx = Some(Transaction::default());
    out.ok();
}

pub fn discard(s: &mut Session, _: &Args, out: &mut Out) {
    if s.tx.take().is_none() {
        return out.error("ERR DISCARD without MULTI");
    }
    s.watched.clear();
    out.ok();
}

pub fn watch(s: &mut Session, a: &Args, out: &mut Out) {
    if s.tx.is_some() {
        return out.error("ERR WATCH inside MULTI is not allowed");
    }
    for k in &a[1..] {
        let v = s.shared.version(k);
        s.watched.push((k.clone(), v));
    }
    out.ok();
}

pub fn unwatch(s: &mut Session, _: &Args, out: &mut Out) {
    s.watched.clear();
    out.ok();
}

pub fn exec(s: &mut Session, _: &Args, out: &mut Out) {
    let Some(tx) = s.tx.take() else {
        return out.error("ERR EXEC without MULTI");
    };
    let watched = std::mem::take(&mut s.watched);
    if tx.aborted {
        return out.error("EXECABORT Transaction discarded because of previous errors.");
    }
    let mut keys: Vec<bytes::Bytes> = watched.iter().map(|(k, _)| k.clone()).collect();
    for q in &tx.queued {
        keys.extend(keys_of(q));
    }
    let shared = s.shared.clone();
    let _held = shared.lock_keys(keys.iter());
    if watched.iter().any(|(k, v)| shared.version(k) != *v) {
        return out.null_array();
    }
    out.array(tx.queued.len());
    for q in &tx.queued {
        run_queued(s, q, out);
    }
}
