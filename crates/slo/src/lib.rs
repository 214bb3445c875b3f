//! SLO configuration (Redy, "SLO-based Search"): a performance model measured once
//! per deployment by `farcache calibrate`, and a search of that model for the
//! cheapest transport (`c`, `s`, `b`, `q`) that meets a latency and throughput SLO.
//!
//! - [`model`]: the versioned model file (machine, date, measured points) and its
//!   refusal of files from another machine or release.
//! - [`grid`]: power-of-two measurements and the interpolation between them.
//! - [`search`]: cost-ordered branch-and-bound search, and the exhaustive oracle it
//!   must agree with.
//! - [`calibration`]: which settings `farcache calibrate` measures, its held-out
//!   error check and its table (the measuring itself runs clusters, in the bench).
//!
//! Pure computation over a file: no sockets, no threads. The manager answers
//! `create` with it; the bench draws SLOs from it.

pub mod calibration;
pub mod error;
pub(crate) mod grid;
pub mod machine;
pub mod model;
pub mod point;
pub mod search;

pub use error::SloError;
pub use machine::Machine;
pub use model::{CalibrationSummary, Model, ModelFile, Perf, Point, Section};
pub use search::{
    CLIENT_CORE_HOUR, CorePrices, DEFAULT_HEADROOM, Found, ON_DEMAND_CORE_HOUR, SPOT_CORE_HOUR,
    SearchLimits, oracle, search, settings,
};
