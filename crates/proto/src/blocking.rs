//! Frame I/O over any blocking `Read`/`Write` (control plane, tests, tools).
//! The data path uses non-blocking sockets and the same codec directly.

use std::io::{self, Read, Write};

use thiserror::Error;

use crate::DecodeError;
use crate::auth::{AuthError, Credential};
use crate::control::{ControlErrorCode, ControlRequest, ControlResponse};
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN, encode_frame};

#[derive(Debug, Error)]
pub enum RpcError {
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("protocol: {0}")]
    Decode(#[from] DecodeError),
    #[error("peer reported a protocol error: {0}")]
    PeerError(String),
    #[error("{code:?}: {message}")]
    Remote {
        code: ControlErrorCode,
        message: String,
    },
    /// A standby named the leading manager: ask it instead.
    #[error("this manager stands by; the leader is at {leader}")]
    Redirect {
        leader: String,
        leader_tls: Option<String>,
    },
    #[error("unexpected {0}")]
    Unexpected(String),
    #[error("{0}")]
    Auth(#[from] AuthError),
}

pub fn write_frame<W: Write>(
    w: &mut W,
    kind: FrameKind,
    seq: u64,
    payload: &[u8],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
    encode_frame(&mut buf, kind, seq, payload);
    w.write_all(&buf)?;
    w.flush()
}

pub fn read_frame<R: Read>(r: &mut R, max_len: u32) -> Result<(FrameHeader, Vec<u8>), RpcError> {
    let mut hdr = [0u8; HEADER_LEN];
    r.read_exact(&mut hdr)?;
    let Some(h) = FrameHeader::decode(&hdr, max_len)? else {
        return Err(RpcError::Unexpected("short header".into()));
    };
    let mut payload = vec![0u8; h.len as usize];
    r.read_exact(&mut payload)?;
    Ok((h, payload))
}

/// One control round trip. A remote `Error` reply becomes [`RpcError::Remote`], a
/// standby's `Redirect` [`RpcError::Redirect`].
pub fn control_call<S: Read + Write>(
    s: &mut S,
    req: &ControlRequest,
) -> Result<ControlResponse, RpcError> {
    write_frame(s, FrameKind::Control, 0, &req.encode())?;
    let (h, payload) = read_frame(s, crate::MAX_FRAME_DEFAULT)?;
    match h.kind {
        FrameKind::ControlReply => match ControlResponse::decode(&payload)? {
            ControlResponse::Error { code, message } => Err(RpcError::Remote { code, message }),
            ControlResponse::Redirect { leader, leader_tls } => {
                Err(RpcError::Redirect { leader, leader_tls })
            }
            ok => Ok(ok),
        },
        FrameKind::Error => Err(RpcError::PeerError(
            String::from_utf8_lossy(&payload).into_owned(),
        )),
        other => Err(RpcError::Unexpected(format!(
            "{other:?} frame in reply to a control request"
        ))),
    }
}

/// The connector's side of the handshake: waits for the acceptor's challenge, answers
/// with a Hello proving `cred` for `role`, and checks the acceptor's proof in its
/// HelloAck. The first exchange on every connection to a server or the manager.
pub fn handshake<S: Read + Write>(
    s: &mut S,
    role: crate::Role,
    client_id: u64,
    identity: &str,
    cred: &Credential,
) -> Result<crate::HelloAck, RpcError> {
    let challenge = match read_frame(s, crate::hello::Challenge::LEN as u32 + 64)? {
        (h, payload) if h.kind == FrameKind::Challenge => crate::Challenge::decode(&payload)?,
        (h, payload) => return Err(unexpected_frame(h.kind, &payload, "instead of a challenge")),
    };
    if challenge.version != crate::PROTOCOL_VERSION {
        return Err(RpcError::Unexpected(format!(
            "peer speaks protocol v{}, this side speaks v{}",
            challenge.version,
            crate::PROTOCOL_VERSION
        )));
    }
    let hello = cred.hello(role, client_id, identity, &challenge);
    write_frame(s, FrameKind::Hello, 0, &hello.encode())?;
    let (h, payload) = read_frame(s, crate::MAX_FRAME_DEFAULT)?;
    match h.kind {
        FrameKind::HelloAck => {
            let ack = crate::HelloAck::decode(&payload)?;
            cred.check_ack(&hello, &challenge, &ack)?;
            Ok(ack)
        }
        kind => Err(unexpected_frame(kind, &payload, "in reply to Hello")),
    }
}

fn unexpected_frame(kind: FrameKind, payload: &[u8], when: &str) -> RpcError {
    match kind {
        FrameKind::Error => RpcError::PeerError(String::from_utf8_lossy(payload).into_owned()),
        other => RpcError::Unexpected(format!("{other:?} frame {when}")),
    }
}
