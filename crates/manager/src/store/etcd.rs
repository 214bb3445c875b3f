//! The catalogue on etcd, for several managers of which one leads.
//!
//! Keys under the cluster's prefix `P`:
//! - `P/leader`: the leading manager's address, attached to its etcd lease;
//! - `P/servers/<id>`, `P/caches/<id>`: JSON records, as in the redb file;
//! - `P/meta/next_server_id`, `P/meta/next_cache_id`: decimal counters.
//!
//! A manager campaigns by creating `P/leader` in a transaction that succeeds only if
//! the key is absent; the others poll until it is gone (its lease expired or was
//! revoked). Each commit is a transaction conditioned on `P/leader` still being the
//! one this manager created (same create revision) and on every key it writes being
//! at the mod revision this manager last saw; a commit that fails its conditions means
//! another manager leads, so this one steps down.
//!
//! etcd-client is asynchronous: a small runtime of one thread runs the calls (the
//! service waits on each commit, as it waits on redb's fsync) and the lease keep-alive.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use parking_lot::Mutex;
use tokio::runtime::Runtime;

use super::{Backend, Loaded, Write, decode, encode};
use crate::error::ManagerError;
use crate::leadership::Leadership;

/// How a manager reaches etcd and campaigns there.
#[derive(Debug, Clone)]
pub struct EtcdSettings {
    /// etcd client URLs (`http://127.0.0.1:2379`, or `host:port`).
    pub endpoints: Vec<String>,
    /// Key prefix: several clusters can share one etcd.
    pub prefix: String,
    /// The leader's etcd lease: a dead leader is replaced this long after its last
    /// keep-alive (etcd rounds up to whole seconds and to its own minimum).
    pub lease_ttl: Duration,
    /// Each etcd call's deadline.
    pub call_timeout: Duration,
}

impl EtcdSettings {
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/farcache".into(),
            lease_ttl: Duration::from_secs(2),
            call_timeout: Duration::from_secs(2),
        }
    }
}

pub(crate) struct EtcdStore {
    rt: Runtime,
    client: Client,
    prefix: String,
    call_timeout: Duration,
    /// The create revision of the leader key this manager wrote.
    leader_rev: i64,
    lease: i64,
    /// Mod revision of every catalogue key as this manager last saw it (absent: 0).
    revisions: Mutex<HashMap<String, i64>>,
    leadership: Arc<Leadership>,
}

/// Keys per page when the catalogue is read.
const LOAD_PAGE: i64 = 1000;

fn etcd_err(what: &str, e: impl std::fmt::Display) -> ManagerError {
    ManagerError::Etcd(format!("{what}: {e}"))
}

