//! Property tests of the wire codec: random request and response batches (every op and
//! reply kind) round-trip through the encoders and decoders; frame headers round-trip
//! and reject what they must; and arbitrary bytes, truncations and mutations of valid
//! frames never make a decoder panic. The last group runs the same entry point as the
//! `decode_frame` fuzz target (`fuzz/decode_all.rs`).

#[path = "../fuzz/decode_all.rs"]
mod decode_all;

use decode_all::{decode_all, decode_request, decode_response, decode_stream, frame};
use farcache_proto::control::{
    ControlErrorCode, ControlRequest, ControlResponse, MigrationMode, PriceClass,
};
use farcache_proto::response::ReplyBody;
use farcache_proto::{
    Challenge, ClusterSecret, Credential, DecodeError, FrameHeader, FrameKind, HEADER_LEN, Hello,
    HelloAck, Op, OpCode, Reply, RequestDecoder, RequestEncoder, ResponseDecoder, ResponseEncoder,
    Rights, Role, Status,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------------
// Owned mirrors of ops and replies, and their strategies

#[derive(Debug, Clone, PartialEq)]
enum OwnedOp {
    Read {
        cache: u32,
        addr: u64,
        len: u32,
    },
    Write {
        cache: u32,
        addr: u64,
        data: Vec<u8>,
    },
    Cas {
        cache: u32,
        addr: u64,
        expected: u64,
        new: u64,
    },
    FetchAdd {
        cache: u32,
        addr: u64,
        delta: u64,
    },
    Execute {
        cache: u32,
        addr: u64,
        name: String,
        args: Vec<u8>,
    },
    Ping,
}

impl OwnedOp {
    fn op(&self) -> Op<'_> {
        match self {
            Self::Read { cache, addr, len } => Op::Read {
                cache: *cache,
                addr: *addr,
                len: *len,
            },
            Self::Write { cache, addr, data } => Op::Write {
                cache: *cache,
                addr: *addr,
                data,
            },
            Self::Cas {
                cache,
                addr,
                expected,
                new,
            } => Op::Cas {
                cache: *cache,
                addr: *addr,
                expected: *expected,
                new: *new,
            },
            Self::FetchAdd { cache, addr, delta } => Op::FetchAdd {
                cache: *cache,
                addr: *addr,
                delta: *delta,
            },
            Self::Execute {
                cache,
                addr,
                name,
                args,
            } => Op::Execute {
                cache: *cache,
                addr: *addr,
                proc_name: name,
                args,
            },
            Self::Ping => Op::Ping,
        }
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

fn op() -> impl Strategy<Value = OwnedOp> {
    let cache = any::<u32>();
    let addr = prop_oneof![any::<u64>(), 0..4096u64, Just(u64::MAX)];
    prop_oneof![
        (cache, addr.clone(), any::<u32>()).prop_map(|(cache, addr, len)| OwnedOp::Read {
            cache,
            addr,
            len
        }),
        (cache, addr.clone(), bytes(300)).prop_map(|(cache, addr, data)| OwnedOp::Write {
            cache,
            addr,
            data
        }),
        (cache, addr.clone(), any::<u64>(), any::<u64>()).prop_map(
            |(cache, addr, expected, new)| OwnedOp::Cas {
                cache,
                addr,
                expected,
                new
            }
        ),
        (cache, addr.clone(), any::<u64>()).prop_map(|(cache, addr, delta)| OwnedOp::FetchAdd {
            cache,
            addr,
            delta
        }),
        // Names up to 60 chars of up to 4 bytes stay within the 255-byte limit; a few
        // fixed names make repeats (sent as back-references) common.
        (
            cache,
            addr,
            prop_oneof![
                "\\PC{1,60}",
                Just("sum".to_string()),
                Just("aggregate".to_string())
            ],
            bytes(100)
        )
            .prop_map(|(cache, addr, name, args)| {
                OwnedOp::Execute {
                    cache,
                    addr,
                    name,
                    args,
                }
            }),
        Just(OwnedOp::Ping),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum OwnedReply {
    /// READ / EXECUTE ok; `in_place` picks `data_with` over `data`.
    Data {
        op: OpCode,
        data: Vec<u8>,
        in_place: bool,
    },
    /// CAS / FETCH_ADD ok.
    Value {
        op: OpCode,
        value: u64,
    },
    /// WRITE / PING ok.
    Done {
        op: OpCode,
    },
    /// Any op, any status but OK and WRONG_SERVER.
    Failed {
        op: OpCode,
        status: Status,
    },
    WrongServer {
        op: OpCode,
        owner: Option<String>,
    },
    /// A finished procedure's output (sent in a DONE_RUN).
    Output {
        data: Vec<u8>,
    },
}

const FAILURES: [Status; 9] = [
    Status::NotServing,
    Status::OutOfRange,
    Status::NoSuchCache,
    Status::TooLarge,
    Status::Misaligned,
    Status::Unsupported,
    Status::NoMemory,
    Status::Internal,
    Status::NoSuchProc,
];

impl OwnedReply {
    fn encode(&self, out: &mut Vec<u8>, enc: &mut ResponseEncoder) {
        match self {
            Self::Data {
                op,
                data,
                in_place: false,
            } => enc.data(out, *op, data),
            Self::Data {
                op,
                data,
                in_place: true,
            } => enc.data_with(out, *op, data.len(), |dst| dst.copy_from_slice(data)),
            Self::Value { op, value } => enc.value(out, *op, *value),
            Self::Done { op } => enc.status(out, *op, Status::Ok),
            Self::Failed { op, status } => enc.status(out, *op, *status),
            Self::WrongServer { op, owner } => enc.wrong_server(out, *op, owner.as_deref()),
            Self::Output { data } => enc.done(out, data),
        }
    }

    fn expected(&self) -> Reply<'_> {
        let (op, status, body) = match self {
            Self::Data { op, data, .. } => (*op, Status::Ok, ReplyBody::Data(data)),
            Self::Value { op, value } => (*op, Status::Ok, ReplyBody::Value(*value)),
            Self::Done { op } => (*op, Status::Ok, ReplyBody::None),
            Self::Failed { op, status } => (*op, *status, ReplyBody::None),
            Self::WrongServer { op, owner } => {
                (*op, Status::WrongServer, ReplyBody::Owner(owner.as_deref()))
            }
            // An empty output goes as a plain reply (a run of them would take no bytes).
            Self::Output { data } if data.is_empty() => (
                OpCode::Execute,
                Status::Ok,
                ReplyBody::Data(&[farcache_proto::reply::TAG_DONE]),
            ),
            Self::Output { data } => (OpCode::Execute, Status::Ok, ReplyBody::Done(data)),
        };
        Reply { op, status, body }
    }
}

fn any_opcode() -> impl Strategy<Value = OpCode> {
    proptest::sample::select(OpCode::ALL.to_vec())
}

fn reply() -> impl Strategy<Value = OwnedReply> {
    prop_oneof![
        (
            prop_oneof![Just(OpCode::Read), Just(OpCode::Execute)],
            bytes(300),
            any::<bool>()
        )
            .prop_map(|(op, data, in_place)| OwnedReply::Data { op, data, in_place }),
        (
            prop_oneof![Just(OpCode::Cas), Just(OpCode::FetchAdd)],
            any::<u64>()
        )
            .prop_map(|(op, value)| OwnedReply::Value { op, value }),
        prop_oneof![Just(OpCode::Write), Just(OpCode::Ping)].prop_map(|op| OwnedReply::Done { op }),
        (any_opcode(), proptest::sample::select(FAILURES.to_vec()))
            .prop_map(|(op, status)| OwnedReply::Failed { op, status }),
        (any_opcode(), proptest::option::of("\\PC{1,40}"))
            .prop_map(|(op, owner)| OwnedReply::WrongServer { op, owner }),
        // Few lengths, so DONE_RUNs both grow and break.
        prop_oneof![Just(0usize), Just(3), Just(8)]
            .prop_flat_map(|n| vec(any::<u8>(), n))
            .prop_map(|data| OwnedReply::Output { data }),
    ]
}

fn encode_requests(prefix: &[u8], seq: u64, ops: &[OwnedOp]) -> Vec<u8> {
    let mut out = prefix.to_vec();
    let mut enc = RequestEncoder::begin(&mut out, seq);
    for op in ops {
        enc.push(&mut out, &op.op());
    }
    assert_eq!(enc.count() as usize, ops.len());
    enc.finish(&mut out);
    out
}

fn encode_replies(seq: u64, replies: &[OwnedReply]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = ResponseEncoder::begin(&mut out, seq);
    for r in replies {
        r.encode(&mut out, &mut enc);
    }
    enc.finish(&mut out);
    out
}

/// A valid frame of either kind, for truncation and mutation tests.
fn valid_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (any::<u64>(), vec(op(), 0..12)).prop_map(|(seq, ops)| encode_requests(&[], seq, &ops)),
        (any::<u64>(), vec(reply(), 0..12)).prop_map(|(seq, rs)| encode_replies(seq, &rs)),
        (any::<u64>(), any::<u64>()).prop_map(|(seq, id)| frame(
            FrameKind::Hello,
            seq,
            &hello(Role::Client, id).encode()
        )),
        control_request().prop_map(|r| frame(FrameKind::Control, 0, &r.encode())),
        control_response().prop_map(|r| frame(FrameKind::ControlReply, 0, &r.encode())),
    ]
}

/// A Hello answering a fresh challenge with a random cluster secret.
fn hello(role: Role, id: u64) -> Hello {
    let cred = Credential::Cluster(ClusterSecret::generate());
    cred.hello(role, id, "127.0.0.1:7401", &Challenge::new([9; 32]))
}

fn name() -> impl Strategy<Value = String> {
    "\\PC{0,20}"
}

/// Prices that JSON represents exactly.
fn price() -> impl Strategy<Value = f64> {
    (0u32..100_000).prop_map(|n| f64::from(n) / 1024.0)
}

/// An SLO whose figures JSON represents exactly.
fn slo(n: u64) -> farcache_proto::slo::Slo {
    farcache_proto::slo::Slo {
        record_size: (n % 4096) as u32 + 1,
        read_fraction: (n % 5) as f64 / 4.0,
        throughput: (n % 100_000) as f64 * 64.0,
        latency_us: (n % 1000) as f64 / 8.0 + 1.0,
        percentile: if n.is_multiple_of(2) {
            farcache_proto::slo::Percentile::P50
        } else {
            farcache_proto::slo::Percentile::P99
        },
        replicas: (n % 3) as u32,
        duration_s: n.is_multiple_of(7).then_some(n % 86_400),
    }
}

fn control_request() -> impl Strategy<Value = ControlRequest> {
    let price_class = prop_oneof![Just(PriceClass::Spot), Just(PriceClass::OnDemand)];
    prop_oneof![
        (
            proptest::option::of(any::<u32>()),
            name(),
            any::<u64>(),
            any::<u32>(),
            price_class,
            price()
        )
            .prop_map(
                |(server_id, addr, memory, cores, price_class, price_per_gib_hour)| {
                    ControlRequest::RegisterServer {
                        server_id,
                        tls_addr: Some(format!("{addr}:1")),
                        addr,
                        memory,
                        cores,
                        threads: cores % 64,
                        price_class,
                        price_per_gib_hour,
                    }
                }
            ),
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(server_id, used, regions, digest)| ControlRequest::Heartbeat {
                server_id,
                used,
                regions,
                digest
            }
        ),
        (name(), vec(any::<u8>(), 0..300)).prop_map(|(proc_name, code)| {
            ControlRequest::RegisterProc {
                cache: "c".into(),
                proc_name,
                code,
            }
        }),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(cache, capacity, epoch)| {
            ControlRequest::ResizeCache {
                cache,
                capacity,
                epoch,
            }
        }),
        (name(), any::<bool>()).prop_map(|(name, ro)| ControlRequest::IssueToken {
            name,
            rights: if ro {
                Rights::ReadOnly
            } else {
                Rights::ReadWrite
            },
        }),
        Just(ControlRequest::ListRegions),
        (name(), any::<u64>(), proptest::option::of(any::<u64>())).prop_map(
            |(name, capacity, region_size)| ControlRequest::CreateCache {
                slo: capacity.is_multiple_of(3).then(|| slo(capacity)),
                from_file: (capacity % 5 == 0).then(|| format!("/data/{name}")),
                name,
                capacity,
                region_size,
                replicas: (capacity % 4) as u32,
            }
        ),
        (name(), any::<u64>()).prop_map(|(name, n)| ControlRequest::SetSlo { name, slo: slo(n) }),
        name().prop_map(|name| ControlRequest::OpenCache { name }),
        (name(), any::<u64>())
            .prop_map(|(name, capacity)| ControlRequest::ReshapeCache { name, capacity }),
        name().prop_map(|name| ControlRequest::DeleteCache { name }),
        Just(ControlRequest::Status),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(cache, region, region_size, capacity, epoch)| {
                ControlRequest::AllocRegion {
                    cache,
                    region,
                    region_size,
                    capacity,
                    epoch,
                    lost: epoch % 2 == 1,
                    incoming: epoch % 3 == 0,
                    load: (epoch % 5 == 0).then(|| farcache_proto::control::FileSlice {
                        path: "/f".into(),
                        offset: u64::from(region).wrapping_mul(region_size),
                        len: region_size,
                    }),
                }
            }),
        (any::<u32>(), any::<u32>(), name(), any::<bool>()).prop_map(
            |(cache, region, to, pause)| ControlRequest::MigrateRegion {
                replicate: region % 2 == 0,
                cache,
                region,
                to,
                mode: if pause {
                    MigrationMode::PauseRegion
                } else {
                    MigrationMode::DirtyTracking
                },
            }
        ),
        (any::<u32>(), any::<u64>(), any::<u64>())
            .prop_map(|(cache, addr, len)| { ControlRequest::ForgetLost { cache, addr, len } }),
        (any::<u32>(), any::<u64>()).prop_map(|(server_id, grace_ms)| {
            ControlRequest::ReclaimServer {
                server_id,
                grace_ms,
                mode: MigrationMode::DirtyTracking,
            }
        }),
        (name(), any::<u64>(), any::<u64>())
            .prop_map(|(name, addr, len)| ControlRequest::ClearLost { name, addr, len }),
        (any::<u32>(), any::<u32>(), proptest::option::of(name())).prop_map(
            |(cache, region, moved_to)| ControlRequest::FreeRegion {
                cache,
                region,
                moved_to
            }
        ),
        any::<u32>().prop_map(|cache| ControlRequest::DropCache { cache }),
        Just(ControlRequest::ServerStats),
    ]
}

