//! The Lua interpreter: one per event-loop thread, sandboxed, with `redis.call`
//! bound to the running script's command runner for the length of one run.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use super::cache::sha1_hex;
use super::reply::{Reply, decode};
use crate::parse::Args;
use crate::reply::Out;

/// A script still running after this is stopped with an error. It holds its keys'
/// locks and its event loop meanwhile; writes it made before stay made.
pub const TIME_LIMIT: Duration = Duration::from_secs(5);
/// Memory one event loop's interpreter may hold (its scripts' tables and strings).
pub const MEMORY_LIMIT: usize = 64 << 20;
/// Compiled scripts kept per event loop (past this they are compiled again).
const MAX_FUNCTIONS: usize = 1_000;
/// How the time limit's error starts.
const KILLED: &str = "script killed";
/// Lua instructions between two looks at the clock.
const HOOK_EVERY: u32 = 10_000;
/// Deepest table a script may return.
const MAX_DEPTH: usize = 32;

/// What `redis.call` got from the caller's runner.
pub enum Called {
    /// The command ran: its RESP2 reply.
    Ran(Vec<u8>),
    /// The command may not run from this script: the error reply to give.
    Refused(String),
}

/// How a run ended (for the front end's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It returned a value (an error reply it returned on purpose included).
    Returned,
    /// It failed: a Lua error, a command's error through `redis.call`, or its memory.
    Failed,
    /// It ran past [`TIME_LIMIT`].
    Killed,
}

/// The end of this run's time budget.
struct Deadline(Instant);

/// A command's error reply, raised by `redis.call` (passed to the client as is).
#[derive(Debug)]
struct CommandError(String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

struct Vm {
    lua: Lua,
    functions: HashMap<String, Function>,
    generation: u64,
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Base functions a script has no business with (files, loading code, changing
/// environments, the collector).
const REMOVED: &[&str] = &[
    "dofile",
    "loadfile",
    "load",
    "loadstring",
    "require",
    "module",
    "print",
    "getfenv",
    "setfenv",
    "newproxy",
    "gcinfo",
    "collectgarbage",
];

/// Run once per interpreter, after the Rust functions are in: a `pcall` cannot
/// swallow the time limit's error, and scripts cannot leave globals behind for the
/// next script (nor read undefined ones, which is nearly always a typo).
const PRELUDE: &str = r#"
local rawpcall, rawxpcall, expired, err = pcall, xpcall, __farcache_expired, error
__farcache_expired = nil
local function pass(ok, ...)
  if not ok and expired() then err((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return pass(rawpcall(f, ...)) end
xpcall = function(f, h) return pass(rawxpcall(f, h)) end
setmetatable(_G, {
  __newindex = function(_, k)
    err("Script attempted to create global variable '" .. tostring(k) .. "'", 2)
  end,
  __index = function(_, k)
    err("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
  __metatable = false,
})
"#;

fn new_vm() -> mlua::Result<Lua> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    lua.set_memory_limit(MEMORY_LIMIT)?;
    let g = lua.globals();
    for name in REMOVED {
        g.raw_set(*name, Value::Nil)?;
    }
    let redis = lua.create_table()?;
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, msg: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("err", msg)?;
            Ok(t)
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, msg: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("ok", msg)?;
            Ok(t)
        })?,
    )?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
    )?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (level, parts): (i64, mlua::Variadic<mlua::String>)| {
            let msg: Vec<String> = parts
                .iter()
                .map(|p| String::from_utf8_lossy(&p.as_bytes()).into_owned())
                .collect();
            let msg = msg.join(" ");
            match level {
                3.. => tracing::warn!(target: "farcache_resp::script", "{msg}"),
                2 => tracing::info!(target: "farcache_resp::script", "{msg}"),
                _ => tracing::debug!(target: "farcache_resp::script", "{msg}"),
            }
            Ok(())
        })?,
    )?;
    for (name, level) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.raw_set(name, level)?;
    }
    // Redis 7 replicates effects always: these are kept for older scripts.
    redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    redis.raw_set("set_repl", lua.create_function(|_, _: Value| Ok(()))?)?;
    for (name, v) in [
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_SLAVE", 2),
        ("REPL_REPLICA", 2),
        ("REPL_ALL", 3),
    ] {
        redis.raw_set(name, v)?;
    }
    redis.raw_set(
        "setresp",
        lua.create_function(|_, v: i64| match v {
            2 => Ok(()),
            _ => Err(mlua::Error::runtime(
                "RESP version must be 2 (the farcache front end's scripts speak RESP2)",
            )),
        })?,
    )?;
    g.raw_set("redis", redis)?;
    super::libs::install(&lua)?;
    g.raw_set(
        "__farcache_expired",
        lua.create_function(|lua, ()| {
            Ok(lua
                .app_data_ref::<Deadline>()
                .is_some_and(|d| Instant::now() >= d.0))
        })?,
    )?;
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        |lua, _| {
            let late = lua
                .app_data_ref::<Deadline>()
                .is_some_and(|d| Instant::now() >= d.0);
            if late {
                Err(mlua::Error::runtime(format!(
                    "{KILLED}: it ran past the {} s limit",
                    TIME_LIMIT.as_secs()
                )))
            } else {
                Ok(VmState::Continue)
            }
        },
    )?;
    lua.load(PRELUDE).set_name("=farcache_prelude").exec()?;
    Ok(lua)
}

