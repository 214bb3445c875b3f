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
                .filter(|(k, _)| {
                    // Setting names are matched regardless of case, as Redis does.
                    a[2..]
                        .iter()
                        .any(|p| crate::pattern::matches(&p.to_ascii_lowercase(), k.as_bytes()))
                })
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
            "# Server\r\nredis_version:{REDIS_COMPAT}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nfarcache_version:{VERSION}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{:032x}00000000\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:10\r\nconfigured_hz:10\r\nexecutable:{}\r\nconfig_file:\r\n\r\n",
            std::env::consts::OS,
            std::env::consts::ARCH,
            usize::BITS,
            std::process::id(),
            sh.run_id,
            sh.addr.port(),
            sh.started.elapsed().as_secs(),
            sh.started.elapsed().as_secs() / 86_400,
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
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
        let runs = sh.scripts.runs();
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nbatched_rounds:{}\r\nbatched_ops:{}\r\nbatched_store_us:{}\r\noffloaded_commands:{}\r\nrejected_unauthenticated:{}\r\nscripts_returned:{}\r\nscripts_failed:{}\r\nscripts_killed:{}\r\n\r\n",
            sh.connections_total.load(Ordering::Relaxed),
            sh.commands.load(Ordering::Relaxed),
            sh.rounds.load(Ordering::Relaxed),
            sh.round_ops.load(Ordering::Relaxed),
            sh.round_store_us.load(Ordering::Relaxed),
            sh.offloaded.load(Ordering::Relaxed),
            sh.rejected_unauthenticated.load(Ordering::Relaxed),
            runs.0,
            runs.1,
            runs.2
        );
    }
    if want("memory") {
        let scripts = sh.scripts.size();
        // The front end's data lives in the cache: its capacity is the limit.
        let _ = write!(
            t,
            "# Memory\r\nused_memory:{}\r\nmaxmemory:{}\r\nmaxmemory_policy:allkeys-lru\r\nnumber_of_cached_scripts:{}\r\nused_memory_scripts:{}\r\n\r\n",
            info.capacity, info.capacity, scripts.0, scripts.1
        );
    }
    if want("persistence") {
        t.push_str("# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:0\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\n\r\n");
    }
    if want("replication") {
        // Copies are farcache's own (regions' backups), not Redis replicas.
        t.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
    }
    if want("cluster") {
        // One front end is one Redis node: clients must not go looking for slots.
        t.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
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
                let keys = st.live.saturating_sub(st.expired);
                let _ = write!(t, "db0:keys={keys},expires=0,avg_ttl=0\r\n");
            }
            Err(e) => {
                let _ = write!(t, "# census failed: {e}\r\n");
            }
        }
    }
    out.text(&t);
}

/// `TIME`: seconds and microseconds of this front end's clock (expiries are set
/// against it).
pub fn time(_: &mut Session, _: &Args, out: &mut Out) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    out.array(2);
    out.bulk(now.as_secs().to_string().as_bytes());
    out.bulk(now.subsec_micros().to_string().as_bytes());
}

/// `LASTSAVE`: the front end saves nothing (the cache is memory); its start time.
pub fn lastsave(s: &mut Session, _: &Args, out: &mut Out) {
    let started = std::time::SystemTime::now()
        .checked_sub(s.shared.started.elapsed())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    out.int(started.as_secs() as i64);
}
