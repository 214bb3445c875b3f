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
//!   caps, handshake and stall timeouts, output caps) and the file-descriptor limit.

pub mod error;
pub mod guard;
pub mod inbuf;
pub mod outbuf;
pub mod stream;
pub mod tls;

pub use error::NetError;
pub use guard::GuardConfig;
pub use inbuf::FrameBuf;
pub use outbuf::{Flushed, OutBuf};
pub use stream::Stream;
pub use tls::{TlsAcceptor, TlsConnector};
