//! Lua scripts (`EVAL`, `EVALSHA`, `SCRIPT`): the script cache shared by a front
//! end's connections, and a sandboxed Lua 5.1 interpreter per event loop.
//!
//! A script runs on its connection's event loop holding the key-stripe locks of
//! the keys it declares (as `EXEC` does), so it is atomic and isolated against
//! every other write through this front end to those keys. What it may call, and
//! how the command runs, is the caller's: this module only converts values and
//! keeps the interpreter in bounds (time, memory, no new globals, no files).

mod cache;
mod libs;
mod reply;
mod vm;

pub use cache::ScriptCache;
pub use vm::{Called, Ended, run};
