//! Erasure-coded values on a 3-server cluster (in-process servers): round trips of
//! sizes around the chunk and piece boundaries, chunks on distinct servers,
//! overwrites and deletes that leave no pieces behind, and reads that decode from
//! parity when a data chunk is gone.

use farcache_store::{PutOptions, Store, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, LocalCluster};
use rand::{Rng, SeedableRng};

const REGION: u64 = 1 << 20;

fn cluster() -> LocalCluster {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(96 << 20)
        .server_threads(2);
    LocalCluster::start(&opts).expect("start local cluster")
}

fn store(c: &LocalCluster, name: &str) -> Store {
    c.client()
        .expect("client")
        .create_store(
            name,
            48 << 20,
            &StoreOptions {
                large_threshold: 64 << 10,
                ec_data: 2,
                ec_parity: 1,
                ..StoreOptions::default()
            },
        )
        .expect("create store")
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.r#gen()).collect()
}

#[test]
fn large_values_round_trip_on_distinct_servers() {
    let c = cluster();
    let s = store(&c, "ec");
    let base = s.stats().expect("stats").live;
    // 9 MiB: a chunk's 64 KiB pieces go to one server in one batch whose replies
    // together exceed one procedure output's limit (each reply must count alone).
    for (i, len) in [64 << 10 | 1, 200_000, 1 << 20, 3 * (1 << 20) + 7, 9 << 20]
        .into_iter()
        .enumerate()
    {
        let key = format!("obj{i}");
        let v = random(len, i as u64);
        assert!(
            s.put_large(key.as_bytes(), &v, PutOptions::default())
                .expect("put")
        );
        let got = s.get(key.as_bytes()).expect("get").expect("present");
        assert!(got[..] == v[..], "{len} bytes came back different");
        let m = s
            .manifest(key.as_bytes())
            .expect("manifest")
            .expect("coded");
        assert_eq!((m.data, m.parity, m.len), (2, 1, len as u64));
        let servers: Vec<_> = m
            .shards
            .iter()
            .map(|chunk| {
                let info = s.cache().info();
                let on: Vec<_> = chunk
                    .iter()
                    .map(|&sh| {
                        info.regions[(u64::from(sh) * s.descriptor().shard_size / info.region_size)
                            as usize]
                    })
                    .collect();
                assert!(
                    on.iter().all(|&x| x == on[0]),
                    "a chunk stays on one server"
                );
                on[0]
            })
            .collect();
        let mut d = servers.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 3, "chunks on distinct servers: {servers:?}");
    }
    // Values above the threshold go through `put` too.
    let big = random(500_000, 99);
    s.put(b"via-put", &big).expect("put");
    assert_eq!(
        &s.get(b"via-put").expect("get").expect("present")[..],
        &big[..]
    );
    assert!(s.manifest(b"via-put").expect("manifest").is_some());
    // mget mixes small and coded values.
    s.put(b"small", b"tiny").expect("put");
    let got = s
        .mget(&[&b"small"[..], b"via-put", b"absent"])
        .expect("mget");
    assert_eq!(got[0].as_ref().expect("ok").as_deref(), Some(&b"tiny"[..]));
    assert_eq!(got[1].as_ref().expect("ok").as_deref(), Some(&big[..]));
    assert_eq!(got[2].as_ref().expect("ok").as_deref(), None);
    assert!(s.exists(b"via-put").expect("exists"));

    // Overwrites and deletes take the old chunks with them.
    let live_with_all = s.stats().expect("stats").live;
    let v2 = random(1 << 20, 7);
    s.put(b"obj2", &v2).expect("overwrite large");
    assert_eq!(&s.get(b"obj2").expect("get").expect("present")[..], &v2[..]);
    assert_eq!(
        s.stats().expect("stats").live,
        live_with_all,
        "old pieces dropped"
    );
    s.put(b"obj2", b"now small").expect("overwrite small");
    assert_eq!(
        s.get(b"obj2").expect("get").as_deref(),
        Some(&b"now small"[..])
    );
    assert!(s.manifest(b"obj2").expect("manifest").is_none());
    for k in ["obj0", "obj1", "obj2", "obj3", "obj4", "via-put", "small"] {
        assert!(s.delete(k.as_bytes()).expect("delete"), "{k}");
    }
    assert_eq!(s.get(b"obj3").expect("get"), None);
    assert_eq!(
        s.stats().expect("stats").live,
        base,
        "no pieces or copies left"
    );
}

