//! Hostile arguments to the keyed store's multi-key procedures (`kv_mget`, `kv_mfind`,
//! `kv_scan`)
//! sent through the real client to a running 3-server cluster: truncated heads,
//! counts that do not match the keys, keys running past the arguments, trailing
//! bytes, addresses past the cache and at `u64::MAX`, and seeded random blobs. Each
//! call must come back as the procedure's error or a well-formed reply, no server
//! thread may fail (a failing worker drops every connection it serves), and the
//! store must go on serving ordinary GETs and PUTs.
//!
//! The decoders alone are fuzzed in `farcache-kvformat` (`decoders_never_panic`);
//! this test reaches the lookups behind them.

use farcache_client::{Bytes, Cache, ClientError};
use farcache_kvformat::hash::locate;
use farcache_kvformat::wire::{self, MgetKey, Scan};
use farcache_kvformat::{Descriptor, Layout};
use farcache_store::{Store, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, LocalCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const REGION: u64 = 256 << 10;
/// Seeded random argument blobs per procedure.
const RANDOM_BLOBS: usize = 300;
/// Highest shard base the main test's random cases send with a key's real bucket and
/// tag; the top of the address space has its own test
/// (`shard_and_refs_addresses_at_the_top_are_refused_not_crashes`).
const SHARD_BASE_LIMIT: u64 = u64::MAX - (1 << 44);

fn cluster() -> LocalCluster {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(64 << 20)
        .server_threads(2);
    LocalCluster::start(&opts).expect("start local cluster")
}

/// Worker threads that failed (and dropped their connections) on every server.
fn worker_panics(c: &LocalCluster) -> u64 {
    c.servers().iter().map(|s| s.stats().worker_panics).sum()
}

/// Where a key lives: its `kv_mget` entry as the store's client would send it.
fn entry<'a>(d: Descriptor, key: &'a [u8]) -> MgetKey<'a> {
    let lay = Layout(d);
    let h = locate(key, d.shards, d.buckets);
    MgetKey {
        tag: h.tag,
        bucket_addr: lay.bucket_addr(h.shard, h.bucket),
        shard_base: lay.shard_base(h.shard),
        refs_addr: lay.refs_addr(h.shard, h.bucket),
        key,
    }
}

/// `kv_mget` arguments: `count` in the head, then `keys`.
fn mget_args(mode: u8, count: u32, keys: &[MgetKey<'_>]) -> Vec<u8> {
    let mut a = Vec::new();
    wire::mget_head(&mut a, mode, 0, count);
    for k in keys {
        k.encode_into(&mut a);
    }
    a
}

/// What one hostile call may answer: the procedure's own error, or a reply that
/// decodes (with one entry per key when `keys` is given). Returns the reply.
fn check_mget(
    what: &str,
    r: Result<Bytes, ClientError>,
    keys: Option<usize>,
) -> Option<(u32, Vec<wire::MgetEntry>, Bytes)> {
    match r {
        Ok(reply) => {
            let (load, entries) = wire::decode_mget_reply(&reply)
                .unwrap_or_else(|e| panic!("{what}: malformed kv_mget reply ({e}): {reply:?}"));
            if let Some(n) = keys {
                assert_eq!(entries.len(), n, "{what}: entries");
            }
            Some((load, entries, reply))
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(wire::KV_MGET),
                "{what}: an error that is not kv_mget's own: {text}"
            );
            None
        }
    }
}

fn check_scan(what: &str, r: Result<Bytes, ClientError>) -> Option<u32> {
    match r {
        Ok(reply) => {
            let (next, _) = wire::scan_reply(&reply)
                .unwrap_or_else(|e| panic!("{what}: malformed kv_scan reply ({e})"));
            Some(next)
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(wire::KV_SCAN),
                "{what}: an error that is not kv_scan's own: {text}"
            );
            None
        }
    }
}

/// A value the store can only have returned for `key`.
fn value_of(key: &[u8]) -> Vec<u8> {
    let mut v = b"value of ".to_vec();
    v.extend_from_slice(key);
    v
}

