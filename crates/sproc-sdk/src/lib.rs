//! Write farcache stored procedures in Rust.
//!
//! A procedure is a function that reads cache memory through [`Cache`], decodes its
//! arguments with [`Reader`] and encodes its result or continuation state with
//! [`Writer`] into the output buffer it is handed:
//!
//! ```
//! use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer, offset};
//!
//! /// args and state: base u64, n u32, next u32, partial u64; result: the u64 sum.
//! fn sum<'o>(cache: &impl Cache, _addr: u64, args: &[u8], out: &'o mut [u8])
//!     -> Result<Outcome<'o>, Error>
//! {
//!     let mut a = Reader::new(args);
//!     let (base, n, mut next, mut partial) = (a.u64()?, a.u32()?, a.u32()?, a.u64()?);
//!     a.end()?;
//!     while next < n {
//!         let at = offset(base, next.into(), 8)?;
//!         match cache.read_u64(at) {
//!             Ok(v) => partial = partial.wrapping_add(v),
//!             // Held by another server: resume there with the state so far.
//!             Err(Remote) => {
//!                 let state = Writer::new(out).u64(base).u32(n).u32(next).u64(partial);
//!                 return Ok(Outcome::Continue { addr: at, state: state.finish()? });
//!             }
//!         }
//!         next += 1;
//!     }
//!     Ok(Outcome::Done(Writer::new(out).u64(partial).finish()?))
//! }
//!
//! farcache_sproc_sdk::procedure!(sum);
//! # fn main() {}
//! ```
//!
//! Built with `cargo build --release --target wasm32-unknown-unknown` in a
//! `#![no_std]` crate (a `cdylib`, or a `#![no_main]` binary), that is a module the
//! server accepts: [`procedure!`] emits the `alloc` and `run` exports and a panic
//! handler, and [`Cache`] calls the `farcache.read` import. On any other target the
//! imports do not exist and the macro only type-checks the function, so procedures
//! can be unit-tested on the host against [`TestCache`].
//!
//! How an invocation ends (the `run` return code the host sees):
//!
//! | the function returns | code | the host |
//! |---|---|---|
//! | `Ok(Outcome::Done(result))` | 0 | replies with `result` |
//! | `Ok(Outcome::Continue { addr, state })` | 1 | re-invokes the procedure at the owner of `addr` with `state` as its arguments |
//! | `Err(e)` | [`Error::code`], ≥ 2 | fails the invocation: `procedure NAME returned CODE …` |
//! | a panic | trap (`unreachable`) | fails the invocation (`procedure NAME trapped: …`) and discards the instance |
//!
//! The host keeps one instance per worker thread and reuses it, so a procedure must
//! not rely on statics being fresh; this crate's own buffers are reused safely.

#![no_std]

mod cache;
mod codec;
mod outcome;
#[doc(hidden)]
pub mod rt;

pub use cache::{Cache, Remote, TestCache};
pub use codec::{Reader, Writer, offset};
pub use outcome::{Error, Outcome};

/// Output buffer a procedure gets unless [`procedure!`] is told otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 64 << 10;

/// Largest result or state the host accepts from one invocation.
pub const HOST_MAX_OUTPUT: usize = 1 << 20;

