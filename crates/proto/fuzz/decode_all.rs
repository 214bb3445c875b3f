//! The decode entry point shared by the `decode_frame` fuzz target and the
//! `codec_props` property tests (which include this file with `#[path]`), so the code
//! the fuzzer runs is built and exercised by the normal test suite.
//!
//! It feeds untrusted bytes to every decoder of the wire protocol: the frame header,
//! request and response batches, the handshake and the control-plane JSON. Decoders
//! must return `Ok` or `Err` and never panic. Whatever decodes successfully must also
//! be consistent: batches re-encode to exactly the same bytes (the encoding is
//! canonical), iteration agrees with `validate`, and control messages survive a JSON
//! round trip.

use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::frame::encode_frame;
use farcache_proto::reply::{self, ExecReply};
use farcache_proto::response::ReplyBody;
use farcache_proto::{
    Challenge, FrameHeader, FrameKind, HEADER_LEN, Hello, HelloAck, MAX_FRAME_DEFAULT, Op, OpCode,
    RequestDecoder, RequestEncoder, ResponseDecoder, ResponseEncoder, Status,
};

/// Decodes `data` in every way a peer might; panics only on a decoder bug.
pub fn decode_all(data: &[u8]) {
    // As a connection's byte stream: frames one after another.
    decode_stream(data, MAX_FRAME_DEFAULT);
    decode_stream(data, 64);
    // As each kind of payload directly, so inputs need not start with a valid header.
    decode_request(data);
    decode_response(data);
    decode_hello(data);
    decode_control(data);
    decode_peer(data);
    decode_exec_reply(data);
    if let Some(&b) = data.first() {
        let _ = FrameKind::from_u8(b);
        let _ = OpCode::from_u8(b);
        let _ = Status::from_u8(b);
    }
}

/// Splits `data` into frames the way a server does, decoding each payload by kind.
/// Returns how many complete frames were decoded.
pub fn decode_stream(mut data: &[u8], max_len: u32) -> usize {
    let mut frames = 0;
    loop {
        let h = match FrameHeader::decode(data, max_len) {
            Ok(Some(h)) => h,
            Ok(None) | Err(_) => return frames,
        };
        assert!(h.len <= max_len, "header over the limit accepted");
        assert_eq!(
            h.encode()[..],
            data[..HEADER_LEN],
            "header re-encodes exactly"
        );
        let n = h.frame_len();
        if data.len() < n {
            return frames;
        }
        let payload = &data[HEADER_LEN..n];
        match h.kind {
            FrameKind::Request => decode_request(payload),
            FrameKind::Response => decode_response(payload),
            FrameKind::Hello | FrameKind::HelloAck | FrameKind::Challenge => decode_hello(payload),
            FrameKind::Control | FrameKind::ControlReply => decode_control(payload),
            FrameKind::Error => {
                let _ = String::from_utf8_lossy(payload);
            }
            FrameKind::Peer => decode_peer(payload),
        }
        frames += 1;
        data = &data[n..];
    }
}

/// A peer payload: `validate` agrees with iteration, and each valid message re-encodes
/// to the same bytes.
pub fn decode_peer(payload: &[u8]) {
    use farcache_proto::peer::{PeerDecoder, PeerMsg};
    let valid = PeerDecoder::validate(payload);
    let Ok(d) = PeerDecoder::new(payload) else {
        assert!(valid.is_err(), "validate accepted a payload new() rejects");
        return;
    };
    let mut all_ok = true;
    for m in d {
        match m {
            Ok(m) => assert_eq!(PeerMsg::decode(&m.to_vec()), Ok(m), "re-encodes"),
            Err(_) => all_ok = false,
        }
    }
    if !all_ok {
        assert!(valid.is_err(), "validate accepted a bad message");
    }
}

/// A request payload: `validate` agrees with iteration, and a valid batch re-encodes
/// to the same ops.
pub fn decode_request(payload: &[u8]) {
    let valid = RequestDecoder::validate(payload);
    let Ok(mut d) = RequestDecoder::new(payload) else {
        assert!(valid.is_err(), "validate accepted a payload new() rejects");
        return;
    };
    let declared = d.declared();
    let mut ops: Vec<Op<'_>> = Vec::new();
    let mut failed = false;
    for op in d.by_ref() {
        match op {
            Ok(op) => ops.push(op),
            Err(_) => failed = true,
        }
    }
    let finished = d.finish();
    assert_eq!(
        valid.is_ok(),
        !failed && finished.is_ok(),
        "validate disagrees with iteration"
    );
    if let Ok(n) = valid {
        assert_eq!(n, declared);
        assert_eq!(ops.len(), n as usize);
        // Repeated procedure names may travel as back-references and calls of one
        // procedure as an EXECUTE_RUN, so `encoded_len` is an upper bound but for a
        // run of one call (4 bytes over its EXECUTE); re-encoding op by op gives the
        // same ops.
        let total: usize = ops.iter().map(Op::encoded_len).sum();
        assert!(
            total + 4 + 4 * ops.len() >= payload.len(),
            "encoded_len below the bytes"
        );
        let mut out = Vec::new();
        let mut enc = RequestEncoder::begin(&mut out, 0);
        for op in &ops {
            enc.push(&mut out, op);
        }
        assert_eq!(enc.count(), n);
        enc.finish(&mut out);
        let again = &out[HEADER_LEN..];
        let redecoded: Vec<Op<'_>> = RequestDecoder::new(again)
            .expect("re-encoded request")
            .map(|op| op.expect("re-encoded op"))
            .collect();
        assert_eq!(redecoded, ops, "request does not re-encode to the same ops");
    }
}