/// Runs the script `body` (named `sha`) with `keys` and `argv`, its `redis.call`s
/// going to `call`, and writes its result (or its error) to `out`. `generation` is
/// the script cache's: a flush drops the compiled functions.
pub fn run(
    generation: u64,
    sha: &str,
    body: &[u8],
    keys: &[Bytes],
    argv: &[Bytes],
    call: &mut dyn FnMut(Args) -> Called,
    out: &mut Out,
) -> Ended {
    VM.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            out.error("ERR a script cannot run another script");
            return Ended::Failed;
        };
        if slot.is_none() {
            match new_vm() {
                Ok(lua) => {
                    *slot = Some(Vm {
                        lua,
                        functions: HashMap::new(),
                        generation,
                    })
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the Lua interpreter");
                    out.error(&format!("ERR cannot start the Lua interpreter: {e}"));
                    return Ended::Failed;
                }
            }
        }
        let Some(vm) = slot.as_mut() else {
            out.error("ERR the Lua interpreter is not there");
            return Ended::Failed;
        };
        if vm.generation != generation {
            vm.functions.clear();
            vm.generation = generation;
        }
        let f = match vm.functions.get(sha) {
            Some(f) => f.clone(),
            None => match vm.lua.load(body).set_name("@user_script").into_function() {
                Ok(f) => {
                    if vm.functions.len() >= MAX_FUNCTIONS {
                        vm.functions.clear();
                    }
                    vm.functions.insert(sha.to_owned(), f.clone());
                    f
                }
                Err(e) => {
                    out.error(&format!("ERR Error compiling script: {}", innermost(&e)));
                    return Ended::Failed;
                }
            },
        };
        vm.lua.set_app_data(Deadline(Instant::now() + TIME_LIMIT));
        let done = call_script(&vm.lua, &f, keys, argv, call, out);
        vm.lua.remove_app_data::<Deadline>();
        match done {
            Ok(()) => Ended::Returned,
            Err(e) => {
                script_error(&e, sha, out);
                if innermost(&e).starts_with(KILLED) {
                    Ended::Killed
                } else {
                    Ended::Failed
                }
            }
        }
    })
}

fn call_script(
    lua: &Lua,
    f: &Function,
    keys: &[Bytes],
    argv: &[Bytes],
    call: &mut dyn FnMut(Args) -> Called,
    out: &mut Out,
) -> mlua::Result<()> {
    let g = lua.globals();
    let list = |items: &[Bytes]| -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, b) in items.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(b)?)?;
        }
        Ok(t)
    };
    g.raw_set("KEYS", list(keys)?)?;
    g.raw_set("ARGV", list(argv)?)?;
    let redis: Table = g.raw_get("redis")?;
    let call = RefCell::new(call);
    lua.scope(|scope| {
        redis.raw_set(
            "call",
            scope.create_function(|lua, args: MultiValue| redis_call(lua, &call, args, false))?,
        )?;
        redis.raw_set(
            "pcall",
            scope.create_function(|lua, args: MultiValue| redis_call(lua, &call, args, true))?,
        )?;
        let v: Value = f.call(())?;
        write_result(&v, out);
        Ok(())
    })
}

