//! The keyed store against a real 3-server cluster (in-process servers): the API and
//! its refusals, a model check of random get/put/delete (one and many) from several threads,
//! concurrent puts to one key (last writer wins, never a torn value), and a store far
//! smaller than what is written (CLOCK eviction, never another key's bytes).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use farcache_store::{
    Condition, Edit, Edited, PutOptions, Store, StoreError, StoreExt, StoreOptions,
};
use farcache_testkit::{ClusterOptions, LocalCluster};
use rand::{Rng, SeedableRng};

const REGION: u64 = 256 << 10;

fn cluster() -> LocalCluster {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(64 << 20)
        .server_threads(2);
    LocalCluster::start(&opts).expect("start local cluster")
}

fn store(c: &LocalCluster, name: &str, capacity: u64, avg: u64) -> Store {
    let client = c.client().expect("client");
    client
        .create_store(
            name,
            capacity,
            &StoreOptions {
                avg_value_size: avg,
                ..StoreOptions::default()
            },
        )
        .expect("create store")
}

/// A value that names its key and version, so a wrong or torn one is recognisable.
fn value_for(key: &[u8], version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let stamp = format!("{}#{version}|", String::from_utf8_lossy(key));
    while v.len() < len {
        v.extend_from_slice(stamp.as_bytes());
    }
    v.truncate(len);
    v
}

#[test]
fn api_round_trips_and_refusals() {
    let c = cluster();
    let s = store(&c, "api", 2 << 20, 64);
    assert_eq!(s.get(b"nope").expect("get"), None);
    s.put(b"a", b"1").expect("put");
    assert_eq!(s.get(b"a").expect("get").as_deref(), Some(&b"1"[..]));
    s.put(b"a", b"22").expect("overwrite");
    assert_eq!(s.get(b"a").expect("get").as_deref(), Some(&b"22"[..]));
    assert!(s.exists(b"a").expect("exists"));
    assert!(s.delete(b"a").expect("delete"));
    assert!(!s.delete(b"a").expect("delete again"));
    assert!(!s.exists(b"a").expect("exists"));
    assert_eq!(s.get(b"a").expect("get"), None);

    // Binary keys and values, empty values.
    let bin: Vec<u8> = (0..=255u8).collect();
    s.put(&bin, &bin).expect("binary");
    assert_eq!(s.get(&bin).expect("get").as_deref(), Some(&bin[..]));
    s.put(b"empty", b"").expect("empty value");
    assert_eq!(s.get(b"empty").expect("get").as_deref(), Some(&b""[..]));

    // Conditions.
    let nx = PutOptions {
        condition: Condition::IfAbsent,
        ..PutOptions::default()
    };
    let xx = PutOptions {
        condition: Condition::IfPresent,
        ..PutOptions::default()
    };
    assert!(!s.put_with(b"c", b"x", xx).expect("xx absent"));
    assert!(s.put_with(b"c", b"x", nx).expect("nx absent"));
    assert!(!s.put_with(b"c", b"y", nx).expect("nx present"));
    assert!(s.put_with(b"c", b"z", xx).expect("xx present"));
    assert_eq!(s.get(b"c").expect("get").as_deref(), Some(&b"z"[..]));

    // TTL.
    s.put_with(b"t", b"soon", PutOptions::ttl(Duration::from_millis(1000)))
        .expect("ttl put");
    assert_eq!(s.get(b"t").expect("get").as_deref(), Some(&b"soon"[..]));
    // A generous TTL: the read above must come before it even on a loaded machine.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(s.get(b"t").expect("get"), None, "expired value returned");
    assert!(!s.exists(b"t").expect("exists"));
    assert!(s.put_with(b"t", b"again", nx).expect("nx over expired"));

    // Hostile keys and values get clear errors and change nothing.
    // The empty key is a key (as in Redis); the store's reserved prefix is not.
    s.put(b"", b"v").expect("the empty key");
    assert_eq!(s.get(b"").expect("get").as_deref(), Some(&b"v"[..]));
    assert!(s.delete(b"").expect("delete"));
    let reserved = b"\xff\xfeFC-mine";
    assert!(matches!(s.put(reserved, b"v"), Err(StoreError::Key(_))));
    assert!(matches!(s.get(reserved), Err(StoreError::Key(_))));
    let huge = vec![7u8; 5000];
    let e = s.put(&huge, b"v").expect_err("huge key");
    assert!(e.to_string().contains("4096"), "{e}");
    // Above the small-value limit values are erasure coded: RS(4+2) needs six
    // servers and this cluster has three, so the value is coded 2+1.
    let big = vec![3u8; (s.max_small_value() + 1) as usize];
    s.put(b"big", &big).expect("4+2 asked, 3 servers");
    let m = s.manifest(b"big").expect("manifest").expect("coded");
    assert_eq!((m.data, m.parity), (2, 1));
    assert_eq!(s.get(b"big").expect("get").as_deref(), Some(&big[..]));
    assert!(s.delete(b"big").expect("delete"));

    // Batches: per-key results, bad keys failing alone.
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
        .map(|i| {
            let k = format!("m{i}").into_bytes();
            let v = value_for(&k, 0, (i % 90) as usize);
            (k, v)
        })
        .collect();
    assert!(s.mput(&pairs).iter().all(Result::is_ok));
    let mut keys: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
    keys.push(b"\xff\xfeFC-reserved".to_vec());
    let got = s.mget(&keys).expect("mget");
    for (i, (k, v)) in pairs.iter().enumerate() {
        assert_eq!(
            got[i].as_ref().expect("ok").as_deref(),
            Some(&v[..]),
            "{k:?}"
        );
    }
    assert!(matches!(got[300], Err(StoreError::Key(_))));

    // Reopening sees the same data; a plain cache is not a store.
    let client = c.client().expect("client");
    let again = client.open_store("api").expect("open");
    assert_eq!(again.get(b"c").expect("get").as_deref(), Some(&b"z"[..]));
    client.create("plain", 1 << 20).expect("plain cache");
    assert!(matches!(
        client.open_store("plain"),
        Err(StoreError::Format(_))
    ));

    let st = s.stats().expect("stats");
    assert_eq!(st.live, 300 + 4, "{st:?}");
    assert!(st.tombstones >= 1);
    assert!(st.requested <= st.reserved && st.reserved <= st.carved);
    assert!(st.internal_fragmentation() < 0.25);
}