fn control_response() -> impl Strategy<Value = ControlResponse> {
    let code = proptest::sample::select(vec![
        ControlErrorCode::NotFound,
        ControlErrorCode::AlreadyExists,
        ControlErrorCode::InsufficientMemory,
        ControlErrorCode::InvalidArgument,
        ControlErrorCode::UnknownServer,
        ControlErrorCode::Unavailable,
        ControlErrorCode::Internal,
        ControlErrorCode::Forbidden,
        ControlErrorCode::Fenced,
    ]);
    prop_oneof![
        Just(ControlResponse::Ok),
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(server_id, heartbeat_ms, lease_ms, fenced)| ControlResponse::Registered {
                server_id,
                heartbeat_ms,
                lease_ms,
                fenced,
            }
        ),
        any::<u64>().prop_map(|lease_ms| ControlResponse::Lease { lease_ms }),
        (code, name()).prop_map(|(code, message)| ControlResponse::Error { code, message }),
        vec((any::<u32>(), any::<u32>()), 0..5).prop_map(|v| ControlResponse::Regions {
            regions: v
                .into_iter()
                .map(|(cache, region)| farcache_proto::control::HeldRegion { cache, region })
                .collect()
        }),
        name().prop_map(|token| ControlResponse::Token { token }),
        (any::<u32>(), name(), any::<u64>(), vec(any::<u32>(), 0..8)).prop_map(
            |(id, name, epoch, regions)| ControlResponse::Cache(
                farcache_proto::control::CacheInfo {
                    id,
                    name,
                    capacity: 1 << 20,
                    region_size: 4096,
                    epoch,
                    backups: regions.iter().map(|&r| vec![r.wrapping_add(1)]).collect(),
                    regions,
                    servers: vec![],
                    replicas: 2,
                    from_file: None,
                    slo: None,
                }
            )
        ),
    ]
}

