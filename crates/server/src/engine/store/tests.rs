use super::*;

fn read(s: &RegionStore, cache: CacheId, addr: u64, len: usize) -> Vec<u8> {
    let m = s.snapshot();
    let c = &m.caches[&cache];
    let (idx, off) = region_split(addr, c.region_size);
    let mut b = vec![0u8; len];
    let r = c.regions[idx as usize].as_ref().unwrap();
    assert!(r.read_into(off as usize, &mut b));
    b
}

fn write(s: &RegionStore, cache: CacheId, addr: u64, data: &[u8]) {
    let m = s.snapshot();
    let c = &m.caches[&cache];
    let (idx, off) = region_split(addr, c.region_size);
    assert!(
        c.regions[idx as usize]
            .as_ref()
            .unwrap()
            .write_from(off as usize, data)
    );
}

#[test]
fn budget_is_enforced_and_returned() {
    let s = RegionStore::new(3 * 4096);
    s.alloc(1, 0, 4096, 8192, 1, Arrival::default()).unwrap();
    s.alloc(1, 1, 4096, 8192, 1, Arrival::default()).unwrap();
    s.alloc(1, 1, 4096, 8192, 1, Arrival::default()).unwrap(); // a retry
    s.alloc(2, 0, 4096, 4096, 1, Arrival::default()).unwrap();
    assert!(matches!(
        s.alloc(2, 1, 4096, 8192, 1, Arrival::default()),
        Err(StoreError::NoMemory { .. })
    ));
    assert_eq!(s.used(), 3 * 4096);
    assert!(s.free(1, 1, Some("x:1".into())));
    assert_eq!(s.used(), 2 * 4096);
    assert_eq!(
        s.snapshot().caches[&1].moved.get(&1).map(String::as_str),
        Some("x:1")
    );
    assert!(s.drop_cache(1));
    assert_eq!(s.used(), 4096);
    assert!(!s.drop_cache(1));
    assert!(matches!(
        s.alloc(3, 0, 100, 100, 1, Arrival::default()),
        Err(StoreError::BadRegionSize(100))
    ));
    // A region size the budget cannot hold does not overflow the arithmetic.
    assert!(
        s.alloc(4, 0, u64::MAX - 4095, u64::MAX, 1, Arrival::default())
            .is_err()
    );
    assert_eq!(s.used(), 4096);
    // A region index past the capacity would size the table, not place memory.
    assert!(matches!(
        s.alloc(5, u32::MAX, 4096, 8192, 1, Arrival::default()),
        Err(StoreError::RegionOutOfRange { .. })
    ));
}

#[test]
fn a_retry_keeps_bytes_and_a_newer_epoch_zeroes_them() {
    let s = RegionStore::new(1 << 20);
    s.alloc(1, 0, 4096, 4096, 1, Arrival::default()).unwrap();
    write(&s, 1, 10, b"keep");
    s.alloc(1, 0, 4096, 4096, 1, Arrival::default()).unwrap();
    assert_eq!(read(&s, 1, 10, 4), b"keep");
    // The region's free was lost; a later table places it here again.
    s.alloc(1, 0, 4096, 4096, 3, Arrival::default()).unwrap();
    assert_eq!(read(&s, 1, 10, 4), [0; 4]);
    assert_eq!(s.used(), 4096);
    assert_eq!(
        s.held(),
        vec![HeldRegion {
            cache: 1,
            region: 0
        }]
    );
}

#[test]
fn shrinking_zeroes_the_tail_and_old_epochs_are_ignored() {
    let s = RegionStore::new(1 << 20);
    s.alloc(1, 0, 8192, 8192, 1, Arrival::default()).unwrap();
    write(&s, 1, 6000, &[9; 2000]);
    assert!(s.resize(1, 7000, 2));
    assert_eq!(s.snapshot().caches[&1].capacity, 7000);
    assert!(s.resize(1, 8192, 3));
    let tail = read(&s, 1, 6000, 2000);
    assert!(tail[..1000].iter().all(|&b| b == 9), "kept below the cut");
    assert!(tail[1000..].iter().all(|&b| b == 0), "zeros past the cut");
    // A late message from before the grow changes nothing.
    assert!(s.resize(1, 100, 2));
    assert_eq!(s.snapshot().caches[&1].capacity, 8192);
    s.set_routes(1, 4, vec!["a:1".into()], &[], 6000, "me");
    assert_eq!(s.snapshot().caches[&1].capacity, 6000);
    assert!(!s.resize(9, 1, 1), "no such cache here");
}
