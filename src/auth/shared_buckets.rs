//! Rate limit buckets kept in Argo CD's Redis (`--redis`), for the limits that must hold across
//! replicas: logins, which a client could otherwise multiply by the number of replicas behind a
//! load balancer. Each bucket is one key holding its TAT (see `buckets`), evaluated and moved on
//! by one Lua script, so concurrent replicas never lose an update. The time is the caller's
//! clock, passed in; the key expires when the bucket would be full again.
//!
//! The keys are `tiphys|ratelimit|<class>|<client>`: upstream's own keys in that Redis are
//! `revoked-token|<jti>`, the channel `new-revoked-token`, and its cache entries (`app|…`,
//! `cluster|…`, `mfst|…` and the like); it keeps failed login attempts in the server's memory
//! (v3; older releases cached them under `session|login.attempts`). A prefix of tiphys's own
//! meets none of them.

use std::net::IpAddr;
use std::time::Duration;

use super::buckets::Cell;
use crate::config::rate_limits::Class;

const PREFIX: &str = "tiphys|ratelimit|";
/// How long one Redis call may take before the replica falls back to its own buckets.
const CALL: Duration = Duration::from_millis(500);

/// Returns `{1, 0}` when admitted (and moves the TAT on), `{0, wait_us}` otherwise. ARGV: now,
/// interval and depth, in microseconds. `%d` keeps the TAT exact (a Lua number printed by
/// `tostring` loses digits); Unix microseconds stay below 2^53, exact in a double.
const SCRIPT: &str = r"
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local depth = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local nxt = tat + interval
if nxt - now > depth then
  return {0, nxt - now - depth}
end
redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', math.max(1, math.ceil((nxt - now) / 1000)))
return {1, 0}
";

pub struct SharedBuckets {
    conn: redis::aio::ConnectionManager,
    addr: String,
}

impl SharedBuckets {
    /// Connects to Redis at `addr` (`host:port`). An unreachable Redis stops the start, naming it.
    pub async fn connect(addr: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(format!("redis://{addr}/"))
            .map_err(|e| anyhow::anyhow!("--redis {addr}: {e}"))?;
        let conn = tokio::time::timeout(Duration::from_secs(5), client.get_connection_manager())
            .await
            .map_err(|_| anyhow::anyhow!("Redis at {addr} did not answer within 5 s"))?
            .map_err(|e| anyhow::anyhow!("cannot reach Redis at {addr}: {e}"))?;
        Ok(Self {
            conn,
            addr: addr.to_owned(),
        })
    }

    /// Admits one request of `client` in `class` at `now_us`, or says how long to wait. `Err`
    /// when Redis did not answer: the caller decides what to do without it.
    pub async fn admit(
        &self,
        class: Class,
        client: IpAddr,
        now_us: u64,
        cell: Cell,
    ) -> Result<Result<(), Duration>, String> {
        let key = format!("{PREFIX}{}|{client}", class.as_str());
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SCRIPT)
            .arg(1)
            .arg(&key)
            .arg(now_us)
            .arg(cell.interval_us)
            .arg(cell.depth_us);
        let reply: (i64, i64) = tokio::time::timeout(CALL, cmd.query_async(&mut conn))
            .await
            .map_err(|_| format!("Redis at {} did not answer within {CALL:?}", self.addr))?
            .map_err(|e| format!("Redis at {}: {e}", self.addr))?;
        Ok(match reply {
            (1, _) => Ok(()),
            (_, wait) => Err(Duration::from_micros(u64::try_from(wait).unwrap_or(0))),
        })
    }
}
