//! The Lua of argocd-cm's custom actions, run as upstream runs it (util/lua/lua.go on
//! gopher-lua, a Lua 5.1): the resource is the global `obj`, V2's parameters are the strings of
//! `actionParams`, and the script's result is a table. The sandbox has the base, table, string
//! and math libraries and an `os` with only `time` and `date` (also through `require("os")`);
//! nothing reads files, runs programs or loads native code. A script is bounded in instructions
//! and memory, so one that loops or grows without end is refused, not left running.

use std::cell::Cell;
use std::rc::Rc;

use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, Value as LuaValue, VmState};
use serde_json::{Map, Number, Value};

/// How many Lua instructions one script may run: far more than a real action needs, far fewer
/// than an endless loop would take.
const INSTRUCTIONS: u64 = 20_000_000;
/// How often the budget is counted down.
const STEP: u32 = 10_000;
/// How much memory one script's state may hold.
const MEMORY: usize = 64 << 20;
/// How deep a returned table may nest (a table that holds itself has no end).
const DEPTH: usize = 100;

/// `pcall` and `xpcall` that do not swallow the end of the budget: once it is spent, the
/// error goes on up to the caller, however many protected calls the script nests.
const GUARDS: &str = r#"
local raw_pcall, raw_xpcall, spent, unpack, select = pcall, xpcall, budget_spent, unpack, select
local function pass(ok, ...)
  if not ok and spent() then error((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return pass(raw_pcall(f, ...)) end
xpcall = function(f, handler) return pass(raw_xpcall(f, handler)) end
budget_spent = nil
"#;

/// Runs `source` on `obj` and gives the table it returns, as JSON (upstream's encoding: an
/// empty table is an empty array). The error says what went wrong in the script, without a
/// stack trace.
pub fn run(source: &str, obj: &Value, params: &[(String, String)], now_s: i64) -> Result<Value, String> {
    let lua = sandbox(now_s).map_err(|e| message(&e))?;
    let globals = lua.globals();
    let set = || -> mlua::Result<()> {
        let table = lua.create_table()?;
        for (name, value) in params {
            table.raw_set(name.as_str(), value.as_str())?;
        }
        globals.raw_set("actionParams", table)?;
        globals.raw_set("obj", to_lua(&lua, obj)?)
    };
    set().map_err(|e| message(&e))?;
    let returned: LuaValue = lua
        .load(source)
        .set_mode(ChunkMode::Text)
        .set_name("=action")
        .eval()
        .map_err(|e| message(&e))?;
    match returned {
        LuaValue::Table(table) => to_json(&table, 0),
        other => Err(format!(
            "expect table output from Lua script, not {}",
            type_name(&other)
        )),
    }
}

fn sandbox(now_s: i64) -> mlua::Result<Lua> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    lua.set_memory_limit(MEMORY)?;
    let left = Rc::new(Cell::new(INSTRUCTIONS));
    let counter = Rc::clone(&left);
    lua.set_hook(
        HookTriggers {
            every_nth_instruction: Some(STEP),
            ..HookTriggers::default()
        },
        move |_, _| {
            let now = counter.get().saturating_sub(u64::from(STEP));
            counter.set(now);
            if now == 0 {
                return Err(mlua::Error::RuntimeError(format!(
                    "the script ran over its budget of {INSTRUCTIONS} instructions"
                )));
            }
            Ok(VmState::Continue)
        },
    )?;
    let globals = lua.globals();
    // What reads files, loads code from outside or outlives one call. Lua 5.1's `load` and
    // `loadstring` also take precompiled chunks, which the VM does not verify (a crafted one can
    // corrupt its memory), and `string.dump` makes them: none of the three is left.
    for name in [
        "dofile",
        "loadfile",
        "load",
        "loadstring",
        "require",
        "module",
        "coroutine",
        "collectgarbage",
        "print",
    ] {
        globals.raw_set(name, LuaValue::Nil)?;
    }
    if let Ok(string) = globals.raw_get::<Table>("string") {
        string.raw_set("dump", LuaValue::Nil)?;
    }
    let os = lua.create_table()?;
    os.raw_set(
        "time",
        lua.create_function(move |_, t: Option<Table>| os_time(now_s, t))?,
    )?;
    os.raw_set(
        "date",
        lua.create_function(move |lua, (format, at): (Option<String>, Option<i64>)| {
            os_date(lua, format.as_deref().unwrap_or("%c"), at.unwrap_or(now_s))
        })?,
    )?;
    globals.raw_set("os", os.clone())?;
    globals.raw_set(
        "require",
        lua.create_function(move |_, name: String| {
            if name == "os" {
                Ok(os.clone())
            } else {
                Err(mlua::Error::RuntimeError(format!("module {name:?} not found")))
            }
        })?,
    )?;
    let spent = Rc::clone(&left);
    globals.raw_set(
        "budget_spent",
        lua.create_function(move |_, ()| Ok(spent.get() == 0))?,
    )?;
    lua.load(GUARDS).set_name("=guards").exec()?;
    Ok(lua)
}

/// `os.time()`: the clock's now; `os.time{year=…}`: that moment in UTC.
fn os_time(now_s: i64, table: Option<Table>) -> mlua::Result<i64> {
    let Some(t) = table else {
        return Ok(now_s);
    };
    let field = |name: &str, default: i64| -> mlua::Result<i64> {
        Ok(t.raw_get::<Option<i64>>(name)?.unwrap_or(default))
    };
    let civil = jiff::civil::DateTime::new(
        narrow(field("year", 1970)?)?,
        narrow(field("month", 1)?)?,
        narrow(field("day", 1)?)?,
        narrow(field("hour", 12)?)?,
        narrow(field("min", 0)?)?,
        narrow(field("sec", 0)?)?,
        0,
    )
    .map_err(|e| mlua::Error::RuntimeError(format!("os.time: {e}")))?;
    let at = civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|e| mlua::Error::RuntimeError(format!("os.time: {e}")))?;
    Ok(at.timestamp().as_second())
}