#[test]
fn random_ops_from_threads_match_a_model() {
    let c = cluster();
    let s = store(&c, "model", 4 << 20, 48);
    random_ops_match_a_model(&s, 200);
}

/// The same on an index far too small for its keys: most buckets overflow into
/// their pairs, and deletes and re-inserts go through the locked path (tombstones
/// of either bucket), from four threads at once. No pair holds more keys than its
/// 14 slots, so nothing may be evicted.
#[test]
fn random_ops_on_full_bucket_pairs_match_a_model() {
    let c = cluster();
    let s = store(&c, "pairs", 1 << 20, 4000);
    let keys = 75;
    let d = s.descriptor();
    let mut per_bucket = HashMap::new();
    for t in 0..4 {
        for k in 0..keys {
            let h = farcache_kvformat::hash::locate(
                format!("t{t}-k{k}").as_bytes(),
                d.shards,
                d.buckets,
            );
            *per_bucket.entry((h.shard, h.bucket)).or_insert(0) += 1;
        }
    }
    let full = per_bucket.values().filter(|&&n| n > 7).count();
    let pair_max = per_bucket
        .iter()
        .map(|(&(sh, b), &n)| n + per_bucket.get(&(sh, b ^ 1)).copied().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(
        full >= 3 && pair_max <= 14,
        "{full} buckets over 7 keys, a pair with {pair_max}"
    );
    random_ops_match_a_model(&s, keys);
}

/// Four threads, each with its own `keys` keys, run random get/put/delete/mget/mput
/// checked against a model of their own; then the store holds exactly the models'
/// keys and evicted none.
fn random_ops_match_a_model(s: &Store, keys: u64) {
    let threads = 4;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0xfa5 + t);
                let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
                for step in 0..3000u64 {
                    // Few keys per thread, so ops keep hitting the same buckets.
                    let key = format!("t{t}-k{}", rng.gen_range(0..keys)).into_bytes();
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let v = value_for(&key, step, rng.gen_range(0..160));
                            s.put(&key, &v).expect("put");
                            model.insert(key, v);
                        }
                        4 if step % 2 == 0 => {
                            let was = s.delete(&key).expect("delete");
                            assert_eq!(was, model.remove(&key).is_some(), "delete {key:?}");
                        }
                        4 => {
                            // Batched, sometimes naming a key twice: it counts once.
                            let keys: Vec<Vec<u8>> = (0..rng.gen_range(1..30))
                                .map(|_| format!("t{t}-k{}", rng.gen_range(0..keys)).into_bytes())
                                .collect();
                            for (k, r) in keys.iter().zip(s.delete_many(&keys)) {
                                let was = r.expect("delete_many");
                                assert_eq!(was, model.remove(k).is_some(), "delete_many {k:?}");
                            }
                        }
                        5 => {
                            let keys: Vec<Vec<u8>> = (0..rng.gen_range(1..40))
                                .map(|_| format!("t{t}-k{}", rng.gen_range(0..keys)).into_bytes())
                                .collect();
                            let got = s.mget(&keys).expect("mget");
                            for (k, g) in keys.iter().zip(got) {
                                assert_eq!(g.expect("ok").as_deref(), model.get(k).map(|v| &v[..]));
                            }
                        }
                        6 => {
                            let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..rng.gen_range(1..30))
                                .map(|i| {
                                    let k =
                                        format!("t{t}-k{}", rng.gen_range(0..keys)).into_bytes();
                                    let v = value_for(&k, step * 100 + i, rng.gen_range(0..100));
                                    (k, v)
                                })
                                .collect();
                            for r in s.mput(&pairs) {
                                r.expect("mput");
                            }
                            // Within one batch the last pair for a key wins.
                            for (k, v) in pairs {
                                model.insert(k, v);
                            }
                        }
                        _ => {
                            let got = s.get(&key).expect("get");
                            assert_eq!(got.as_deref(), model.get(&key).map(|v| &v[..]), "{key:?}");
                        }
                    }
                }
                model.len() as u64
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.join().expect("thread");
    }
    let st = s.stats().expect("stats");
    assert_eq!(st.live, total, "{st:?}");
    assert_eq!(st.evictions, 0);
}

