//! The direct encoder against its reference: `from_json` and prost-reflect's encoder, over
//! generated JSON for every message of the schema (valid input, Go-style key variants, repeated
//! keys, `null`s, lifted inline keys, one wrong value at a time).

use prost::Message as _;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage as _};
use serde_json::{Map, Value, json};

use super::Schema;

/// A small deterministic generator (xorshift64*): the cases must be the same on every run.
struct Gen {
    state: u64,
    /// A wrong value is put in place of a right one with this probability (per mille) while
    /// `budget` lasts.
    wrong_per_mille: u64,
    wrong_budget: u32,
}

impl Gen {
    fn new(seed: u64) -> Self {
        Self {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            wrong_per_mille: 0,
            wrong_budget: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        #[allow(clippy::cast_possible_truncation)]
        &items[self.below(items.len() as u64) as usize]
    }

    fn wrong(&mut self) -> bool {
        if self.wrong_budget > 0 && self.chance(self.wrong_per_mille) {
            self.wrong_budget -= 1;
            return true;
        }
        false
    }
}

const STRINGS: &[&str] = &["", "a", "héllo wörld", "https://example.com/repo.git", "0"];

fn long_string(g: &mut Gen) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let len = 100 + g.below(300) as usize;
    "x".repeat(len)
}

fn message(schema: &Schema, desc: &MessageDescriptor, g: &mut Gen, depth: u32) -> Value {
    let mut out = Map::new();
    if depth > 4 {
        return Value::Object(out);
    }
    let plan = schema.plan(desc);
    for field in &plan.fields {
        let fd = &field.fd;
        match g.below(10) {
            0..=3 => continue,
            4 => {
                out.insert(fd.name().to_owned(), Value::Null);
                continue;
            }
            _ => {}
        }
        let value = field_value(schema, fd, g, depth);
        if field.inline && g.chance(500) {
            // Go's embedded struct: its keys at this level.
            if let Value::Object(inner) = value {
                for (k, v) in inner {
                    out.entry(k).or_insert(v);
                }
            }
            continue;
        }
        out.insert(key_variant(fd.name(), g), value);
        if g.chance(80) {
            // The same field under a second spelling: the later key (in map order) wins.
            let again = field_value(schema, fd, g, depth);
            out.insert(fd.name().to_uppercase(), again);
        }
    }
    if g.chance(100) {
        out.insert("zzUnknownKey".to_owned(), json!({"ignored": [1, 2]}));
    }
    Value::Object(out)
}

/// Go matches keys exactly, then case-insensitively.
fn key_variant(name: &str, g: &mut Gen) -> String {
    match g.below(8) {
        0 => name.to_uppercase(),
        1 => {
            let mut chars = name.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect())
                .unwrap_or_default()
        }
        _ => name.to_owned(),
    }
}

fn field_value(schema: &Schema, fd: &FieldDescriptor, g: &mut Gen, depth: u32) -> Value {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else {
            unreachable!("a map field has an entry message");
        };
        let key_kind = entry.map_entry_key_field().kind();
        let value_kind = entry.map_entry_value_field().kind();
        let mut out = Map::new();
        for _ in 0..g.below(4) {
            let key = if g.wrong() {
                "not a key".to_owned()
            } else {
                map_key(&key_kind, g)
            };
            let value = if g.chance(100) {
                Value::Null
            } else {
                value(schema, &value_kind, g, depth)
            };
            out.insert(key, value);
        }
        return Value::Object(out);
    }
    if fd.is_list() {
        if g.wrong() {
            return json!({"not": "a list"});
        }
        let kind = fd.kind();
        let items = (0..g.below(4))
            .map(|_| {
                if g.chance(100) {
                    Value::Null
                } else {
                    value(schema, &kind, g, depth)
                }
            })
            .collect();
        return Value::Array(items);
    }
    value(schema, &fd.kind(), g, depth)
}

fn map_key(kind: &Kind, g: &mut Gen) -> String {
    match kind {
        Kind::Bool => g.pick(&["true", "false"]).to_string(),
        Kind::String => {
            if g.chance(100) {
                String::new()
            } else {
                format!("k{}", g.below(1000))
            }
        }
        Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => g.below(1000).to_string(),
        #[allow(clippy::cast_possible_wrap)]
        _ => (g.below(2000) as i64 - 1000).to_string(),
    }
}

