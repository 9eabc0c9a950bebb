//! RBAC engine benchmark: compile (reload) time and memory of a policy, then
//! per-decision latency, uncached and cached, for a user in many groups.
//! Prints one JSON line per measurement. Driven by benches/rbac.sh.
//!
//! cargo run --release --example rbac_bench -- --policy P.csv --requests R.csv --groups G.txt \
//!     [--user dev@example.com] [--seconds 3] [--max-decisions 2000000] [--loads 7]
//!     [--only uncached_groups,cached_groups,uncached_plain,cached_plain]
//!
//! - The policy file is loaded as `policy.csv` of an argocd-rbac-cm data map, with the
//!   built-in roles (`LoadOptions::default()`), no `policy.default`, default scopes.
//! - `uncached_groups`: `decide_uncached(user, Some(groups))`, cycling over the requests.
//! - `cached_groups`: `decide(Subject::Claims { user, claims: {"groups": [...]} })` after one
//!   warm-up pass, so every timed call is a cache hit.
//! - `uncached_plain` / `cached_plain`: the request file's own subject as a plain subject
//!   (`Subject::Plain`, no groups): the same question the Go peer answers.
//! - Latency is `Instant` around each call (the timer's own cost is reported as
//!   `timer_overhead_ns` and included); decisions/s is calls over the loop's wall time.
//!   `request_fastest_*`: percentiles over the requests of each request's fastest timed call,
//!   i.e. the tail that comes from the requests themselves rather than from preemption
//!   (meaningful when `full_passes` is well above 1).
//! - Memory: RSS (/proc/self/statm) growth from building one policy that is kept alive, and
//!   after `--loads` more loads that are dropped (one still alive); VmHWM. (The crate forbids
//!   `unsafe`, so there is no counting allocator: these are glibc malloc's RSS figures.)

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tiphys::rbac::{FixedProjects, LoadOptions, Policy, Subject};

