//! Connection commands: PING, ECHO, QUIT, HELLO, AUTH, CLIENT, SELECT, COMMAND,
//! CONFIG, INFO, DBSIZE.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::parse::Args;
use crate::reply::{Out, Proto};
use crate::session::Session;

/// What `HELLO` and `INFO` call the server: the Redis version whose commands this
/// front end follows (clients enable features by it), and farcache's own.
pub const REDIS_COMPAT: &str = "7.2.0";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn ping(_: &mut Session, a: &Args, out: &mut Out) {
    match a.len() {
        1 => out.simple("PONG"),
        2 => out.bulk(&a[1]),
        _ => out.error("ERR wrong number of arguments for 'ping' command"),
    }
}

pub fn echo(_: &mut Session, a: &Args, out: &mut Out) {
    out.bulk(&a[1]);
}

pub fn quit(s: &mut Session, _: &Args, out: &mut Out) {
    s.quit = true;
    out.ok();
}

fn try_auth(s: &mut Session, user: &[u8], pass: &[u8]) -> Result<(), String> {
    if !s.shared.auth.requires_auth() {
        return Err(
            "ERR AUTH <password> called without any password configured for the \
                    default user. Are you sure your configuration is correct?"
                .into(),
        );
    }
    if !user.eq_ignore_ascii_case(b"default") {
        return Err("WRONGPASS invalid username-password pair or user is disabled.".into());
    }
    match s.shared.auth.check(pass) {
        Some(a) => {
            s.access = Some(a);
            Ok(())
        }
        None => {
            tracing::info!(client = s.id, "RESP AUTH refused");
            Err("WRONGPASS invalid username-password pair or user is disabled.".into())
        }
    }
}

pub fn auth(s: &mut Session, a: &Args, out: &mut Out) {
    let r = match a.len() {
        2 => try_auth(s, b"default", &a[1]),
        3 => try_auth(s, &a[1], &a[2]),
        _ => Err("ERR syntax error".into()),
    };
    match r {
        Ok(()) => out.ok(),
        Err(e) => out.error(&e),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
pub fn hello(s: &mut Session, a: &Args, out: &mut Out) {
    let mut proto = s.proto;
    if a.len() >= 2 {
        proto = match &a[1][..] {
            b"2" => Proto::Resp2,
            b"3" => Proto::Resp3,
            _ => {
                out.error("NOPROTO unsupported protocol version");
                return;
            }
        };
    }
    let mut i = 2;
    let mut name = None;
    while i < a.len() {
        if a[i].eq_ignore_ascii_case(b"auth") && i + 2 < a.len() {
            if let Err(e) = try_auth(s, &a[i + 1], &a[i + 2]) {
                out.error(&e);
                return;
            }
            i += 3;
        } else if a[i].eq_ignore_ascii_case(b"setname") && i + 1 < a.len() {
            name = Some(a[i + 1].clone());
            i += 2;
        } else {
            out.error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&a[i])
            ));
            return;
        }
    }
    if s.access.is_none() {
        out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        return;
    }
    if let Some(n) = name {
        s.name = Some(n);
    }
    s.proto = proto;
    out.proto = proto;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(REDIS_COMPAT.as_bytes());
    out.bulk(b"proto");
    out.int(if proto == Proto::Resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(s.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

pub fn client(s: &mut Session, a: &Args, out: &mut Out) {
    let sub = a[1].to_ascii_lowercase();
    match (&sub[..], a.len()) {
        (b"setname", 3) => {
            if a[2].iter().any(|&c| c <= b' ' || c > b'~') {
                out.error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            } else {
                s.name = (!a[2].is_empty()).then(|| a[2].clone());
                out.ok();
            }
        }
        (b"getname", 2) => out.opt_bulk(s.name.as_deref()),
        (b"id", 2) => out.int(s.id as i64),
        // Library name and version (redis-py sends them on connect): accepted.
        (b"setinfo", 4) => out.ok(),
        (b"info", 2) => {
            let line = format!(
                "id={} addr=? laddr={} name={} resp={}\n",
                s.id,
                s.shared.addr,
                String::from_utf8_lossy(s.name.as_deref().unwrap_or_default()),
                if s.proto == Proto::Resp3 { 3 } else { 2 }
            );
            out.bulk(line.as_bytes());
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for 'client|{}' command",
            String::from_utf8_lossy(&sub)
        )),
    }
}

/// One keyspace per front end: database 0.
pub fn select(_: &mut Session, a: &Args, out: &mut Out) {
    if &a[1][..] == b"0" {
        out.ok();
    } else {
        out.error("ERR DB index is out of range (a farcache store is one keyspace: use another store for another database)");
    }
}

/// `COMMAND` (redis-cli asks `COMMAND DOCS` for its hints): the names, no docs.
pub fn command(_: &mut Session, a: &Args, out: &mut Out) {
    let sub = a.get(1).map(|s| s.to_ascii_lowercase());
    match sub.as_deref() {
        Some(b"count") => out.int(super::names().count() as i64),
        Some(b"docs") => out.map(0),
        None | Some(b"list") => {
            let names: Vec<&str> = super::names().collect();
            out.array(names.len());
            for n in names {
                out.bulk(n.as_bytes());
            }
        }
        Some(other) => out.error(&format!(
            "ERR unknown subcommand '{}'",
            String::from_utf8_lossy(other)
        )),
    }
}

/// `CONFIG GET` answers the two settings redis-benchmark asks for; the front end has
/// no runtime configuration to change.
pub fn config(_: &mut Session, a: &Args, out: &mut Out) {
    let sub = a[1].to_ascii_lowercase();
    match &sub[..] {
        b"get" if a.len() >= 3 => {
            let known: [(&str, &str); 2] = [("save", ""), ("appendonly", "no")];
            let hits: Vec<_> = known
                .iter()
                .filter(|(k, _)| a[2..].iter().any(|p| glob(p, k.as_bytes())))
                .collect();
            out.map(hits.len());
            for (k, v) in hits {
                out.bulk(k.as_bytes());
                out.bulk(v.as_bytes());
            }
        }
        b"set" | b"resetstat" | b"rewrite" => {
            out.error("ERR the farcache front end has no runtime configuration (restart it with other flags)");
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for 'config|{}' command",
            String::from_utf8_lossy(&sub)
        )),
    }
}

