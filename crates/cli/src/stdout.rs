//! Printing that survives a closed stdout. `println!` panics when the reader of a pipe
//! went away (`farcache status | head`); the `outln!` / `out!` macros return the error
//! instead, and `main` ends the command quietly. SIGPIPE stays ignored (Rust's
//! default): restoring its default action would also kill a server when a TLS peer
//! goes away (rustls writes sockets with `writev`, which raises SIGPIPE), and would
//! let `up`, `chaos` or `bench` die without stopping their child processes.

use std::fmt;
use std::io;

/// `println!` to stdout; a closed stdout is `Err(StdoutClosed)`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::stdout::check({
            use std::io::Write as _;
            writeln!(std::io::stdout().lock(), $($arg)*)
        })
    };
}

/// `print!` to stdout; a closed stdout is `Err(StdoutClosed)`.
#[cfg_attr(not(feature = "bench"), allow(unused_macros))] // only the bench commands print without a newline
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::check({
            use std::io::Write as _;
            write!(std::io::stdout().lock(), $($arg)*)
        })
    };
}

/// The reader of stdout went away: nothing is left to tell, so not a failure.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

pub fn check(r: io::Result<()>) -> anyhow::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Whether `e` only says that stdout was closed.
pub fn closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}