fn rss_bytes() -> u64 {
    // statm: size resident shared text lib data dt (pages)
    let text = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn status_kb(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `--only a,b`: run only these decision measurements (for profiling).
static ONLY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

struct Request {
    sub: String,
    res: String,
    act: String,
    obj: String,
}

fn read_requests(path: &str) -> anyhow::Result<Vec<Request>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields =
            tiphys::rbac::csv::split_fields(line).map_err(|e| anyhow::anyhow!("{path}:{}: {e}", i + 1))?;
        let [sub, res, act, obj] = <[String; 4]>::try_from(fields)
            .map_err(|f| anyhow::anyhow!("{path}:{}: expected 4 fields, got {}", i + 1, f.len()))?;
        out.push(Request { sub, res, act, obj });
    }
    anyhow::ensure!(!out.is_empty(), "{path}: no requests");
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `decide(i)` once per call, cycling over `n` requests, until `max` calls or `limit`.
fn measure(
    name: &str,
    n: usize,
    max: usize,
    limit: Duration,
    timer_ns: u64,
    mut decide: impl FnMut(usize) -> bool,
) {
    if ONLY.get().is_some_and(|only| !only.split(',').any(|o| o == name)) {
        return;
    }
    let mut allowed = 0usize;
    for i in 0..n {
        allowed += usize::from(decide(i));
    }
    let mut lat: Vec<u32> = Vec::with_capacity(max.min(4_000_000));
    let start = Instant::now();
    let deadline = start + limit;
    let mut i = 0usize;
    let mut end = start;
    // per request, the fastest of its timed calls: its cost without preemption or cache misses
    let mut fastest = vec![u32::MAX; n];
    while lat.len() < max && end < deadline {
        let t0 = Instant::now();
        black_box(decide(i));
        end = Instant::now();
        let ns = u32::try_from((end - t0).as_nanos()).unwrap_or(u32::MAX);
        lat.push(ns);
        fastest[i] = fastest[i].min(ns);
        i += 1;
        if i == n {
            i = 0;
        }
    }
    let secs = (end - start).as_secs_f64();
    let count = lat.len();
    lat.sort_unstable();
    let pct = |p: f64| lat[((count as f64 * p) as usize).min(count - 1)];
    let passes = count / n;
    fastest.sort_unstable();
    let fastest_pct = |p: f64| fastest[((n as f64 * p) as usize).min(n - 1)];
    let mean_ns = lat.iter().map(|&v| u64::from(v)).sum::<u64>() as f64 / count as f64;
    println!(
        "{}",
        json!({
            "tool": "tiphys rbac_bench",
            "measure": name,
            "requests": n,
            "allowed_per_pass": allowed,
            "decisions": count,
            "seconds": secs,
            "decisions_per_sec": count as f64 / secs,
            "mean_ns": mean_ns.round(),
            "p50_ns": pct(0.50),
            "p90_ns": pct(0.90),
            "p99_ns": pct(0.99),
            "p999_ns": pct(0.999),
            "max_ns": lat[count - 1],
            "timer_overhead_ns": timer_ns,
            "full_passes": passes,
            "request_fastest_p50_ns": fastest_pct(0.50),
            "request_fastest_p99_ns": fastest_pct(0.99),
            "request_fastest_max_ns": fastest[n - 1],
        })
    );
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut policy_path, mut requests_path, mut groups_path) = (None, None, None);
    let mut user = "dev@example.com".to_owned();
    let mut seconds = 3.0f64;
    let mut max_decisions = 2_000_000usize;
    let mut loads = 7usize;
    let mut only: Option<String> = None;
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--policy" => policy_path = Some(value),
            "--requests" => requests_path = Some(value),
            "--groups" => groups_path = Some(value),
            "--user" => user = value,
            "--seconds" => seconds = value.parse()?,
            "--max-decisions" => max_decisions = value.parse()?,
            "--loads" => loads = value.parse::<usize>()?.max(1),
            "--only" => only = Some(value),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    if let Some(only) = only {
        let _ = ONLY.set(only);
    }
    let policy_path = policy_path.ok_or_else(|| anyhow::anyhow!("--policy is required"))?;
    let requests = read_requests(&requests_path.ok_or_else(|| anyhow::anyhow!("--requests is required"))?)?;
    let groups_text =
        std::fs::read_to_string(groups_path.ok_or_else(|| anyhow::anyhow!("--groups is required"))?)?;
    let groups: Vec<&str> = groups_text
        .lines()
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    let limit = Duration::from_secs_f64(seconds);

    let text = std::fs::read_to_string(&policy_path)?;
    let data = BTreeMap::from([("policy.csv".to_owned(), text)]);

    // --- compile: memory of one policy kept alive, then timing of more loads (dropped)
    let rss0 = rss_bytes();
    let t = Instant::now();
    let policy = Policy::from_config(&data, LoadOptions::default())?;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let rss1 = rss_bytes();
    let mut times = vec![first_ms];
    for _ in 0..loads {
        let t = Instant::now();
        let p = Policy::from_config(&data, LoadOptions::default())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(black_box(p));
    }
    let rss2 = rss_bytes();
    let (min_ms, max_ms) = times
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &v| (a.min(v), b.max(v)));
    let all_times = times.clone();
    println!(
        "{}",
        json!({
            "tool": "tiphys rbac_bench",
            "measure": "compile",
            "policy": policy_path,
            "policy_lines": policy.user_lines(),
            "warnings": policy.warnings().len(),
            "loads": times.len(),
            "median_ms": median(&mut times),
            "min_ms": min_ms,
            "max_ms": max_ms,
            "first_ms": first_ms,
            "all_ms": all_times,
            "rss_growth_one_load_bytes": rss1.saturating_sub(rss0),
            "rss_growth_after_loads_one_alive_bytes": rss2.saturating_sub(rss0),
            "rss_bytes": rss2,
            "vm_hwm_kb": status_kb("VmHWM:"),
        })
    );

    // --- decisions
    let timer_ns = {
        let n = 100_000u32;
        let t = Instant::now();
        for _ in 0..n {
            black_box(Instant::now());
        }
        (t.elapsed().as_nanos() / u128::from(n)) as u64 * 2
    };
    let projects = FixedProjects::default();
    let n = requests.len();
    let groups_ref = groups.as_slice();
    let r = &requests;
    measure("uncached_groups", n, max_decisions, limit, timer_ns, |i| {
        policy.decide_uncached(
            &projects,
            &user,
            Some(groups_ref),
            &r[i].res,
            &r[i].act,
            &r[i].obj,
        )
    });
    let mut claims = Map::new();
    claims.insert("sub".to_owned(), Value::String(user.clone()));
    claims.insert(
        "groups".to_owned(),
        Value::Array(groups.iter().map(|g| Value::String((*g).to_owned())).collect()),
    );
    measure("cached_groups", n, max_decisions, limit, timer_ns, |i| {
        let subject = Subject::Claims {
            user: &user,
            claims: Some(&claims),
        };
        policy.decide(&projects, subject, &r[i].res, &r[i].act, &r[i].obj)
    });
    measure("uncached_plain", n, max_decisions, limit, timer_ns, |i| {
        policy.decide_uncached(&projects, &r[i].sub, None, &r[i].res, &r[i].act, &r[i].obj)
    });
    measure("cached_plain", n, max_decisions, limit, timer_ns, |i| {
        policy.decide(
            &projects,
            Subject::Plain(&r[i].sub),
            &r[i].res,
            &r[i].act,
            &r[i].obj,
        )
    });
    println!(
        "{}",
        json!({
            "tool": "tiphys rbac_bench",
            "measure": "memory_end",
            "rss_bytes": rss_bytes(),
            "vm_hwm_kb": status_kb("VmHWM:"),
            "groups": groups.len(),
        })
    );
    Ok(())
}