#[test]
fn a_lost_data_chunk_is_decoded_from_parity() {
    let c = cluster();
    let s = store(&c, "ec-decode");
    let v = random(700_001, 3);
    s.put(b"k", &v).expect("put");
    let m = s.manifest(b"k").expect("manifest").expect("coded");
    // Destroy data chunk 0: zero the heap of one of its shards (not the first, which
    // is the key's home and holds the manifest).
    assert!(m.shards[0].len() > 1, "{m:?}");
    let shard = m.shards[0][1];
    let lay = farcache_kvformat::Layout(s.descriptor());
    let heap = lay.heap_start();
    let zeros = vec![0u8; (s.descriptor().shard_size - heap) as usize];
    let base = lay.shard_base(shard);
    for (i, part) in zeros.chunks(1 << 19).enumerate() {
        s.cache()
            .write(base + heap + (i as u64) * (1 << 19), part)
            .expect("wipe");
    }
    assert_eq!(&s.get(b"k").expect("get").expect("decoded")[..], &v[..]);
    // Two chunks gone with one parity: the pieces read as absent (as if evicted), so
    // the value is a miss, never wrong bytes.
    let shard = m.shards[1][0];
    let base = lay.shard_base(shard);
    for (i, part) in zeros.chunks(1 << 19).enumerate() {
        s.cache()
            .write(base + heap + (i as u64) * (1 << 19), part)
            .expect("wipe");
    }
    assert_eq!(s.get(b"k").expect("get"), None);
}

/// A store asking for 4+2 (the default) on fewer servers than 6: large values are
/// coded with what fits (one server: one chunk, no parity; three: 2+1), never
/// refused, and round-trip at 1 MiB + 1, 5 MiB and 100 MiB.
#[test]
fn large_values_fit_clusters_smaller_than_their_coding() {
    for (servers, want) in [(1usize, (1u8, 0u8)), (3, (2, 1))] {
        let opts = ClusterOptions::default()
            .servers(servers)
            .region_size(64 << 20)
            .server_memory(if servers == 1 { 448 << 20 } else { 192 << 20 })
            .server_threads(2);
        let c = LocalCluster::start(&opts).expect("start local cluster");
        let s = c
            .client()
            .expect("client")
            .create_store("big", 384 << 20, &StoreOptions::default())
            .expect("create store");
        for (i, len) in [(1 << 20) + 1, 5 << 20, 100 << 20].into_iter().enumerate() {
            let key = format!("v{i}");
            let v = random(len, 7 + i as u64);
            s.put(key.as_bytes(), &v)
                .unwrap_or_else(|e| panic!("{servers} servers, {len} bytes: {e}"));
            let got = s.get(key.as_bytes()).expect("get").expect("present");
            assert!(got[..] == v[..], "{len} bytes came back different");
            let m = s
                .manifest(key.as_bytes())
                .expect("manifest")
                .expect("coded");
            assert_eq!((m.data, m.parity), want, "{servers} servers");
            assert!(s.delete(key.as_bytes()).expect("delete"));
        }
    }
}

/// A read-write token holder can overwrite any bytes of the cache, a manifest
/// included. A forged manifest announcing a huge object must come back as an error,
/// not make the reader allocate without bound (and abort).
#[test]
fn a_forged_manifest_is_refused_before_anything_is_allocated() {
    use farcache_kvformat::item;
    use farcache_kvformat::manifest::Manifest;
    let c = cluster();
    let s = store(&c, "forged");
    let key = b"victim";
    s.put(key, &random(300 << 10, 9)).expect("put");
    let m = s.manifest(key).expect("manifest").expect("coded");
    let want = m.encode();
    // Find the home item (key then manifest) by scanning the store's memory.
    let cache = s.cache().clone();
    let mut needle = key.to_vec();
    needle.extend_from_slice(&want);
    let step = 1u64 << 20;
    let mut found = Vec::new();
    let mut at = 0;
    while at < cache.capacity() {
        let len = step.min(cache.capacity() - at);
        let b = cache.read(at, len).expect("read");
        found.extend(
            b.windows(needle.len())
                .enumerate()
                .filter(|(_, w)| *w == &needle[..])
                .map(|(i, _)| at + i as u64 - item::HEADER as u64),
        );
        at += len;
    }
    assert!(!found.is_empty(), "the manifest item is in the cache");
    let forged = [
        Manifest {
            len: u64::MAX,
            chunk_len: u64::MAX / 2,
            ..m.clone()
        },
        // Sizes the old check let through: a lookup batch of 2^45 pieces.
        Manifest {
            len: 1 << 62,
            chunk_len: 1 << 61,
            ..m.clone()
        },
        Manifest {
            len: 8 << 30,
            chunk_len: 4 << 30,
            ..m.clone()
        },
        Manifest {
            piece_len: 1,
            ..m.clone()
        },
    ];
    for f in forged {
        let head = cache.read(found[0], item::HEADER as u64).expect("head");
        let mut exp = [0u8; 8];
        exp.copy_from_slice(&head[16..24]);
        let mut it = Vec::new();
        item::encode_into(
            &mut it,
            key,
            &f.encode(),
            u64::from_le_bytes(exp),
            item::FLAG_MANIFEST,
        );
        for &a in &found {
            cache.write(a, &it).expect("forge");
        }
        let got = s.get(key);
        assert!(got.is_err(), "forged {f:?} gave {got:?}");
    }
    // The store goes on serving.
    s.put(b"after", b"fine").expect("put after");
    assert_eq!(&s.get(b"after").expect("get").expect("hit")[..], b"fine");
    s.put(key, &random(200 << 10, 10))
        .expect("overwrite the forged key");
    assert_eq!(s.get(key).expect("get").expect("hit").len(), 200 << 10);
}
