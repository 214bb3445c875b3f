//! The command table: name, arity (Redis's convention: `n` exactly, `-n` at least),
//! whether it writes, and the handler. Handlers live by family.

mod bits;
mod conn;
mod eval;
mod fcall;
mod keys;
mod keyspace;
mod lcs;
mod rmw;

mod strings;
mod tx;

use crate::auth::Access;
use crate::parse::Args;
pub(crate) use crate::parse::int_arg;
use crate::reply::Out;
use crate::session::Session;

type Handler = fn(&mut Session, &Args, &mut Out);

/// Where a command names its keys (Redis's first / last / step; `last < 0` counts
/// from the end): `EXEC` locks them before it runs the queued commands.
#[derive(Clone, Copy)]
enum Keys {
    None,
    Span {
        first: usize,
        last: isize,
        step: usize,
    },
    /// `FCALL fn numkeys key...`, `EVAL script numkeys key...`.
    Numkeys,
}

const ONE: Keys = Keys::Span {
    first: 1,
    last: 1,
    step: 1,
};
const ALL: Keys = Keys::Span {
    first: 1,
    last: -1,
    step: 1,
};
const TWO: Keys = Keys::Span {
    first: 1,
    last: 2,
    step: 1,
};
const PAIRS: Keys = Keys::Span {
    first: 1,
    last: -1,
    step: 2,
};

struct Command {
    name: &'static str,
    arity: i32,
    writes: bool,
    /// Allowed before `AUTH`.
    before_auth: bool,
    keys: Keys,
    /// Runs at once inside `MULTI` instead of being queued.
    tx_control: bool,
    run: Handler,
}

const fn c(name: &'static str, arity: i32, writes: bool, keys: Keys, run: Handler) -> Command {
    Command {
        name,
        arity,
        writes,
        before_auth: false,
        keys,
        tx_control: false,
        run,
    }
}

const fn open(name: &'static str, arity: i32, run: Handler) -> Command {
    Command {
        name,
        arity,
        writes: false,
        before_auth: true,
        keys: Keys::None,
        tx_control: false,
        run,
    }
}

const fn txc(name: &'static str, arity: i32, run: Handler) -> Command {
    Command {
        name,
        arity,
        writes: false,
        before_auth: false,
        keys: Keys::None,
        tx_control: true,
        run,
    }
}

const NO: Keys = Keys::None;