#[test]
fn random_ops_on_the_two_round_road_match_a_model() {
    let c = cluster();
    let s = store(&c, "model-two", 4 << 20, 48);
    s.set_one_round_puts(false);
    random_ops_match_a_model(&s, 200);
}

/// Op counts of every server, by op name.
fn op_counts(c: &LocalCluster) -> HashMap<String, u64> {
    let mut n = HashMap::new();
    for s in c.servers() {
        for o in s.stats().ops {
            *n.entry(o.op).or_default() += o.count;
        }
    }
    n
}

/// Puts of small values take one round trip: a `kv_mput` run per server for a
/// batch (a `kv_put` for one key), and no find, item write or compare-and-swap from
/// the client; overwrites recycle the old items. The two-round road takes both.
#[test]
fn puts_take_one_round_trip() {
    let c = cluster();
    let s = store(&c, "one-round", 2 << 20, 64);
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("k{i}").into_bytes()).collect();
    let ops = |n: &HashMap<String, u64>, op: &str| n.get(op).copied().unwrap_or(0);
    for round in 0..3u64 {
        let before = op_counts(&c);
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = keys
            .iter()
            .map(|k| (k.clone(), value_for(k, round, 40)))
            .collect();
        for r in s.mput(&pairs) {
            r.expect("put");
        }
        let after = op_counts(&c);
        // Only recycling may write: old items past what the handle keeps go to the
        // shared free list (a chain write and one compare-and-swap per spill).
        let (cas, writes) = (
            ops(&after, "cas") - ops(&before, "cas"),
            ops(&after, "write") - ops(&before, "write"),
        );
        assert!(
            cas <= 4 && writes <= 4,
            "round {round}: {cas} CAS, {writes} writes"
        );
        // 200 keys over 3 servers, at most 128 keys a run.
        let runs = ops(&after, "execute") - ops(&before, "execute");
        assert!((3..=6).contains(&runs), "round {round}: {runs} runs");
        for k in &keys {
            let got = s.get(k).expect("get").expect("present");
            assert_eq!(got[..], value_for(k, round, 40)[..]);
        }
    }
    let st = s.stats().expect("stats");
    assert_eq!(st.live, keys.len() as u64, "{st:?}");
    let before = op_counts(&c);
    s.put(b"k1", b"one round").expect("put");
    let after = op_counts(&c);
    assert_eq!(ops(&after, "execute") - ops(&before, "execute"), 1);
    assert_eq!(ops(&after, "cas"), ops(&before, "cas"));
    assert_eq!(
        s.get(b"k1").expect("get").as_deref(),
        Some(&b"one round"[..])
    );
    s.set_one_round_puts(false);
    let before = op_counts(&c);
    s.put(b"k0", b"two rounds").expect("put");
    let after = op_counts(&c);
    assert_eq!(ops(&after, "cas") - ops(&before, "cas"), 1);
    assert_eq!(
        s.get(b"k0").expect("get").as_deref(),
        Some(&b"two rounds"[..])
    );
}

/// Writers on both put roads (one round trip, two) race on one key, each from its
/// own handle: a reader never sees a torn value, and one slot holds the key.
#[test]
fn concurrent_puts_to_one_key_never_tear() {
    let c = cluster();
    let s = store(&c, "race", 2 << 20, 512);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let s = c
                .client()
                .expect("client")
                .open_store("race")
                .expect("open");
            s.set_one_round_puts(t % 2 == 0);
            std::thread::spawn(move || {
                let mut last = Vec::new();
                for i in 0..400u64 {
                    last = value_for(format!("w{t}").as_bytes(), i, 64 + (i as usize * 7) % 700);
                    s.put(b"hot", &last).expect("put");
                }
                last
            })
        })
        .collect();
    let reader = {
        let s = s.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = s.get(b"hot").expect("get") {
                    // Whole values only: every stamp in it is the same.
                    let text = String::from_utf8_lossy(&v);
                    let first = text.split('|').next().unwrap_or_default().to_string();
                    let expect = value_for(
                        first.split('#').next().unwrap_or_default().as_bytes(),
                        first
                            .split('#')
                            .nth(1)
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(u64::MAX),
                        v.len(),
                    );
                    assert_eq!(&v[..], &expect[..], "torn or foreign value");
                    seen += 1;
                }
            }
            seen
        })
    };
    let lasts: Vec<Vec<u8>> = writers
        .into_iter()
        .map(|h| h.join().expect("writer"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().expect("reader") > 0);
    let fin = s.get(b"hot").expect("get").expect("present");
    assert!(
        lasts.iter().any(|l| l[..] == fin[..]),
        "final value is no writer's last"
    );
    let st = s.stats().expect("stats");
    assert_eq!(st.live, 1, "one key, one live slot: {st:?}");
}

