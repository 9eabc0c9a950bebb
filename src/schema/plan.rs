//! Per message, how each field appears in JSON: worked out once from the descriptors and their
//! `tiphys.always` / `tiphys.inline` options.

use std::collections::HashMap;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor, Value};

use super::SchemaError;

pub(crate) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(crate) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Scalar,
    /// A Kubernetes `Time` (seconds precision) or `MicroTime` (microseconds).
    Time {
        micro: bool,
    },
    Message,
}

pub(crate) struct FieldPlan {
    pub fd: FieldDescriptor,
    /// Emitted even when zero (no `omitempty`, or a non-pointer struct).
    pub always: bool,
    /// A Go embedded struct: its fields sit at the parent's level.
    pub inline: bool,
    /// The shape of one value (of the element, for lists; of the value, for maps).
    pub shape: Shape,
}

pub(crate) struct MessagePlan {
    pub fields: Vec<FieldPlan>,
    /// Exact JSON name → index into `fields`.
    by_name: HashMap<String, usize>,
    /// Lower-cased JSON name → index: Go matches keys case-insensitively after an exact miss.
    by_folded: HashMap<String, usize>,
}

impl MessagePlan {
    pub fn lookup(&self, key: &str) -> Option<&FieldPlan> {
        let index = self
            .by_name
            .get(key)
            .or_else(|| self.by_folded.get(&key.to_lowercase()))?;
        Some(&self.fields[*index])
    }
}

pub(crate) fn build_all(pool: &DescriptorPool) -> Result<HashMap<String, MessagePlan>, SchemaError> {
    let always = pool.get_extension_by_name("tiphys.always");
    let inline = pool.get_extension_by_name("tiphys.inline");
    let flag = |fd: &FieldDescriptor, ext: &Option<prost_reflect::ExtensionDescriptor>| {
        ext.as_ref().is_some_and(|ext| {
            let options = fd.options();
            options.has_extension(ext) && options.get_extension(ext).as_bool() == Some(true)
        })
    };
    let mut plans = HashMap::new();
    for message in pool.all_messages() {
        let mut fields = Vec::new();
        let mut by_name = HashMap::new();
        let mut by_folded = HashMap::new();
        for fd in message.fields() {
            let shape = shape_of(&fd);
            let inline = flag(&fd, &inline);
            if inline && (shape != Shape::Message || fd.is_list() || fd.is_map()) {
                return Err(SchemaError::new(
                    fd.full_name(),
                    "only a singular message field can be inline",
                ));
            }
            by_name.insert(fd.name().to_owned(), fields.len());
            by_folded.entry(fd.name().to_lowercase()).or_insert(fields.len());
            fields.push(FieldPlan {
                always: flag(&fd, &always),
                inline,
                shape,
                fd,
            });
        }
        plans.insert(
            message.full_name().to_owned(),
            MessagePlan {
                fields,
                by_name,
                by_folded,
            },
        );
    }
    Ok(plans)
}

fn shape_of(fd: &FieldDescriptor) -> Shape {
    let kind = if fd.is_map() {
        match fd.kind() {
            Kind::Message(entry) => entry.map_entry_value_field().kind(),
            other => other,
        }
    } else {
        fd.kind()
    };
    match kind {
        Kind::Message(m) => message_shape(&m),
        _ => Shape::Scalar,
    }
}

fn message_shape(m: &MessageDescriptor) -> Shape {
    match m.full_name() {
        TIME => Shape::Time { micro: false },
        MICRO_TIME => Shape::Time { micro: true },
        _ => Shape::Message,
    }
}

/// True when a scalar value is its type's zero (Go `omitempty`).
pub(crate) fn is_zero(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::I32(n) | Value::EnumNumber(n) => *n == 0,
        Value::I64(n) => *n == 0,
        Value::U32(n) => *n == 0,
        Value::U64(n) => *n == 0,
        Value::F32(n) => *n == 0.0,
        Value::F64(n) => *n == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Message(_) => false,
    }
}
