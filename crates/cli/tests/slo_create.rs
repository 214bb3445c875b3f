//! Caches created from an SLO on a real cluster: the manager searches its model,
//! places the cache, and the client handle runs the chosen `c`, `b`, `q`.

mod common;

use std::path::Path;
use std::process::Command;

use farcache_client::{ClientConfig, ClientError};
use farcache_proto::Rights;
use farcache_proto::slo::{Percentile, Slo, Transport};
use farcache_slo::{Machine, ModelFile, Perf, Point, Section};
use farcache_testkit::{ClusterOptions, ProcessCluster};

/// A model shaped like a measured one: batching and depth raise throughput and
/// latency; client threads raise throughput.
fn model(machine: Machine) -> ModelFile {
    let mut f = ModelFile::new(machine, 1_764_000_000);
    for (record_size, read_fraction, slow) in [(8, 1.0, 1.0), (8, 0.0, 1.5), (64, 1.0, 1.2)] {
        let mut points = Vec::new();
        for s in [1u32, 2] {
            for c in [1u32, 2, 4] {
                for b in [1u32, 2, 4, 8, 16, 32, 64] {
                    for q in [1u32, 2, 4, 8] {
                        let lat = (6.0 + f64::from(b * q) * 0.4 / f64::from(s)) * slow;
                        points.push(Point {
                            transport: Transport { s, c, b, q },
                            perf: Perf {
                                p50_us: lat,
                                p99_us: lat * 2.5,
                                throughput: f64::from(c * b * q) * 1e6 / lat,
                            },
                        });
                    }
                }
            }
        }
        f.sections.push(Section {
            record_size,
            read_fraction,
            points,
        });
    }
    f
}

fn cluster(model_path: &Path) -> ProcessCluster {
    ProcessCluster::start(
        common::bin(),
        &ClusterOptions::default()
            .servers(2)
            .server_threads(1)
            .manager_args(["--slo-model", &model_path.to_string_lossy()]),
    )
    .expect("cluster")
}

#[test]
fn a_cache_from_an_slo_runs_the_chosen_transport() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    model(Machine::detect()).save(&path).unwrap();
    let cl = cluster(&path);
    let client = cl.client().unwrap();

    // 1 Mops/s of 8-byte reads within 20 us at p50.
    let slo = Slo::new(8, 1e6, 20.0);
    let cache = client.create_with_slo("fast", 4 << 20, &slo).unwrap();
    let choice = cache.slo().expect("the cache carries its SLO choice");
    let t = choice.transport;
    // Servers run one thread each, so s cannot exceed 1.
    assert_eq!(t.s, 1, "{t}");
    // The headroom (10 %) is kept on both figures.
    assert!(choice.predicted_latency_us * 1.1 <= 20.0, "{choice:?}");
    assert!(choice.predicted_throughput >= 1.1e6, "{choice:?}");
    assert!(choice.dollars_per_hour > 0.0 && choice.search_us > 0.0);
    // The handle runs the chosen transport.
    let cfg = cache.config();
    assert_eq!(
        (cfg.connections, cfg.batch_size, cfg.queue_depth),
        (t.c as usize, t.b as usize, t.q as usize)
    );
    // And it is a working cache.
    cache.write(4096, b"slo-bytes").unwrap();
    assert_eq!(&cache.read(4096, 9).unwrap()[..], b"slo-bytes");
    let mut batch = cache.batch();
    for i in 0..200u64 {
        batch.write(i * 8, &i.to_le_bytes());
    }
    assert_eq!(batch.submit().wait().failed(), 0);

    // Opening it again (another client, default transport) applies the choice too.
    let other = cl.client().unwrap();
    let opened = other.open("fast").unwrap();
    assert_eq!(opened.config().batch_size, t.b as usize);
    assert_eq!(&opened.read(4096, 9).unwrap()[..], b"slo-bytes");

    // `status` shows it.
    let st = client.status().unwrap();
    let row = st.caches.iter().find(|c| c.name == "fast").unwrap();
    assert_eq!(row.slo.as_ref().map(|c| c.transport), Some(t));

    // A stricter SLO on the same cache: the search runs again.
    let mut strict = slo.clone();
    strict.throughput = 3e6;
    strict.latency_us = 60.0;
    strict.percentile = Percentile::P99;
    let info = client.set_slo("fast", &strict).unwrap();
    let again = info.slo.unwrap();
    assert_eq!(again.slo, strict);
    assert!(again.predicted_throughput >= 3.3e6, "{again:?}");
    assert!(client.open("fast").unwrap().slo().unwrap().slo == strict);

    // Reshape keeps the SLO and prices the larger memory.
    let grown = client.reshape("fast", 64 << 20).unwrap();
    let after = grown.slo.unwrap();
    assert_eq!(after.slo, strict);
    assert!(after.dollars_per_hour >= again.dollars_per_hour);

    // A read-only token may not change the SLO.
    let token = client.issue_token("fast", Rights::ReadOnly).unwrap();
    let reader = cl
        .client_with(ClientConfig::new(cl.manager_addr()).token(token.parse().unwrap()))
        .unwrap();
    let e = reader.set_slo("fast", &slo).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    drop(cl);
}

