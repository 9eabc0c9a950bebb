//! The application-controller's cache entries as they sit in Redis, read without Redis: their
//! keys and their encoding (upstream's util/cache/cache.go, util/cache/redis.go and
//! util/cache/appstate/cache.go).
//!
//! A key is `<what>|<version>`, and `.gz` after it when the writer compresses (its
//! `--redis-compress`, gzip by default); the value is the Go `encoding/json` text of the object
//! (with the encoder's trailing newline), gzip'd or not, stored as is (go-redis/cache keeps a
//! `[]byte` value untouched). A resource tree may be split into shards (the controller's
//! `ARGOCD_APPLICATION_TREE_SHARD_SIZE`): shard 0 at the plain key carries `shardsCount`, shard
//! `i` sits at `<key>|<i>`.

use std::io::Read as _;

use serde_json::Value;

/// The version upstream puts after every key (`common.CacheVersion`); an entry written under
/// another version is one this reader does not know.
pub const CACHE_VERSION: &str = "1.8.3";

/// Why an entry could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Larger than `limit` bytes, compressed or decoded.
    TooLarge { limit: usize },
    /// Not gzip'd JSON nor JSON.
    Invalid(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { limit } => write!(f, "larger than {limit} bytes"),
            Self::Invalid(why) => f.write_str(why),
        }
    }
}

/// Both names an entry may have: gzip'd (`.gz`, the default) first, then uncompressed. A reader
/// asks for both at once, so it need not be told the controller's `--redis-compress`.
pub fn entry_keys(what: &str) -> [String; 2] {
    [
        format!("{what}|{CACHE_VERSION}.gz"),
        format!("{what}|{CACHE_VERSION}"),
    ]
}

/// The pub/sub channel on which the controller announces a new tree of an application: upstream
/// names it after the managed-resources key (`OnAppResourcesTreeChanged`), never with `.gz`.
pub fn tree_channel(instance: &str) -> String {
    format!("{}|{CACHE_VERSION}", managed_resources_key(instance))
}

/// The key of an application's tree (`shard` 0: the first or only part).
pub fn tree_key(instance: &str, shard: u64) -> String {
    if shard == 0 {
        format!("app|resources-tree|{instance}")
    } else {
        format!("app|resources-tree|{instance}|{shard}")
    }
}

pub fn managed_resources_key(instance: &str) -> String {
    format!("app|managed-resources|{instance}")
}

pub fn cluster_info_key(server: &str) -> String {
    format!("cluster|info|{server}")
}

