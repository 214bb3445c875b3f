//! A fuzz run of every frame decoder on stable Rust: a million inputs, half of them
//! valid frames of every kind with a few random mutations (so they get past the first
//! checks), half random bytes, each fed to the same entry point the cargo-fuzz target
//! uses (`fuzz/decode_all.rs`), which also checks that whatever decodes re-encodes.
//!
//! Not part of the default run (it takes tens of seconds): `scripts/test.sh` runs it
//! with `cargo test -p farcache-proto --test fuzz_decoders -- --ignored`.
//! `FARCACHE_FUZZ_INPUTS` and `FARCACHE_FUZZ_SEED` change the count and the seed.

#[path = "../fuzz/decode_all.rs"]
mod decode_all;

use decode_all::{decode_all, frame};
use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::peer::{PeerEncoder, PeerMsg};
use farcache_proto::{
    Challenge, ClusterSecret, Credential, FrameKind, HelloAck, Op, RequestEncoder, ResponseEncoder,
    Role, Status,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| rng.r#gen()).collect()
}

/// A valid frame of a random kind.
fn valid(rng: &mut StdRng, cred: &Credential) -> Vec<u8> {
    let mut out = Vec::new();
    match rng.gen_range(0..8) {
        0 => {
            let data = bytes(rng, 64);
            let name = ["chase", "aggregate", "x"][rng.gen_range(0..3)];
            let mut e = RequestEncoder::begin(&mut out, rng.r#gen());
            for _ in 0..rng.gen_range(0..12) {
                let op = match rng.gen_range(0..7) {
                    0 => Op::Read {
                        cache: rng.gen_range(0..4),
                        addr: rng.r#gen(),
                        len: rng.gen_range(0..1 << 21),
                    },
                    1 => Op::Write {
                        cache: 1,
                        addr: rng.r#gen(),
                        data: &data,
                    },
                    2 => Op::Cas {
                        cache: 1,
                        addr: rng.r#gen(),
                        expected: rng.r#gen(),
                        new: rng.r#gen(),
                    },
                    3 => Op::FetchAdd {
                        cache: 1,
                        addr: rng.r#gen(),
                        delta: rng.r#gen(),
                    },
                    4 => Op::Execute {
                        cache: 1,
                        addr: rng.r#gen(),
                        proc_name: name,
                        args: &data,
                    },
                    5 => {
                        // A run of calls of one procedure (EXECUTE_RUN).
                        let k = rng.gen_range(0..5);
                        let args_len = rng.gen_range(0..=data.len().min(32)) as u32;
                        let addrs: Vec<u64> = (0..k).map(|_| rng.r#gen()).collect();
                        let calls = addrs.iter().map(|&a| (a, &data[..]));
                        assert!(e.push_executes(&mut out, 1, name, args_len, calls));
                        continue;
                    }
                    _ => Op::Ping,
                };
                e.push(&mut out, &op);
            }
            e.finish(&mut out);
        }
        1 => {
            let mut e = ResponseEncoder::begin(&mut out, rng.r#gen());
            for _ in 0..rng.gen_range(0..12) {
                match rng.gen_range(0..6) {
                    0 => e.data(&mut out, farcache_proto::OpCode::Read, &bytes(rng, 40)),
                    // Outputs of two lengths, so runs both grow and break.
                    4 | 5 => {
                        let n = if rng.gen_bool(0.5) { 8 } else { 3 };
                        let output: Vec<u8> = (0..n).map(|_| rng.r#gen()).collect();
                        e.done(&mut out, &output);
                    }
                    1 => e.value(&mut out, farcache_proto::OpCode::Cas, rng.r#gen()),
                    2 => e.wrong_server(&mut out, farcache_proto::OpCode::Read, Some("h:1")),
                    _ => e.status(&mut out, farcache_proto::OpCode::Write, Status::Forbidden),
                }
            }
            e.finish(&mut out);
        }
        2 => {
            let ch = Challenge::new(rng.r#gen());
            out = frame(FrameKind::Challenge, 0, &ch.encode());
            let hello = cred.hello(Role::Server, rng.r#gen(), "10.0.0.1:7401", &ch);
            out.extend(frame(FrameKind::Hello, 0, &hello.encode()));
        }
        3 => {
            let ack = HelloAck {
                version: farcache_proto::PROTOCOL_VERSION,
                server_id: rng.r#gen(),
                max_frame: rng.r#gen(),
                proof: rng.r#gen(),
            };
            out = frame(FrameKind::HelloAck, 0, &ack.encode());
        }
        4 => {
            let req = match rng.gen_range(0..3) {
                0 => ControlRequest::RegisterProc {
                    cache: "c".into(),
                    proc_name: "p".into(),
                    code: bytes(rng, 100),
                },
                1 => ControlRequest::ResizeCache {
                    cache: rng.r#gen(),
                    capacity: rng.r#gen(),
                    epoch: rng.r#gen(),
                },
                _ => ControlRequest::Status,
            };
            out = frame(FrameKind::Control, 0, &req.encode());
        }
        5 => {
            let resp = ControlResponse::Token {
                token: "fct1_1_ro_00".into(),
            };
            out = frame(FrameKind::ControlReply, 0, &resp.encode());
        }
        6 => {
            let state = bytes(rng, 48);
            let mut e = PeerEncoder::begin(&mut out);
            for _ in 0..rng.gen_range(0..6) {
                let m = match rng.gen_range(0..4) {
                    0 => PeerMsg::Forward {
                        ticket: rng.r#gen(),
                        origin: "10.0.0.2:1",
                        cache: 1,
                        addr: rng.r#gen(),
                        hops: rng.r#gen(),
                        proc_name: "chase",
                        state: &state,
                    },
                    1 => PeerMsg::Result {
                        ticket: rng.r#gen(),
                        hops: 1,
                        body: &state,
                    },
                    2 => PeerMsg::Fetch {
                        ticket: rng.r#gen(),
                        origin: "10.0.0.2:1",
                        cache: 1,
                        addr: rng.r#gen(),
                        len: rng.r#gen(),
                    },
                    _ => PeerMsg::Fetched {
                        ticket: rng.r#gen(),
                        addr: rng.r#gen(),
                        status: Status::Ok,
                        data: &state,
                    },
                };
                e.push(&mut out, &m);
            }
            e.finish(&mut out);
        }
        _ => {
            let mut body = Vec::new();
            farcache_proto::reply::push_continue(&mut body, rng.r#gen(), &bytes(rng, 32));
            out = body;
        }
    }
    out
}

fn mutate(rng: &mut StdRng, v: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..=8) {
        match rng.gen_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] = [0, 1, 0x7f, 0x80, 0xff][rng.gen_range(0..5)];
            }
            2 if !v.is_empty() => {
                let n = rng.gen_range(0..v.len());
                v.truncate(n);
            }
            3 => {
                let i = rng.gen_range(0..=v.len());
                v.insert(i, rng.r#gen());
            }
            _ => {
                // A length field (little-endian u32) set to something interesting.
                if v.len() >= 4 {
                    let i = rng.gen_range(0..=v.len() - 4);
                    let x: u32 = [0, 1, 0xFFFF, u32::MAX, rng.r#gen()][rng.gen_range(0..5)];
                    v[i..i + 4].copy_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
}

#[test]
#[ignore = "a million inputs: run with --ignored (scripts/test.sh does)"]
fn a_million_inputs_decode_without_a_panic() {
    let inputs = env("FARCACHE_FUZZ_INPUTS", 1_000_000);
    let seed = env("FARCACHE_FUZZ_SEED", 0xFA2C_AC4E);
    let mut rng = StdRng::seed_from_u64(seed);
    let cred = Credential::Cluster(ClusterSecret::generate());
    let start = std::time::Instant::now();
    let mut structured = 0u64;
    for i in 0..inputs {
        let input = if i % 2 == 0 {
            structured += 1;
            let mut v = valid(&mut rng, &cred);
            if rng.gen_bool(0.9) {
                mutate(&mut rng, &mut v);
            }
            v
        } else {
            bytes(&mut rng, 2048)
        };
        decode_all(&input);
    }
    eprintln!(
        "fuzzed the decoders with {inputs} inputs ({structured} mutated frames, seed {seed:#x}) in {:.1?}: no panic",
        start.elapsed()
    );
}