#[test]
fn slos_the_model_cannot_meet_are_refused_with_the_best_figures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    model(Machine::detect()).save(&path).unwrap();
    let cl = cluster(&path);
    let client = cl.client().unwrap();

    // 1 us is below the lowest latency the model has (6 us).
    let Err(e) = client.create_with_slo("never", 1 << 20, &Slo::new(8, 1e5, 1.0)) else {
        panic!("an SLO below the model's lowest latency was accepted");
    };
    let msg = e.to_string();
    assert!(msg.contains("no configuration meets the SLO"), "{msg}");
    assert!(msg.contains("at best"), "{msg}");
    assert!(matches!(e, ClientError::Rejected { .. }), "{e:?}");
    // Records larger than any measured are not covered.
    let Err(e) = client.create_with_slo("big", 1 << 20, &Slo::new(4096, 1e5, 100.0)) else {
        panic!("records larger than the model's were accepted");
    };
    assert!(e.to_string().contains("up to 64 B"), "{e}");
    // Nothing was created.
    assert!(client.open("never").is_err());
    assert!(client.open("big").is_err());
    drop(cl);
}

#[test]
fn a_manager_refuses_a_model_from_another_machine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    let mut elsewhere = Machine::detect();
    elsewhere.hostname = "another-host".into();
    model(elsewhere).save(&path).unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, farcache_proto::ClusterSecret::generate().to_hex()).unwrap();
    let out = Command::new(common::bin())
        .arg("manager")
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("m"))
        .arg("--secret-file")
        .arg(&secret)
        .arg("--slo-model")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another machine"), "{err}");
    assert!(err.contains("another-host"), "{err}");
}

/// A server holding part of an SLO cache is killed (SIGKILL): the SLO search waits for
/// recovery with a clear refusal rather than guessing, then succeeds; bytes on the
/// surviving server read back intact and the lost ones read as lost, never as wrong
/// bytes.
#[test]
fn an_slo_cache_survives_a_killed_server_and_searches_again_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    model(Machine::detect()).save(&path).unwrap();
    let mut cl = cluster(&path);
    let client = cl.client().unwrap();
    let slo = Slo::new(8, 1e6, 20.0);
    let cache = client.create_with_slo("kill", 4 << 20, &slo).unwrap();
    let info = cache.info();
    let rs = info.region_size;
    // One marked record per region, each acknowledged.
    for r in 0..info.regions.len() as u64 {
        cache.write(r * rs, &(r + 100).to_le_bytes()).unwrap();
    }
    let victim = info
        .servers
        .iter()
        .find(|s| s.addr == cl.server_addr(0))
        .map(|s| s.id)
        .expect("server 0 holds part of the cache");
    assert!(info.regions.contains(&victim) && info.regions.iter().any(|&s| s != victim));
    cl.kill_server(0).unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match client.set_slo("kill", &slo) {
            Ok(i) => {
                assert!(i.slo.is_some());
                break;
            }
            Err(e) => {
                let m = e.to_string();
                // Before the manager notices, the search still sees the server alive
                // and succeeds; in between it refuses, naming the server.
                assert!(m.contains("not alive"), "{m}");
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "set_slo never recovered"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Wait until the dead server's regions are placed again, then check every region.
    let fresh = loop {
        let c = client.open("kill").unwrap();
        if !c.info().regions.contains(&victim) {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "regions never recovered"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for (r, &owner) in info.regions.iter().enumerate() {
        let got = fresh.read(r as u64 * rs, 8);
        if owner == victim {
            match got {
                Err(ClientError::Op(e)) if e.to_string().contains("lost") => {}
                other => panic!("region {r} lost with its server read as {other:?}"),
            }
        } else {
            let got = got.unwrap_or_else(|e| panic!("region {r}: {e}"));
            assert_eq!(&got[..], &(r as u64 + 100).to_le_bytes(), "region {r}");
        }
    }
}