/// The name the controller files an application under (upstream's `InstanceName`): its name in
/// the control namespace, `<namespace>_<name>` elsewhere.
pub fn instance_name(app_namespace: &str, name: &str, control_namespace: &str) -> String {
    if app_namespace.is_empty() || app_namespace == control_namespace {
        name.to_owned()
    } else {
        format!("{app_namespace}_{name}")
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// An entry's value: gzip'd JSON (told by its magic bytes) or JSON, at most `limit` bytes once
/// decompressed; with the length of its JSON text.
pub fn decode(bytes: &[u8], limit: usize) -> Result<(Value, usize), DecodeError> {
    if bytes.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    if bytes.starts_with(&GZIP_MAGIC) {
        let mut text = Vec::new();
        // One byte past the limit tells a value at the limit from a larger one.
        flate2::read::GzDecoder::new(bytes)
            .take(limit as u64 + 1)
            .read_to_end(&mut text)
            .map_err(|e| DecodeError::Invalid(format!("not valid gzip: {e}")))?;
        if text.len() > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        Ok((parse(&text)?, text.len()))
    } else {
        Ok((parse(bytes)?, bytes.len()))
    }
}

fn parse(text: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(text).map_err(|e| DecodeError::Invalid(format!("not valid JSON: {e}")))
}

/// How many shards a tree's first part says there are (0 or 1: it is the whole tree).
pub fn shards_count(first: &Value) -> u64 {
    first.get("shardsCount").and_then(Value::as_u64).unwrap_or(0)
}

/// The whole tree from its first part and the others, as upstream's `ApplicationTree.Merge`:
/// nodes, orphaned nodes and hosts put together, nodes ordered by `group/kind/namespace/name`
/// and hosts by name. `shardsCount` stays as the first part has it.
pub fn merge_shards(mut first: Value, rest: Vec<Value>) -> Value {
    let Some(tree) = first.as_object_mut() else {
        return first;
    };
    for field in ["nodes", "orphanedNodes", "hosts"] {
        let mut all: Vec<Value> = match tree.remove(field) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        for shard in &rest {
            if let Some(Value::Array(items)) = shard.get(field) {
                all.extend(items.iter().cloned());
            }
        }
        if field == "hosts" {
            all.sort_by(|a, b| text(a, "name").cmp(text(b, "name")));
        } else {
            all.sort_by_cached_key(full_name);
        }
        if !all.is_empty() {
            tree.insert(field.to_owned(), Value::Array(all));
        }
    }
    first
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// A node's `group/kind/namespace/name` (upstream's `ResourceNode.FullName`).
fn full_name(node: &Value) -> String {
    format!(
        "{}/{}/{}/{}",
        text(node, "group"),
        text(node, "kind"),
        text(node, "namespace"),
        text(node, "name")
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use serde_json::json;

    use super::*;

    fn gzip(text: &[u8]) -> Vec<u8> {
        let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        w.write_all(text).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn keys_are_upstreams() {
        assert_eq!(
            entry_keys(&tree_key("guestbook", 0)),
            [
                "app|resources-tree|guestbook|1.8.3.gz",
                "app|resources-tree|guestbook|1.8.3"
            ]
        );
        assert_eq!(tree_key("guestbook", 2), "app|resources-tree|guestbook|2");
        assert_eq!(tree_channel("guestbook"), "app|managed-resources|guestbook|1.8.3");
        assert_eq!(
            entry_keys(&cluster_info_key("https://kubernetes.default.svc"))[0],
            "cluster|info|https://kubernetes.default.svc|1.8.3.gz"
        );
        assert_eq!(instance_name("argocd", "a", "argocd"), "a");
        assert_eq!(instance_name("", "a", "argocd"), "a");
        assert_eq!(instance_name("team", "a", "argocd"), "team_a");
    }

    #[test]
    fn gzip_and_plain_json_both_decode() {
        let text = b"{\"nodes\":[{\"kind\":\"ConfigMap\",\"name\":\"c\"}]}\n";
        let want = json!({"nodes": [{"kind": "ConfigMap", "name": "c"}]});
        assert_eq!(decode(&gzip(text), 1 << 20).unwrap(), (want.clone(), text.len()));
        assert_eq!(decode(text, 1 << 20).unwrap(), (want, text.len()));
    }

    #[test]
    fn a_value_over_the_limit_is_refused_compressed_or_decoded() {
        let text = format!("[{}]", vec!["0"; 5000].join(","));
        let packed = gzip(text.as_bytes());
        assert!(packed.len() < 1000, "{}", packed.len());
        assert_eq!(decode(&packed, 1000), Err(DecodeError::TooLarge { limit: 1000 }));
        assert_eq!(
            decode(text.as_bytes(), 1000),
            Err(DecodeError::TooLarge { limit: 1000 })
        );
        assert!(decode(&packed, text.len()).is_ok());
    }

    #[test]
    fn broken_values_say_what_is_wrong() {
        let mut packed = gzip(b"{\"nodes\": []}");
        packed.truncate(packed.len() - 4);
        let Err(DecodeError::Invalid(why)) = decode(&packed, 1 << 20) else {
            panic!("a truncated gzip stream decoded");
        };
        assert!(why.contains("gzip"), "{why}");
        let Err(DecodeError::Invalid(why)) = decode(b"{nodes", 1 << 20) else {
            panic!("broken JSON decoded");
        };
        assert!(why.contains("JSON"), "{why}");
    }

    // Entries as the real application-controller (v3.2.11) wrote them to Redis, kept by
    // tests/e2e/test_resource_tree.py (TIPHYS_CAPTURE_DIR) after it synced an application of
    // ConfigMaps, a Service, a Secret and a Deployment.
    const TREE: &[u8] = include_bytes!("testdata/tree.json.gz");
    const MANAGED: &[u8] = include_bytes!("testdata/managed.json.gz");
    const CLUSTER: &[u8] = include_bytes!("testdata/cluster.json.gz");

    #[test]
    fn the_controllers_entries_decode() {
        assert!(TREE.starts_with(&GZIP_MAGIC));
        let (tree, len) = decode(TREE, 1 << 20).unwrap();
        assert!(len > TREE.len(), "{len}");
        let nodes = tree["nodes"].as_array().unwrap();
        let pod = nodes.iter().find(|n| n["kind"] == "Pod").unwrap();
        assert_eq!(pod["parentRefs"][0]["kind"], "ReplicaSet");
        assert_eq!(pod["images"], json!(["registry.invalid/tree:1"]));
        assert_eq!(shards_count(&tree), 0);

        let (managed, _) = decode(MANAGED, 1 << 20).unwrap();
        let secret = managed
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["kind"] == "Secret")
            .unwrap();
        // Masked by the controller before it wrote them.
        assert!(
            secret["liveState"]
                .as_str()
                .unwrap()
                .contains(r#""password":"++++++++""#)
        );

        let (info, _) = decode(CLUSTER, 1 << 20).unwrap();
        assert_eq!(info["connectionState"]["status"], "Successful");
        assert_eq!(info["serverVersion"], "1.34");
        assert!(info["cacheInfo"]["resourcesCount"].as_u64().unwrap() > 0);
        // Too large once decompressed, though small as stored.
        assert_eq!(
            decode(TREE, TREE.len() + 1),
            Err(DecodeError::TooLarge {
                limit: TREE.len() + 1
            })
        );
    }

    /// The real tree split as upstream's `GetShards` splits it (nodes first, then orphans, two
    /// to a shard; the count on the first) and put together again is the tree.
    #[test]
    fn a_real_tree_split_into_shards_merges_back() {
        let (tree, _) = decode(TREE, 1 << 20).unwrap();
        let items: Vec<(&str, Value)> = ["nodes", "orphanedNodes", "hosts"]
            .iter()
            .flat_map(|f| {
                tree.get(*f)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(move |v| (*f, v.clone()))
            })
            .collect();
        let mut shards: Vec<Value> = items
            .chunks(2)
            .map(|chunk| {
                let mut shard = serde_json::Map::new();
                for (field, item) in chunk {
                    let list = shard.entry(*field).or_insert_with(|| json!([]));
                    list.as_array_mut().unwrap().push(item.clone());
                }
                Value::Object(shard)
            })
            .collect();
        assert!(shards.len() >= 3, "{}", shards.len());
        shards[0]["shardsCount"] = json!(shards.len());
        let first = shards.remove(0);
        let mut merged = merge_shards(first, shards);
        assert!(merged.as_object_mut().unwrap().remove("shardsCount").is_some());
        assert_eq!(merged, tree);
    }

    #[test]
    fn shards_merge_in_upstreams_order() {
        let first = json!({"shardsCount": 3, "nodes": [{"kind": "Service", "name": "b"}],
            "hosts": [{"name": "n2"}]});
        let rest = vec![
            json!({"nodes": [{"group": "apps", "kind": "Deployment", "name": "a"}],
                "orphanedNodes": [{"kind": "ConfigMap", "name": "o"}]}),
            json!({"nodes": [{"kind": "ConfigMap", "name": "a"}], "hosts": [{"name": "n1"}]}),
        ];
        assert_eq!(shards_count(&first), 3);
        let tree = merge_shards(first, rest);
        assert_eq!(
            tree,
            json!({"shardsCount": 3,
                "nodes": [{"kind": "ConfigMap", "name": "a"}, {"kind": "Service", "name": "b"},
                    {"group": "apps", "kind": "Deployment", "name": "a"}],
                "orphanedNodes": [{"kind": "ConfigMap", "name": "o"}],
                "hosts": [{"name": "n1"}, {"name": "n2"}]})
        );
    }
}