impl EtcdStore {
    /// Connects, waits until this manager leads (telling `on_leader` who does
    /// meanwhile), then reads the whole catalogue. `me` is what the leader key says
    /// (this manager's addresses, as `LeaderAddr` in `front` encodes them).
    pub(crate) fn campaign(
        settings: &EtcdSettings,
        me: &str,
        on_leader: &dyn Fn(Option<&str>),
    ) -> Result<(Self, Loaded, Arc<Leadership>), ManagerError> {
        if settings.endpoints.is_empty() {
            return Err(ManagerError::Config("no etcd endpoint given".into()));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("manager-etcd")
            .enable_all()
            .build()?;
        let opts = ConnectOptions::new()
            .with_connect_timeout(settings.call_timeout)
            .with_timeout(settings.call_timeout)
            .with_keep_alive(Duration::from_secs(1), settings.call_timeout);
        let client = rt
            .block_on(Client::connect(&settings.endpoints, Some(opts)))
            .map_err(|e| etcd_err(&format!("connect to {:?}", settings.endpoints), e))?;
        let prefix = settings.prefix.trim_end_matches('/').to_string();
        let leader_key = format!("{prefix}/leader");
        let ttl = i64::try_from(settings.lease_ttl.as_secs().max(1)).unwrap_or(60);
        let mut seen_leader: Option<String> = None;
        let (lease, leader_rev, granted_at, granted_ttl) = loop {
            let mut c = client.clone();
            let current = rt
                .block_on(c.get(leader_key.as_str(), None))
                .map_err(|e| etcd_err("read the leader key", e))?;
            if let Some(kv) = current.kvs().first() {
                let who = String::from_utf8_lossy(kv.value()).into_owned();
                if seen_leader.as_deref() != Some(&who) {
                    tracing::info!(leader = %who, "standing by: another manager leads");
                    on_leader(Some(&who));
                    seen_leader = Some(who);
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            if seen_leader.take().is_some() {
                on_leader(None);
            }
            let granted_at = Instant::now();
            let grant = rt
                .block_on(c.lease_grant(ttl, None))
                .map_err(|e| etcd_err("grant a lease", e))?;
            let txn = Txn::new()
                .when([Compare::create_revision(
                    leader_key.as_str(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([TxnOp::put(
                    leader_key.as_str(),
                    me,
                    Some(PutOptions::new().with_lease(grant.id())),
                )]);
            let r = rt
                .block_on(c.txn(txn))
                .map_err(|e| etcd_err("campaign", e))?;
            if r.succeeded() {
                let rev = r.header().map_or(0, |h| h.revision());
                let granted_ttl = u64::try_from(grant.ttl()).unwrap_or(1);
                break (grant.id(), rev, granted_at, granted_ttl);
            }
            // Another manager won the race: our lease holds nothing, give it back.
            let _ = rt.block_on(c.lease_revoke(grant.id()));
        };
        let leadership = Leadership::until(
            granted_at
                + Duration::from_secs(granted_ttl).mul_f64(1.0 - crate::leadership::LEASE_MARGIN),
        );
        tracing::info!(%me, lease_ttl_s = granted_ttl, "this manager leads (etcd)");
        let store = Self {
            rt,
            client,
            prefix,
            call_timeout: settings.call_timeout,
            leader_rev,
            lease,
            revisions: Mutex::new(HashMap::new()),
            leadership: Arc::clone(&leadership),
        };
        store.keep_alive(granted_ttl);
        let loaded = match store.load() {
            Ok(l) => l,
            Err(e) => {
                store.resign();
                return Err(e);
            }
        };
        Ok((store, loaded, leadership))
    }

    /// Renews the lease a third of its TTL apart; deposes on a lapse or refusal.
    fn keep_alive(&self, ttl_s: u64) {
        let mut c = self.client.clone();
        let lease = self.lease;
        let lead = Arc::clone(&self.leadership);
        let every = Duration::from_secs(ttl_s).div_f64(3.0);
        let call_timeout = self.call_timeout;
        self.rt.spawn(async move {
            let mut stream = None;
            loop {
                tokio::time::sleep(every).await;
                if !lead.holds() {
                    return;
                }
                if stream.is_none() {
                    match c.lease_keep_alive(lease).await {
                        Ok(s) => stream = Some(s),
                        Err(e) => {
                            tracing::warn!(error = %e, "etcd keep-alive: cannot open the stream");
                            continue;
                        }
                    }
                }
                let Some((keeper, replies)) = stream.as_mut() else {
                    continue;
                };
                let sent = Instant::now();
                let answer = tokio::time::timeout(call_timeout, async {
                    keeper.keep_alive().await?;
                    replies.message().await
                })
                .await;
                match answer {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => {
                        lead.renewed(
                            sent,
                            Duration::from_secs(u64::try_from(r.ttl()).unwrap_or(0)),
                        );
                    }
                    Ok(Ok(Some(_))) => {
                        lead.depose("etcd says the leader's lease expired");
                        return;
                    }
                    Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                        // Reopen the stream next round; the lease may still be alive.
                        tracing::warn!("etcd keep-alive got no answer");
                        stream = None;
                    }
                }
            }
        });
    }

    /// Gives the lease back (deleting the leader key) so a standby takes over at once.
    pub(crate) fn resign(&self) {
        self.leadership.depose("resigned");
        let mut c = self.client.clone();
        let r = self.rt.block_on(async {
            tokio::time::timeout(self.call_timeout, c.lease_revoke(self.lease)).await
        });
        if !matches!(r, Ok(Ok(_))) {
            tracing::warn!("could not revoke the leader's lease; it expires by itself");
        }
    }

    fn key(&self, w: &Write<'_>) -> String {
        let p = &self.prefix;
        match w {
            Write::Server(s) => format!("{p}/servers/{:010}", s.id),
            Write::Cache(c) => format!("{p}/caches/{:010}", c.id),
            Write::RemoveCache(id) => format!("{p}/caches/{id:010}"),
            Write::NextServerId(_) => format!("{p}/meta/next_server_id"),
            Write::NextCacheId(_) => format!("{p}/meta/next_cache_id"),
            Write::Event(seq, _) | Write::DropEvent(seq) => format!("{p}/events/{seq:020}"),
        }
    }

    /// Reads the whole catalogue, a page of keys at a time (one answer holding a large
    /// catalogue would pass gRPC's 4 MiB message limit), every page at the revision
    /// of the first, so the pages form one snapshot.
    pub(crate) fn load(&self) -> Result<Loaded, ManagerError> {
        let mut c = self.client.clone();
        let from = format!("{}/", self.prefix);
        // The end of the prefix's range: the prefix with its last byte raised ('/' + 1).
        let end = format!("{}0", self.prefix);
        let mut kvs = Vec::new();
        let mut next = from.clone().into_bytes();
        let mut at = 0;
        loop {
            let mut opts = GetOptions::new()
                .with_range(end.as_str())
                .with_limit(LOAD_PAGE);
            if at > 0 {
                opts = opts.with_revision(at);
            }
            let r = self
                .rt
                .block_on(c.get(next.clone(), Some(opts)))
                .map_err(|e| etcd_err("read the catalogue", e))?;
            if at == 0 {
                at = r.header().map_or(0, |h| h.revision());
            }
            let page = r.kvs().len();
            let more = r.more();
            if let Some(last) = r.kvs().last() {
                // The next page starts just after the last key.
                next = [last.key(), &[0]].concat();
            }
            kvs.extend(
                r.kvs()
                    .iter()
                    .map(|kv| (kv.key().to_vec(), kv.value().to_vec(), kv.mod_revision())),
            );
            if !more || page == 0 {
                break;
            }
        }
        let mut loaded = Loaded::default();
        let mut revs = self.revisions.lock();
        for (key, value, mod_revision) in &kvs {
            let key = String::from_utf8_lossy(key).into_owned();
            let Some(rest) = key.strip_prefix(&from) else {
                continue;
            };
            let counter = || -> Result<u32, ManagerError> {
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| ManagerError::Corrupt(format!("{key} is not a counter")))
            };
            if rest.starts_with("servers/") {
                loaded.servers.push(decode(&key, value)?);
            } else if rest.starts_with("caches/") {
                loaded.caches.push(decode(&key, value)?);
            } else if rest == "meta/next_server_id" {
                loaded.next_server_id = counter()?;
            } else if rest == "meta/next_cache_id" {
                loaded.next_cache_id = counter()?;
            } else if let Some(seq) = rest.strip_prefix("events/") {
                let seq = seq
                    .parse()
                    .map_err(|_| ManagerError::Corrupt(format!("{key}: not an event number")))?;
                loaded.events.push((seq, decode(&key, value)?));
            } else {
                continue;
            }
            revs.insert(key, *mod_revision);
        }
        Ok(loaded)
    }

    /// After a commit whose answer was lost: did it land? Reads, in one snapshot, the
    /// leader key and each written key. It landed if this manager still leads (so
    /// no other can have written since) and every key moved past the revision known
    /// before, to the value written (a deleted key is gone).
    fn landed(
        &self,
        keys: &[(String, Option<Vec<u8>>)],
        known: &HashMap<String, i64>,
    ) -> Option<i64> {
        let mut c = self.client.clone();
        let leader_key = format!("{}/leader", self.prefix);
        let ops: Vec<TxnOp> = std::iter::once(TxnOp::get(leader_key.as_str(), None))
            .chain(keys.iter().map(|(k, _)| TxnOp::get(k.as_str(), None)))
            .collect();
        let r = self
            .rt
            .block_on(async {
                tokio::time::timeout(self.call_timeout, c.txn(Txn::new().and_then(ops))).await
            })
            .ok()?
            .ok()?;
        let mut answers = r.op_responses().into_iter();
        let TxnOpResponse::Get(leader) = answers.next()? else {
            return None;
        };
        let leads = leader
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == self.leader_rev);
        if !leads {
            return None;
        }
        let mut rev = 0;
        for ((k, v), op) in keys.iter().zip(answers) {
            let TxnOpResponse::Get(g) = op else {
                return None;
            };
            let kv = g.kvs().first();
            let now = kv.map_or(0, |kv| kv.mod_revision());
            let before = known.get(k).copied().unwrap_or(0);
            let done = match v {
                Some(v) => now > before && kv.is_some_and(|kv| kv.value() == v.as_slice()),
                None => now == 0 && before > 0,
            };
            if !done {
                return None;
            }
            rev = rev.max(now);
        }
        // Every key the commit deleted: the snapshot's revision stands for them.
        Some(if rev == 0 {
            r.header().map_or(0, |h| h.revision())
        } else {
            rev
        })
    }
}

impl Backend for EtcdStore {
    fn commit(&self, writes: &[Write<'_>]) -> Result<(), ManagerError> {
        if !self.leadership.holds() {
            return Err(ManagerError::NotLeader(
                "this manager's etcd leadership lapsed".into(),
            ));
        }
        // One operation per key (etcd refuses a key written twice in a transaction):
        // the last write of a key wins, as it would applied in order.
        let mut keys: Vec<(String, Option<Vec<u8>>)> = Vec::new();
        for w in writes {
            let value = match w {
                Write::Server(s) => Some(encode(s)?),
                Write::Cache(c) => Some(encode(c)?),
                Write::RemoveCache(_) | Write::DropEvent(_) => None,
                Write::NextServerId(id) | Write::NextCacheId(id) => {
                    Some(id.to_string().into_bytes())
                }
                Write::Event(_, e) => Some(encode(e)?),
            };
            let key = self.key(w);
            keys.retain(|(k, _)| *k != key);
            keys.push((key, value));
        }
        if keys.is_empty() {
            return Ok(());
        }
        let mut revs = self.revisions.lock();
        let leader_key = format!("{}/leader", self.prefix);
        let mut when = vec![Compare::create_revision(
            leader_key.as_str(),
            CompareOp::Equal,
            self.leader_rev,
        )];
        let mut ops = Vec::with_capacity(keys.len());
        for (k, v) in &keys {
            let known = revs.get(k).copied().unwrap_or(0);
            when.push(Compare::mod_revision(k.as_str(), CompareOp::Equal, known));
            ops.push(match v {
                Some(v) => TxnOp::put(k.as_str(), v.clone(), None),
                None => TxnOp::delete(k.as_str(), None),
            });
        }
        let mut c = self.client.clone();
        let cache_commit = writes.iter().any(|w| matches!(w, Write::Cache(_)));
        let unsent = cache_commit && crate::failpoints::hit("etcd-cache-commit-unsent");
        let answer = (!unsent)
            .then(|| {
                self.rt.block_on(async {
                    tokio::time::timeout(
                        self.call_timeout,
                        c.txn(Txn::new().when(when).and_then(ops)),
                    )
                    .await
                })
            })
            .and_then(|a| a.ok())
            .and_then(|a| a.ok())
            .filter(|_| !(cache_commit && crate::failpoints::hit("etcd-cache-commit-answer-lost")));
        let rev = match answer {
            Some(r) if r.succeeded() => r.header().map_or(0, |h| h.revision()),
            Some(_) => {
                self.leadership
                    .depose("an etcd commit failed its conditions: another manager leads");
                return Err(ManagerError::NotLeader(
                    "another manager leads (etcd refused the change)".into(),
                ));
            }
            None => match self.landed(&keys, &revs) {
                Some(rev) => rev,
                None => {
                    // Unknown whether it landed: this manager's view may be stale,
                    // so it must not commit again on it.
                    self.leadership
                        .depose("an etcd commit's outcome is unknown");
                    return Err(ManagerError::Etcd(
                        "etcd did not answer a commit; this manager steps down".into(),
                    ));
                }
            },
        };
        for (k, v) in keys {
            if v.is_some() {
                revs.insert(k, rev);
            } else {
                revs.remove(&k);
            }
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "etcd"
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if self.leadership.holds() {
            self.resign();
        }
    }
}