#[allow(clippy::cast_possible_wrap, clippy::cast_precision_loss)]
fn value(schema: &Schema, kind: &Kind, g: &mut Gen, depth: u32) -> Value {
    if g.wrong() {
        return match kind {
            Kind::String => json!(5),
            Kind::Bytes => json!("not base64!"),
            Kind::Bool => json!("yes"),
            Kind::Enum(_) => json!("NO_SUCH_VALUE"),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Uint32 | Kind::Fixed32 => json!(1_u64 << 40),
            Kind::Message(m) if m.full_name().ends_with(".Time") || m.full_name().ends_with(".MicroTime") => {
                json!("yesterday")
            }
            Kind::Message(_) => json!([1]),
            _ => json!("twelve"),
        };
    }
    match kind {
        Kind::Bool => json!(g.chance(500)),
        Kind::String => {
            if g.chance(100) {
                json!(long_string(g))
            } else {
                json!(g.pick(STRINGS))
            }
        }
        Kind::Bytes => {
            use base64::Engine as _;
            #[allow(clippy::cast_possible_truncation)]
            let bytes: Vec<u8> = (0..g.below(200)).map(|_| g.next() as u8).collect();
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!(g.below(4_000_000_000) as i64 - 2_000_000_000),
        Kind::Uint32 | Kind::Fixed32 => json!(g.below(4_000_000_000)),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            let n = g.next() as i64 >> g.below(64);
            if g.chance(300) {
                json!(n.to_string())
            } else {
                json!(n)
            }
        }
        Kind::Uint64 | Kind::Fixed64 => json!(g.next() >> g.below(64)),
        Kind::Float | Kind::Double => json!((g.below(2000) as f64 - 1000.0) / 8.0),
        Kind::Enum(e) => {
            let values: Vec<_> = e.values().collect();
            let v = g.pick(&values);
            if g.chance(300) {
                json!(v.number())
            } else {
                json!(v.name())
            }
        }
        Kind::Message(m) => match m.full_name() {
            super::plan::TIME | super::plan::MICRO_TIME => json!(g.pick(&[
                "2026-01-02T03:04:05Z",
                "1970-01-01T00:00:00Z",
                "2026-01-02T03:04:05.123456Z",
                "1969-12-31T23:59:59.5+01:00",
            ])),
            super::plan::RAW_EXTENSION => g
                .pick(&[
                    json!({"replicas": 2, "image": {"tag": "v1"}, "list": [1, "a", null]}),
                    json!([true, 1.5, "x"]),
                    json!("text"),
                    json!(0),
                    json!({}),
                ])
                .clone(),
            super::plan::INT_OR_STRING => {
                if g.chance(500) {
                    json!(g.pick(&["50%", "", "3"]))
                } else {
                    json!(g.below(200) as i64 - 100)
                }
            }
            _ => message(schema, m, g, depth + 1),
        },
    }
}

/// The reference: the message `from_json` builds, as prost-reflect encodes it.
fn reference(schema: &Schema, desc: &MessageDescriptor, json: &Value) -> Result<Vec<u8>, super::SchemaError> {
    Ok(schema.from_json(desc, json)?.encode_to_vec())
}

/// Where two encodings of `desc` differ once decoded (field and map entry order may differ; the
/// messages may not), or `None`.
fn difference(desc: &MessageDescriptor, want: &[u8], got: &[u8]) -> Option<String> {
    let want = DynamicMessage::decode(desc.clone(), want).expect("the reference decodes");
    let got = DynamicMessage::decode(desc.clone(), got).expect("the direct encoding decodes");
    first_difference(&want, &got, desc.name())
}

fn first_difference(want: &DynamicMessage, got: &DynamicMessage, path: &str) -> Option<String> {
    if want == got {
        return None;
    }
    for fd in want.descriptor().fields() {
        let (a, b) = (want.get_field(&fd), got.get_field(&fd));
        if a == b && want.has_field(&fd) == got.has_field(&fd) {
            continue;
        }
        let path = format!("{path}.{}", fd.name());
        if let (Some(a), Some(b)) = (a.as_message(), b.as_message()) {
            return first_difference(a, b, &path);
        }
        let mut text = format!(
            "{path}: want {a:?} (set: {}), got {b:?} (set: {})",
            want.has_field(&fd),
            got.has_field(&fd)
        );
        shorten(&mut text);
        return Some(text);
    }
    Some(format!("{path}: differ in unknown fields"))
}

