//! The network layer the server, the manager and the client share, apart from what
//! they serve:
//!
//! - [`stream`]: a non-blocking connection, plain TCP or TLS (rustls), with one
//!   read/write interface for the event loops;
//! - [`tls`]: TLS settings from PEM files, and self-signed certificates for local
//!   clusters;
//! - [`inbuf`]: a receive buffer whose memory follows the bytes a peer actually sent,
//!   not the length its frame header announces;
//! - [`outbuf`]: bytes queued for a peer, and since when it stopped taking them;
//! - [`guard`]: the limits that keep one peer from exhausting a process (connection
//!   caps, handshake and stall timeouts, output caps), the deadlines a sweep checks,
//!   and the file-descriptor limit;
//! - [`accept`]: taking connections off a listener under a cap (plain or TLS);
//! - [`handshake`]: the accepting side of the challenge–Hello–ack handshake.
//!
//! The server, the manager and the Redis front end accept through [`accept`] and
//! sweep with [`GuardConfig::expired`]; the server and the manager greet through
//! [`handshake`].

pub mod accept;
pub mod error;
pub mod guard;
pub mod handshake;
pub mod inbuf;
pub mod outbuf;
pub mod stream;
pub mod tls;

pub use accept::{Accepted, accept_next};
pub use error::NetError;
pub use guard::{Clocks, Expiry, GuardConfig};
pub use handshake::{Greeting, Refusal};
pub use inbuf::FrameBuf;
pub use outbuf::{Flushed, OutBuf};
pub use stream::Stream;
pub use tls::{TlsAcceptor, TlsConnector};
