//! The libraries Redis gives scripts besides Lua's own: `cjson` (JSON) and `bit`
//! (LuaBitOp's 32-bit operations), written against Redis's behaviour.

use mlua::{Lua, Table, Value, Variadic};

/// Deepest JSON either way.
const MAX_DEPTH: usize = 128;

pub fn install(lua: &Lua) -> mlua::Result<()> {
    let g = lua.globals();
    g.raw_set("cjson", cjson(lua)?)?;
    g.raw_set("bit", bit(lua)?)?;
    Ok(())
}

fn cjson(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "encode",
        lua.create_function(|lua, v: Value| {
            let mut out = Vec::new();
            encode(&v, &mut out, 0).map_err(mlua::Error::runtime)?;
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "decode",
        lua.create_function(|lua, s: mlua::String| {
            let v: serde_json::Value = serde_json::from_slice(&s.as_bytes())
                .map_err(|e| mlua::Error::runtime(format!("cjson.decode: {e}")))?;
            decode(lua, &v, 0)
        })?,
    )?;
    t.raw_set("null", Value::NULL)?;
    Ok(t)
}

fn encode(v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("cjson.encode: nested deeper than {MAX_DEPTH}"));
    }
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        v if *v == Value::NULL => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Number(n) if n.is_finite() => {
            if n.fract() == 0.0 && n.abs() < 1e15 {
                out.extend_from_slice((*n as i64).to_string().as_bytes());
            } else {
                out.extend_from_slice(format!("{n}").as_bytes());
            }
        }
        Value::Number(_) => return Err("cjson.encode: cannot encode inf or nan".into()),
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) => {
            let n = t.raw_len();
            let mut pairs = 0usize;
            for p in t.pairs::<Value, Value>() {
                p.map_err(|e| e.to_string())?;
                pairs += 1;
            }
            if n > 0 && pairs == n {
                out.push(b'[');
                for i in 1..=n {
                    if i > 1 {
                        out.push(b',');
                    }
                    let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                    encode(&item, out, depth + 1)?;
                }
                out.push(b']');
            } else {
                out.push(b'{');
                let mut first = true;
                for p in t.pairs::<Value, Value>() {
                    let (k, v) = p.map_err(|e| e.to_string())?;
                    let key = match &k {
                        Value::String(s) => s.as_bytes().to_vec(),
                        Value::Integer(i) => i.to_string().into_bytes(),
                        Value::Number(n) => format!("{n}").into_bytes(),
                        _ => {
                            return Err(
                                "cjson.encode: table keys must be strings or numbers".into()
                            );
                        }
                    };
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    string(&key, out);
                    out.push(b':');
                    encode(&v, out, depth + 1)?;
                }
                out.push(b'}');
            }
        }
        _ => return Err(format!("cjson.encode: cannot encode a {}", v.type_name())),
    }
    Ok(())
}

/// A JSON string; bytes that are not UTF-8 pass through as cjson passes them.
fn string(b: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in b {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'/' => out.extend_from_slice(b"\\/"),
            c if c < 0x20 => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn decode(lua: &Lua, v: &serde_json::Value, depth: usize) -> mlua::Result<Value> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::runtime(format!(
            "cjson.decode: nested deeper than {MAX_DEPTH}"
        )));
    }
    Ok(match v {
        serde_json::Value::Null => Value::NULL,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, decode(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(lua.create_string(k)?, decode(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
    })
}

/// LuaBitOp: arguments are taken modulo 2^32, results are signed 32-bit numbers.
fn bit(lua: &Lua) -> mlua::Result<Table> {
    fn tobit(n: f64) -> i32 {
        // Modulo 2^32 of the integer part, as LuaBitOp normalises.
        (n.trunc().rem_euclid(4_294_967_296.0) as u64 as u32) as i32
    }
    let t = lua.create_table()?;
    let one = |f: fn(i32) -> i32| lua.create_function(move |_, n: f64| Ok(f(tobit(n))));
    let fold = |f: fn(i32, i32) -> i32| {
        lua.create_function(move |_, (first, rest): (f64, Variadic<f64>)| {
            Ok(rest.iter().fold(tobit(first), |a, &b| f(a, tobit(b))))
        })
    };
    let shift = |f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, (n, by): (f64, f64)| Ok(f(tobit(n), (tobit(by) & 31) as u32)))
    };
    t.raw_set("tobit", one(|x| x)?)?;
    t.raw_set("bnot", one(|x| !x)?)?;
    t.raw_set("bswap", one(i32::swap_bytes)?)?;
    t.raw_set("band", fold(|a, b| a & b)?)?;
    t.raw_set("bor", fold(|a, b| a | b)?)?;
    t.raw_set("bxor", fold(|a, b| a ^ b)?)?;
    t.raw_set("lshift", shift(|a, s| ((a as u32) << s) as i32)?)?;
    t.raw_set("rshift", shift(|a, s| ((a as u32) >> s) as i32)?)?;
    t.raw_set("arshift", shift(|a, s| a >> s)?)?;
    t.raw_set("rol", shift(|a, s| (a as u32).rotate_left(s) as i32)?)?;
    t.raw_set("ror", shift(|a, s| (a as u32).rotate_right(s) as i32)?)?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (n, digits): (f64, Option<f64>)| {
            let x = tobit(n) as u32;
            let d = digits.map_or(8, |d| d as i64);
            let width = d.unsigned_abs().clamp(1, 8) as usize;
            let s = format!("{x:08x}");
            let s = &s[8 - width..];
            Ok(if d < 0 {
                s.to_ascii_uppercase()
            } else {
                s.to_owned()
            })
        })?,
    )?;
    Ok(t)
}