/// `n` keys whose home is `bucket` of shard 0.
fn keys_homed_at(s: &Store, bucket: u32, n: usize, prefix: &str) -> Vec<Vec<u8>> {
    let d = s.descriptor();
    (0..)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .filter(|k| {
            let h = farcache_kvformat::hash::locate(k, d.shards, d.buckets);
            (h.shard, h.bucket) == (0, bucket)
        })
        .take(n)
        .collect()
}

#[test]
fn a_full_bucket_spills_into_its_pair_without_evicting_or_duplicating() {
    let c = cluster();
    // Roomy heap, small index (planned for 1000-byte values, given 40-byte ones).
    let s = store(&c, "spill", 1 << 20, 1000);
    // 11 keys for bucket 0 (7 slots) and 3 of bucket 1's own: 14 keys, 14 slots.
    let mut keys = keys_homed_at(&s, 0, 11, "home");
    keys.extend(keys_homed_at(&s, 1, 3, "pair"));
    let keys = Arc::new(keys);
    // Threads race to insert (and delete and re-insert) the same keys, so two
    // inserts of one key often meet a full home bucket at once.
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let (s, keys) = (s.clone(), keys.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0x5b111 + t);
                for round in 0..60u64 {
                    let mut order: Vec<usize> = (0..keys.len()).collect();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.gen_range(0..=i));
                    }
                    for &i in &order {
                        let v = value_for(&keys[i], t * 1000 + round, 40);
                        s.put(&keys[i], &v).expect("put");
                        if rng.gen_range(0..8) == 0 {
                            s.delete(&keys[i]).expect("delete");
                        }
                    }
                }
                for k in keys.iter() {
                    s.put(k, &value_for(k, t * 1000 + 999, 40)).expect("put");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let st = s.stats().expect("stats");
    assert_eq!((st.live, st.evictions), (14, 0), "{st:?}");
    for k in keys.iter() {
        let v = s.get(k).expect("get").expect("present");
        assert!(
            (0..3).any(|t| v == value_for(k, t * 1000 + 999, 40)),
            "{k:?}: not a last write"
        );
    }
    // Deleting each key once leaves nothing: no key was ever in two slots.
    for k in keys.iter() {
        assert!(s.delete(k).expect("delete"), "{k:?}");
        assert_eq!(s.get(k).expect("get"), None, "{k:?} had a second copy");
    }
    assert_eq!(s.stats().expect("stats").live, 0);
    // Past both buckets' 14 slots, puts evict (under the home bucket's lock) and
    // never return another key's bytes.
    let more = keys_homed_at(&s, 0, 30, "more");
    for (i, k) in more.iter().enumerate() {
        s.put(k, &value_for(k, i as u64, 40))
            .expect("put into full buckets");
    }
    let mut present = 0;
    for (i, k) in more.iter().enumerate() {
        if let Some(v) = s.get(k).expect("get") {
            assert_eq!(v, value_for(k, i as u64, 40), "{k:?}");
            present += 1;
        }
    }
    let st = s.stats().expect("stats");
    assert!(
        st.evictions > 0 && st.live == present,
        "{st:?}, {present} present"
    );
    assert!((7..=14).contains(&present), "{present} of 30 in 14 slots");
}

#[test]
fn a_full_store_evicts_and_never_returns_another_keys_bytes() {
    let c = cluster();
    // 4 shards of 256 KiB; ~40k puts of ~100 bytes is 20× what fits.
    let s = store(&c, "small", 1 << 20, 100);
    let n = 40_000u64;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|i| {
            let k = format!("key{i}").into_bytes();
            let v = value_for(&k, i, 80 + (i % 40) as usize);
            (k, v)
        })
        .collect();
    for chunk in pairs.chunks(256) {
        for r in s.mput(chunk) {
            r.expect("put into a full store evicts instead of failing");
        }
    }
    let keys: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
    let mut present = 0;
    let mut recent = 0;
    for (ci, chunk) in keys.chunks(500).enumerate() {
        for (j, g) in s.mget(chunk).expect("mget").into_iter().enumerate() {
            let i = ci * 500 + j;
            if let Some(v) = g.expect("ok") {
                assert_eq!(&v[..], &pairs[i].1[..], "key {i} returned other bytes");
                present += 1;
                if i as u64 >= n - 2000 {
                    recent += 1;
                }
            }
        }
    }
    let st = s.stats().expect("stats");
    assert!(st.evictions > 0, "{st:?}");
    assert_eq!(st.live, present, "{st:?}");
    assert!(
        present > 3000,
        "a 1 MiB store holds a few thousand: {present}"
    );
    assert!(
        recent > 1000,
        "recent writes mostly resident: {recent}/2000"
    );
}

