//! What Argo CD's application-controller keeps in its Redis cache and upstream's argocd-server
//! serves from it: each application's resource tree (sharded when large) and managed
//! resources, each cluster's info, and the channel that announces a new tree. Read through the
//! `--redis` address, in upstream's format (`decode` says what that is), each call bounded in
//! time and each value in size. Only this module talks to that cache.
//!
//! Redis that does not answer is `Unavailable`, naming it; nothing else depends on it, so the
//! rest of the API goes on without it.

pub mod decode;

use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use serde_json::Value;

use self::decode::{DecodeError, cluster_info_key, entry_keys, managed_resources_key, tree_key};
pub use self::decode::{instance_name, tree_channel};
use crate::error::AppError;

/// How long one read (one round trip) may take.
const CALL: Duration = Duration::from_secs(5);
/// The largest value read, compressed, and the most JSON one read decodes (all shards of a
/// tree together). A 2,000-node tree is about 2 MB of JSON; managed resources carry each
/// resource's manifests four times over, so theirs is the larger need.
const MAX_STORED: usize = 32 << 20;
const MAX_DECODED: usize = 128 << 20;

/// Reads each key whose value is at most `ARGV[1]` bytes; a larger one is answered with its
/// length instead. Without it a value far larger than the limit would be read whole into memory
/// before its size could be checked. One round trip, like a plain MGET.
const BOUNDED_MGET: &str = "local out = {}
local limit = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local n = redis.call('STRLEN', key)
  if n > limit then out[i] = n else out[i] = redis.call('GET', key) end
end
return out";

pub struct ControllerCache {
    client: redis::Client,
    conn: redis::aio::ConnectionManager,
    /// `host:port`, as messages name it.
    addr: String,
}

