//! What `farcache calibrate` decides, apart from running the measurements (the bench
//! crate's runner drives real clusters): which settings to measure and when to stop
//! raising a knob ([`plan`]), how the model's error is checked on settings it did not
//! measure ([`held_out`]), and the table it prints ([`table`]).

pub mod held_out;
pub mod plan;
pub mod table;

pub use table::format_calibration_table;