// ---------------------------------------------------------------------------------
// Round trips

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn request_batches_round_trip(
        prefix in bytes(40),
        seq in any::<u64>(),
        ops in vec(op(), 0..40),
    ) {
        let out = encode_requests(&prefix, seq, &ops);
        prop_assert_eq!(&out[..prefix.len()], &prefix[..], "the encoder appends");
        let frame = &out[prefix.len()..];
        let h = FrameHeader::decode(frame, u32::MAX).unwrap().unwrap();
        prop_assert_eq!((h.kind, h.seq, h.flags), (FrameKind::Request, seq, 0));
        prop_assert_eq!(h.frame_len(), frame.len());
        let payload = &frame[HEADER_LEN..];
        prop_assert_eq!(RequestDecoder::validate(payload), Ok(ops.len() as u32));
        let mut d = RequestDecoder::new(payload).unwrap();
        prop_assert_eq!(d.declared() as usize, ops.len());
        let decoded: Vec<Op<'_>> = d.by_ref().map(Result::unwrap).collect();
        prop_assert_eq!(d.finish(), Ok(()));
        let want: Vec<Op<'_>> = ops.iter().map(OwnedOp::op).collect();
        prop_assert_eq!(&decoded, &want);
        // A name repeated from the batch's previous EXECUTE is not sent again.
        let mut last = None;
        let total: usize = want
            .iter()
            .map(|op| match op {
                Op::Execute { proc_name, .. } => {
                    let repeat = last == Some(*proc_name);
                    last = Some(*proc_name);
                    op.encoded_len() - if repeat { proc_name.len() } else { 0 }
                }
                _ => op.encoded_len(),
            })
            .sum();
        prop_assert_eq!(total + 4, payload.len());
        decode_all(frame);
    }

    /// The client drops sent frames from the front of its buffer while a batch is
    /// open; `rebase` keeps the open batch valid.
    #[test]
    fn request_encoder_survives_rebase(
        prefix in bytes(200),
        cut in any::<prop::sample::Index>(),
        seq in any::<u64>(),
        first in vec(op(), 0..10),
        second in vec(op(), 0..10),
    ) {
        let mut out = prefix.clone();
        let mut enc = RequestEncoder::begin(&mut out, seq);
        for op in &first {
            enc.push(&mut out, &op.op());
        }
        let n = cut.index(prefix.len() + 1);
        out.drain(..n);
        enc.rebase(n);
        for op in &second {
            enc.push(&mut out, &op.op());
        }
        enc.finish(&mut out);
        let frame = &out[prefix.len() - n..];
        let h = FrameHeader::decode(frame, u32::MAX).unwrap().unwrap();
        prop_assert_eq!(h.frame_len(), frame.len());
        prop_assert_eq!(h.seq, seq);
        let all: Vec<OwnedOp> = first.iter().chain(&second).cloned().collect();
        let decoded: Vec<Op<'_>> = RequestDecoder::new(&frame[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        prop_assert_eq!(decoded, all.iter().map(OwnedOp::op).collect::<Vec<_>>());
    }

    #[test]
    fn response_batches_round_trip(seq in any::<u64>(), replies in vec(reply(), 0..40)) {
        let out = encode_replies(seq, &replies);
        let h = FrameHeader::decode(&out, u32::MAX).unwrap().unwrap();
        prop_assert_eq!((h.kind, h.seq), (FrameKind::Response, seq));
        prop_assert_eq!(h.frame_len(), out.len());
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        prop_assert_eq!(d.declared() as usize, replies.len());
        let got: Vec<Reply<'_>> = d.by_ref().map(Result::unwrap).collect();
        prop_assert_eq!(d.finish(), Ok(()));
        prop_assert_eq!(d.position(), out.len() - HEADER_LEN);
        let want: Vec<Reply<'_>> = replies.iter().map(OwnedReply::expected).collect();
        prop_assert_eq!(got, want);
        decode_all(&out);
    }

    /// Outputs taken a slice of a DONE_RUN at a time are the replies `next` yields.
    #[test]
    fn done_outputs_taken_in_slices_match_one_at_a_time(
        replies in vec(reply(), 0..40),
        takes in vec(0u32..6, 1..20),
    ) {
        let out = encode_replies(1, &replies);
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        let mut got = Vec::new();
        let mut takes = takes.iter().cycle();
        while got.len() < replies.len() {
            let max = *takes.next().unwrap_or(&1);
            match d.take_done(max) {
                Some(o) => {
                    prop_assert!(o.count >= 1 && o.count <= max.max(1));
                    prop_assert_eq!(o.bytes.len(), o.len * o.count as usize);
                    for i in 0..o.count as usize {
                        let b = &o.bytes[i * o.len..(i + 1) * o.len];
                        got.push(Reply { op: OpCode::Execute, status: Status::Ok, body: ReplyBody::Done(b) });
                    }
                }
                None => got.push(d.next().unwrap().unwrap()),
            }
        }
        prop_assert_eq!(d.take_done(1), None);
        prop_assert!(d.next().is_none());
        prop_assert_eq!(d.finish(), Ok(()));
        let want: Vec<Reply<'_>> = replies.iter().map(OwnedReply::expected).collect();
        prop_assert_eq!(got, want);
    }

    /// Frames back to back in one buffer (as on a connection) split exactly.
    #[test]
    fn frame_streams_split_exactly(
        batches in vec((any::<u64>(), vec(op(), 0..6)), 1..8),
        replies in vec(reply(), 0..6),
    ) {
        let mut stream = Vec::new();
        for (seq, ops) in &batches {
            stream = encode_requests(&stream, *seq, ops);
        }
        stream.extend(encode_replies(7, &replies));
        prop_assert_eq!(decode_stream(&stream, u32::MAX), batches.len() + 1);
        let mut at = 0;
        for (seq, ops) in &batches {
            let h = FrameHeader::decode(&stream[at..], u32::MAX).unwrap().unwrap();
            prop_assert_eq!(h.seq, *seq);
            let payload = &stream[at + HEADER_LEN..at + h.frame_len()];
            prop_assert_eq!(RequestDecoder::validate(payload), Ok(ops.len() as u32));
            at += h.frame_len();
        }
        // Every strict prefix of the stream holds fewer whole frames.
        let cut = stream.len() - 1;
        prop_assert_eq!(decode_stream(&stream[..cut], u32::MAX), batches.len());
    }

    #[test]
    fn frame_headers_round_trip_and_reject(
        len in any::<u32>(),
        kind in 1u8..=9,
        flags in any::<u8>(),
        seq in any::<u64>(),
        max in any::<u32>(),
        reserved in 1u16..,
        bad_kind in prop_oneof![Just(0u8), 10u8..],
        short in 0usize..HEADER_LEN,
    ) {
        let kind = FrameKind::from_u8(kind).unwrap();
        let h = FrameHeader { len, kind, flags, seq };
        let b = h.encode();
        if len <= max {
            prop_assert_eq!(FrameHeader::decode(&b, max), Ok(Some(h)));
        } else {
            prop_assert_eq!(
                FrameHeader::decode(&b, max),
                Err(DecodeError::FrameTooLarge { len: len.into(), max: max.into() })
            );
        }
        prop_assert_eq!(h.frame_len(), HEADER_LEN + len as usize);
        // Trailing bytes after the header are not its business.
        let mut longer = b.to_vec();
        longer.extend_from_slice(&[0xAB; 5]);
        prop_assert_eq!(FrameHeader::decode(&longer, u32::MAX), Ok(Some(h)));
        prop_assert_eq!(FrameHeader::decode(&b[..short], 0), Ok(None));
        let mut r = b;
        r[6..8].copy_from_slice(&reserved.to_le_bytes());
        prop_assert_eq!(FrameHeader::decode(&r, u32::MAX), Err(DecodeError::ReservedBits));
        let mut k = b;
        k[4] = bad_kind;
        prop_assert_eq!(
            FrameHeader::decode(&k, u32::MAX),
            Err(DecodeError::UnknownFrameKind(bad_kind))
        );
    }

    #[test]
    fn handshake_round_trips(role in 1u8..=3, id in any::<u64>(), server in any::<u32>(), max in any::<u32>(), proof in any::<[u8; 32]>()) {
        let role = match role { 1 => Role::Client, 2 => Role::Server, _ => Role::Manager };
        let h = hello(role, id);
        prop_assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let a = HelloAck { version: farcache_proto::PROTOCOL_VERSION, server_id: server, max_frame: max, proof };
        prop_assert_eq!(HelloAck::decode(&a.encode()), Ok(a));
    }

    /// Names over the 255-byte limit are cut, at a char boundary, and the frame stays
    /// valid.
    #[test]
    fn long_procedure_names_are_cut_at_a_char_boundary(name in "\\PC{60,120}") {
        let op = OwnedOp::Execute { cache: 1, addr: 8, name: name.clone(), args: vec![7] };
        let f = encode_requests(&[], 1, std::slice::from_ref(&op));
        let payload = &f[HEADER_LEN..];
        prop_assert_eq!(RequestDecoder::validate(payload), Ok(1));
        let got = RequestDecoder::new(payload).unwrap().next().unwrap().unwrap();
        let Op::Execute { proc_name, args, .. } = got else {
            return Err(TestCaseError::fail(format!("decoded {got:?}")));
        };
        prop_assert!(name.starts_with(proc_name));
        prop_assert!(proc_name.len() <= 255);
        // The longest prefix that fits: the next char would not have.
        if proc_name.len() < name.len() {
            let next = name[proc_name.len()..].chars().next().unwrap();
            prop_assert!(proc_name.len() + next.len_utf8() > 255);
        }
        prop_assert_eq!(args, &[7][..]);
    }

    /// An EXECUTE with an empty name repeats the previous one's; with none before it,
    /// the batch is malformed.
    #[test]
    fn empty_procedure_names_refer_back(addr in any::<u64>(), args in bytes(20)) {
        let mut raw = Vec::new();
        let mut enc = RequestEncoder::begin(&mut raw, 1);
        enc.push(&mut raw, &Op::Execute { cache: 1, addr, proc_name: "sum", args: &args });
        enc.push(&mut raw, &Op::Read { cache: 1, addr, len: 8 });
        enc.push(&mut raw, &Op::Execute { cache: 1, addr, proc_name: "sum", args: &args });
        enc.finish(&mut raw);
        let payload = &raw[HEADER_LEN..];
        prop_assert_eq!(RequestDecoder::validate(payload), Ok(3));
        let ops: Vec<Op<'_>> = RequestDecoder::new(payload).unwrap().map(Result::unwrap).collect();
        let repeated = matches!(ops[2], Op::Execute { proc_name: "sum", .. });
        prop_assert!(repeated, "decoded {:?}", ops[2]);
        // The same frame without the first EXECUTE: its back-reference has no target.
        let mut lone = Vec::new();
        let mut enc = RequestEncoder::begin(&mut lone, 1);
        enc.push(&mut lone, &Op::Execute { cache: 1, addr, proc_name: "sum", args: &args });
        enc.finish(&mut lone);
        let name_len_at = HEADER_LEN + 4 + 13;
        lone[name_len_at] = 0;
        lone.drain(name_len_at + 1..name_len_at + 4);
        let body_len = (lone.len() - HEADER_LEN) as u32;
        let h = FrameHeader::new(FrameKind::Request, 1, body_len).encode();
        lone[..HEADER_LEN].copy_from_slice(&h);
        prop_assert_eq!(
            RequestDecoder::validate(&lone[HEADER_LEN..]),
            Err(DecodeError::NoProcToRepeat)
        );
    }

    /// Calls sent as EXECUTE_RUNs (between other ops, under one name or two) decode to
    /// the same EXECUTEs as the calls sent one by one, and count one op each.
    #[test]
    fn execute_runs_decode_like_single_calls(
        calls in prop::collection::vec((any::<u64>(), bytes(32)), 1..40),
        args_len in 0u32..=32,
        split in any::<prop::sample::Index>(),
        names in prop::sample::subsequence(vec!["sum", "chase", "aggregate"], 2),
    ) {
        let pad = |a: &[u8]| {
            let mut v = a[..a.len().min(args_len as usize)].to_vec();
            v.resize(args_len as usize, 0);
            v
        };
        let cut = split.index(calls.len() + 1);
        let (first, second) = calls.split_at(cut);
        let mut raw = Vec::new();
        let mut enc = RequestEncoder::begin(&mut raw, 1);
        let it_first = first.iter().map(|(a, d)| (*a, d.as_slice()));
        prop_assert!(enc.push_executes(&mut raw, 2, names[0], args_len, it_first));
        enc.push(&mut raw, &Op::Read { cache: 2, addr: 5, len: 8 });
        let it_second = second.iter().map(|(a, d)| (*a, d.as_slice()));
        prop_assert!(enc.push_executes(&mut raw, 2, names[1], args_len, it_second));
        // A plain EXECUTE after a run repeats the run's name.
        enc.push(&mut raw, &Op::Execute { cache: 2, addr: 9, proc_name: names[1], args: b"x" });
        enc.finish(&mut raw);
        let payload = &raw[HEADER_LEN..];
        let n = calls.len() as u32 + 2;
        prop_assert_eq!(RequestDecoder::validate(payload), Ok(n));
        let got: Vec<Op<'_>> = RequestDecoder::new(payload).unwrap().map(Result::unwrap).collect();
        let padded: Vec<Vec<u8>> = calls.iter().map(|(_, a)| pad(a)).collect();
        let mut want: Vec<Op<'_>> = Vec::new();
        for (i, (addr, _)) in calls.iter().enumerate() {
            if i == cut {
                want.push(Op::Read { cache: 2, addr: 5, len: 8 });
            }
            let proc_name = if i < cut { names[0] } else { names[1] };
            want.push(Op::Execute { cache: 2, addr: *addr, proc_name, args: &padded[i] });
        }
        if cut == calls.len() {
            want.push(Op::Read { cache: 2, addr: 5, len: 8 });
        }
        want.push(Op::Execute { cache: 2, addr: 9, proc_name: names[1], args: b"x" });
        prop_assert_eq!(got, want);
        // Smaller than the same calls one by one whenever a run has two calls or more.
        let mut single = Vec::new();
        let mut enc = RequestEncoder::begin(&mut single, 1);
        for op in RequestDecoder::new(payload).unwrap().map(Result::unwrap) {
            enc.push(&mut single, &op);
        }
        enc.finish(&mut single);
        if first.len() >= 2 && second.len() >= 2 {
            prop_assert!(raw.len() < single.len());
        }
    }

    /// A run's head that lies (no calls, more calls than the batch has ops left, calls
    /// past the payload's end, arguments of any length, a back-reference with nothing
    /// before it) makes the batch malformed; nothing panics.
    #[test]
    fn malformed_execute_runs_are_refused(
        calls in any::<u32>(),
        args_len in any::<u32>(),
        declared in any::<u32>(),
        body in bytes(64),
        named in any::<bool>(),
        consistent in any::<bool>(),
    ) {
        // Half the cases tell the truth but for the name, so the honest road runs too.
        let (calls, args_len, declared, body) = if consistent {
            let (c, a) = (calls % 4 + 1, args_len % 9);
            let need = c as usize * (8 + a as usize);
            (c, a, c, body.iter().copied().cycle().take(need).chain(std::iter::repeat(7)).take(need).collect())
        } else {
            (calls, args_len, declared, body)
        };
        let mut p = Vec::new();
        p.extend_from_slice(&declared.to_le_bytes());
        p.push(farcache_proto::request::EXECUTE_RUN);
        p.extend_from_slice(&1u32.to_le_bytes());
        if named {
            p.push(3);
            p.extend_from_slice(b"sum");
        } else {
            p.push(0);
        }
        p.extend_from_slice(&args_len.to_le_bytes());
        p.extend_from_slice(&calls.to_le_bytes());
        p.extend_from_slice(&body);
        let stride = 8 + u64::from(args_len);
        let honest = named
            && calls >= 1
            && calls == declared
            && u64::from(calls) * stride == body.len() as u64;
        let v = RequestDecoder::validate(&p);
        prop_assert_eq!(v.is_ok(), honest, "{:?}", v);
        if !named {
            prop_assert!(v.is_err());
        }
        // Iterating agrees with validating, and stops at the first error.
        let mut d = RequestDecoder::new(&p).unwrap();
        let mut n = 0u32;
        let mut failed = false;
        for op in d.by_ref() {
            match op {
                Ok(_) => n += 1,
                Err(_) => failed = true,
            }
        }
        prop_assert_eq!(!failed && d.finish().is_ok(), honest);
        if honest {
            prop_assert_eq!(n, calls);
        }
    }

    /// A run of 0 calls and a run claiming more ops than the batch declares are named.
    #[test]
    fn run_counts_must_fit_the_batch(extra in 1u32..1000) {
        let mut raw = Vec::new();
        let mut enc = RequestEncoder::begin(&mut raw, 1);
        let calls = [(8u64, &b"abcdefghi"[..]); 3];
        prop_assert!(enc.push_executes(&mut raw, 1, "aggregate", 9, calls.into_iter()));
        enc.finish(&mut raw);
        let payload = &mut raw[HEADER_LEN..];
        prop_assert_eq!(RequestDecoder::validate(payload), Ok(3));
        // Declared below the run's calls.
        payload[..4].copy_from_slice(&2u32.to_le_bytes());
        let short = RequestDecoder::validate(payload);
        prop_assert!(matches!(short, Err(DecodeError::BadRun(_))), "{:?}", short);
        // Declared above: the batch ends early.
        payload[..4].copy_from_slice(&(3 + extra).to_le_bytes());
        let long = RequestDecoder::validate(payload);
        prop_assert!(long.is_err(), "{:?}", long);
        // A run of no calls.
        payload[..4].copy_from_slice(&3u32.to_le_bytes());
        let calls_at = 4 + 1 + 4 + 1 + "aggregate".len() + 4;
        payload[calls_at..calls_at + 4].copy_from_slice(&0u32.to_le_bytes());
        let empty = RequestDecoder::validate(payload);
        prop_assert!(matches!(empty, Err(DecodeError::BadRun(_))), "{:?}", empty);
    }

    /// The word-wise name compare agrees with slice equality at every length, including
    /// names that differ in one byte only.
    #[test]
    fn same_name_is_byte_equality(a in bytes(40), flip in any::<prop::sample::Index>(), xor in 1u8..) {
        prop_assert!(farcache_proto::op::same_name(&a, &a.clone()));
        if !a.is_empty() {
            let mut b = a.clone();
            b[flip.index(a.len())] ^= xor;
            prop_assert!(!farcache_proto::op::same_name(&a, &b));
            prop_assert!(!farcache_proto::op::same_name(&a, &a[..a.len() - 1]));
        }
    }

    #[test]
    fn copy_short_copies_exactly(src in bytes(32), extra in 0usize..20) {
        // Writes exactly the first `src.len()` bytes, whatever room follows.
        let mut dst = vec![0xAA; src.len() + extra];
        farcache_proto::op::copy_short(&mut dst, &src);
        prop_assert_eq!(&dst[..src.len()], &src[..]);
        prop_assert!(dst[src.len()..].iter().all(|&b| b == 0xAA));
    }

    #[test]
    fn control_messages_round_trip(req in control_request(), resp in control_response()) {
        prop_assert_eq!(ControlRequest::decode(&req.encode()), Ok(req));
        prop_assert_eq!(ControlResponse::decode(&resp.encode()), Ok(resp));
    }
}

