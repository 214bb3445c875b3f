//! The handshake: a Hello must answer this side's challenge before anything else is
//! read; the proof it carries decides the peer's role and rights.

use farcache_net::Refusal;

use super::*;

impl Conn {
    /// Checks the Hello against this side's challenge and answers with a proof.
    pub(super) fn handshake(
        &mut self,
        sh: &Shared,
        greeting: &Greeting,
        hdr: FrameHeader,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        let v = greeting.verify(&sh.authority, payload).map_err(|r| {
            if let Refusal::Unproven(_) = r {
                GuardCounters::bump(&sh.metrics.guard.auth_failures);
            }
            DecodeError::from(r)
        })?;
        if v.role == Role::Client && sh.tls_advertise.is_some() && !self.stream.is_tls() {
            GuardCounters::bump(&sh.metrics.guard.forbidden);
            return Err(DecodeError::BadHello(format!(
                "this server takes clients over TLS only, at {}",
                sh.tls_advertise.as_deref().unwrap_or_default()
            )));
        }
        let stream = if v.role == Role::Server {
            v.client_id
        } else {
            0
        };
        if stream != 0 && !sh.streams.announce(&v.identity, stream) {
            return Err(DecodeError::BadHello(format!(
                "replication stream {stream} of {} is older than one already open",
                v.identity
            )));
        }
        greeting.answer(
            &sh.authority,
            &v,
            sh.server_id(),
            sh.config.max_frame,
            hdr.seq,
            &mut self.out.buf,
        );
        debug!(peer = %self.peer, role = ?v.role, access = ?v.access, "peer authenticated");
        self.auth = Auth::Ready(Peer {
            role: v.role,
            access: v.access,
            newest: (stream != 0).then(|| sh.streams.of(&v.identity)),
            identity: v.identity,
            stream,
        });
        Ok(())
    }
}
