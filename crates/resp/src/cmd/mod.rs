//! The command table: name, arity (Redis's convention: `n` exactly, `-n` at least),
//! whether it writes, and the handler. Handlers live by family.

mod conn;
mod fcall;
mod keys;
mod rmw;
mod strings;

use crate::auth::Access;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

type Handler = fn(&mut Session, &Args, &mut Out);

struct Command {
    name: &'static str,
    arity: i32,
    writes: bool,
    /// Allowed before `AUTH`.
    before_auth: bool,
    run: Handler,
}

const fn c(name: &'static str, arity: i32, writes: bool, run: Handler) -> Command {
    Command {
        name,
        arity,
        writes,
        before_auth: false,
        run,
    }
}

const fn open(name: &'static str, arity: i32, run: Handler) -> Command {
    Command {
        name,
        arity,
        writes: false,
        before_auth: true,
        run,
    }
}

const COMMANDS: &[Command] = &[
    // Connection.
    open("ping", -1, conn::ping),
    open("echo", 2, conn::echo),
    open("quit", -1, conn::quit),
    open("hello", -1, conn::hello),
    open("auth", -2, conn::auth),
    c("client", -2, false, conn::client),
    c("select", 2, false, conn::select),
    c("command", -1, false, conn::command),
    c("config", -2, false, conn::config),
    c("info", -1, false, conn::info),
    c("dbsize", 1, false, conn::dbsize),
    // Strings.
    c("get", 2, false, strings::get),
    c("set", -3, true, strings::set),
    c("setnx", 3, true, strings::setnx),
    c("setex", 4, true, strings::setex),
    c("psetex", 4, true, strings::psetex),
    c("getset", 3, true, strings::getset),
    c("getdel", 2, true, strings::getdel),
    c("mget", -2, false, strings::mget),
    c("mset", -3, true, strings::mset),
    c("incr", 2, true, strings::incr),
    c("decr", 2, true, strings::decr),
    c("incrby", 3, true, strings::incrby),
    c("decrby", 3, true, strings::decrby),
    c("append", 3, true, strings::append),
    c("getrange", 4, false, strings::getrange),
    c("substr", 4, false, strings::getrange),
    c("setrange", 4, true, strings::setrange),
    c("strlen", 2, false, strings::strlen),
    // Keys.
    c("del", -2, true, keys::del),
    c("unlink", -2, true, keys::del),
    c("exists", -2, false, keys::exists),
    c("expire", 3, true, keys::expire),
    c("pexpire", 3, true, keys::pexpire),
    c("expireat", 3, true, keys::expireat),
    c("pexpireat", 3, true, keys::pexpireat),
    c("persist", 2, true, keys::persist),
    c("ttl", 2, false, keys::ttl),
    c("pttl", 2, false, keys::pttl),
    c("type", 2, false, keys::type_of),
    // Procedures.
    c("fcall", -3, true, fcall::fcall),
    c("fcall_ro", -3, false, fcall::fcall),
];

fn find(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.name.len() == name.len() && name.eq_ignore_ascii_case(c.name.as_bytes()))
}

/// Runs one command, appending exactly one reply.
pub fn dispatch(s: &mut Session, args: &Args, out: &mut Out) {
    let name = &args[0];
    let Some(cmd) = find(name) else {
        out.error(&unknown(args));
        return;
    };
    let n = args.len() as i32;
    if (cmd.arity >= 0 && n != cmd.arity) || (cmd.arity < 0 && n < -cmd.arity) {
        out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            cmd.name
        ));
        return;
    }
    match s.access {
        None if !cmd.before_auth => {
            out.error("NOAUTH Authentication required.");
            return;
        }
        Some(Access::ReadOnly) if cmd.writes => {
            out.error(&format!(
                "NOPERM this connection authenticated with the cache's read-only token and cannot run '{}'",
                cmd.name
            ));
            return;
        }
        _ => {}
    }
    (cmd.run)(s, args, out);
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

/// Parses a decimal integer argument as Redis does.
pub(crate) fn int_arg(b: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| !(s.starts_with('+') || (s.len() > 1 && s.starts_with('0'))))
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or("ERR value is not an integer or out of range")
}

/// The names `COMMAND` lists.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}