const COMMANDS: &[Command] = &[
    // Connection.
    open("ping", -1, conn::ping),
    open("echo", 2, conn::echo),
    open("quit", -1, conn::quit),
    open("hello", -1, conn::hello),
    open("auth", -2, conn::auth),
    c("client", -2, false, NO, conn::client),
    c("select", 2, false, NO, conn::select),
    c("command", -1, false, NO, conn::command),
    c("config", -2, false, NO, conn::config),
    c("info", -1, false, NO, conn::info),
    c("time", 1, false, NO, conn::time),
    c("lastsave", 1, false, NO, conn::lastsave),
    // Transactions.
    txc("multi", 1, tx::multi),
    txc("exec", 1, tx::exec),
    txc("discard", 1, tx::discard),
    txc("watch", -2, tx::watch),
    c("unwatch", 1, false, NO, tx::unwatch),
    // Strings.
    c("get", 2, false, ONE, strings::get),
    c("set", -3, true, ONE, strings::set),
    c("setnx", 3, true, ONE, strings::setnx),
    c("setex", 4, true, ONE, strings::setex),
    c("psetex", 4, true, ONE, strings::psetex),
    c("getset", 3, true, ONE, strings::getset),
    c("getdel", 2, true, ONE, strings::getdel),
    c("getex", -2, true, ONE, strings::getex),
    c("mget", -2, false, ALL, strings::mget),
    c("mset", -3, true, PAIRS, strings::mset),
    c("msetnx", -3, true, PAIRS, strings::msetnx),
    c("incr", 2, true, ONE, strings::incr),
    c("decr", 2, true, ONE, strings::decr),
    c("incrby", 3, true, ONE, strings::incrby),
    c("decrby", 3, true, ONE, strings::decrby),
    c("incrbyfloat", 3, true, ONE, strings::incrbyfloat),
    c("append", 3, true, ONE, strings::append),
    c("getrange", 4, false, ONE, strings::getrange),
    c("substr", 4, false, ONE, strings::getrange),
    c("setrange", 4, true, ONE, strings::setrange),
    c("strlen", 2, false, ONE, strings::strlen),
    c("getbit", 3, false, ONE, bits::getbit),
    c("setbit", 4, true, ONE, bits::setbit),
    c("bitcount", -2, false, ONE, bits::bitcount),
    c("bitpos", -3, false, ONE, bits::bitpos),
    c(
        "bitop",
        -4,
        true,
        Keys::Span {
            first: 2,
            last: -1,
            step: 1,
        },
        bits::bitop,
    ),
    c("lcs", -3, false, TWO, lcs::lcs),
    // Keys.
    c("del", -2, true, ALL, keys::del),
    c("unlink", -2, true, ALL, keys::del),
    c("exists", -2, false, ALL, keys::exists),
    c("expire", -3, true, ONE, keys::expire),
    c("pexpire", -3, true, ONE, keys::pexpire),
    c("expireat", -3, true, ONE, keys::expireat),
    c("pexpireat", -3, true, ONE, keys::pexpireat),
    c("expiretime", 2, false, ONE, keys::expiretime),
    c("pexpiretime", 2, false, ONE, keys::pexpiretime),
    c("persist", 2, true, ONE, keys::persist),
    c("ttl", 2, false, ONE, keys::ttl),
    c("pttl", 2, false, ONE, keys::pttl),
    c("type", 2, false, ONE, keys::type_of),
    c("rename", 3, true, TWO, keys::rename),
    c("renamenx", 3, true, TWO, keys::renamenx),
    c("copy", -3, true, TWO, keys::copy),
    // The keyspace.
    c("dbsize", 1, false, NO, keyspace::dbsize),
    c("scan", -2, false, NO, keyspace::scan),
    c("keys", 2, false, NO, keyspace::keys),
    c("randomkey", 1, false, NO, keyspace::randomkey),
    c("flushdb", -1, true, NO, keyspace::flushdb),
    c("flushall", -1, true, NO, keyspace::flushdb),
    // Procedures.
    c("fcall", -3, true, Keys::Numkeys, fcall::fcall),
    c("fcall_ro", -3, false, Keys::Numkeys, fcall::fcall),
    // Lua scripts.
    c("eval", -3, true, Keys::Numkeys, eval::eval),
    c("evalsha", -3, true, Keys::Numkeys, eval::evalsha),
    c("eval_ro", -3, false, Keys::Numkeys, eval::eval_ro),
    c("evalsha_ro", -3, false, Keys::Numkeys, eval::evalsha_ro),
    c("script", -2, false, NO, eval::script),
];

fn find(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.name.len() == name.len() && name.eq_ignore_ascii_case(c.name.as_bytes()))
}

/// Runs one command, appending exactly one reply (inside `MULTI`: queues it and
/// answers `QUEUED`, or refuses it and dooms the transaction).
pub fn dispatch(s: &mut Session, args: &Args, out: &mut Out) {
    let cmd = match check(s, args) {
        Ok(cmd) => cmd,
        Err(e) => {
            if let Some(tx) = s.tx.as_mut() {
                tx.aborted = true;
            }
            return out.error(&e);
        }
    };
    if let Some(tx) = s.tx.as_mut()
        && !cmd.tx_control
    {
        if cmd.writes && matches!(cmd.keys, Keys::None) {
            // It writes keys it cannot name before it runs, so `EXEC` could not lock
            // them in order with its others.
            tx.aborted = true;
            return out.error(&format!(
                "ERR '{}' inside MULTI is not supported by the farcache front end",
                cmd.name
            ));
        }
        tx.queued.push(args.clone());
        return out.simple("QUEUED");
    }
    let run = cmd.run;
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(s, args, out)));
    if ran.is_err() {
        // A bug, not the client's fault: this connection ends (its reply may be half
        // written), the event loop and its other connections go on.
        tracing::error!(
            command = cmd.name,
            "command handler panicked; closing its connection"
        );
        out.error("ERR internal error in the farcache front end (see its log)");
        s.quit = true;
    }
}

