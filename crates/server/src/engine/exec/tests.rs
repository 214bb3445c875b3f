use super::chunk::CHUNK;
use super::*;
use crate::engine::store::{Arrival, RegionStore};
use farcache_proto::{HEADER_LEN, RequestEncoder, ResponseDecoder, Rights, response::ReplyBody};

#[test]
fn touched_lists_each_written_region_once_per_cache() {
    let rs: Vec<Region> = (0..3).map(|_| Region::new(4096).unwrap()).collect();
    let mut t = Touched::default();
    assert!(t.is_empty());
    // Random writes hop between regions, and back.
    for i in [0usize, 2, 0, 1, 2, 2, 0, 1] {
        t.note(1, i as u64 + 200, &rs[i]);
    }
    let ptrs = |t: &Touched<'_>| {
        t.regions()
            .iter()
            .map(|r| *r as *const Region)
            .collect::<Vec<_>>()
    };
    let want: Vec<*const Region> = [0, 2, 1].iter().map(|&i| &rs[i] as *const Region).collect();
    assert_eq!(ptrs(&t), want);
    // Another cache's index 200 is another region.
    t.note(2, 200, &rs[1]);
    assert_eq!(t.regions().len(), 4);
}

fn run(store: &RegionStore, ops: &[Op<'_>]) -> Vec<u8> {
    run_as(store, ops, Access::Cluster)
}

fn run_as(store: &RegionStore, ops: &[Op<'_>], access: Access) -> Vec<u8> {
    let mut req = Vec::new();
    let mut e = RequestEncoder::begin(&mut req, 5);
    for op in ops {
        e.push(&mut req, op);
    }
    e.finish(&mut req);
    let mut out = Vec::new();
    let map = store.snapshot();
    let procs = ProcTable::default();
    let cx = BatchCtx {
        map: &map,
        procs: &procs,
        access,
        me: "127.0.0.1:1",
        from_server: false,
        replica_of: None,
        completions: &Completions::default(),
        note_acks: false,
        max_frame: 1 << 20,
    };
    execute_batch(
        &cx,
        &req[HEADER_LEN..],
        5,
        &mut out,
        &mut Tally::default(),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut Touched::default(),
    )
    .unwrap();
    out
}

/// An ANSWER (a writing EXECUTE's reply, passed on with its tag) is a server's to
/// send: from a client it is ignored, though the write it precedes applies; from a
/// server the receiver records the body under the EXECUTE's address, for retries.
#[test]
fn an_answer_is_recorded_only_from_a_server() {
    const RS: u64 = 4096;
    let store = RegionStore::new(1 << 20);
    store.alloc(7, 0, RS, RS, 1, Arrival::default()).unwrap();
    let tag = Tag {
        session: 9,
        seq: 3,
        done_below: 0,
        result: 0,
    };
    let ops = [
        Op::Tag(tag),
        Op::Answer {
            addr: 64,
            body: b"new value",
        },
        Op::Write {
            cache: 7,
            addr: 512,
            data: b"xy",
        },
    ];
    let mut req = Vec::new();
    let mut e = RequestEncoder::begin(&mut req, 5);
    for op in &ops {
        e.push(&mut req, op);
    }
    e.finish(&mut req);
    for from_server in [false, true] {
        let completions = Completions::default();
        let map = store.snapshot();
        let procs = ProcTable::default();
        let cx = BatchCtx {
            map: &map,
            procs: &procs,
            access: Access::Cluster,
            me: "127.0.0.1:1",
            from_server,
            replica_of: None,
            completions: &completions,
            note_acks: false,
            max_frame: 1 << 20,
        };
        let mut out = Vec::new();
        execute_batch(
            &cx,
            &req[HEADER_LEN..],
            5,
            &mut out,
            &mut Tally::default(),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut Touched::default(),
        )
        .unwrap();
        let replies: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(replies.len(), 1, "tag and answer get no reply");
        assert_eq!(replies[0].status, Status::Ok);
        assert_eq!(
            completions.body(9, 3, 64).as_deref(),
            from_server.then_some(&b"new value"[..]),
            "from a server: {from_server}"
        );
        assert!(
            completions.get(9, 3, 512).is_some(),
            "the write is recorded"
        );
    }
}

proptest::proptest! {
    /// Short `aggregate` calls answered straight from a region (`folded_here`) give
    /// what the procedure gives over a copy of the same bytes, and any call the
    /// short road cannot take (records past the region or the capacity, strides
    /// below 8, over 8 records, unknown functions) still gets the general road's
    /// answer: a result where the copy has one, a failure where it fails.
    #[test]
    fn folded_calls_answer_as_the_procedure_does(
        seed in proptest::prelude::any::<u64>(),
        calls in proptest::collection::vec(
            (0u8..5, 0u32..11, proptest::sample::select(vec![0u32, 4, 8, 16, 24, 4096, 4100]), 0u64..8300),
            1..60,
        ),
    ) {
        use farcache_sproc::builtin::Aggregate;
        use farcache_sproc::memory::VecMemory;
        use farcache_sproc::{Outcome, Procedure};
        const RS: u64 = 4096;
        // Two local regions; the capacity ends inside the second one.
        let capacity = 2 * RS - 100;
        let store = RegionStore::new(1 << 20);
        for r in 0..2 {
            store.alloc(7, r, RS, capacity, 1, Arrival::default()).unwrap();
        }
        let mut z = seed;
        let bytes: Vec<u8> = (0..capacity)
            .map(|i| {
                z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Some zero words, so that count has something to skip.
                if (i / 8) % 5 == 0 { 0 } else { (z >> 33) as u8 }
            })
            .collect();
        run(&store, &[Op::Write { cache: 7, addr: 0, data: &bytes[..RS as usize] }]);
        run(&store, &[Op::Write { cache: 7, addr: RS, data: &bytes[RS as usize..] }]);
        let args: Vec<[u8; 9]> = calls
            .iter()
            .map(|&(f, n, stride, _)| {
                let mut a = [0u8; 9];
                a[0] = f;
                a[1..5].copy_from_slice(&n.to_le_bytes());
                a[5..9].copy_from_slice(&stride.to_le_bytes());
                a
            })
            .collect();
        let ops: Vec<Op<'_>> = calls
            .iter()
            .zip(&args)
            .map(|(&(_, _, _, addr), a)| Op::Execute {
                cache: 7,
                addr: addr.min(capacity - 1),
                proc_name: Aggregate::NAME,
                args: a,
            })
            .collect();
        let out = run(&store, &ops);
        let local = [true, true];
        let mem = VecMemory { bytes: &bytes, region_size: RS, local: &local };
        let replies: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        proptest::prop_assert_eq!(replies.len(), ops.len());
        for (op, r) in ops.iter().zip(&replies) {
            let Op::Execute { addr, args, .. } = *op else { unreachable!() };
            let want = match Aggregate.run(&mem, addr, args) {
                Ok(Outcome::Done(v)) => Some(v),
                _ => None,
            };
            let got = match (r.status, r.body) {
                (Status::Ok, ReplyBody::Done(v)) => Some(v.to_vec()),
                (Status::Ok, ReplyBody::Data(d)) => match reply::decode(d).unwrap() {
                    reply::ExecReply::Done(v) => Some(v.to_vec()),
                    _ => None,
                },
                _ => None,
            };
            proptest::prop_assert_eq!(got, want, "call {:?}", op);
        }
    }
}

#[test]
fn ops_against_regions() {
    let store = RegionStore::new(1 << 20);
    store
        .alloc(7, 0, 4096, 8192, 1, Arrival::default())
        .unwrap();
    store.free(7, 1, Some("10.0.0.9:1".into()));
    let out = run(
        &store,
        &[
            Op::Write {
                cache: 7,
                addr: 100,
                data: b"abcdefgh",
            },
            Op::Read {
                cache: 7,
                addr: 100,
                len: 8,
            },
            Op::Cas {
                cache: 7,
                addr: 104,
                expected: 0,
                new: 1,
            },
            Op::FetchAdd {
                cache: 7,
                addr: 200,
                delta: 5,
            },
            Op::FetchAdd {
                cache: 7,
                addr: 200,
                delta: 5,
            },
            Op::Read {
                cache: 7,
                addr: 4090,
                len: 10,
            },
            Op::Read {
                cache: 7,
                addr: 5000,
                len: 8,
            },
            Op::Read {
                cache: 7,
                addr: 9000,
                len: 8,
            },
            Op::Read {
                cache: 8,
                addr: 0,
                len: 8,
            },
            Op::Cas {
                cache: 7,
                addr: 3,
                expected: 0,
                new: 0,
            },
            Op::Read {
                cache: 7,
                addr: u64::MAX,
                len: 8,
            },
        ],
    );
    let r: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(r[0].status, Status::Ok);
    assert_eq!(r[1].body, ReplyBody::Data(b"abcdefgh"));
    assert_eq!(
        r[2].body,
        ReplyBody::Value(0x6867_6665),
        "CAS fails and returns the old word"
    );
    assert_eq!(r[3].body, ReplyBody::Value(0));
    assert_eq!(r[4].body, ReplyBody::Value(5));
    assert_eq!(r[5].status, Status::OutOfRange, "spans a region boundary");
    assert_eq!(r[6].body, ReplyBody::Owner(Some("10.0.0.9:1")));
    assert_eq!(r[7].status, Status::OutOfRange, "beyond capacity");
    assert_eq!(r[8].status, Status::NoSuchCache);
    assert_eq!(r[9].status, Status::Misaligned);
    assert_eq!(r[10].status, Status::OutOfRange);
}

/// Batches of many chunks (decoded and prefetched a chunk ahead) answer every op,
/// in order.
#[test]
fn long_batches_answer_every_op() {
    let store = RegionStore::new(1 << 20);
    store
        .alloc(4, 0, 1 << 16, 1 << 17, 1, Arrival::default())
        .unwrap();
    let n = 20 * CHUNK + 77;
    let words: Vec<[u8; 8]> = (0..n as u64).map(|i| (i * 31 + 7).to_le_bytes()).collect();
    // Spread over the held region, the missing one and past the capacity.
    let addr = |i: usize| (i as u64 * 8 * 13) % (3 << 16);
    let writes: Vec<Op<'_>> = (0..n)
        .map(|i| Op::Write {
            cache: 4,
            addr: addr(i),
            data: &words[i],
        })
        .collect();
    let expect = |i: usize| match addr(i) {
        a if a < 1 << 16 => Status::Ok,
        a if a < 1 << 17 => Status::WrongServer,
        _ => Status::OutOfRange,
    };
    let got = statuses(&run(&store, &writes));
    assert_eq!(got.len(), n);
    for (i, s) in got.iter().enumerate() {
        assert_eq!(*s, expect(i), "write {i}");
    }
    let reads: Vec<Op<'_>> = (0..n)
        .map(|i| Op::Read {
            cache: 4,
            addr: addr(i),
            len: 8,
        })
        .collect();
    let out = run(&store, &reads);
    let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
    // The last write to an address wins.
    let mut last = std::collections::HashMap::new();
    for i in 0..n {
        last.insert(addr(i), i);
    }
    for (i, r) in d.by_ref().enumerate() {
        let r = r.unwrap();
        assert_eq!(r.status, expect(i), "read {i}");
        if r.status == Status::Ok {
            assert_eq!(r.body, ReplyBody::Data(&words[last[&addr(i)]]), "read {i}");
        }
    }
    d.finish().unwrap();
}

fn statuses(out: &[u8]) -> Vec<Status> {
    ResponseDecoder::new(&out[HEADER_LEN..])
        .unwrap()
        .map(|r| r.unwrap().status)
        .collect()
}

#[test]
fn tokens_reach_their_own_cache_only() {
    let store = RegionStore::new(1 << 20);
    store
        .alloc(1, 0, 4096, 4096, 1, Arrival::default())
        .unwrap();
    store
        .alloc(2, 0, 4096, 4096, 1, Arrival::default())
        .unwrap();
    let ops = [
        Op::Write {
            cache: 1,
            addr: 0,
            data: b"x",
        },
        Op::Read {
            cache: 1,
            addr: 0,
            len: 1,
        },
        Op::FetchAdd {
            cache: 1,
            addr: 8,
            delta: 1,
        },
        Op::Read {
            cache: 2,
            addr: 0,
            len: 1,
        },
        Op::Write {
            cache: 2,
            addr: 0,
            data: b"y",
        },
    ];
    let rw = Access::Cache {
        cache: 1,
        rights: Rights::ReadWrite,
    };
    use Status::{Forbidden as F, Ok as K};
    assert_eq!(statuses(&run_as(&store, &ops, rw)), [K, K, K, F, F]);
    let ro = Access::Cache {
        cache: 1,
        rights: Rights::ReadOnly,
    };
    assert_eq!(statuses(&run_as(&store, &ops, ro)), [F, K, F, F, F]);
    assert_eq!(
        statuses(&run_as(&store, &ops, Access::Cluster)),
        [K, K, K, K, K]
    );
}

#[test]
fn wrong_server_names_the_owner_from_the_region_table() {
    let store = RegionStore::new(1 << 20);
    store
        .alloc(3, 0, 4096, 8192, 1, Arrival::default())
        .unwrap();
    let hint = |store: &RegionStore| {
        let read = Op::Read {
            cache: 3,
            addr: 5000,
            len: 8,
        };
        let out = run(store, &[read]);
        let r = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        match r.body {
            ReplyBody::Owner(o) => o.map(str::to_owned),
            other => panic!("{other:?}"),
        }
    };
    store.set_routes(
        3,
        1,
        vec!["127.0.0.1:1".into(), "10.0.0.2:7".into()],
        &[],
        8192,
        "me",
    );
    assert_eq!(hint(&store).as_deref(), Some("10.0.0.2:7"));
    // A table naming this server for a region it does not hold gives no hint.
    store.set_routes(
        3,
        2,
        vec!["127.0.0.1:1".into(), "127.0.0.1:1".into()],
        &[],
        8192,
        "me",
    );
    assert_eq!(hint(&store), None);
}
