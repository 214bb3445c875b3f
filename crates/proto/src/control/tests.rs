use super::*;

#[test]
fn control_json_roundtrip() {
    let r = ControlRequest::CreateCache {
        slo: None,
        name: "a".into(),
        capacity: 10,
        region_size: None,
        replicas: 2,
        from_file: None,
    };
    assert_eq!(ControlRequest::decode(&r.encode()).unwrap(), r);
    let nope = encode_payload(b"{\"type\":\"nope\"}", &[]);
    assert!(ControlRequest::decode(&nope).is_err());
    let e = ControlResponse::error(ControlErrorCode::NotFound, "x");
    assert_eq!(ControlResponse::decode(&e.encode()).unwrap(), e);
    assert_eq!(r.name(), "create_cache");
}

#[test]
fn procedure_code_travels_as_raw_bytes() {
    let code: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let r = ControlRequest::RegisterProc {
        cache: "c".into(),
        proc_name: "p".into(),
        code: code.clone(),
    };
    let wire = r.encode();
    assert!(
        wire.len() < code.len() + 200,
        "{} bytes on the wire",
        wire.len()
    );
    assert_eq!(ControlRequest::decode(&wire).unwrap(), r);
    // An attachment on a request that takes none, and a cut JSON length.
    let mut bad = ControlRequest::Status.encode();
    bad.push(1);
    assert!(ControlRequest::decode(&bad).is_err());
    assert!(ControlRequest::decode(&wire[..3]).is_err());
    assert!(ControlRequest::decode(&wire[..10]).is_err());
}

#[test]
fn region_digest_ignores_order_and_sees_changes() {
    let a = [
        HeldRegion {
            cache: 1,
            region: 0,
        },
        HeldRegion {
            cache: 1,
            region: 1,
        },
    ];
    let b = [a[1], a[0]];
    assert_eq!(region_digest(a), region_digest(b));
    assert_ne!(region_digest(a), region_digest([a[0]]));
    assert_ne!(
        region_digest([HeldRegion {
            cache: 1,
            region: 2
        }]),
        region_digest([HeldRegion {
            cache: 2,
            region: 1
        }])
    );
    assert_eq!(region_digest([]), 0);
}

#[test]
fn region_split_matches_division() {
    let sizes = [4096u64, 1 << 20, 1 << 30, 12288, 3 * (1 << 20), 4096 * 7];
    let addrs = [0u64, 1, 4095, 4096, 12287, 1 << 20, (1 << 40) + 5, u64::MAX];
    for &rs in &sizes {
        for &a in &addrs {
            assert_eq!(
                region_split(a, rs),
                (a / rs, a % rs),
                "{a} in regions of {rs}"
            );
        }
    }
}
