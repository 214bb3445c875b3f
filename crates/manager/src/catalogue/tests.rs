use super::*;

const R: u64 = 1 << 20;

fn server(id: ServerId, memory: u64) -> ServerRecord {
    ServerRecord {
        id,
        addr: format!("10.0.0.{id}:7000"),
        memory,
        cores: 4,
        threads: 1,
        price_class: PriceClass::OnDemand,
        price_per_gib_hour: 1.0,
        tls_addr: None,
        reclaim: None,
    }
}

fn cache(id: CacheId, name: &str, regions: Vec<ServerId>) -> CacheRecord {
    CacheRecord::plain(id, name.into(), R, regions)
}

#[test]
fn loaded_state_is_unknown_and_ids_move_past_loaded_ones() {
    let cat = Catalogue::from_parts(
        vec![server(4, 8 * R)],
        vec![cache(9, "a", vec![4, 4])],
        1,
        1,
    );
    assert_eq!(cat.next_server_id(), 5);
    assert_eq!(cat.next_cache_id(), 10);
    let info = cat.server_info(4).unwrap();
    assert_eq!(info.state, ServerState::Unknown);
    assert_eq!(info.used, 2 * R);
    assert!(
        cat.candidates().is_empty(),
        "unknown servers get no placements"
    );
}

/// The per-server index of placed regions, the first region on each server and the
/// caches short of copies stay equal to a full recount through
/// random creates, replacements (moves, new backups) and deletes.
#[test]
fn the_placed_index_matches_a_recount_through_random_changes() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut cat = Catalogue::default();
    for id in 1..=6 {
        cat.upsert_server(server(id, 1 << 40), Instant::now());
    }
    for step in 0..2000u32 {
        let id = rng.gen_range(1..=40);
        if rng.gen_bool(0.2) {
            cat.remove_cache(id);
        } else {
            let n = rng.gen_range(1..=8usize);
            let regions: Vec<ServerId> = (0..n).map(|_| rng.gen_range(1..=6)).collect();
            let backups: Vec<Vec<ServerId>> = (0..n)
                .map(|_| {
                    (0..rng.gen_range(0..=2))
                        .map(|_| rng.gen_range(1..=6))
                        .collect()
                })
                .collect();
            cat.insert_cache(CacheRecord {
                backups,
                replicas: rng.gen_range(1..=3),
                ..cache(id, &format!("c{id}"), regions)
            });
        }
        let short: Vec<CacheId> = cat.short_caches().map(|c| c.id).collect();
        let recount: Vec<CacheId> = cat
            .caches
            .values()
            .filter(|c| !c.short_of_copies().is_empty())
            .map(|c| c.id)
            .collect();
        assert_eq!(short, recount, "short caches after step {step}");
        for sid in 1..=6 {
            assert_eq!(
                cat.first_placed_on(sid),
                cat.placed_on(sid).first().copied(),
                "first region on {sid}"
            );
            let placed = cat.placed_on(sid);
            assert_eq!(
                cat.placed_digest(sid),
                (placed.len() as u64, region_digest(placed)),
                "server {sid} after step {step}"
            );
        }
    }
}

#[test]
fn loaded_servers_that_never_return_are_declared_dead_after_the_clock_starts() {
    let mut cat = Catalogue::from_parts(vec![server(4, 8 * R)], vec![], 1, 1);
    let t0 = Instant::now();
    let timeout = Duration::from_secs(3);
    assert!(
        cat.expire(t0 + 10 * timeout, timeout).is_empty(),
        "no clock yet"
    );
    cat.start_clock(t0);
    assert!(
        cat.expire(t0 + timeout, timeout).is_empty(),
        "not yet silent too long"
    );
    assert_eq!(cat.expire(t0 + 2 * timeout, timeout), vec![4]);
    assert_eq!(cat.server_info(4).unwrap().state, ServerState::Dead);
}