#[test]
fn hostile_procedure_args_and_damaged_stores_get_errors_not_crashes() {
    use farcache_kvformat::wire::{self, Lookup};
    let c = cluster();
    let s = store(&c, "hostile", 1 << 20, 64);
    s.put(b"victim", b"value").expect("put");
    let cache = s.cache().clone();
    // Short, empty and random argument blobs.
    for args in [&b""[..], &b"\x00\x01"[..], &[0xffu8; 26][..]] {
        for proc in [wire::KV_GET, wire::KV_FIND, wire::KV_STATS] {
            let e = cache.execute(proc, 1024, args).expect_err("malformed args");
            assert!(e.to_string().contains(proc), "{proc}: {e}");
        }
    }
    // kv_stats away from a shard's start, or over bytes that are not a store.
    assert!(
        cache
            .execute(wire::KV_STATS, 8, &0u64.to_le_bytes())
            .is_err()
    );
    let plain = c
        .client()
        .expect("client")
        .create("plain", 1 << 20)
        .expect("cache");
    let e = plain
        .execute(wire::KV_STATS, 0, &0u64.to_le_bytes())
        .expect_err("not a store");
    assert!(e.to_string().contains("not a farcache store"), "{e}");
    // A lookup whose shard base points past the cache.
    let mut args = Vec::new();
    Lookup {
        mode: wire::MODE_VALUE,
        tag: 1,
        now_ms: 0,
        shard_base: u64::MAX - 10,
        refs_addr: u64::MAX,
        key: b"k",
    }
    .encode_into(&mut args);
    let r = cache
        .execute(wire::KV_GET, 1024, &args)
        .expect("an empty bucket is a miss");
    assert_eq!(r[0], wire::MISS);
    // Damage: point every slot of the victim's bucket at garbage; the key reads as
    // absent or contended, the server keeps serving, and a put repairs it.
    let d = s.descriptor();
    let lay = farcache_kvformat::Layout(d);
    let h = farcache_kvformat::hash::locate(b"victim", d.shards, d.buckets);
    let bucket = lay.bucket_addr(h.shard, h.bucket);
    let junk: Vec<u8> = (0..7u64)
        .flat_map(|i| ((u64::from(h.tag) << 48) | (i << 40) | 0xff_ffff_ffff).to_le_bytes())
        .collect();
    cache.write(bucket, &junk).expect("damage");
    match s.get(b"victim") {
        Ok(None) | Err(StoreError::Contended { .. }) | Err(StoreError::Client(_)) => {}
        other => panic!("damaged bucket answered {other:?}"),
    }
    s.put(b"other", b"still serving").expect("server alive");
    assert_eq!(
        s.get(b"other").expect("get").as_deref(),
        Some(&b"still serving"[..])
    );
}

/// Runs a future on this thread, parking between polls (wakers unpark it).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "future never completed"
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

#[test]
fn async_calls_match_blocking_ones() {
    let c = cluster();
    let s = store(&c, "async", 2 << 20, 64);
    block_on(s.put_async(b"a", b"1"))
        .expect("pool")
        .expect("put");
    assert_eq!(
        block_on(s.get_async(b"a")).expect("get").as_deref(),
        Some(&b"1"[..])
    );
    assert!(block_on(s.exists_async(b"a")).expect("exists"));
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..200u32)
        .map(|i| {
            (
                format!("k{i}").into_bytes(),
                value_for(format!("k{i}").as_bytes(), 1, 50),
            )
        })
        .collect();
    for r in block_on(s.mput_async(&pairs)).expect("pool") {
        r.expect("mput");
    }
    let keys: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
    let got = block_on(s.mget_async(&keys)).expect("mget");
    for ((_, v), g) in pairs.iter().zip(got) {
        assert_eq!(g.expect("ok").as_deref(), Some(&v[..]));
    }
    // Several futures in flight at once, awaited out of order.
    let f1 = s.put_async(b"x", b"one");
    let f2 = s.put_async(b"y", b"two");
    block_on(f2).expect("pool").expect("put");
    block_on(f1).expect("pool").expect("put");
    assert!(
        block_on(s.delete_async(b"x"))
            .expect("pool")
            .expect("delete")
    );
    assert_eq!(block_on(s.get_async(b"x")).expect("get"), None);
    assert_eq!(s.get(b"y").expect("get").as_deref(), Some(&b"two"[..]));
    // Refusals come back through the future too.
    assert!(matches!(
        block_on(s.get_async(b"\xff\xfeFC-mine")),
        Err(StoreError::Key(_))
    ));
}

