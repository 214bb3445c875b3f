//! The accepting side of farcache's handshake, shared by the server and the manager:
//! the challenge goes out first; nothing but a small Hello answering it is read
//! before the peer has proven its role; a verified Hello is answered with a proof
//! that this side holds the key too (`farcache_proto::auth`).

use farcache_proto::auth::Verified;
use farcache_proto::frame::encode_frame;
use farcache_proto::{Authority, Challenge, DecodeError, FrameHeader, FrameKind, Hello};

/// Largest Hello payload accepted (a real one is under 400 bytes).
pub const MAX_HELLO: u32 = 512;

/// Why a Hello was refused.
#[derive(Debug)]
pub enum Refusal {
    /// Not a Hello at all.
    Malformed(DecodeError),
    /// A Hello whose proof or claim did not hold (counted as an authentication
    /// failure).
    Unproven(DecodeError),
}

impl From<Refusal> for DecodeError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Malformed(e) | Refusal::Unproven(e) => e,
        }
    }
}

/// A connection that was sent a challenge and waits for the Hello answering it.
#[derive(Debug, Clone, Copy)]
pub struct Greeting {
    challenge: Challenge,
}

impl Greeting {
    /// A fresh challenge, its frame appended to `out` (the first bytes a peer gets).
    pub fn start(authority: &Authority, out: &mut Vec<u8>) -> Self {
        let challenge = authority.challenge();
        encode_frame(out, FrameKind::Challenge, 0, &challenge.encode());
        Self { challenge }
    }

    /// Refuses any frame before the handshake but a Hello of at most [`MAX_HELLO`]
    /// bytes (checked on the header, before the payload is buffered).
    pub fn admit(hdr: &FrameHeader) -> Result<(), DecodeError> {
        if hdr.kind != FrameKind::Hello || hdr.len > MAX_HELLO {
            return Err(DecodeError::BadHello(format!(
                "{:?} frame of {} bytes before the handshake (a Hello of at most \
                 {MAX_HELLO} bytes answering the challenge comes first)",
                hdr.kind, hdr.len
            )));
        }
        Ok(())
    }

    /// Checks a Hello payload against this challenge.
    pub fn verify(&self, authority: &Authority, payload: &[u8]) -> Result<Verified, Refusal> {
        let hello = Hello::decode(payload).map_err(Refusal::Malformed)?;
        authority
            .verify(&self.challenge, &hello)
            .map_err(|e| Refusal::Unproven(DecodeError::BadHello(e.to_string())))
    }

    /// Appends the `HelloAck` answering a verified Hello (frame `seq`) to `out`.
    pub fn answer(
        &self,
        authority: &Authority,
        peer: &Verified,
        server_id: u32,
        max_frame: u32,
        seq: u64,
        out: &mut Vec<u8>,
    ) {
        let ack = authority.ack(peer, &self.challenge, server_id, max_frame);
        encode_frame(out, FrameKind::HelloAck, seq, &ack.encode());
    }
}

#[cfg(test)]
mod tests {
    use farcache_proto::frame::HEADER_LEN;
    use farcache_proto::{ClusterSecret, Credential, HelloAck, Role};

    use super::*;

    #[test]
    fn a_hello_answering_the_challenge_is_verified_and_answered() {
        let secret = ClusterSecret::generate();
        let authority = Authority::new(secret.clone());
        let mut out = Vec::new();
        let g = Greeting::start(&authority, &mut out);
        let hdr = FrameHeader::decode(&out, 1 << 20)
            .expect("header")
            .expect("whole");
        assert_eq!(hdr.kind, FrameKind::Challenge);
        let challenge = Challenge::decode(&out[HEADER_LEN..]).expect("challenge");
        let cred = Credential::Cluster(secret);
        let hello = cred.hello(Role::Client, 0, "c", &challenge);
        let payload = hello.encode();
        let hello_hdr = FrameHeader::new(FrameKind::Hello, 1, payload.len() as u32);
        Greeting::admit(&hello_hdr).expect("a small Hello is admitted");
        let v = g.verify(&authority, &payload).expect("verified");
        assert_eq!(v.role, Role::Client);
        let mut ack = Vec::new();
        g.answer(&authority, &v, 7, 1 << 20, 1, &mut ack);
        let h = FrameHeader::decode(&ack, 1 << 20)
            .expect("h")
            .expect("whole");
        assert_eq!(h.kind, FrameKind::HelloAck);
        let a = HelloAck::decode(&ack[HEADER_LEN..]).expect("ack");
        assert_eq!(a.server_id, 7);

        // Anything else first, or a Hello too big, is refused on its header.
        for (kind, len) in [(FrameKind::Request, 10), (FrameKind::Hello, MAX_HELLO + 1)] {
            let e = Greeting::admit(&FrameHeader::new(kind, 0, len)).expect_err("refused");
            assert!(e.to_string().contains("before the handshake"), "{e}");
        }
        // A Hello answering another challenge is not verified.
        let other = Greeting::start(&authority, &mut Vec::new());
        assert!(other.verify(&authority, &payload).is_err());
    }
}