#[test]
fn register_heartbeat_and_expire() {
    let t0 = Instant::now();
    let mut cat = Catalogue::from_parts(vec![], vec![], 0, 0);
    assert_eq!(cat.next_server_id(), 1);
    assert_eq!(cat.upsert_server(server(1, R), t0), Seen::New);
    assert_eq!(cat.upsert_server(server(1, 2 * R), t0), Seen::StillAlive);
    assert_eq!(cat.server_record(1).unwrap().memory, 2 * R);
    assert_eq!(cat.upsert_server(server(7, R), t0), Seen::New);
    assert_eq!(cat.next_server_id(), 8);
    assert_eq!(cat.heartbeat(3, t0, (0, 0)), None);

    let timeout = Duration::from_millis(100);
    let t1 = t0 + Duration::from_millis(60);
    assert_eq!(cat.heartbeat(1, t1, (0, 0)), Some(Seen::StillAlive));
    let t2 = t0 + Duration::from_millis(150);
    assert_eq!(cat.expire(t2, timeout), vec![7]);
    assert_eq!(cat.server_state(7), Some(ServerState::Dead));
    assert_eq!(
        cat.expire(t2, timeout),
        Vec::<ServerId>::new(),
        "reported once"
    );
    assert_eq!(
        cat.candidates().iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![1]
    );
    // A dead server's heartbeat is fenced: it stays dead until it registers.
    assert_eq!(cat.heartbeat(7, t2, (0, 0)), Some(Seen::Fenced));
    assert_eq!(cat.server_state(7), Some(ServerState::Dead));
    assert_eq!(
        cat.upsert_server(server(7, R), t2),
        Seen::Back(ServerState::Dead)
    );
    assert_eq!(cat.server_state(7), Some(ServerState::Alive));
}

#[test]
fn backups_count_as_placed_and_used() {
    let now = Instant::now();
    let mut cat = Catalogue::default();
    for id in 1..=3 {
        cat.upsert_server(server(id, 4 * R), now);
    }
    let mut c = cache(1, "r", vec![1, 2]);
    c.replicas = 2;
    c.backups = vec![vec![2], vec![]];
    cat.insert_cache(c.clone());
    assert_eq!(
        cat.server_info(2).unwrap().used,
        2 * R,
        "owner and backup copies"
    );
    assert_eq!(cat.placed_on(2).len(), 2);
    assert_eq!(cat.owned_by(2).len(), 1);
    assert_eq!(c.short_of_copies(), vec![1]);
    assert_eq!(c.holders(), vec![1, 2]);
    assert_eq!(c.copies(0).collect::<Vec<_>>(), vec![1, 2]);
    let info = cat.cache_info(&c);
    assert_eq!(
        (info.replicas, info.backups.clone()),
        (2, vec![vec![2], vec![]])
    );
    assert!(cat.mark_dead(3));
    assert!(!cat.mark_dead(3), "already dead");
    assert!(cat.candidates().iter().all(|x| x.id != 3));
}

#[test]
fn caches_account_used_memory_and_names() {
    let now = Instant::now();
    let mut cat = Catalogue::default();
    cat.upsert_server(server(1, 4 * R), now);
    cat.upsert_server(server(2, 4 * R), now);
    assert_eq!(cat.take_cache_id(), 1);
    assert_eq!(cat.next_cache_id(), 2);
    cat.insert_cache(cache(1, "a", vec![1, 2, 1]));
    let free: Vec<u64> = cat.candidates().iter().map(|c| c.free).collect();
    assert_eq!(free, vec![2 * R, 3 * R]);

    let info = cat.cache_info(cat.cache_by_name("a").unwrap());
    assert_eq!(
        info.servers.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![1, 2]
    );

    // Replacing (reshape) re-accounts rather than double counting.
    cat.insert_cache(cache(1, "a", vec![1]));
    assert_eq!(cat.server_info(1).unwrap().used, R);
    assert_eq!(cat.server_info(2).unwrap().used, 0);

    assert!(cat.remove_cache(1).is_some());
    assert!(cat.cache_by_name("a").is_none());
    assert_eq!(cat.server_info(1).unwrap().used, 0);
    assert!(cat.status().caches.is_empty());
}