fn redis_call(
    lua: &Lua,
    call: &RefCell<&mut dyn FnMut(Args) -> Called>,
    args: MultiValue,
    protected: bool,
) -> mlua::Result<Value> {
    if args.is_empty() {
        return Err(mlua::Error::runtime(
            "Please specify at least one argument for this redis lib call",
        ));
    }
    let mut a = Args::with_capacity(args.len());
    for v in args {
        match v {
            Value::String(s) => a.push(Bytes::copy_from_slice(&s.as_bytes())),
            v @ (Value::Integer(_) | Value::Number(_)) => match lua.coerce_string(v)? {
                Some(s) => a.push(Bytes::copy_from_slice(&s.as_bytes())),
                None => return Err(bad_argument()),
            },
            _ => return Err(bad_argument()),
        }
    }
    let called = {
        let mut run = call
            .try_borrow_mut()
            .map_err(|_| mlua::Error::runtime("redis.call is already running"))?;
        (*run)(a)
    };
    let reply = match called {
        Called::Ran(bytes) => decode(&bytes),
        Called::Refused(msg) => Reply::Error(msg.into_bytes()),
    };
    match reply {
        Reply::Error(msg) if !protected => Err(mlua::Error::external(CommandError(
            String::from_utf8_lossy(&msg).into_owned(),
        ))),
        r => to_lua(lua, r),
    }
}

fn bad_argument() -> mlua::Error {
    mlua::Error::runtime("Lua redis lib command arguments must be strings or integers")
}

/// Redis's conversion of a reply to Lua: status and error replies become tables
/// with `ok` / `err`, nulls become `false`.
fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(s)?)?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(s)?)?;
            Value::Table(t)
        }
        Reply::Int(i) => Value::Integer(i),
        Reply::Bulk(Some(b)) => Value::String(lua.create_string(b)?),
        Reply::Bulk(None) | Reply::Array(None) => Value::Boolean(false),
        Reply::Array(Some(items)) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

fn one_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace(['\r', '\n'], " ")
}

/// Redis's conversion of a script's result: numbers truncate to integers, `true`
/// is 1, `false` and `nil` are null, a table with `err` / `ok` is an error / status
/// reply, any other table is an array up to its first `nil`. A table may hold
/// itself or share parts, so the reply is built aside and bounded: past
/// [`MAX_REPLY_BYTES`] it is dropped for an error instead of growing without end.
fn write_result(v: &Value, out: &mut Out) {
    let mut buf = Vec::new();
    let mut aside = Out {
        buf: &mut buf,
        proto: out.proto,
    };
    if to_out(v, &mut aside, 0) {
        out.buf.extend_from_slice(&buf);
    } else {
        out.error(&format!(
            "ERR the script's result is over {} MiB as a reply",
            MAX_REPLY_BYTES >> 20
        ));
    }
}

/// Largest reply a script's result may become: a value of the largest size and a
/// little more.
const MAX_REPLY_BYTES: usize = (512 << 20) + (1 << 20);

/// Writes `v`; false once the reply passed [`MAX_REPLY_BYTES`].
fn to_out(v: &Value, out: &mut Out, depth: usize) -> bool {
    match v {
        Value::Boolean(true) => out.int(1),
        Value::Integer(i) => out.int(*i),
        Value::Number(n) => out.int(*n as i64),
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Table(t) if depth < MAX_DEPTH => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                out.error(&one_line(&e.as_bytes()));
                return out.buf.len() <= MAX_REPLY_BYTES;
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                out.simple(&one_line(&s.as_bytes()));
                return out.buf.len() <= MAX_REPLY_BYTES;
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(v),
                }
            }
            out.array(items.len());
            for item in &items {
                if !to_out(item, out, depth + 1) {
                    return false;
                }
            }
        }
        _ => out.null(),
    }
    out.buf.len() <= MAX_REPLY_BYTES
}

