use super::*;
use crate::DecodeError;
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::op::{Op, Tag};

#[test]
fn a_tag_travels_with_the_op_after_it_and_is_not_counted() {
    let tag = Tag {
        session: 0xABCD,
        seq: 7,
        done_below: 3,
        result: 99,
    };
    let add = Op::FetchAdd {
        cache: 1,
        addr: 64,
        delta: 2,
    };
    let mut buf = Vec::new();
    let mut e = RequestEncoder::begin(&mut buf, 1);
    e.push(&mut buf, &Op::Tag(tag));
    e.push(&mut buf, &add);
    e.push(&mut buf, &Op::Ping);
    assert_eq!(e.count(), 2, "the tag is no op of the batch");
    e.finish(&mut buf);
    let payload = &buf[HEADER_LEN..];
    assert_eq!(payload.len(), 4 + Tag::LEN + add.encoded_len() + 1);
    assert_eq!(RequestDecoder::validate(payload), Ok(2));
    let ops: Vec<_> = RequestDecoder::new(payload)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(ops, vec![Op::Tag(tag), add, Op::Ping]);

    // Tagged writes in one go encode as a tag and a write each.
    let tag0 = Tag { seq: 20, ..tag };
    let (mut one, mut each) = (Vec::new(), Vec::new());
    let mut e1 = RequestEncoder::begin(&mut one, 4);
    e1.push_tagged_writes(
        &mut one,
        3,
        2,
        tag0,
        [(8u64, &b"ab"[..]), (16, b"c")].into_iter(),
    );
    e1.finish(&mut one);
    let mut e2 = RequestEncoder::begin(&mut each, 4);
    for (k, (addr, data)) in [(8u64, &b"ab"[..]), (16, b"c\0")].into_iter().enumerate() {
        e2.push(
            &mut each,
            &Op::Tag(Tag {
                seq: 20 + k as u64,
                ..tag
            }),
        );
        e2.push(
            &mut each,
            &Op::Write {
                cache: 3,
                addr,
                data,
            },
        );
    }
    e2.finish(&mut each);
    assert_eq!(one, each);

    // A frame cannot end in a tag: it names no op.
    let mut buf = Vec::new();
    let mut e = RequestEncoder::begin(&mut buf, 2);
    e.push(&mut buf, &Op::Ping);
    e.push(&mut buf, &Op::Tag(tag));
    e.finish(&mut buf);
    assert!(matches!(
        RequestDecoder::validate(&buf[HEADER_LEN..]),
        Err(DecodeError::TrailingBytes(n)) if n == Tag::LEN
    ));
    // Nor is a cut tag anything but malformed.
    let mut buf = Vec::new();
    let mut e = RequestEncoder::begin(&mut buf, 3);
    e.push(&mut buf, &Op::Tag(tag));
    e.push(&mut buf, &Op::Ping);
    e.finish(&mut buf);
    let cut = &buf[HEADER_LEN..buf.len() - 10];
    assert!(RequestDecoder::validate(cut).is_err());
}

#[test]
fn write_filled_in_place_encodes_like_a_write() {
    let mut a = Vec::new();
    let mut e = RequestEncoder::begin(&mut a, 3);
    e.push(
        &mut a,
        &Op::Write {
            cache: 4,
            addr: 5,
            data: b"hello",
        },
    );
    e.finish(&mut a);
    let mut b = Vec::new();
    let mut e = RequestEncoder::begin(&mut b, 3);
    e.push_write_with(&mut b, 4, 5, 5, |d| d.copy_from_slice(b"hello"));
    e.finish(&mut b);
    assert_eq!(a, b);
}

#[test]
fn batched_reads_and_writes_encode_like_single_ones() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut one = RequestEncoder::begin(&mut a, 8);
    let mut many = RequestEncoder::begin(&mut b, 8);
    let addrs = [0u64, 7, u64::MAX - 3];
    for &addr in &addrs {
        one.push(
            &mut a,
            &Op::Read {
                cache: 2,
                addr,
                len: 4,
            },
        );
    }
    many.push_reads(&mut b, 2, 4, addrs.iter().copied());
    let writes: [(u64, &[u8]); 2] = [(9, b"abcd"), (1 << 40, b"wxyz")];
    for &(addr, data) in &writes {
        one.push(
            &mut a,
            &Op::Write {
                cache: 2,
                addr,
                data,
            },
        );
    }
    many.push_writes(&mut b, 2, 4, writes.iter().copied());
    assert_eq!(one.count(), 5);
    assert_eq!(many.count(), 5);
    one.finish(&mut a);
    many.finish(&mut b);
    assert_eq!(a, b);
}