/// A response payload: whole-batch validity agrees with iteration, and a valid batch
/// re-encodes to the same replies (to the same bytes unless DONE_RUNs were merged: the
/// encoder joins adjacent outputs of one length into one run).
pub fn decode_response(payload: &[u8]) {
    let Ok(mut d) = ResponseDecoder::new(payload) else {
        return;
    };
    let mut out = Vec::new();
    let mut enc = ResponseEncoder::begin(&mut out, 0);
    let mut failed = false;
    let mut replies = Vec::new();
    for r in d.by_ref() {
        let Ok(r) = r else {
            failed = true;
            continue;
        };
        match (r.status, r.body) {
            (Status::Ok, ReplyBody::Data(b)) => enc.data(&mut out, r.op, b),
            (Status::Ok, ReplyBody::Value(v)) => enc.value(&mut out, r.op, v),
            (Status::Ok, ReplyBody::Done(b)) => enc.done(&mut out, b),
            (Status::WrongServer, ReplyBody::Owner(o)) => enc.wrong_server(&mut out, r.op, o),
            (s, ReplyBody::None) => enc.status(&mut out, r.op, s),
            (s, body) => panic!("status {s:?} decoded with body {body:?}"),
        }
        replies.push(r);
    }
    if !failed && d.finish().is_ok() {
        enc.finish(&mut out);
        let again: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .expect("re-encoded response")
            .map(|r| r.expect("re-encoded reply"))
            .collect();
        assert_eq!(
            again, replies,
            "response does not re-encode to the same replies"
        );
        if !payload.contains(&farcache_proto::response::DONE_RUN) {
            assert_eq!(
                &out[HEADER_LEN..],
                payload,
                "response does not re-encode exactly"
            );
        }
    }
}

/// `Hello` / `HelloAck` payloads: what decodes re-encodes (reserved bytes aside).
pub fn decode_hello(payload: &[u8]) {
    // The handshake encodings are canonical: whatever decodes re-encodes exactly.
    if let Ok(h) = Hello::decode(payload) {
        assert_eq!(h.encode(), payload, "hello re-encodes");
    }
    if let Ok(c) = Challenge::decode(payload) {
        assert_eq!(c.encode()[..4], payload[..4], "challenge re-encodes");
        assert_eq!(c.encode()[8..], payload[8..], "challenge re-encodes");
    }
    if let Ok(a) = HelloAck::decode(payload) {
        let e = a.encode();
        assert_eq!(e[..2], payload[..2], "hello ack re-encodes");
        assert_eq!(e[4..], payload[4..], "hello ack re-encodes");
    }
}

/// An EXECUTE reply body: what decodes re-encodes to the same bytes.
pub fn decode_exec_reply(body: &[u8]) {
    let mut again = Vec::new();
    match reply::decode(body) {
        Ok(ExecReply::Done(r)) => reply::push_done(&mut again, r),
        Ok(ExecReply::Continue { addr, state }) => reply::push_continue(&mut again, addr, state),
        Ok(ExecReply::Failed(m)) => reply::push_failed(&mut again, m),
        Err(_) => return,
    }
    assert_eq!(again, body, "execute reply re-encodes");
}

/// Control payloads: what parses encodes and parses again to the same message.
pub fn decode_control(payload: &[u8]) {
    if let Ok(r) = ControlRequest::decode(payload) {
        let again = ControlRequest::decode(&r.encode());
        assert!(
            again.as_ref().is_ok_and(|a| *a == r),
            "control request does not survive a round trip: {r:?}"
        );
    }
    if let Ok(r) = ControlResponse::decode(payload) {
        let again = ControlResponse::decode(&r.encode());
        assert!(
            again.is_ok(),
            "control response does not survive a round trip: {r:?}"
        );
    }
}

/// Wraps `payload` in a frame of `kind` (for building structured inputs).
#[allow(dead_code)]
pub fn frame(kind: FrameKind, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&mut out, kind, seq, payload);
    out
}