/// The error a Lua failure is about, under its wrappers.
fn innermost(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => innermost(cause),
        mlua::Error::WithContext { cause, .. } => innermost(cause),
        mlua::Error::RuntimeError(m) | mlua::Error::SyntaxError { message: m, .. } => m.clone(),
        mlua::Error::MemoryError(m) => format!(
            "{m} (scripts may hold {} MiB on an event loop)",
            MEMORY_LIMIT >> 20
        ),
        e => e.to_string(),
    }
}

/// A command error raised by `redis.call` reaches the client as the command gave
/// it; a Lua error as Redis words it, naming the script.
fn script_error(e: &mlua::Error, sha: &str, out: &mut Out) {
    let mut at = e;
    loop {
        match at {
            mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
                at = cause
            }
            mlua::Error::ExternalError(x) => {
                if let Some(c) = x.downcast_ref::<CommandError>() {
                    return out.error(&c.0);
                }
                break;
            }
            _ => break,
        }
    }
    out.error(&format!(
        "ERR Error running script (call to f_{sha}): {}",
        innermost(e)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_alone(code: &str) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            proto: crate::reply::Proto::Resp2,
        };
        let mut call = |_: Args| Called::Refused("ERR no commands here".into());
        run(
            0,
            &sha1_hex(code.as_bytes()),
            code.as_bytes(),
            &[],
            &[],
            &mut call,
            &mut out,
        );
        buf
    }

    #[test]
    fn a_memory_bomb_fails_alone() {
        let t = Instant::now();
        for bomb in [
            "local t = {} for i = 1, 1e9 do t[i] = i end",
            "return #string.rep('x', 1e9)",
        ] {
            let r = String::from_utf8_lossy(&run_alone(bomb)).into_owned();
            assert!(
                r.starts_with("-ERR") && r.contains("memory"),
                "{r} after {:?}",
                t.elapsed()
            );
        }
        assert_eq!(run_alone("return 7"), b":7\r\n");
    }

    #[test]
    fn redis_libraries_answer_as_in_redis() {
        let r = run_alone(
            "local t = cjson.decode('{\"a\":[1,2.5,{\"b\":null}],\"c\":\"d\"}') \
             return {cjson.encode({1, 'x', true}), cjson.encode({k = 'v\"'}), t.a[1], t.c, \
                     tostring(t.a[2]), t.a[3].b == cjson.null}",
        );
        assert_eq!(
            String::from_utf8_lossy(&r),
            "*6\r\n$12\r\n[1,\"x\",true]\r\n$11\r\n{\"k\":\"v\\\"\"}\r\n:1\r\n$1\r\nd\r\n$3\r\n2.5\r\n:1\r\n"
        );
        let r = run_alone(
            "return {bit.band(0xff, 0x0f), bit.bor(1, 2, 4), bit.bxor(5, 1), bit.lshift(1, 31), \
                     bit.rshift(-1, 28), bit.arshift(-16, 2), bit.tohex(255), bit.tohex(255, -4), \
                     bit.bnot(0), bit.tobit(2^32 + 5), redis.replicate_commands()}",
        );
        assert_eq!(
            String::from_utf8_lossy(&r),
            "*11\r\n:15\r\n:7\r\n:4\r\n:-2147483648\r\n:15\r\n:-4\r\n$8\r\n000000ff\r\n$4\r\n00FF\r\n:-1\r\n:5\r\n:1\r\n"
        );
        let r = String::from_utf8_lossy(&run_alone("return cjson.decode('{')")).into_owned();
        assert!(
            r.starts_with("-ERR Error running script") && r.contains("cjson.decode"),
            "{r}"
        );
    }

    #[test]
    fn a_result_that_holds_itself_is_bounded() {
        let t = Instant::now();
        // 64 wide, holding itself: 64^32 values if written out.
        let r = run_alone(
            "local t = {} for i = 1, 64 do t[i] = t end t[65] = string.rep('x', 1000) return t",
        );
        let r = String::from_utf8_lossy(&r[..r.len().min(200)]).into_owned();
        assert!(r.starts_with("-ERR the script's result is over"), "{r}");
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    }
}
