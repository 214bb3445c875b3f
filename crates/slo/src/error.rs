//! What can go wrong loading a model or searching it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SloError {
    #[error("cannot read SLO model file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("SLO model file {path} is not valid JSON of a model: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path} is not a farcache SLO model (format '{found}'); make one with `farcache calibrate`"
    )]
    WrongFormat { path: String, found: String },
    #[error(
        "SLO model {path} was written by {found}; this is {expected}: performance changes between \
         versions, so run `farcache calibrate` again"
    )]
    WrongVersion {
        path: String,
        found: String,
        expected: String,
    },
    #[error(
        "SLO model {path} was measured on another machine ({model}); this machine is {here}: \
         run `farcache calibrate` here (or pass --slo-model-any-machine to use it anyway)"
    )]
    WrongMachine {
        path: String,
        model: String,
        here: String,
    },
    #[error("SLO model is malformed: {0}")]
    Malformed(String),
    #[error("invalid SLO: {0}")]
    InvalidSlo(String),
    #[error("the SLO model does not cover this SLO: {0}")]
    NotCovered(String),
    #[error(
        "no configuration meets the SLO ({slo}); the model predicts at best {best_latency_us:.1} us \
         ({percentile}) and {best_throughput_mops:.3} Mops/s, and within {latency_us:.1} us at most \
         {throughput_within_latency_mops:.3} Mops/s"
    )]
    Infeasible {
        slo: String,
        percentile: String,
        latency_us: f64,
        /// Lowest latency any configuration reaches.
        best_latency_us: f64,
        /// Highest throughput any configuration reaches.
        best_throughput_mops: f64,
        /// Highest throughput of configurations meeting the latency bound (0: none).
        throughput_within_latency_mops: f64,
    },
}