/// `text` cut to about 3,000 bytes, at a character boundary.
fn shorten(text: &mut String) {
    let mut end = text.len().min(3000);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

fn check(schema: &Schema, desc: &MessageDescriptor, json: &Value) -> Result<(), String> {
    let mut input = json.to_string();
    shorten(&mut input);
    match (reference(schema, desc, json), schema.encode(desc, json)) {
        (Ok(want), Ok(got)) => match difference(desc, &want, &got) {
            None => Ok(()),
            Some(diff) => Err(format!("{diff}\n  for {input}")),
        },
        (Err(want), Err(got)) if want == got => Ok(()),
        (want, got) => Err(format!(
            "{}: reference {:?}, direct {:?}\n  for {input}",
            desc.full_name(),
            want.map(|b| b.len()),
            got.map(|b| b.len())
        )),
    }
}

/// The messages of the API (not protobuf's own descriptor types, which only describe it).
fn api_messages(schema: &Schema) -> impl Iterator<Item = MessageDescriptor> {
    schema
        .pool()
        .all_messages()
        .filter(|m| !m.is_map_entry() && !m.full_name().starts_with("google.protobuf."))
}

#[test]
fn every_message_encodes_as_the_reference_does() {
    let schema = Schema::get();
    let mut failures = Vec::new();
    let mut cases = 0;
    for desc in api_messages(schema) {
        for seed in 0..12 {
            let mut g = Gen::new(seed + 1);
            let json = message(schema, &desc, &mut g, 0);
            cases += 1;
            if let Err(e) = check(schema, &desc, &json) {
                failures.push(e);
            }
        }
    }
    assert!(cases > 500, "only {cases} cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} differ; first:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn one_wrong_value_gives_the_reference_error() {
    let schema = Schema::get();
    let mut failures = Vec::new();
    let mut errors = 0;
    for desc in api_messages(schema) {
        for seed in 0..12 {
            let mut g = Gen::new(1000 + seed);
            g.wrong_per_mille = 150;
            g.wrong_budget = 1;
            let json = message(schema, &desc, &mut g, 0);
            errors += u32::from(g.wrong_budget == 0);
            if let Err(e) = check(schema, &desc, &json) {
                failures.push(e);
            }
        }
    }
    assert!(errors > 100, "only {errors} cases with a wrong value");
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn keys_of_nested_inline_messages_are_read_at_the_outer_level() {
    // KustomizeSelector embeds KustomizeResId, which embeds KustomizeGvk: Go promotes `group`,
    // `version` and `kind` two levels up.
    let schema = Schema::get();
    let desc = schema
        .message("github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.KustomizeSelector")
        .unwrap();
    let input = json!({"group": "apps", "kind": "Deployment", "name": "web", "labelSelector": "a=b"});
    let from_json = schema.from_json(&desc, &input).unwrap();
    assert_eq!(schema.to_json(&from_json), input);
    let bytes = schema.encode(&desc, &input).unwrap();
    assert_eq!(schema.decode(&desc, &bytes).unwrap(), input);
}

#[test]
fn lengths_past_one_byte_and_repeated_keys_are_written_right() {
    let schema = Schema::get();
    let desc = schema
        .message("github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Application")
        .unwrap();
    let long = "y".repeat(20_000);
    let input = json!({"metadata": {"name": long, "NAME": "short", "annotations": {"a": long}}});
    check(schema, &desc, &input).unwrap();
    let bytes = schema.encode(&desc, &input).unwrap();
    let back = schema.decode(&desc, &bytes).unwrap();
    // BTreeMap order: "NAME" before "name", so "name" (the long one) wins as in Go.
    assert_eq!(back["metadata"]["name"].as_str().map(str::len), Some(20_000));
    assert_eq!(
        back["metadata"]["annotations"]["a"].as_str().map(str::len),
        Some(20_000)
    );
}
