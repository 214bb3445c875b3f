//! The Lua scripts the Redis baselines of `bench sproc` run (the procedures' logic),
//! shared by redis-benchmark's `EVALSHA` runs and the spinning driver's.

use serde::{Deserialize, Serialize};

/// The value every key holds (decimal text, 8 bytes, so `tonumber` works on it).
pub const KEY_VALUE: &str = "12345678";

/// Key `i` as redis-benchmark spells `key:__rand_int__`.
pub fn key_name(i: u64) -> String {
    format!("key:{i:012}")
}

/// A Lua script and the keys and arguments each call passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalScript {
    /// Short description, e.g. `verify 1 key`.
    pub label: String,
    pub body: String,
    /// Random keys per call (`key:__rand_int__` each).
    pub keys: usize,
    /// `ARGV`.
    pub args: Vec<String>,
    /// What one call must return (checked once before the sweep).
    pub expect: i64,
}

impl EvalScript {
    /// GET one key and compare it with the expected value passed as `ARGV[1]`: 1 or 0.
    pub fn verify() -> Self {
        Self {
            label: "verify 1 key".into(),
            body: "if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 else return 0 end".into(),
            keys: 1,
            args: vec![KEY_VALUE.into()],
            expect: 1,
        }
    }

    /// GET `keys` keys and return the sum of their values.
    pub fn sum(keys: usize) -> Self {
        let v: i64 = KEY_VALUE.parse().unwrap_or(0);
        Self {
            label: format!("sum {keys} keys"),
            body: "local s = 0 for _, k in ipairs(KEYS) do \
                   s = s + tonumber(redis.call('GET', k) or '0') end return s"
                .into(),
            keys,
            args: Vec::new(),
            expect: v * keys as i64,
        }
    }
}