/// `*` and exact matches (enough for `CONFIG GET`).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    pattern == b"*" || pattern.eq_ignore_ascii_case(name)
}

pub fn info(s: &mut Session, a: &Args, out: &mut Out) {
    let want = |section: &str| {
        a.len() == 1
            || a[1..].iter().any(|x| {
                x.eq_ignore_ascii_case(section.as_bytes())
                    || x.eq_ignore_ascii_case(b"all")
                    || x.eq_ignore_ascii_case(b"everything")
                    || x.eq_ignore_ascii_case(b"default")
            })
    };
    let sh = &s.shared;
    let cache = sh.store.cache();
    let info = cache.info();
    let mut t = String::new();
    if want("server") {
        let _ = write!(
            t,
            "# Server\r\nredis_version:{REDIS_COMPAT}\r\nfarcache_version:{VERSION}\r\nredis_mode:standalone\r\nos:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            std::env::consts::OS,
            std::process::id(),
            sh.addr.port(),
            sh.started.elapsed().as_secs()
        );
    }
    if want("clients") {
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nrejected_connections:{}\r\n\r\n",
            sh.connected.load(Ordering::Relaxed),
            sh.rejected.load(Ordering::Relaxed)
        );
    }
    if want("stats") {
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nbatched_rounds:{}\r\nbatched_ops:{}\r\nbatched_store_us:{}\r\n\r\n",
            sh.connections_total.load(Ordering::Relaxed),
            sh.commands.load(Ordering::Relaxed),
            sh.rounds.load(Ordering::Relaxed),
            sh.round_ops.load(Ordering::Relaxed),
            sh.round_store_us.load(Ordering::Relaxed)
        );
    }
    if want("farcache") {
        let _ = write!(
            t,
            "# Farcache\r\ncache:{}\r\ncapacity:{}\r\nregions:{}\r\nregion_size:{}\r\nauth:{}\r\n\r\n",
            info.name,
            info.capacity,
            info.regions.len(),
            info.region_size,
            if sh.auth.requires_auth() {
                "token"
            } else {
                "none"
            }
        );
    }
    if want("keyspace") {
        t.push_str("# Keyspace\r\n");
        match sh.store.stats() {
            Ok(st) => {
                let _ = write!(t, "db0:keys={},expires=0,avg_ttl=0\r\n", st.live);
            }
            Err(e) => {
                let _ = write!(t, "# census failed: {e}\r\n");
            }
        }
    }
    out.text(&t);
}

pub fn dbsize(s: &mut Session, _: &Args, out: &mut Out) {
    match s.shared.store.stats() {
        Ok(st) => out.int(st.live as i64),
        Err(e) => out.error(&crate::error::store_error_line(&e)),
    }
}