/// Runs a command `EXEC` took from its queue (checked again: an `AUTH` queued
/// before it may have changed what this session may do).
pub(crate) fn run_queued(s: &mut Session, args: &Args, out: &mut Out) {
    match check(s, args) {
        Ok(cmd) => (cmd.run)(s, args, out),
        Err(e) => out.error(&e),
    }
}

/// Runs a command a script's `redis.call` names, writing its reply to `out`;
/// refuses (with the error to raise) what a script may not run: session and
/// transaction commands, other scripts, writes from a read-only script, keyless
/// writes, and keys the script did not declare (it holds only those keys' locks).
pub(crate) fn run_from_script(
    s: &mut Session,
    args: &Args,
    declared: &[bytes::Bytes],
    read_only: bool,
    out: &mut Out,
) -> Result<(), String> {
    const NOT_IN_SCRIPTS: &[&str] = &[
        "auth",
        "hello",
        "quit",
        "client",
        "unwatch",
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "script",
    ];
    let cmd = check(s, args)?;
    if cmd.tx_control || NOT_IN_SCRIPTS.contains(&cmd.name) {
        return Err(format!(
            "ERR This Redis command is not allowed from script: '{}'",
            cmd.name
        ));
    }
    if cmd.writes && read_only {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    if cmd.writes && matches!(cmd.keys, Keys::None) {
        return Err(format!(
            "ERR '{}' is not supported in scripts by the farcache front end (it writes keys a script cannot declare)",
            cmd.name
        ));
    }
    if let Some(k) = keys_of(args).into_iter().find(|k| !declared.contains(k)) {
        return Err(format!(
            "ERR Script attempted to access key '{}', which it did not declare in KEYS (the farcache front end isolates a script by the keys it declares)",
            String::from_utf8_lossy(&k[..k.len().min(128)])
        ));
    }
    (cmd.run)(s, args, out);
    Ok(())
}

/// The command `args` names, if this session may run it with these arguments.
fn check(s: &Session, args: &Args) -> Result<&'static Command, String> {
    let Some(cmd) = find(&args[0]) else {
        return Err(unknown(args));
    };
    let n = args.len() as i32;
    if (cmd.arity >= 0 && n != cmd.arity) || (cmd.arity < 0 && n < -cmd.arity) {
        return Err(format!(
            "ERR wrong number of arguments for '{}' command",
            cmd.name
        ));
    }
    match s.access {
        None if !cmd.before_auth => Err("NOAUTH Authentication required.".into()),
        Some(Access::ReadOnly) if cmd.writes => Err(format!(
            "NOPERM this connection authenticated with the cache's read-only token and cannot run '{}'",
            cmd.name
        )),
        _ => Ok(cmd),
    }
}

/// The keys `args` names (for locking them around an `EXEC`).
pub(crate) fn keys_of(args: &Args) -> Vec<bytes::Bytes> {
    let Some(cmd) = find(&args[0]) else {
        return Vec::new();
    };
    match cmd.keys {
        Keys::None => Vec::new(),
        Keys::Span { first, last, step } => {
            let end = if last < 0 {
                args.len() as isize + last
            } else {
                last
            };
            let end = usize::try_from(end)
                .unwrap_or(0)
                .min(args.len().saturating_sub(1));
            (first..=end)
                .step_by(step)
                .filter_map(|i| args.get(i).cloned())
                .collect()
        }
        Keys::Numkeys => {
            let n = args.get(2).and_then(|b| int_arg(b).ok()).unwrap_or(0);
            let n = usize::try_from(n).unwrap_or(0);
            args.iter().skip(3).take(n).cloned().collect()
        }
    }
}

/// Redis's wording, so clients that match on it behave the same.
fn unknown(args: &Args) -> String {
    let shown =
        |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(128)]).replace(['\r', '\n'], " ");
    let rest: Vec<String> = args[1..]
        .iter()
        .take(8)
        .map(|a| format!("'{}'", shown(a)))
        .collect();
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        shown(&args[0]),
        rest.join(" ")
    )
}

/// The names `COMMAND` lists.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}
