//! Lua scripts: `EVAL`, `EVALSHA`, their `_RO` forms, and `SCRIPT LOAD | EXISTS |
//! FLUSH | KILL`. A script holds the key-stripe locks of the keys it declares for
//! its whole run (as `EXEC` does), so it is atomic and isolated against every other
//! write through this front end to those keys; it may touch no other key. The
//! interpreter and its limits live in [`crate::script`].

use std::sync::Arc;

use super::{int_arg, run_from_script};
use crate::auth::Access;
use crate::parse::Args;
use crate::reply::{Out, Proto};
use crate::script::{self, Called, Ended, ScriptCache};
use crate::session::Session;

pub fn eval(s: &mut Session, a: &Args, out: &mut Out) {
    run(s, a, out, false, false);
}

pub fn evalsha(s: &mut Session, a: &Args, out: &mut Out) {
    run(s, a, out, true, false);
}

pub fn eval_ro(s: &mut Session, a: &Args, out: &mut Out) {
    run(s, a, out, false, true);
}

pub fn evalsha_ro(s: &mut Session, a: &Args, out: &mut Out) {
    run(s, a, out, true, true);
}

fn run(s: &mut Session, a: &Args, out: &mut Out, by_sha: bool, read_only: bool) {
    let numkeys = match int_arg(&a[2]) {
        Ok(n) if n < 0 => return out.error("ERR Number of keys can't be negative"),
        Ok(n) => usize::try_from(n).unwrap_or(usize::MAX),
        Err(e) => return out.error(e),
    };
    if numkeys > a.len() - 3 {
        return out.error("ERR Number of keys can't be greater than number of args");
    }
    let shared = s.shared.clone();
    let (sha, body): (String, Arc<[u8]>) = if by_sha {
        match shared.scripts.get(&a[1]) {
            Some(body) => (String::from_utf8_lossy(&a[1]).to_ascii_lowercase(), body),
            None => return out.error("NOSCRIPT No matching script. Please use EVAL."),
        }
    } else {
        // Kept for a later EVALSHA if there is room; run either way.
        let (sha, _) = shared.scripts.add(&a[1]);
        (sha, Arc::from(&a[1][..]))
    };
    let (keys, argv) = a[3..].split_at(numkeys);
    let _held = shared.lock_keys(keys.iter());
    let mut call = |args: Args| {
        let mut buf = Vec::new();
        let mut o = Out {
            buf: &mut buf,
            proto: Proto::Resp2,
        };
        match run_from_script(s, &args, keys, read_only, &mut o) {
            Ok(()) => Called::Ran(buf),
            Err(e) => Called::Refused(e),
        }
    };
    let t = std::time::Instant::now();
    let ended = script::run(
        shared.scripts.generation(),
        &sha,
        &body,
        keys,
        argv,
        &mut call,
        out,
    );
    shared.scripts.count(ended);
    if ended == Ended::Killed || t.elapsed() >= SLOW {
        tracing::warn!(
            sha = %sha,
            ms = t.elapsed().as_millis() as u64,
            keys = keys.len(),
            killed = ended == Ended::Killed,
            "slow script (it held its keys' locks and a pool thread meanwhile)"
        );
    }
}

/// A script this slow is logged.
const SLOW: std::time::Duration = std::time::Duration::from_millis(100);

pub fn script(s: &mut Session, a: &Args, out: &mut Out) {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match (sub.as_str(), a.len()) {
        ("load", 3) => {
            let (sha, kept) = s.shared.scripts.add(&a[2]);
            if kept {
                out.bulk(sha.as_bytes());
            } else {
                let (n, bytes) = ScriptCache::limits();
                out.error(&format!(
                    "ERR the script cache is full ({n} scripts or {} MiB); SCRIPT FLUSH empties it",
                    bytes >> 20
                ));
            }
        }
        ("exists", 3..) => {
            out.array(a.len() - 2);
            for sha in &a[2..] {
                out.int(i64::from(s.shared.scripts.get(sha).is_some()));
            }
        }
        ("flush", 2 | 3) => {
            if let Some(mode) = a.get(2)
                && !mode.eq_ignore_ascii_case(b"sync")
                && !mode.eq_ignore_ascii_case(b"async")
            {
                return out.error("ERR SCRIPT FLUSH only supports SYNC|ASYNC option");
            }
            if s.access != Some(Access::ReadWrite) {
                return out.error(
                    "NOPERM this connection authenticated with the cache's read-only token and cannot run 'script|flush'",
                );
            }
            s.shared.scripts.flush();
            out.ok();
        }
        // Scripts run to completion or to their time limit; none can be stopped.
        ("kill", 2) => out.error("NOTBUSY No scripts in execution right now."),
        ("help", 2) => {
            let lines = [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "FLUSH [ASYNC|SYNC]",
                "KILL",
                "LOAD <script>",
            ];
            out.array(lines.len());
            for l in lines {
                out.simple(l);
            }
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&a[1][..a[1].len().min(64)])
        )),
    }
}