fn narrow<T: TryFrom<i64>>(v: i64) -> mlua::Result<T> {
    T::try_from(v).map_err(|_| mlua::Error::RuntimeError(format!("os.time: {v} is out of range")))
}

/// `os.date`: a strftime format, in UTC ("!" first, or not: the server keeps UTC), or `*t` for
/// a table of the fields.
fn os_date(lua: &Lua, format: &str, at: i64) -> mlua::Result<LuaValue> {
    let format = format.strip_prefix('!').unwrap_or(format);
    let when = jiff::Timestamp::from_second(at)
        .map_err(|e| mlua::Error::RuntimeError(format!("os.date: {e}")))?
        .to_zoned(jiff::tz::TimeZone::UTC);
    if format == "*t" {
        let t = lua.create_table()?;
        t.raw_set("year", when.year())?;
        t.raw_set("month", when.month())?;
        t.raw_set("day", when.day())?;
        t.raw_set("hour", when.hour())?;
        t.raw_set("min", when.minute())?;
        t.raw_set("sec", when.second())?;
        t.raw_set("wday", when.weekday().to_sunday_one_offset())?;
        t.raw_set("yday", when.day_of_year())?;
        t.raw_set("isdst", false)?;
        return Ok(LuaValue::Table(t));
    }
    let text = jiff::fmt::strtime::format(format, &when)
        .map_err(|e| mlua::Error::RuntimeError(format!("os.date: {e}")))?;
    Ok(LuaValue::String(lua.create_string(text)?))
}

/// JSON as Lua values: objects and arrays as tables, null as nil.
fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => LuaValue::Number(n.as_f64().unwrap_or_default()),
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Value::Object(fields) => {
            let t = lua.create_table_with_capacity(0, fields.len())?;
            for (k, item) in fields {
                t.raw_set(k.as_str(), to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// A returned table as JSON, as upstream's encoder reads it: a table whose keys are 1..n is
/// an array (an empty one too), one with string keys an object; other keys are refused.
fn to_json(table: &Table, depth: usize) -> Result<Value, String> {
    if depth > DEPTH {
        return Err(format!("the returned table nests deeper than {DEPTH} levels"));
    }
    let len = table.raw_len();
    let mut pairs = Vec::new();
    for pair in table.pairs::<LuaValue, LuaValue>() {
        pairs.push(pair.map_err(|e| message(&e))?);
    }
    if pairs.len() == len {
        let mut items = Vec::with_capacity(len);
        for i in 1..=len {
            let item: LuaValue = table.raw_get(i).map_err(|e| message(&e))?;
            items.push(value_to_json(item, depth)?);
        }
        return Ok(Value::Array(items));
    }
    let mut fields = Map::new();
    for (key, item) in pairs {
        let LuaValue::String(key) = key else {
            return Err(format!(
                "cannot encode a table with a {} key as JSON (mixed or invalid key types)",
                type_name(&key)
            ));
        };
        fields.insert(key.to_string_lossy(), value_to_json(item, depth)?);
    }
    Ok(Value::Object(fields))
}

fn value_to_json(v: LuaValue, depth: usize) -> Result<Value, String> {
    Ok(match v {
        LuaValue::Nil => Value::Null,
        LuaValue::Boolean(b) => Value::Bool(b),
        LuaValue::Integer(i) => Value::from(i),
        LuaValue::Number(n) => number(n)?,
        LuaValue::String(s) => Value::String(s.to_string_lossy()),
        LuaValue::Table(t) => to_json(&t, depth + 1)?,
        other => return Err(format!("cannot encode {} to JSON", type_name(&other))),
    })
}

/// A Lua number: whole numbers as JSON integers (Lua 5.1 has only doubles).
fn number(n: f64) -> Result<Value, String> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        return Ok(Value::from(n as i64));
    }
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| format!("cannot encode the number {n} to JSON"))
}

