//! The JSON Schema (OpenAPI 3.0 dialect) of the JSON that `gojson` writes, per message: one
//! definition per message reached from the roots, named as upstream's OpenAPI document names
//! them (`v1alpha1Application`: the package's last segment, then the message's own name).
//!
//! The schemas follow the writer, not the proto file: `inline` fields sit at the parent's level,
//! int64 are integers, times are date-time strings, enums are their names, maps are objects,
//! `RawExtension` is any JSON value and `IntOrString` an integer or a string. Nothing is ever
//! `null` (see `gojson`), so no schema is nullable.

use std::collections::BTreeMap;

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use super::Schema;
use super::plan::{Shape, Wire};

/// The definitions (`components.schemas`) of a set of messages and everything they reach.
#[derive(Default)]
pub struct Definitions {
    /// Definition name → schema, sorted (a stable document).
    schemas: BTreeMap<String, Value>,
    /// Message full name → definition name.
    names: BTreeMap<String, String>,
}

impl Definitions {
    /// A `$ref` to the definition of `desc`, adding it (and what it reaches) when new.
    pub fn reference(&mut self, schema: &Schema, desc: &MessageDescriptor) -> Value {
        let name = self.define(schema, desc);
        json!({ "$ref": format!("#/components/schemas/{name}") })
    }

    /// The schema of one field's JSON value (a list, a map or a single value).
    pub fn field(&mut self, schema: &Schema, fd: &FieldDescriptor) -> Value {
        let field = &schema.plan(fd.parent_message()).fields[field_index(fd)];
        let one = self.value(schema, field.shape, &field.wire, &value_kind(fd));
        if fd.is_list() {
            json!({"type": "array", "items": one})
        } else if fd.is_map() {
            json!({"type": "object", "additionalProperties": one})
        } else {
            one
        }
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.schemas.into_iter().collect()
    }

    fn define(&mut self, schema: &Schema, desc: &MessageDescriptor) -> String {
        if let Some(name) = self.names.get(desc.full_name()) {
            return name.clone();
        }
        let name = self.unique_name(desc);
        self.names.insert(desc.full_name().to_owned(), name.clone());
        // Reserved before the fields are walked: a message may reach itself.
        self.schemas.insert(name.clone(), Value::Null);
        let mut properties = Map::new();
        self.properties(schema, desc, &mut properties);
        let mut body = json!({"type": "object", "properties": properties});
        if desc.full_name() == "google.protobuf.Empty" || properties_empty(&body) {
            body = json!({"type": "object"});
        }
        self.schemas.insert(name.clone(), body);
        name
    }

    /// The JSON properties of `desc`, with those of its inline fields at the same level.
    fn properties(&mut self, schema: &Schema, desc: &MessageDescriptor, out: &mut Map<String, Value>) {
        for field in &schema.plan(desc).fields {
            if field.inline {
                if let Kind::Message(inner) = field.fd.kind() {
                    self.properties(schema, &inner, out);
                }
                continue;
            }
            let value = self.field(schema, &field.fd);
            out.insert(field.fd.name().to_owned(), value);
        }
    }

    fn value(&mut self, schema: &Schema, shape: Shape, wire: &Wire, kind: &Kind) -> Value {
        match (shape, kind) {
            (Shape::Time { .. }, _) => json!({"type": "string", "format": "date-time"}),
            // Any JSON value: a schema without a type.
            (Shape::Raw, _) => json!({}),
            (Shape::IntOrString, _) => {
                json!({"oneOf": [{"type": "integer", "format": "int32"}, {"type": "string"}]})
            }
            (_, Kind::Message(m)) => self.reference(schema, m),
            _ => scalar(wire),
        }
    }

    /// `v1alpha1Application`, or the full name (dots made safe) when that is taken.
    fn unique_name(&self, desc: &MessageDescriptor) -> String {
        let package = desc.package_name();
        let last = package.rsplit('.').next().unwrap_or(package);
        let own = desc
            .full_name()
            .strip_prefix(package)
            .unwrap_or(desc.full_name())
            .trim_start_matches('.')
            .replace('.', "");
        let short = format!("{last}{own}");
        if self.schemas.contains_key(&short) {
            desc.full_name().replace('.', "_")
        } else {
            short
        }
    }
}

fn properties_empty(body: &Value) -> bool {
    body["properties"].as_object().is_some_and(Map::is_empty)
}

fn field_index(fd: &FieldDescriptor) -> usize {
    // A field's place in its message's plan is its place among the message's fields.
    fd.parent_message()
        .fields()
        .position(|f| f.number() == fd.number())
        .unwrap_or_default()
}

/// The kind of one value: the element of a list, the value of a map.
fn value_kind(fd: &FieldDescriptor) -> Kind {
    match fd.kind() {
        Kind::Message(entry) if fd.is_map() => entry.map_entry_value_field().kind(),
        kind => kind,
    }
}

fn scalar(wire: &Wire) -> Value {
    match wire {
        Wire::Bool => json!({"type": "boolean"}),
        Wire::Int32 | Wire::Sint32 | Wire::Sfixed32 => json!({"type": "integer", "format": "int32"}),
        Wire::Int64 | Wire::Sint64 | Wire::Sfixed64 => json!({"type": "integer", "format": "int64"}),
        Wire::Uint32 | Wire::Fixed32 => json!({"type": "integer", "format": "int64", "minimum": 0}),
        Wire::Uint64 | Wire::Fixed64 => json!({"type": "integer", "minimum": 0}),
        Wire::Float => json!({"type": "number", "format": "float"}),
        Wire::Double => json!({"type": "number", "format": "double"}),
        Wire::String => json!({"type": "string"}),
        Wire::Bytes => json!({"type": "string", "format": "byte"}),
        Wire::Enum { desc, .. } => {
            let names: Vec<String> = desc.values().map(|v| v.name().to_owned()).collect();
            json!({"type": "string", "enum": names})
        }
        // Messages are references (`Definitions::value`); never reached.
        Wire::Message { .. } | Wire::Time { .. } | Wire::Raw | Wire::IntOrString => json!({}),
    }
}