/// The counter in `v` (decimal text), 0 for none.
fn counter(v: Option<&farcache_store::Entry>) -> u64 {
    v.and_then(|e| std::str::from_utf8(&e.value).ok()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn read_modify_writes_from_many_handles_never_lose_a_step() {
    use farcache_store::Update;
    let c = cluster();
    let s = store(&c, "rmw", 4 << 20, 64);
    let keys: Vec<Vec<u8>> = (0..24).map(|i| format!("ctr:{i}").into_bytes()).collect();
    // One key keeps an expiry across its rewrites; one is rewritten by plain puts
    // racing the updates (its steps may be overwritten, never torn).
    let far = farcache_store::options::PutOptions::expires_at(Some(u64::MAX / 4));
    s.put_with(&keys[0], b"0", far).expect("put with expiry");
    let threads = 4u64;
    let rounds = 200u64;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            // Each thread its own client and handle: nothing of the front end's
            // locking, only the slot guards.
            let client = c.client().expect("client");
            let keys = keys.clone();
            std::thread::spawn(move || {
                let s = client.open_store("rmw").expect("open");
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for _ in 0..rounds {
                    // Every key once per round, in a shuffled order.
                    let mut order: Vec<usize> = (0..keys.len()).collect();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.gen_range(0..=i));
                    }
                    let half = keys.len() / 2;
                    let batch: Vec<&[u8]> = order[..half].iter().map(|&i| &keys[i][..]).collect();
                    let rest: Vec<&[u8]> = order[half..].iter().map(|&i| &keys[i][..]).collect();
                    for part in [batch, rest] {
                        let r = s.update_many(&part, |_, e| Update::Put {
                            value: (counter(e) + 1).to_string().into_bytes(),
                            expires_ms: e.and_then(|e| e.expires_ms),
                        });
                        for r in r {
                            assert!(r.expect("update"), "a step was not written");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    for k in &keys {
        let e = s.entry(k).expect("entry");
        assert_eq!(counter(e.as_ref()), threads * rounds, "key {k:?}");
    }
    let e = s.entry(&keys[0]).expect("entry").expect("present");
    assert_eq!(e.expires_ms, Some(u64::MAX / 4), "the expiry was kept");

    // Keep leaves the key; an absent key is seen as None; a refused key fails
    // alone; a value past the small-value limit takes the large path.
    let big = vec![7u8; s.max_small_value() as usize + 1];
    let r = s.update_many(
        &[&b"ctr:1"[..], b"absent", b"\xff\xfeFC reserved", b"big"],
        |i, e| match i {
            0 => Update::Keep,
            1 => {
                assert!(e.is_none(), "absent key seen as {e:?}");
                Update::Put {
                    value: b"new".to_vec(),
                    expires_ms: None,
                }
            }
            _ => Update::Put {
                value: big.clone(),
                expires_ms: None,
            },
        },
    );
    assert!(matches!(r[0], Ok(false)), "{:?}", r[0]);
    assert!(matches!(r[1], Ok(true)), "{:?}", r[1]);
    assert!(r[2].is_err(), "a reserved key was written: {:?}", r[2]);
    assert!(matches!(r[3], Ok(true)), "{:?}", r[3]);
    assert_eq!(
        counter(s.entry(b"ctr:1").expect("entry").as_ref()),
        threads * rounds
    );
    assert_eq!(s.get(b"absent").expect("get").as_deref(), Some(&b"new"[..]));
    assert_eq!(s.get(b"big").expect("get").as_deref(), Some(&big[..]));
    // A large value is read, decided on and rewritten like a small one.
    let r = s.update_many(&[&b"big"[..]], |_, e| {
        let mut v = e.map(|e| e.value.to_vec()).unwrap_or_default();
        v.push(1);
        Update::Put {
            value: v,
            expires_ms: None,
        }
    });
    assert!(matches!(r[0], Ok(true)), "{:?}", r[0]);
    let v = s.get(b"big").expect("get").expect("present");
    assert_eq!((v.len(), v[v.len() - 1]), (big.len() + 1, 1));
}

/// A read-modify-write whose key was rewritten back into the very item it read
/// (ABA) while it decided: the slot word's stamp tells, and it decides again.
#[test]
fn a_key_rewritten_into_its_old_item_meanwhile_is_decided_again() {
    use farcache_store::Update;
    let c = cluster();
    let s = store(&c, "aba", 2 << 20, 64);
    // Two keys of one shard, values of one size: items of one class.
    let k = keys_homed_at(&s, 5, 2, "aba:");
    let (key, other) = (&k[0][..], &k[1][..]);
    s.put(key, b"1").expect("put");
    s.put(other, b"a").expect("put");
    let a = c.client().expect("client").open_store("aba").expect("open");
    let mut first = true;
    let r = s.update_many(&[key], |_, e| {
        if std::mem::take(&mut first) {
            // Another handle cycles `key`'s item through `other` and back: with
            // its own free items reused most recent first, `key` ends up in the
            // item it had when this update read it.
            a.put(key, b"x").expect("put");
            a.put(other, b"b").expect("put");
            a.put(other, b"c").expect("put");
            a.put(key, b"5").expect("put");
        }
        Update::Put {
            value: (counter(e) + 1).to_string().into_bytes(),
            expires_ms: None,
        }
    });
    assert!(matches!(r[0], Ok(true)), "{:?}", r[0]);
    assert_eq!(
        s.get(key).expect("get").as_deref(),
        Some(&b"6"[..]),
        "the step applied to the value it was not computed from"
    );
}

/// The steps of one call for each key, as edits.
fn steps_of(steps: &[Vec<i64>]) -> Vec<Vec<Edit<'static>>> {
    steps
        .iter()
        .map(|v| v.iter().map(|&d| Edit::Step(d)).collect())
        .collect()
}

/// Counter steps (`Store::edit_values`) from handles on both roads (`kv_medit`
/// where the keys live, and read-modify-write) racing on shared keys: no step is
/// lost, a key that is no integer is left alone, a step that would overflow is
/// skipped, expiries are kept, and the one-round road takes one run per server.
#[test]
fn counters_step_where_they_live_and_never_lose_a_step() {
    let c = cluster();
    let s = store(&c, "counters", 4 << 20, 64);
    let shared: Vec<Vec<u8>> = (0..8).map(|i| format!("n{i}").into_bytes()).collect();
    let far = PutOptions::expires_at(Some(u64::MAX / 4));
    s.put_with(&shared[0], b"10", far).expect("put with expiry");
    let (threads, rounds) = (4u64, 150u64);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let h = c
                .client()
                .expect("client")
                .open_store("counters")
                .expect("open");
            h.set_one_round_puts(t % 2 == 0);
            let keys = shared.clone();
            std::thread::spawn(move || {
                for r in 0..rounds {
                    // Every key once a round, some twice (+1 then +2).
                    let mut ks: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                    let mut steps: Vec<Vec<i64>> = vec![vec![1]; ks.len()];
                    let twice = (r + t) as usize % keys.len();
                    steps[twice] = vec![1, 2];
                    ks.push(b"mine-only");
                    steps.push(vec![-1]);
                    let got = h.edit_values(&ks, &steps_of(&steps));
                    for (k, got) in got.into_iter().enumerate() {
                        let v = got.expect("step");
                        assert_eq!(v.len(), steps[k].len());
                        assert!(v.iter().all(|e| matches!(e, Edited::Int(_))), "{v:?}");
                        if let [Edited::Int(a), Edited::Int(b)] = v[..] {
                            assert_eq!(b, a + 2, "steps of one call apply in order");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let per_key = threads * rounds;
    let extra = |i: usize| -> i64 {
        // Each (round, thread) with (r + t) % 8 == i added 2 more.
        (0..threads)
            .flat_map(|t| (0..rounds).map(move |r| (r + t) as usize % 8))
            .filter(|&x| x == i)
            .count() as i64
            * 2
    };
    for (i, k) in shared.iter().enumerate() {
        let base = if i == 0 { 10 } else { 0 };
        let want = base + per_key as i64 + extra(i);
        let got = s.get(k).expect("get").expect("present");
        assert_eq!(String::from_utf8_lossy(&got), want.to_string(), "{i}");
    }
    let e = s.entry(&shared[0]).expect("entry").expect("present");
    assert_eq!(e.expires_ms, Some(u64::MAX / 4), "the expiry is kept");
    assert_eq!(
        s.get(b"mine-only").expect("get").as_deref(),
        Some(format!("-{per_key}").as_bytes())
    );
    // No integer: nothing changes. Overflow: that step is skipped.
    s.put(b"text", b"abc").expect("put");
    s.put(b"big", (i64::MAX - 1).to_string().as_bytes())
        .expect("put");
    for one_round in [true, false] {
        s.set_one_round_puts(one_round);
        let r = s.edit_values(
            &[&b"text"[..], b"big"],
            &steps_of(&[vec![1], vec![1, 1, -5]]),
        );
        assert_eq!(r[0].as_ref().expect("text"), &vec![Edited::NotInteger]);
        let want_big = if one_round {
            vec![
                Edited::Int(i64::MAX),
                Edited::Overflow,
                Edited::Int(i64::MAX - 5),
            ]
        } else {
            vec![
                Edited::Int(i64::MAX - 4),
                Edited::Int(i64::MAX - 3),
                Edited::Int(i64::MAX - 8),
            ]
        };
        assert_eq!(r[1].as_ref().expect("big"), &want_big);
        assert_eq!(s.get(b"text").expect("get").as_deref(), Some(&b"abc"[..]));
    }
    s.set_one_round_puts(true);
    let before = op_counts(&c);
    let many: Vec<Vec<u8>> = (0..50).map(|i| format!("m{i}").into_bytes()).collect();
    for r in s.edit_values(&many, &steps_of(&vec![vec![3]; many.len()])) {
        assert_eq!(r.expect("step"), vec![Edited::Int(3)]);
    }
    let after = op_counts(&c);
    let n = |m: &HashMap<String, u64>, op: &str| m.get(op).copied().unwrap_or(0);
    let servers = c.servers().len() as u64;
    assert!(
        n(&after, "execute") - n(&before, "execute") <= servers,
        "one run per server: {} runs",
        n(&after, "execute") - n(&before, "execute")
    );
    assert!(n(&after, "cas") - n(&before, "cas") <= 2);
}

/// Appends and range overwrites (`Store::edit_values`) on both roads against a
/// model: random edits of a few keys (some with expiries, some growing past what
/// a small item holds, some raced by plain puts) leave exactly the model's values,
/// each edit answers the model's length, expiries are kept, and a key the edits
/// create has none.
#[test]
fn appends_and_range_overwrites_match_a_model() {
    let c = cluster();
    let s = store(&c, "edits", 8 << 20, 64);
    let small = s.max_small_value() as usize;
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("e{i}").into_bytes()).collect();
    let mut model: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
    let far = Some(u64::MAX / 4);
    s.put_with(&keys[0], b"start", PutOptions::expires_at(far))
        .expect("put");
    model[0] = Some(b"start".to_vec());
    let mut rng = rand::rngs::StdRng::seed_from_u64(30);
    let blob = vec![b'z'; small + 10];
    for round in 0..120 {
        s.set_one_round_puts(round % 3 != 0);
        let mut ks: Vec<&[u8]> = Vec::new();
        let mut programs: Vec<Vec<Edit<'_>>> = Vec::new();
        let mut which = Vec::new();
        for (k, key) in keys.iter().enumerate() {
            if rng.gen_bool(0.3) {
                continue;
            }
            let n = rng.gen_range(1..4);
            let program: Vec<Edit<'_>> = (0..n)
                .map(|_| {
                    let len = match rng.gen_range(0..20) {
                        // Now and then past a small item.
                        0 => small / 2 + rng.gen_range(0..10),
                        _ => rng.gen_range(0..40),
                    };
                    match rng.gen_bool(0.5) {
                        true => Edit::Append(&blob[..len]),
                        false => Edit::SetRange(rng.gen_range(0..60), &blob[..len]),
                    }
                })
                .collect();
            ks.push(key);
            programs.push(program);
            which.push(k);
        }
        let got = s.edit_values(&ks, &programs);
        for ((k, program), got) in which.iter().zip(&programs).zip(got) {
            let got = got.expect("edit");
            let mut want = Vec::new();
            for e in program {
                let v = &mut model[*k];
                match *e {
                    Edit::Append(b) => v.get_or_insert_with(Vec::new).extend_from_slice(b),
                    Edit::SetRange(off, b) if !b.is_empty() => {
                        let v = v.get_or_insert_with(Vec::new);
                        let end = off as usize + b.len();
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[off as usize..end].copy_from_slice(b);
                    }
                    _ => {}
                }
                want.push(Edited::Len(v.as_ref().map_or(0, Vec::len) as u64));
            }
            assert_eq!(got, want, "round {round}, key {k}");
        }
        if round % 10 == 5 {
            // A plain put between rounds: the edits go on from it.
            s.put(&keys[1], b"reset").expect("put");
            model[1] = Some(b"reset".to_vec());
        }
        for (k, key) in keys.iter().enumerate() {
            assert_eq!(
                s.get(key).expect("get").as_deref(),
                model[k].as_deref(),
                "round {round}, key {k}"
            );
        }
    }
    let e = s.entry(&keys[0]).expect("entry").expect("present");
    assert_eq!(e.expires_ms, far, "the expiry is kept");
    if let Some(e) = s.entry(&keys[2]).expect("entry") {
        assert_eq!(e.expires_ms, None, "created by edits: no expiry");
    }
    // Where they live: one run per server for a batch of fresh keys, in a store
    // of its own (the rounds above may have used up a shard's heap, and a key
    // whose shard has none left takes the read-modify-write road).
    let s = store(&c, "edits-fresh", 8 << 20, 64);
    let fresh: Vec<Vec<u8>> = (0..30).map(|i| format!("f{i}").into_bytes()).collect();
    let before = op_counts(&c);
    for r in s.edit_values(
        &fresh,
        &vec![vec![Edit::Append(b"ab"), Edit::SetRange(3, b"c")]; 30],
    ) {
        assert_eq!(r.expect("edit"), vec![Edited::Len(2), Edited::Len(4)]);
    }
    let after = op_counts(&c);
    let n = |m: &HashMap<String, u64>, op: &str| m.get(op).copied().unwrap_or(0);
    assert!(n(&after, "execute") - n(&before, "execute") <= c.servers().len() as u64);
    assert_eq!(n(&after, "cas"), n(&before, "cas"), "no read-modify-write");
    assert_eq!(s.get(b"f7").expect("get").as_deref(), Some(&b"ab\0c"[..]));
    // An empty overwrite creates nothing.
    let r = s.edit_values(&[b"never"], &[vec![Edit::SetRange(5, b"")]]);
    assert_eq!(r[0].as_ref().expect("edit"), &vec![Edited::Len(0)]);
    assert_eq!(s.get(b"never").expect("get"), None);
}