fn still_serves(c: &LocalCluster, s: &Store, keys: &[Vec<u8>], after: &str) {
    assert_eq!(worker_panics(c), 0, "a server thread failed after {after}");
    for k in keys {
        assert_eq!(
            s.get(k).expect("get").as_deref(),
            Some(&value_of(k)[..]),
            "after {after}"
        );
    }
}

/// A 3-server cluster and a store of 64 keys, each holding [`value_of`] itself.
fn stored_keys() -> (LocalCluster, Store, Vec<Vec<u8>>) {
    let c = cluster();
    let client = c.client().expect("client");
    let s = client
        .create_store(
            "hostile-mget",
            1 << 20,
            &StoreOptions {
                avg_value_size: 64,
                ..StoreOptions::default()
            },
        )
        .expect("create store");
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("key-{i}").into_bytes()).collect();
    for k in &keys {
        s.put(k, &value_of(k)).expect("put");
    }
    (c, s, keys)
}

#[test]
fn hostile_mget_and_scan_args_get_errors_or_replies_not_crashes() {
    let (c, s, keys) = stored_keys();
    let d = s.descriptor();
    let cache: Cache = s.cache().clone();
    let capacity = cache.capacity();
    let victim = entry(d, &keys[0]);
    // Every call is invoked at the victim's bucket, so it runs where that bucket is.
    let at = victim.bucket_addr;
    let mget = |args: &[u8]| cache.execute(wire::KV_MGET, at, args);

    // The well-formed call first: the victim's value, one entry.
    let good = mget_args(wire::MODE_VALUE, 1, &[victim]);
    let (_, e, reply) = check_mget("well-formed", mget(&good), Some(1)).expect("a reply");
    assert_eq!(e[0].status, wire::HIT);
    assert_eq!(&reply[e[0].value.0..e[0].value.1], &value_of(&keys[0])[..]);

    // Truncated: every strict prefix of a one-key call (heads included).
    for n in 0..good.len() {
        let r = mget(&good[..n]);
        assert!(r.is_err(), "{n} of {} bytes decoded", good.len());
        check_mget(&format!("prefix of {n} bytes"), r, None);
    }
    // A count larger than the keys supplied, and smaller.
    for count in [2, 3, 64, 1 << 16, u32::MAX] {
        let r = mget(&mget_args(wire::MODE_VALUE, count, &[victim]));
        assert!(r.is_err(), "count {count} with one key");
        check_mget(&format!("count {count}"), r, None);
    }
    let r = mget(&mget_args(wire::MODE_VALUE, 1, &[victim, victim]));
    assert!(r.is_err(), "count 1 with two keys");
    check_mget("count 1, two keys", r, None);
    // A key whose length runs past the arguments (the length field is bytes
    // 13 + 2..13 + 4).
    for klen in [victim.key.len() as u16 + 1, 255, u16::MAX] {
        let mut a = good.clone();
        a[wire::MGET_HEAD + 2..wire::MGET_HEAD + 4].copy_from_slice(&klen.to_le_bytes());
        let r = mget(&a);
        assert!(r.is_err(), "key length {klen}");
        check_mget(&format!("key length {klen}"), r, None);
    }
    // Trailing bytes.
    for extra in [1usize, 7, 29, 30, 100] {
        let mut a = good.clone();
        a.extend(std::iter::repeat_n(0xa5, extra));
        let r = mget(&a);
        assert!(r.is_err(), "{extra} trailing bytes");
        check_mget(&format!("{extra} trailing bytes"), r, None);
    }
    // A count of 0: an empty reply, or with trailing bytes an error.
    check_mget(
        "count 0",
        mget(&mget_args(wire::MODE_VALUE, 0, &[])),
        Some(0),
    )
    .expect("count 0 answers");
    let mut a = mget_args(wire::MODE_VALUE, 0, &[]);
    a.extend_from_slice(&good[wire::MGET_HEAD..]);
    assert!(mget(&a).is_err(), "count 0 followed by a key");
    // Every mode byte, the victim's real entry.
    for mode in [wire::MODE_EXISTS, 2, 0x7f, 0xff] {
        check_mget(
            &format!("mode {mode}"),
            mget(&mget_args(mode, 1, &[victim])),
            Some(1),
        );
    }
    still_serves(&c, &s, &keys[..4], "malformed heads");

    // Addresses past the cache and at the top of the address space, one field at a
    // time with the others real (so the bucket holds the key's item under its tag
    // and the lookup goes on to the item and its reference byte), then all at once.
    let bad_addrs = [
        capacity,
        capacity + 1,
        capacity + 4096,
        1 << 40,
        u64::MAX / 2,
        u64::MAX - 63,
        u64::MAX - 7,
        u64::MAX - 1,
        u64::MAX,
    ];
    for &bad in &bad_addrs {
        let variants = [
            (
                "bucket",
                MgetKey {
                    bucket_addr: bad,
                    ..victim
                },
            ),
            (
                "shard",
                MgetKey {
                    shard_base: bad,
                    ..victim
                },
            ),
            (
                "refs",
                MgetKey {
                    refs_addr: bad,
                    ..victim
                },
            ),
            (
                "all",
                MgetKey {
                    bucket_addr: bad,
                    shard_base: bad,
                    refs_addr: bad,
                    ..victim
                },
            ),
        ];
        for (field, k) in variants {
            if field == "shard" && bad > SHARD_BASE_LIMIT {
                continue;
            }
            let what = format!("{field} address {bad:#x}");
            // Alone, and behind the real victim (a key further into the run).
            check_mget(&what, mget(&mget_args(wire::MODE_VALUE, 1, &[k])), Some(1));
            check_mget(
                &what,
                mget(&mget_args(wire::MODE_VALUE, 2, &[victim, k])),
                Some(2),
            );
            assert_eq!(worker_panics(&c), 0, "a server thread failed on {what}");
        }
    }
    // Shard bases that are real but not the key's shard, and just below the top.
    for (i, shard_base) in [REGION, 2 * REGION, capacity - 1, SHARD_BASE_LIMIT]
        .into_iter()
        .enumerate()
    {
        let k = MgetKey {
            shard_base,
            ..victim
        };
        check_mget(
            &format!("shard base #{i} {shard_base:#x}"),
            mget(&mget_args(wire::MODE_VALUE, 1, &[k])),
            Some(1),
        );
    }
    // Invoked past the cache: the client refuses or the server errs, no crash.
    for addr in [capacity, u64::MAX - 7, u64::MAX] {
        assert!(
            cache.execute(wire::KV_MGET, addr, &good).is_err(),
            "kv_mget invoked at {addr:#x}"
        );
    }
    still_serves(&c, &s, &keys[..4], "hostile addresses");

    // Many keys in one call: every stored key, each several times, then the most
    // zero-length keys the arguments allow at the victim's bucket.
    let many: Vec<MgetKey<'_>> = keys
        .iter()
        .cycle()
        .take(1000)
        .map(|k| entry(d, k))
        .collect();
    let (_, e, _) = check_mget(
        "1000 keys",
        mget(&mget_args(wire::MODE_VALUE, many.len() as u32, &many)),
        Some(many.len()),
    )
    .expect("a reply");
    assert!(e.iter().all(|x| x.status <= wire::AGAIN));
    let empty = MgetKey { key: b"", ..victim };
    let zeros = vec![empty; 20_000];
    check_mget(
        "20000 empty keys",
        mget(&mget_args(wire::MODE_VALUE, zeros.len() as u32, &zeros)),
        Some(zeros.len()),
    );

    // Seeded random blobs: raw bytes, then well-headed calls with random key fields
    // (addresses anywhere, in the cache or not), sent one at a time and in batches
    // beside a well-formed call that must still answer.
    let mut rng = StdRng::seed_from_u64(0x6d67_6574);
    let mut blobs: Vec<Vec<u8>> = (0..RANDOM_BLOBS)
        .map(|_| {
            let n = rng.gen_range(0..300);
            (0..n).map(|_| rng.r#gen()).collect()
        })
        .collect();
    let random_addr = |rng: &mut StdRng| match rng.gen_range(0..4) {
        0 => rng.gen_range(0..capacity),
        1 => capacity.saturating_add(rng.gen_range(0..1 << 20)),
        2 => u64::MAX - rng.gen_range(0..4096),
        _ => rng.r#gen(),
    };
    let random_keys: Vec<Vec<u8>> = (0..RANDOM_BLOBS)
        .map(|_| {
            let n = rng.gen_range(0..8usize);
            let fields: Vec<(u16, u64, u64, u64, Vec<u8>)> = (0..n)
                .map(|_| {
                    let key = if rng.gen_bool(0.5) {
                        keys[rng.gen_range(0..keys.len())].clone()
                    } else {
                        (0..rng.gen_range(0..40)).map(|_| rng.r#gen()).collect()
                    };
                    let real = entry(d, &key);
                    let tag = if rng.gen_bool(0.5) {
                        real.tag
                    } else {
                        rng.r#gen()
                    };
                    let mut pick = |real: u64| {
                        if rng.gen_bool(0.5) {
                            real
                        } else {
                            random_addr(&mut rng)
                        }
                    };
                    (
                        tag,
                        pick(real.bucket_addr),
                        pick(real.shard_base).min(SHARD_BASE_LIMIT),
                        pick(real.refs_addr),
                        key,
                    )
                })
                .collect();
            let ks: Vec<MgetKey<'_>> = fields
                .iter()
                .map(|(tag, b, s, r, key)| MgetKey {
                    tag: *tag,
                    bucket_addr: *b,
                    shard_base: *s,
                    refs_addr: *r,
                    key,
                })
                .collect();
            mget_args(rng.r#gen(), ks.len() as u32, &ks)
        })
        .collect();
    blobs.extend(random_keys);
    for (i, a) in blobs.iter().enumerate() {
        check_mget(&format!("random blob #{i}"), mget(a), None);
    }
    for (n, chunk) in blobs.chunks(50).enumerate() {
        let mut b = cache.batch();
        let ids: Vec<usize> = chunk
            .iter()
            .map(|a| b.execute(wire::KV_MGET, at, a))
            .collect();
        let ok = b.execute(wire::KV_MGET, at, &good);
        let r = b.run();
        for (j, &id) in ids.iter().enumerate() {
            check_mget(
                &format!("batch {n} blob {j}"),
                r.data(id).map(Bytes::copy_from_slice),
                None,
            );
        }
        let reply = r.data(ok).expect("the well-formed call in a hostile batch");
        let (_, e) = wire::decode_mget_reply(reply).expect("its reply");
        assert_eq!(&reply[e[0].value.0..e[0].value.1], &value_of(&keys[0])[..]);
    }
    still_serves(&c, &s, &keys, "random kv_mget arguments");

    // kv_scan: invoked at each shard's first byte; malformed and random paging.
    let lay = Layout(d);
    let shard0 = lay.shard_base(0);
    let scan = |addr: u64, args: &[u8]| cache.execute(wire::KV_SCAN, addr, args);
    let page = |mask: u8, from: u32, max_bytes: u32| {
        Scan {
            mask,
            from,
            max_bytes,
            now_ms: 0,
        }
        .encode()
    };
    for n in [0usize, 1, 4, 5, 8, 10, 64] {
        let mut a = page(0xff, 0, 4096).to_vec();
        a.resize(n, 0x5a);
        let r = scan(shard0, &a);
        assert!(r.is_err(), "{n}-byte scan arguments");
        check_scan(&format!("{n}-byte scan arguments"), r);
    }
    // The key-listing mode (mask 0) takes 17 bytes (its clock too): its old 9-byte
    // form, and other lengths, are refused.
    for n in [1usize, 9, 16, 18, 64] {
        let mut a = page(wire::SCAN_KEYS, 0, 4096);
        a.resize(n, 0);
        let r = scan(shard0, &a);
        assert!(r.is_err(), "{n}-byte key-listing scan arguments");
        check_scan(&format!("{n}-byte key-listing scan arguments"), r);
    }
    for shard in 0..d.shards {
        let base = lay.shard_base(shard);
        for from in [
            0,
            1,
            d.buckets - 1,
            d.buckets,
            d.buckets + 1,
            u32::MAX - 1,
            u32::MAX,
        ] {
            for max_bytes in [0, 1, 4096, u32::MAX] {
                for mask in [0, 1, 0xff] {
                    let what = format!("scan of shard {shard} from {from} max {max_bytes}");
                    check_scan(&what, scan(base, &page(mask, from, max_bytes)));
                }
            }
        }
        // Paging from the start must end, each page starting past the last.
        let mut from = 0u32;
        for pages in 0.. {
            assert!(pages <= d.buckets, "scan of shard {shard} does not end");
            let next = check_scan(&format!("page {pages} of shard {shard}"), {
                scan(base, &page(0xff, from, 0))
            })
            .expect("a page");
            if next == wire::SCAN_DONE {
                break;
            }
            assert!(
                next > from,
                "scan of shard {shard} went back: {from} -> {next}"
            );
            from = next;
        }
    }
    // Away from a shard's first byte, past the cache, at the top.
    for addr in [8, shard0 + 64, lay.bucket_addr(0, 0), capacity - 8] {
        let r = scan(addr, &page(0xff, 0, 4096));
        assert!(r.is_err(), "kv_scan at {addr:#x}");
        check_scan(&format!("scan at {addr:#x}"), r);
    }
    for addr in [capacity, u64::MAX - 8, u64::MAX] {
        assert!(
            scan(addr, &page(0xff, 0, 4096)).is_err(),
            "kv_scan at {addr:#x}"
        );
    }
    for i in 0..RANDOM_BLOBS {
        let n = if i % 2 == 0 { 9 } else { rng.gen_range(0..20) };
        let a: Vec<u8> = (0..n).map(|_| rng.r#gen()).collect();
        let shard = rng.gen_range(0..d.shards);
        check_scan(
            &format!("random scan #{i}"),
            scan(lay.shard_base(shard), &a),
        );
    }
    still_serves(&c, &s, &keys, "hostile kv_scan arguments");

    // The store still takes writes and answers batched reads.
    s.put(b"after", b"all of that").expect("put after");
    assert_eq!(
        s.get(b"after").expect("get after").as_deref(),
        Some(&b"all of that"[..])
    );
    let got = s.mget(&keys).expect("mget after");
    for (k, g) in keys.iter().zip(got) {
        assert_eq!(g.expect("key").as_deref(), Some(&value_of(k)[..]));
    }
    assert_eq!(worker_panics(&c), 0, "a server thread failed");
}

/// Shard bases and reference-byte addresses at the top of the address space, with a
/// key's real bucket and tag (so the lookup reaches the item and its CLOCK byte), to
/// every lookup procedure. The key sits in slot 1 of its bucket, so `refs_addr +
/// slot` would overflow too: the lookups saturate these sums (a worker panicked on
/// them once).
#[test]
fn shard_and_refs_addresses_at_the_top_are_refused_not_crashes() {
    let (c, s, mut keys) = stored_keys();
    let d = s.descriptor();
    let cache = s.cache().clone();
    // Two new keys sharing a bucket: the second put takes the bucket's next slot.
    let mut seen = std::collections::HashMap::new();
    let pair = (0u32..)
        .map(|i| format!("slot-{i}").into_bytes())
        .find_map(|k| {
            let h = locate(&k, d.shards, d.buckets);
            seen.insert((h.shard, h.bucket), k.clone())
                .map(|first| (first, k))
        })
        .expect("two keys in one bucket");
    for k in [&pair.0, &pair.1] {
        s.put(k, &value_of(k)).expect("put");
    }
    keys.insert(0, pair.1);
    let victim = entry(d, &keys[0]);
    let mut get = Vec::new();
    wire::Lookup {
        mode: wire::MODE_VALUE,
        tag: victim.tag,
        now_ms: 0,
        shard_base: victim.shard_base,
        refs_addr: victim.refs_addr,
        key: victim.key,
    }
    .encode_into(&mut get);
    let reply = cache
        .execute(wire::KV_GET, victim.bucket_addr, &get)
        .expect("kv_get");
    let reply = wire::GetReply::decode(&reply).expect("kv_get reply");
    assert_eq!(
        (reply.status, reply.slot),
        (wire::HIT, 1),
        "the second key's slot"
    );
    let mut failures = Vec::new();
    let tops = [u64::MAX - 63, u64::MAX - 7, u64::MAX];
    for (field, top) in tops
        .iter()
        .map(|&t| ("shard_base", t))
        .chain(tops.iter().map(|&t| ("refs_addr", t)))
    {
        let k = match field {
            "shard_base" => MgetKey {
                shard_base: top,
                ..victim
            },
            _ => MgetKey {
                refs_addr: top,
                ..victim
            },
        };
        let mut lookup = Vec::new();
        wire::Lookup {
            mode: wire::MODE_VALUE,
            tag: k.tag,
            now_ms: 0,
            shard_base: k.shard_base,
            refs_addr: k.refs_addr,
            key: k.key,
        }
        .encode_into(&mut lookup);
        for (proc, args) in [
            (wire::KV_MGET, mget_args(wire::MODE_VALUE, 1, &[k])),
            (wire::KV_MFIND, mget_args(wire::MODE_VALUE, 1, &[k])),
            (wire::KV_GET, lookup.clone()),
            (wire::KV_FIND, lookup),
        ] {
            // A thread that failed drops its connections, and the client fails the
            // next calls on them until it has reconnected: wait for that first, so
            // each line below names an input that fails by itself.
            let healthy = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while s.get(&keys[0]).is_err() {
                assert!(
                    std::time::Instant::now() < healthy,
                    "the store never recovered"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let before = worker_panics(&c);
            let r = cache.execute(proc, victim.bucket_addr, &args);
            let own_error = r
                .as_ref()
                .err()
                .is_none_or(|e| e.to_string().contains(proc));
            if !own_error || worker_panics(&c) != before {
                failures.push(format!("{proc} with {field} {top:#x}: {r:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    still_serves(&c, &s, &keys[..4], "addresses at the top");
}

/// What a hostile `kv_mfind` may answer: its own error, or a reply that decodes (in
/// either form: plain finds, or finds with their items for `MODE_ENTRY`).
fn check_mfind(what: &str, r: Result<Bytes, ClientError>) -> Option<Vec<Option<wire::FindReply>>> {
    match r {
        Ok(reply) => Some(
            wire::decode_mfind_entries(&reply)
                .unwrap_or_else(|e| panic!("{what}: malformed kv_mfind reply ({e})"))
                .into_iter()
                .map(|e| e.map(|(f, _)| f))
                .collect(),
        ),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(wire::KV_MFIND),
                "{what}: an error that is not kv_mfind's own: {text}"
            );
            None
        }
    }
}

/// `kv_mfind` (a PUT's multi-key find) takes `kv_mget`'s arguments: the same hostile
/// families get its own error or a well-formed reply, and nothing fails.
#[test]
fn hostile_mfind_args_get_errors_or_replies_not_crashes() {
    let (c, s, keys) = stored_keys();
    let d = s.descriptor();
    let cache: Cache = s.cache().clone();
    let victim = entry(d, &keys[0]);
    let at = victim.bucket_addr;
    let mfind = |args: &[u8]| cache.execute(wire::KV_MFIND, at, args);

    let good = mget_args(wire::MODE_VALUE, 1, &[victim]);
    let found = check_mfind("well-formed", mfind(&good)).expect("a reply");
    assert_eq!(found.len(), 1);
    let f = found[0].expect("the victim's bucket is here");
    assert_eq!(f.status, wire::HIT);
    for n in 0..good.len() {
        let r = mfind(&good[..n]);
        assert!(r.is_err(), "{n} of {} bytes decoded", good.len());
        check_mfind(&format!("prefix of {n} bytes"), r);
    }
    for count in [0u32, 2, 64, 1 << 16, u32::MAX] {
        let r = mfind(&mget_args(wire::MODE_VALUE, count, &[victim]));
        assert!(r.is_err(), "count {count} with one key");
        check_mfind(&format!("count {count}"), r);
    }
    for extra in [1usize, 29, 100] {
        let mut a = good.clone();
        a.extend(std::iter::repeat_n(0x5a, extra));
        let r = mfind(&a);
        assert!(r.is_err(), "{extra} trailing bytes");
        check_mfind(&format!("{extra} trailing bytes"), r);
    }
    // MODE_ENTRY: the same find with the victim's item; cut short, an error.
    let with_item = mget_args(wire::MODE_ENTRY, 1, &[victim]);
    let reply = mfind(&with_item).expect("a reply");
    let e = wire::decode_mfind_entries(&reply).expect("entries");
    let (f, it) = e[0].expect("the victim's bucket is here");
    assert_eq!(f.status, wire::HIT);
    assert_eq!(it.map(|i| i.value), Some(&value_of(&keys[0])[..]));
    for n in 0..with_item.len() {
        let r = mfind(&with_item[..n]);
        assert!(
            r.is_err(),
            "MODE_ENTRY: {n} of {} bytes decoded",
            with_item.len()
        );
        check_mfind(&format!("MODE_ENTRY prefix of {n} bytes"), r);
    }
    // More keys than one reply may hold, in either mode.
    let many = vec![victim; 30_000];
    let r = mfind(&mget_args(wire::MODE_ENTRY, many.len() as u32, &many));
    assert!(r.is_err(), "30 000 keys with items");
    check_mfind("30 000 keys with items", r);
    let r = mfind(&mget_args(wire::MODE_VALUE, many.len() as u32, &many));
    assert!(r.is_err(), "30 000 keys");
    check_mfind("30 000 keys", r);
    // Addresses that are not this server's, or not the cache's: MOVED, not a crash.
    let capacity = cache.capacity();
    for bucket_addr in [capacity, capacity + 4096, u64::MAX - 63] {
        let k = MgetKey {
            bucket_addr,
            ..victim
        };
        let r = mfind(&mget_args(wire::MODE_VALUE, 2, &[victim, k]));
        if let Some(found) = check_mfind(&format!("bucket at {bucket_addr:#x}"), r) {
            assert!(found[1].is_none(), "bucket at {bucket_addr:#x} answered");
        }
    }
    // Seeded random blobs and random key lists.
    let mut rng = StdRng::seed_from_u64(0x006d_6669_6e64);
    for i in 0..RANDOM_BLOBS {
        let a: Vec<u8> = if rng.gen_bool(0.5) {
            (0..rng.gen_range(0..200)).map(|_| rng.r#gen()).collect()
        } else {
            let n = rng.gen_range(1..6usize);
            let ks: Vec<Vec<u8>> = (0..n)
                .map(|_| keys[rng.gen_range(0..keys.len())].clone())
                .collect();
            let entries: Vec<MgetKey<'_>> = ks
                .iter()
                .map(|k| {
                    let mut e = entry(d, k);
                    if rng.gen_bool(0.3) {
                        e.tag = rng.r#gen();
                    }
                    if rng.gen_bool(0.3) {
                        e.bucket_addr = rng.r#gen();
                    }
                    if rng.gen_bool(0.3) {
                        e.refs_addr = rng.r#gen();
                    }
                    e
                })
                .collect();
            mget_args(rng.r#gen(), entries.len() as u32, &entries)
        };
        check_mfind(&format!("random #{i}"), mfind(&a));
    }
    still_serves(&c, &s, &keys, "hostile kv_mfind arguments");
    // Puts (which use kv_mfind) still land.
    for k in &keys {
        s.put(k, &value_of(k)).expect("put after hostile kv_mfind");
    }
    still_serves(&c, &s, &keys, "puts after hostile kv_mfind");
}

/// `kv_put` and `kv_mput` with arguments cut short, lying counts, items outside the
/// heap or sizes that do not hold the item, and random bytes: each gets an error or
/// a well-formed reply, no server thread fails, and every stored key keeps its value
/// (a refused put writes nothing).
#[test]
fn hostile_put_args_get_errors_not_crashes() {
    use farcache_kvformat::item;
    use farcache_kvformat::wire::{NO_ITEM, PutArgs, PutGuard, PutReply, PutStatus};
    let (c, s, keys) = stored_keys();
    let d = s.descriptor();
    let lay = Layout(d);
    let cache: Cache = s.cache().clone();
    let victim = entry(d, &keys[0]);
    let at = victim.bucket_addr;
    let size = farcache_kvformat::class::size(
        farcache_kvformat::class::for_len((item::HEADER + 64) as u64).expect("class"),
    )
    .expect("size");
    // A put that would apply, guarded to apply only if absent: it is skipped.
    let args = PutArgs {
        guard: PutGuard::IfAbsent,
        tag: victim.tag,
        word_class: farcache_kvformat::class::for_len(u64::from(size)).expect("class"),
        flags: 0,
        now_ms: 1,
        shard_base: victim.shard_base,
        refs_addr: victim.refs_addr,
        expires_ms: item::NO_EXPIRY,
        item: NO_ITEM,
        generation: 0,
        size,
        heap_start: lay.heap_start(),
        shard_size: d.shard_size,
        key: &keys[0],
        value: b"never stored",
    };
    let mut good = Vec::new();
    args.encode_into(&mut good);
    let put = |a: &[u8]| cache.execute(wire::KV_PUT, at, a);
    let r = PutReply::decode(&put(&good).expect("a reply")).expect("reply");
    assert_eq!(r.status, PutStatus::Skipped);
    for n in 0..good.len().min(wire::PUT_HEAD + 2) {
        assert!(put(&good[..n]).is_err(), "{n} bytes decoded");
    }
    let mut wrong = Vec::new();
    for bad in [
        PutArgs { size: 8, ..args },
        PutArgs { item: 3, ..args },
        PutArgs {
            item: d.shard_size,
            ..args
        },
        PutArgs { item: 0, ..args },
        PutArgs {
            heap_start: d.shard_size,
            ..args
        },
        PutArgs {
            shard_size: 0,
            ..args
        },
    ] {
        wrong.clear();
        bad.encode_into(&mut wrong);
        let e = put(&wrong).expect_err("refused");
        assert!(e.to_string().contains(wire::KV_PUT), "{e}");
    }
    // The same as one key of a `kv_mput`; then counts that lie.
    let mut many = 1u32.to_le_bytes().to_vec();
    wire::mput_entry_into(&mut many, at, &args);
    let mput = |a: &[u8]| cache.execute(wire::KV_MPUT, at, a);
    let r = wire::decode_mput_reply(&mput(&many).expect("a reply")).expect("reply");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, PutStatus::Skipped);
    for count in [0u32, 2, 1 << 16, u32::MAX] {
        let mut m = many.clone();
        m[..4].copy_from_slice(&count.to_le_bytes());
        assert!(mput(&m).is_err(), "count {count}");
    }
    for n in 0..many.len() {
        assert!(
            mput(&many[..n]).is_err(),
            "{n} of {} bytes decoded",
            many.len()
        );
    }
    // `kv_medit`: an overwrite of nothing changes nothing; cut arguments, edits
    // that lie about their count or length, and unknown edits are refused.
    let mut program = Vec::new();
    wire::encode_edits(&mut program, 1 << 20, &[wire::Edit::SetRange(3, b"")]);
    let mut edit_args = 1u32.to_le_bytes().to_vec();
    wire::mput_entry_into(
        &mut edit_args,
        at,
        &PutArgs {
            guard: PutGuard::Always,
            value: &program,
            ..args
        },
    );
    let medit = |a: &[u8]| cache.execute(wire::KV_MEDIT, at, a);
    let r = wire::decode_medit_reply(&medit(&edit_args).expect("a reply")).expect("reply");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].put.status, PutStatus::Skipped);
    let was = s.get(&keys[0]).expect("get").map_or(0, |v| v.len() as u64);
    assert_eq!(r[0].edits, vec![wire::Edited::Len(was)]);
    for n in 0..edit_args.len() {
        assert!(medit(&edit_args[..n]).is_err(), "{n} bytes decoded");
    }
    let head = edit_args.len() - program.len();
    for (at_byte, v) in [(8, 9u8), (8, 0), (12, 7), (13 + 8, 0xff)] {
        let mut bad = edit_args.clone();
        bad[head + at_byte] = v;
        let e = medit(&bad).expect_err("refused");
        assert!(e.to_string().contains(wire::KV_MEDIT), "{e}");
    }
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..300 {
        let len = rng.gen_range(0..200);
        let junk: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
        let _ = put(&junk);
        let _ = mput(&junk);
        let _ = medit(&junk);
        // Junk edits in well-formed arguments.
        let mut e = edit_args[..head].to_vec();
        e.extend_from_slice(&junk);
        let n = (e.len() - 12) as u32;
        e[12..16].copy_from_slice(&n.to_le_bytes());
        let _ = medit(&e);
    }
    still_serves(&c, &s, &keys, "hostile kv_put and kv_medit arguments");
}
