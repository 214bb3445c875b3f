//! What one run of a procedure asks for next. How it travels to a client is the
//! EXECUTE reply body in `farcache_proto::reply`; the server builds it.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done(Vec<u8>),
    /// Resume this procedure at the owner of `addr` with `state` as its args.
    Continue {
        addr: u64,
        state: Vec<u8>,
    },
    /// DFlow: bring these `(addr, len)` ranges to this server, then run again at the
    /// same address with `state`; the ranges read as if they were local. Servers
    /// handle it; it never reaches a client.
    Pull {
        ranges: Vec<(u64, u32)>,
        state: Vec<u8>,
    },
}