impl ControllerCache {
    /// The cache in Redis at `addr` (`host:port`). Connects on first use, and again after a
    /// lost connection, so a Redis that is down at the start only fails the calls that read it.
    pub fn new(addr: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(format!("redis://{addr}/"))
            .map_err(|e| anyhow::anyhow!("--redis {addr}: {e}"))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL))
            .set_response_timeout(Some(CALL))
            .set_number_of_retries(1);
        let conn = redis::aio::ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| anyhow::anyhow!("--redis {addr}: {e}"))?;
        Ok(Self {
            client,
            conn,
            addr: addr.to_owned(),
        })
    }

    /// The tree of application `instance` (see [`instance_name`]), its shards put together;
    /// `None` when the controller has written none.
    pub async fn resource_tree(&self, instance: &str) -> Result<Option<Value>, AppError> {
        let mut budget = MAX_DECODED;
        let what = || format!("the resource tree of {instance}");
        let Some(first) = self
            .read(&[tree_key(instance, 0)], &mut budget, &what)
            .await?
            .pop()
            .flatten()
        else {
            return Ok(None);
        };
        let count = decode::shards_count(&first);
        if count <= 1 {
            return Ok(Some(first));
        }
        let keys: Vec<String> = (1..count).map(|i| tree_key(instance, i)).collect();
        let mut rest = Vec::with_capacity(keys.len());
        for (key, shard) in keys.iter().zip(self.read(&keys, &mut budget, &what).await?) {
            // A shard missing beside its first part: the controller is rewriting the tree, or
            // its entries expired one by one. Upstream fails the read then too.
            rest.push(shard.ok_or_else(|| {
                AppError::Unavailable(format!(
                    "{}: shard {key} is missing in Redis at {} (the controller is writing it again; retry)",
                    what(),
                    self.addr
                ))
            })?);
        }
        Ok(Some(decode::merge_shards(first, rest)))
    }

    /// The managed resources (with their diffs) of application `instance`, in the controller's
    /// order; `None` when it has written none.
    pub async fn managed_resources(&self, instance: &str) -> Result<Option<Vec<Value>>, AppError> {
        let mut budget = MAX_DECODED;
        let what = || format!("the managed resources of {instance}");
        let found = self
            .read(&[managed_resources_key(instance)], &mut budget, &what)
            .await?
            .pop()
            .flatten();
        Ok(found.map(|v| match v {
            Value::Array(items) => items,
            // Go writes a nil slice as `null`: none.
            _ => Vec::new(),
        }))
    }

    /// The info the controller keeps of each of `servers` (`None` where it keeps none), in one
    /// round trip.
    pub async fn cluster_infos(&self, servers: &[&str]) -> Result<Vec<Option<Value>>, AppError> {
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        let mut budget = MAX_DECODED;
        let keys: Vec<String> = servers.iter().map(|s| cluster_info_key(s)).collect();
        self.read(&keys, &mut budget, &|| "cluster info".to_owned()).await
    }

    /// A signal each time the controller announces a new tree of application `instance`. The
    /// subscription is in place when this returns; the stream ends with an error when the
    /// connection to Redis is lost.
    pub async fn tree_changes(
        &self,
        instance: &str,
    ) -> Result<impl Stream<Item = Result<(), AppError>> + Send + 'static + use<>, AppError> {
        let channel = tree_channel(instance);
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = self.bounded(subscribe).await?;
        let addr = self.addr.clone();
        let lost = futures_util::stream::once(async move {
            Err(AppError::Unavailable(format!(
                "the connection to Redis at {addr} was lost while following the resource tree"
            )))
        });
        Ok(pubsub.into_on_message().map(|_| Ok(())).chain(lost))
    }

    /// The entries at `keys` (each under both its names, see [`entry_keys`]), decoded, with
    /// what they decode to counted against `budget`.
    async fn read(
        &self,
        keys: &[String],
        budget: &mut usize,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<Vec<Option<Value>>, AppError> {
        let names: Vec<[String; 2]> = keys.iter().map(|k| entry_keys(k)).collect();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(BOUNDED_MGET).arg(names.len() * 2);
        for [gz, plain] in &names {
            cmd.arg(gz).arg(plain);
        }
        cmd.arg(MAX_STORED);
        let mut conn = self.conn.clone();
        let replies: Vec<redis::Value> = self.bounded(cmd.query_async(&mut conn)).await?;
        let mut out = Vec::with_capacity(names.len());
        let mut replies = replies.into_iter();
        for [gz, plain] in &names {
            let (a, b) = (replies.next(), replies.next());
            let found = [(gz, a), (plain, b)].into_iter().find_map(|(key, reply)| match reply {
                Some(redis::Value::BulkString(bytes)) => Some(Ok((key, bytes))),
                Some(redis::Value::Int(len)) => Some(Err(AppError::Exhausted(format!(
                    "{}: the cache entry {key} holds {len} bytes, more than the {MAX_STORED} tiphys reads",
                    what()
                )))),
                _ => None,
            });
            let Some(found) = found else {
                out.push(None);
                continue;
            };
            let (key, bytes) = found?;
            let (value, len) = decode::decode(&bytes, *budget).map_err(|e| match e {
                DecodeError::TooLarge { .. } => AppError::Exhausted(format!(
                    "{}: the cache entry {key} decodes to more than the {MAX_DECODED} bytes tiphys reads",
                    what()
                )),
                DecodeError::Invalid(why) => AppError::Internal(anyhow::anyhow!(
                    "{}: the cache entry {key} in Redis at {} is {why}",
                    what(),
                    self.addr
                )),
            })?;
            *budget = budget.saturating_sub(len);
            out.push(Some(value));
        }
        Ok(out)
    }

    /// `call` within [`CALL`], its failure `Unavailable` naming Redis.
    async fn bounded<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, AppError> {
        tokio::time::timeout(CALL, call)
            .await
            .map_err(|_| {
                AppError::Unavailable(format!(
                    "the application controller's cache: Redis at {} did not answer within {CALL:?}",
                    self.addr
                ))
            })?
            .map_err(|e| {
                AppError::Unavailable(format!(
                    "the application controller's cache: cannot read Redis at {}: {e}",
                    self.addr
                ))
            })
    }
}
