//! Responses waiting for invocations that continue on other servers.
//!
//! A connection's replies leave in request order. When a batch has an EXECUTE whose
//! answer comes later, its response frame is kept with a hole where that reply goes,
//! and every later response on the connection queues behind it.

use std::collections::VecDeque;

use farcache_proto::frame::{FrameHeader, FrameKind};
use farcache_proto::response::late_data_reply;
use farcache_proto::{HEADER_LEN, OpCode};

/// Where an invocation's answer goes on this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoleRef {
    /// Slab key of the connection, and its serial (keys are reused).
    pub conn: usize,
    pub serial: u64,
    pub resp: u64,
    pub hole: u32,
}

struct Response {
    id: u64,
    frame: Vec<u8>,
    /// (offset in `frame`, the reply once known), in offset order.
    holes: Vec<(usize, Option<Vec<u8>>)>,
    missing: usize,
}

#[derive(Default)]
pub struct PendingResponses {
    queue: VecDeque<Response>,
    next_id: u64,
    /// Bytes of the queued frames and filled replies (the connection stops reading
    /// past a cap).
    bytes: usize,
}

impl PendingResponses {
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Queues a frame with replies missing at `holes` (offsets into `frame`,
    /// ascending; none for a complete frame that must wait its turn); returns its id.
    pub fn push(&mut self, frame: Vec<u8>, holes: &[usize]) -> u64 {
        self.push_held(frame, holes, 0)
    }

    /// Like [`push`](Self::push), and the frame also waits for `held` calls of
    /// [`release`](Self::release) (backups acknowledging its writes).
    pub fn push_held(&mut self, frame: Vec<u8>, holes: &[usize], held: usize) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += frame.len();
        self.queue.push_back(Response {
            id,
            frame,
            holes: holes.iter().map(|&o| (o, None)).collect(),
            missing: holes.len() + held,
        });
        id
    }

    /// One of the acknowledgements response `resp` was held for arrived.
    pub fn release(&mut self, resp: u64) {
        if let Some(r) = self.queue.iter_mut().find(|r| r.id == resp) {
            r.missing = r.missing.saturating_sub(1);
        }
    }

    /// Fills a hole with an EXECUTE reply carrying `body`, or a TooLarge status when
    /// the frame would pass `max_frame`. Unknown or filled holes are ignored.
    pub fn fill(&mut self, resp: u64, hole: u32, body: &[u8], max_frame: usize) {
        let Some(r) = self.queue.iter_mut().find(|r| r.id == resp) else {
            return;
        };
        let Some((_, slot @ None)) = r.holes.get_mut(hole as usize) else {
            return;
        };
        let room = max_frame.saturating_sub(r.frame.len());
        let reply = late_data_reply(OpCode::Execute, body, room);
        self.bytes += reply.len();
        *slot = Some(reply);
        r.missing = r.missing.saturating_sub(1);
    }

    /// Moves every complete response at the front into `out`, in order.
    pub fn drain_ready(&mut self, out: &mut Vec<u8>) {
        while self
            .queue
            .front()
            .is_some_and(|r| r.missing == 0 && r.holes.iter().all(|h| h.1.is_some()))
        {
            let Some(r) = self.queue.pop_front() else {
                return;
            };
            self.bytes = self.bytes.saturating_sub(
                r.frame.len()
                    + r.holes
                        .iter()
                        .map(|h| h.1.as_ref().map_or(0, Vec::len))
                        .sum::<usize>(),
            );
            if r.holes.is_empty() {
                // A complete frame (a control reply) that only waited its turn.
                out.extend_from_slice(&r.frame);
                continue;
            }
            let start = out.len();
            let mut at = 0;
            for (off, reply) in &r.holes {
                out.extend_from_slice(&r.frame[at..*off]);
                out.extend_from_slice(reply.as_deref().unwrap_or_default());
                at = *off;
            }
            out.extend_from_slice(&r.frame[at..]);
            let len = (out.len() - start - HEADER_LEN) as u32;
            let seq = u64::from_le_bytes(r.frame[8..16].try_into().unwrap_or_default());
            let hdr = FrameHeader::new(FrameKind::Response, seq, len).encode();
            out[start..start + HEADER_LEN].copy_from_slice(&hdr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farcache_proto::response::ReplyBody;
    use farcache_proto::{ResponseDecoder, ResponseEncoder, Status};

    #[test]
    fn held_responses_wait_for_every_release_and_keep_order() {
        let frame = |seq| {
            let mut f = Vec::new();
            let mut e = ResponseEncoder::begin(&mut f, seq);
            e.status(&mut f, OpCode::Ping, Status::Ok);
            e.finish(&mut f);
            f
        };
        let mut p = PendingResponses::default();
        // Held for two backups, then a plain response queued behind it.
        let a = p.push_held(frame(1), &[], 2);
        p.push(frame(2), &[]);
        let mut out = Vec::new();
        p.drain_ready(&mut out);
        assert!(out.is_empty());
        p.release(a);
        p.drain_ready(&mut out);
        assert!(out.is_empty(), "one backup has not acknowledged yet");
        p.release(a);
        p.release(a); // a stray extra release changes nothing
        p.drain_ready(&mut out);
        assert!(p.is_empty());
        let h = FrameHeader::decode(&out, u32::MAX).unwrap().unwrap();
        assert_eq!(h.seq, 1);
        let h2 = FrameHeader::decode(&out[h.frame_len()..], u32::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(h2.seq, 2);
    }

    #[test]
    fn holes_are_filled_in_place_and_order_is_kept() {
        // Response 1: [PING ok, <hole>, PING ok]; response 2: [PING ok], no holes.
        let mut f1 = Vec::new();
        let mut e = ResponseEncoder::begin(&mut f1, 7);
        e.status(&mut f1, OpCode::Ping, Status::Ok);
        let hole = f1.len();
        e.placeholder();
        e.status(&mut f1, OpCode::Ping, Status::Ok);
        e.finish(&mut f1);
        let mut f2 = Vec::new();
        let mut e = ResponseEncoder::begin(&mut f2, 8);
        e.status(&mut f2, OpCode::Ping, Status::Ok);
        e.finish(&mut f2);

        let mut p = PendingResponses::default();
        let a = p.push(f1, &[hole]);
        p.push(f2, &[]);
        let mut out = Vec::new();
        p.drain_ready(&mut out);
        assert!(out.is_empty(), "the first response is incomplete");
        p.fill(a, 0, b"xyz", 1 << 20);
        p.fill(a, 0, b"again", 1 << 20);
        assert!(p.bytes() > 0);
        p.drain_ready(&mut out);
        assert!(p.is_empty());
        assert_eq!(p.bytes(), 0);
        let h = FrameHeader::decode(&out, u32::MAX).unwrap().unwrap();
        assert_eq!(h.seq, 7);
        let replies: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..h.frame_len()])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(replies.len(), 3);
        assert_eq!(replies[1].body, ReplyBody::Data(b"xyz"));
        let h2 = FrameHeader::decode(&out[h.frame_len()..], u32::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(h2.seq, 8);
    }
}