/// Turns a procedure function into the module's exports.
///
/// `procedure!(f)` or `procedure!(f, max_output = BYTES)`, where `f` can be called as
/// `f(&impl Cache, addr: u64, args: &'o [u8], out: &'o mut [u8]) -> Result<Outcome<'o>, Error>`
/// (a generic `impl Cache` parameter is fine). `out` is `max_output` bytes long
/// ([`DEFAULT_MAX_OUTPUT`] by default, at most [`HOST_MAX_OUTPUT`]).
///
/// On `wasm32` it emits the `alloc` and `run` exports and a `#[panic_handler]` that
/// traps, so use it once, at the root of a `#![no_std]` crate. Elsewhere it only checks
/// that `f` has the right shape.
#[macro_export]
macro_rules! procedure {
    ($f:path) => {
        $crate::procedure!($f, max_output = $crate::DEFAULT_MAX_OUTPUT);
    };
    ($f:path, max_output = $max:expr) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[unsafe(export_name = "alloc")]
            extern "C" fn __farcache_alloc(len: i32) -> i32 {
                $crate::rt::alloc(len, $max)
            }

            #[unsafe(export_name = "run")]
            extern "C" fn __farcache_run(addr: i64, args: i32, len: i32) -> i32 {
                $crate::rt::run(addr, args, len, $max, |cache, addr, args, out| {
                    $f(cache, addr, args, out)
                })
            }

            // A panic traps: the host fails the invocation and drops the instance.
            #[cfg(not(test))]
            #[panic_handler]
            fn __farcache_panic(_: &::core::panic::PanicInfo<'_>) -> ! {
                ::core::arch::wasm32::unreachable()
            }
        };

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            #[allow(dead_code)]
            fn __farcache_check() {
                $crate::rt::check(|cache: &$crate::TestCache<'_>, addr, args, out| {
                    $f(cache, addr, args, out)
                });
            }
        };
    };
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;

    /// The sum procedure of the crate docs.
    fn sum<'o>(
        cache: &impl Cache,
        _addr: u64,
        args: &[u8],
        out: &'o mut [u8],
    ) -> Result<Outcome<'o>, Error> {
        let mut a = Reader::new(args);
        let (base, n, mut next, mut partial) = (a.u64()?, a.u32()?, a.u32()?, a.u64()?);
        a.end()?;
        while next < n {
            let at = offset(base, next.into(), 8)?;
            match cache.read_u64(at) {
                Ok(v) => partial = partial.wrapping_add(v),
                Err(Remote) => {
                    let state = Writer::new(out).u64(base).u32(n).u32(next).u64(partial);
                    return Ok(Outcome::Continue {
                        addr: at,
                        state: state.finish()?,
                    });
                }
            }
            next += 1;
        }
        Ok(Outcome::Done(Writer::new(out).u64(partial).finish()?))
    }

    // Off wasm32 this only type-checks `sum`.
    procedure!(sum);
    procedure!(sum, max_output = 24);

    #[test]
    fn a_procedure_continues_on_the_owner_and_finishes() {
        const REGION: u64 = 64;
        let bytes: Vec<u8> = (0..REGION as usize * 4).map(|i| (i * 13) as u8).collect();
        let owners = [0, 1, 0, 2];
        let (base, n) = (8u64, 30u32);
        let want = (0..u64::from(n)).fold(0u64, |acc, i| {
            let at = (base + 8 * i) as usize;
            let mut v = [0u8; 8];
            v.copy_from_slice(&bytes[at..at + 8]);
            acc.wrapping_add(u64::from_le_bytes(v))
        });
        let mut args = Writer::new(&mut [0u8; 24][..])
            .u64(base)
            .u32(n)
            .u32(0)
            .u64(0)
            .finish()
            .map(<[u8]>::to_vec)
            .expect("24 bytes");
        let (mut addr, mut hops) = (base, 0);
        let mut out = [0u8; DEFAULT_MAX_OUTPUT];
        let result = loop {
            let server = owners[(addr / REGION) as usize];
            let local: Vec<bool> = owners.iter().map(|&o| o == server).collect();
            let cache = TestCache {
                bytes: &bytes,
                region_size: REGION,
                local: &local,
            };
            match sum(&cache, addr, &args, &mut out) {
                Ok(Outcome::Done(r)) => break r.to_vec(),
                Ok(Outcome::Continue { addr: at, state }) => {
                    assert_ne!(owners[(at / REGION) as usize], server);
                    (addr, args) = (at, state.to_vec());
                    hops += 1;
                }
                Ok(Outcome::Pull { .. }) => panic!("this sum ships, it does not pull"),
                Err(e) => panic!("{e:?}"),
            }
        };
        assert_eq!(result, want.to_le_bytes());
        assert_eq!(hops, 3, "regions 0, 1, 2, 3 are held by 0, 1, 0, 2");
        // Bad arguments and a too-small output buffer fail instead of panicking.
        let cache = TestCache {
            bytes: &bytes,
            region_size: REGION,
            local: &[true; 4],
        };
        assert_eq!(sum(&cache, 0, &args[..20], &mut out), Err(Error::Args));
        assert_eq!(
            sum(&cache, 0, &[args.clone(), vec![0]].concat(), &mut out),
            Err(Error::Args)
        );
        assert_eq!(sum(&cache, 0, &args, &mut out[..7]), Err(Error::OutputFull));
        let mut huge = args.clone();
        huge[..8].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        assert_eq!(sum(&cache, 0, &huge, &mut out), Err(Error::Overflow));
    }
}