/// Lua's own name of a value's type (mlua tells whole numbers apart; Lua 5.1 does not).
fn type_name(v: &LuaValue) -> &'static str {
    match v {
        LuaValue::Integer(_) => "number",
        other => other.type_name(),
    }
}

/// What the script did wrong, without Lua's stack trace.
pub fn message(err: &mlua::Error) -> String {
    match err {
        mlua::Error::SyntaxError { message, .. } => format!("syntax error: {message}"),
        // Lua's stack trace would tell the caller nothing about their script.
        mlua::Error::RuntimeError(m) => m.split("\nstack traceback:").next().unwrap_or("").to_owned(),
        mlua::Error::MemoryError(_) => format!("the script ran over its {} MiB of memory", MEMORY >> 20),
        mlua::Error::CallbackError { cause, .. } => message(cause),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_object_and_parameters_reach_the_script() {
        let out = run(
            "obj.spec.replicas = tonumber(actionParams['n']); return obj",
            &json!({"spec": {"replicas": 1, "list": [1, "a"]}, "none": null}),
            &[("n".into(), "3".into())],
            0,
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"replicas": 3, "list": [1, "a"]}}));
    }

    #[test]
    fn os_date_and_time_read_the_clock_passed_in() {
        let out = run(
            "return {d = os.date('!%Y-%m-%dT%XZ'), t = os.time(), r = require('os').time{year=2001, month=9, day=9, hour=1, min=46, sec=40}}",
            &json!({}),
            &[],
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"d": "2023-11-14T22:13:20Z", "t": 1_700_000_000, "r": 1_000_000_000})
        );
    }

    #[test]
    fn an_endless_loop_is_stopped_even_under_pcall() {
        let err = run(
            "while true do pcall(function() while true do end end) end",
            &json!({}),
            &[],
            0,
        )
        .unwrap_err();
        assert!(err.contains("budget"), "{err}");
    }

    #[test]
    fn errors_say_what_without_a_stack() {
        let err = run("return {", &json!({}), &[], 0).unwrap_err();
        assert!(err.starts_with("syntax error"), "{err}");
        let err = run("error('no replicas', 0)", &json!({}), &[], 0).unwrap_err();
        assert_eq!(err, "no replicas");
        let err = run("return 1", &json!({}), &[], 0).unwrap_err();
        assert_eq!(err, "expect table output from Lua script, not number");
        let err = run(
            "local t = {} t[1] = 1 t.a = 2 t[true] = 3 return t",
            &json!({}),
            &[],
            0,
        )
        .unwrap_err();
        assert!(err.contains("key"), "{err}");
    }

    #[test]
    fn nothing_outside_is_reachable() {
        for script in [
            "return io.open('x')",
            "return dofile('x')",
            "return os.execute('true')",
            "return require('io')",
            "return loadstring('return 1')()",
            "return load(function() return nil end)",
            "return string.dump(function() end)",
            // A precompiled chunk is refused as the script itself.
            "\u{1b}LuaQ\0\u{1}\u{4}",
        ] {
            assert!(run(script, &json!({}), &[], 0).is_err(), "{script}");
        }
    }

    #[test]
    fn memory_is_bounded() {
        let err = run("local s = 'x' while true do s = s .. s end", &json!({}), &[], 0).unwrap_err();
        assert!(err.contains("memory") || err.contains("budget"), "{err}");
    }

    #[test]
    fn empty_tables_are_arrays_and_cycles_are_refused() {
        assert_eq!(
            run("return {a = {}}", &json!({}), &[], 0).unwrap(),
            json!({"a": []})
        );
        let err = run("local t = {} t.t = t return t", &json!({}), &[], 0).unwrap_err();
        assert!(err.contains("nests"), "{err}");
    }
}