// ---------------------------------------------------------------------------------
// Hostile bytes: decoders return Ok or Err and never panic

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in bytes(2048)) {
        decode_all(&data);
    }

    /// Random payloads behind a valid header of every kind, so the payload decoders see
    /// them through the stream path too.
    #[test]
    fn arbitrary_payloads_never_panic(kind in 1u8..=7, seq in any::<u64>(), payload in bytes(512)) {
        let kind = FrameKind::from_u8(kind).unwrap();
        let f = frame(kind, seq, &payload);
        prop_assert_eq!(decode_stream(&f, u32::MAX), 1);
        decode_all(&f);
    }

    /// Payloads that start like a real batch (a small count, then plausible op codes)
    /// reach deep into the op decoders.
    #[test]
    fn plausible_batches_never_panic(
        count in 0u32..8,
        body in vec(prop_oneof![
            3 => proptest::sample::select(vec![1u8, 2, 3, 4, 5, 0x10]),
            1 => any::<u8>(),
            2 => Just(0u8),
        ], 0..300),
    ) {
        let mut payload = count.to_le_bytes().to_vec();
        payload.extend_from_slice(&body);
        decode_request(&payload);
        decode_response(&payload);
        decode_all(&payload);
    }

    /// Every strict prefix of a valid batch is rejected as a whole; nothing panics.
    #[test]
    fn truncated_frames_are_rejected(f in valid_frame(), cut in any::<prop::sample::Index>()) {
        let h = FrameHeader::decode(&f, u32::MAX).unwrap().unwrap();
        let payload = &f[HEADER_LEN..];
        let n = cut.index(payload.len().max(1));
        let short = &payload[..n.min(payload.len())];
        if n < payload.len() {
            match h.kind {
                FrameKind::Request => prop_assert!(RequestDecoder::validate(short).is_err()),
                FrameKind::Response => {
                    let ok = ResponseDecoder::new(short).is_ok_and(|mut d| {
                        d.by_ref().all(|r| r.is_ok()) && d.finish().is_ok()
                    });
                    prop_assert!(!ok, "truncated response accepted");
                }
                FrameKind::Hello => prop_assert!(Hello::decode(short).is_err()),
                _ => {}
            }
        }
        // A frame cut anywhere (header included) is an incomplete frame, not a panic.
        let m = cut.index(f.len());
        prop_assert_eq!(decode_stream(&f[..m], u32::MAX), 0);
        decode_all(&f[..m]);
        decode_all(short);
    }

    /// Random edits of valid frames: flips, overwrites, insertions and deletions.
    #[test]
    fn mutated_frames_never_panic(
        f in valid_frame(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
    ) {
        let mut m = f;
        for (at, byte, how) in edits {
            if m.is_empty() {
                m.push(byte);
                continue;
            }
            let i = at.index(m.len());
            match how {
                0 => m[i] ^= byte | 1,
                1 => m[i] = byte,
                2 => m.insert(i, byte),
                _ => {
                    m.remove(i);
                }
            }
        }
        decode_all(&m);
        if m.len() > HEADER_LEN {
            decode_all(&m[HEADER_LEN..]);
        }
    }
}

#[test]
fn decode_all_checks_canonical_reencoding() {
    // A valid batch passes; the checks inside `decode_all` are live (not vacuous).
    let ops = [
        OwnedOp::Write {
            cache: 1,
            addr: 2,
            data: b"abc".to_vec(),
        },
        OwnedOp::Execute {
            cache: 1,
            addr: 0,
            name: "sum".into(),
            args: vec![1, 2],
        },
        OwnedOp::Ping,
    ];
    let f = encode_requests(&[], 3, &ops);
    assert_eq!(decode_stream(&f, u32::MAX), 1);
    decode_request(&f[HEADER_LEN..]);
    let r = encode_replies(
        4,
        &[
            OwnedReply::Data {
                op: OpCode::Read,
                data: b"xyz".to_vec(),
                in_place: false,
            },
            OwnedReply::WrongServer {
                op: OpCode::Write,
                owner: Some("h:1".into()),
            },
        ],
    );
    assert_eq!(decode_stream(&r, u32::MAX), 1);
    decode_response(&r[HEADER_LEN..]);
}
