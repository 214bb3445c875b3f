//! A model file round-trips, and files from another machine, release or format are
//! refused with a message that says what to do.

use farcache_proto::slo::Transport;
use farcache_slo::{Machine, Model, ModelFile, Perf, Point, Section, SloError};

fn model() -> ModelFile {
    let mut f = ModelFile::new(Machine::detect(), 1_764_000_000);
    f.sections.push(Section {
        record_size: 8,
        read_fraction: 1.0,
        points: vec![Point {
            transport: Transport {
                s: 1,
                c: 1,
                b: 1,
                q: 1,
            },
            perf: Perf {
                p50_us: 8.0,
                p99_us: 20.0,
                throughput: 1.2e5,
            },
        }],
    });
    f
}

#[test]
fn round_trips_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.json");
    model().save(&p).unwrap();
    let m = Model::load(&p, false).unwrap();
    assert_eq!(m.file, model());
    let one = Transport {
        s: 1,
        c: 1,
        b: 1,
        q: 1,
    };
    assert_eq!(m.predict(8, 1.0, one).unwrap().p50_us, 8.0);
}

#[test]
fn another_machine_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.json");
    let mut f = model();
    f.machine.hostname = "somewhere-else".into();
    f.save(&p).unwrap();
    let e = Model::load(&p, false).unwrap_err();
    assert!(matches!(e, SloError::WrongMachine { .. }), "{e}");
    assert!(e.to_string().contains("somewhere-else"), "{e}");
    assert!(e.to_string().contains("farcache calibrate"), "{e}");
    assert!(Model::load(&p, true).is_ok());
}

#[test]
fn another_release_or_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.json");
    let mut f = model();
    f.farcache_version = "0.0.1".into();
    f.save(&p).unwrap();
    let e = Model::load(&p, true).unwrap_err();
    assert!(matches!(e, SloError::WrongVersion { .. }), "{e}");
    assert!(e.to_string().contains("0.0.1"), "{e}");

    let mut f = model();
    f.format_version = 99;
    f.save(&p).unwrap();
    assert!(matches!(
        Model::load(&p, true),
        Err(SloError::WrongVersion { .. })
    ));

    std::fs::write(&p, br#"{"format": "something-else", "sections": []}"#).unwrap();
    let e = Model::load(&p, true).unwrap_err();
    assert!(matches!(e, SloError::WrongFormat { .. }), "{e}");
    std::fs::write(&p, b"not json").unwrap();
    assert!(matches!(Model::load(&p, true), Err(SloError::Parse { .. })));
    let e = Model::load(&dir.path().join("missing.json"), true).unwrap_err();
    assert!(matches!(e, SloError::Io { .. }), "{e}");
}

#[test]
fn malformed_models_are_refused() {
    let mut f = model();
    f.sections.push(f.sections[0].clone());
    assert!(matches!(Model::from_file(f), Err(SloError::Malformed(_))));
    let mut f = model();
    f.sections.clear();
    assert!(matches!(Model::from_file(f), Err(SloError::Malformed(_))));
    let mut f = model();
    f.sections[0].points[0].transport.b = 3;
    assert!(matches!(Model::from_file(f), Err(SloError::Malformed(_))));
}