#[test]
fn roundtrip_all_ops() {
    let ops = [
        Op::Read {
            cache: 1,
            addr: 2,
            len: 3,
        },
        Op::Write {
            cache: 4,
            addr: 5,
            data: b"hello",
        },
        Op::Cas {
            cache: 6,
            addr: 8,
            expected: 9,
            new: 10,
        },
        Op::FetchAdd {
            cache: 7,
            addr: 16,
            delta: u64::MAX,
        },
        Op::Execute {
            cache: 1,
            addr: 0,
            proc_name: "sum",
            args: &[1, 2],
        },
        Op::Ping,
    ];
    let mut out = vec![0xAA]; // encoder must append, not overwrite
    let mut enc = RequestEncoder::begin(&mut out, 77);
    for op in &ops {
        enc.push(&mut out, op);
    }
    enc.finish(&mut out);
    let hdr = FrameHeader::decode(&out[1..], u32::MAX).unwrap().unwrap();
    assert_eq!(hdr.kind, FrameKind::Request);
    assert_eq!(hdr.seq, 77);
    let payload = &out[1 + HEADER_LEN..];
    assert_eq!(hdr.len as usize, payload.len());
    assert_eq!(RequestDecoder::validate(payload).unwrap(), ops.len() as u32);
    let decoded: Vec<_> = RequestDecoder::new(payload)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(decoded, ops);
    let total: usize = ops.iter().map(Op::encoded_len).sum();
    assert_eq!(total + 4, payload.len());
}

#[test]
fn truncated_and_trailing_are_errors() {
    let mut out = Vec::new();
    let mut enc = RequestEncoder::begin(&mut out, 1);
    enc.push(
        &mut out,
        &Op::Read {
            cache: 1,
            addr: 2,
            len: 3,
        },
    );
    enc.finish(&mut out);
    let payload = &out[HEADER_LEN..];
    assert!(RequestDecoder::validate(&payload[..payload.len() - 1]).is_err());
    let mut extra = payload.to_vec();
    extra.push(0);
    assert_eq!(
        RequestDecoder::validate(&extra),
        Err(DecodeError::TrailingBytes(1))
    );
    let mut bad = payload.to_vec();
    bad[4] = 0xEE;
    assert_eq!(
        RequestDecoder::validate(&bad),
        Err(DecodeError::UnknownOp(0xEE))
    );
}

#[test]
fn an_answer_rides_between_a_tag_and_its_op_uncounted() {
    let tag = Tag {
        session: 5,
        seq: 9,
        done_below: 1,
        result: 0,
    };
    let answer = Op::Answer {
        addr: 4096,
        body: b"reply bytes",
    };
    let write = Op::Write {
        cache: 2,
        addr: 8192,
        data: b"x",
    };
    let mut buf = Vec::new();
    let mut e = RequestEncoder::begin(&mut buf, 1);
    for op in [Op::Tag(tag), answer, write] {
        e.push(&mut buf, &op);
    }
    assert_eq!(e.count(), 1, "tag and answer belong to the write");
    e.finish(&mut buf);
    let payload = &buf[HEADER_LEN..];
    assert_eq!(
        payload.len(),
        4 + Tag::LEN + answer.encoded_len() + write.encoded_len()
    );
    assert_eq!(RequestDecoder::validate(payload), Ok(1));
    let ops: Vec<_> = RequestDecoder::new(payload)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(ops, vec![Op::Tag(tag), answer, write]);
    // A body cut short is malformed, not read past the frame.
    let cut = &payload[..4 + Tag::LEN + Op::ANSWER_HEAD + 3];
    assert!(RequestDecoder::validate(cut).is_err());
}
