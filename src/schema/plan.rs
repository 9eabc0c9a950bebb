//! Per message, how each field appears in JSON: worked out once from the descriptors and their
//! `tiphys.always` / `tiphys.inline` options; and how each field is written as protobuf by the
//! direct encoder (`super::encode`), so that it needs no descriptor look-ups per value.

use std::collections::HashMap;

use foldhash::fast::RandomState;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, Value,
};

use super::SchemaError;
use super::encode::Seen;

pub(crate) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(crate) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
pub(crate) const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
pub(crate) const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";

/// Names are hashed with foldhash: SipHash over a 70-character message name cost more than the
/// rest of encoding a one-field reply.
pub(crate) type NameMap<V> = HashMap<Box<str>, V, RandomState>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Scalar,
    /// A Kubernetes `Time` (seconds precision) or `MicroTime` (microseconds).
    Time {
        micro: bool,
    },
    /// A Kubernetes `RawExtension`: any JSON value, kept as its bytes in `raw = 1`.
    Raw,
    /// A Kubernetes `IntOrString`: a number (`type = 1` holds 0, `intVal = 2` the number) or a
    /// string (`type` holds 1, `strVal = 3` the string).
    IntOrString,
    Message,
}

pub(crate) struct FieldPlan {
    pub fd: FieldDescriptor,
    /// Emitted even when zero (no `omitempty`, or a non-pointer struct).
    pub always: bool,
    /// A Go pointer to a scalar (`*bool`, `*string`): emitted whenever set, zero or not, as
    /// encoding/json writes a non-nil pointer. The `optional` scalars of the API's own request
    /// and response messages are (gogo makes pointers of proto2 optionals), so that a REST
    /// call's `cascade=false` or `"validate": false` is not taken for an absent field; the
    /// Kubernetes and Argo CD object types' scalars are plain values with `omitempty`.
    pub pointer: bool,
    /// A Go embedded struct: its fields sit at the parent's level.
    pub inline: bool,
    /// The shape of one value (of the element, for lists; of the value, for maps).
    pub shape: Shape,
    pub number: u32,
    /// How one value is written (of the element, for lists; of the value, for maps).
    pub wire: Wire,
    pub layout: Layout,
    /// The index of the oneof the field belongs to, if any.
    pub oneof: Option<usize>,
}

/// Whether `fd` is a Go pointer to a scalar (see [`FieldPlan::pointer`]): a singular scalar
/// with presence in a message outside the object types' packages.
fn is_go_pointer(fd: &FieldDescriptor) -> bool {
    let package = fd.parent_message().package_name();
    fd.supports_presence()
        && !fd.is_list()
        && !fd.is_map()
        && !matches!(fd.kind(), Kind::Message(_))
        && !package.starts_with("github.com.")
        && !package.starts_with("k8s.io.")
}

/// The protobuf type of one value, as the direct encoder writes it.
#[derive(Clone)]
pub(crate) enum Wire {
    Bool,
    Int32,
    Sint32,
    Sfixed32,
    Int64,
    Sint64,
    Sfixed64,
    Uint32,
    Fixed32,
    Uint64,
    Fixed64,
    Float,
    Double,
    String,
    Bytes,
    /// `default`: the number of the enum's first value, what an unset field holds.
    Enum {
        desc: EnumDescriptor,
        default: i32,
    },
    /// `plan`: the index of the message's plan in `Schema::plans`.
    Message {
        plan: usize,
        group: bool,
    },
    /// A `Time`/`MicroTime` message read from a time string: `seconds = 1`, `nanos = 2`.
    Time {
        /// Whether `seconds` is written when zero (a proto2 field has presence).
        seconds_presence: bool,
    },
    /// A `RawExtension` message read from any JSON value.
    Raw,
    /// An `IntOrString` message read from a number or a string.
    IntOrString,
}

/// Whether a field holds one value, a list or a map.
pub(crate) enum Layout {
    /// `presence`: the field is written whenever it is set, even to its default value; without
    /// presence (a proto3 scalar), a default value is not written.
    Single { presence: bool },
    /// `packed`: the elements are written as one length-delimited record.
    List { packed: bool },
    /// Entries are messages `{1: key, 2: value}`; each of the two is left out when it holds the
    /// default value and has no presence.
    Map {
        key_kind: Kind,
        key: Wire,
        key_presence: bool,
        value_presence: bool,
    },
}

/// A proto2 `required` field, which is always encoded (see `gojson::fill_required`).
pub(crate) struct Required {
    pub index: usize,
    pub number: u32,
    /// The field holding its default value, encoded (by prost-reflect, once).
    pub default: Box<[u8]>,
}

pub(crate) struct MessagePlan {
    pub fields: Vec<FieldPlan>,
    /// Exact JSON name → index into `fields`.
    by_name: NameMap<usize>,
    /// Lower-cased JSON name → index: Go matches keys case-insensitively after an exact miss.
    by_folded: NameMap<usize>,
    /// The `required` fields, by ascending number.
    pub required: Vec<Required>,
    /// Indices of the `inline` fields.
    pub inline: Vec<usize>,
}

impl MessagePlan {
    pub fn lookup(&self, key: &str) -> Option<&FieldPlan> {
        Some(&self.fields[self.lookup_index(key)?])
    }

    /// The field named exactly `key`, without Go's case-insensitive fallback.
    pub fn exact(&self, key: &str) -> Option<&FieldPlan> {
        Some(&self.fields[*self.by_name.get(key)?])
    }

    pub fn lookup_index(&self, key: &str) -> Option<usize> {
        if let Some(index) = self.by_name.get(key) {
            return Some(*index);
        }
        // A key already in lower case is its own folded form: no need to build a string.
        let folded = if key.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
            self.by_folded.get(key.to_lowercase().as_str())
        } else {
            self.by_folded.get(key)
        };
        folded.copied()
    }
}

/// The plan of every message of `pool`, in the pool's order, and the index of each by full name.
pub(crate) fn build_all(pool: &DescriptorPool) -> Result<(Vec<MessagePlan>, NameMap<usize>), SchemaError> {
    let always = pool.get_extension_by_name("tiphys.always");
    let inline = pool.get_extension_by_name("tiphys.inline");
    let flag = |fd: &FieldDescriptor, ext: &Option<prost_reflect::ExtensionDescriptor>| {
        ext.as_ref().is_some_and(|ext| {
            let options = fd.options();
            options.has_extension(ext) && options.get_extension(ext).as_bool() == Some(true)
        })
    };
    let mut index = NameMap::default();
    for (i, message) in pool.all_messages().enumerate() {
        index.insert(message.full_name().into(), i);
    }
    let mut plans = Vec::with_capacity(index.len());
    for message in pool.all_messages() {
        let mut fields = Vec::new();
        let mut by_name = NameMap::default();
        let mut by_folded = NameMap::default();
        let mut required = Vec::new();
        let mut inlines = Vec::new();
        for fd in message.fields() {
            let shape = shape_of(&fd);
            let inline = flag(&fd, &inline);
            if inline && (shape != Shape::Message || fd.is_list() || fd.is_map()) {
                return Err(SchemaError::new(
                    fd.full_name(),
                    "only a singular message field can be inline",
                ));
            }
            let oneof = fd
                .containing_oneof()
                .and_then(|o| message.oneofs().position(|other| other.name() == o.name()));
            if inline && oneof.is_some() {
                return Err(SchemaError::new(
                    fd.full_name(),
                    "an inline field cannot be part of a oneof",
                ));
            }
            if inline {
                inlines.push(fields.len());
            }
            if fd.is_required() {
                let mut holder = DynamicMessage::new(message.clone());
                holder.set_field(&fd, fd.default_value());
                required.push(Required {
                    index: fields.len(),
                    number: fd.number(),
                    default: holder.encode_to_vec().into(),
                });
            }
            by_name.insert(fd.name().into(), fields.len());
            by_folded
                .entry(fd.name().to_lowercase().into())
                .or_insert(fields.len());
            fields.push(FieldPlan {
                always: flag(&fd, &always),
                pointer: is_go_pointer(&fd),
                inline,
                shape,
                number: fd.number(),
                wire: value_wire(&fd, &index)?,
                layout: layout_of(&fd, &index)?,
                oneof,
                fd,
            });
        }
        required.sort_by_key(|r| r.number);
        // The direct encoder tracks fields and oneofs in bit sets of these widths.
        if fields.len() > Seen::MAX_FIELDS || message.oneofs().count() > Seen::MAX_ONEOFS {
            return Err(SchemaError::new(
                message.full_name(),
                format!(
                    "more than {} fields or {} oneofs in one message",
                    Seen::MAX_FIELDS,
                    Seen::MAX_ONEOFS
                ),
            ));
        }
        plans.push(MessagePlan {
            fields,
            by_name,
            by_folded,
            required,
            inline: inlines,
        });
    }
    Ok((plans, index))
}

/// How one value of `fd` is written: the element of a list, the value of a map.
fn value_wire(fd: &FieldDescriptor, index: &NameMap<usize>) -> Result<Wire, SchemaError> {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else {
            return Err(SchemaError::new(fd.full_name(), "a map without an entry type"));
        };
        return wire_of(&entry.map_entry_value_field(), index);
    }
    wire_of(fd, index)
}

fn wire_of(fd: &FieldDescriptor, index: &NameMap<usize>) -> Result<Wire, SchemaError> {
    Ok(match fd.kind() {
        Kind::Bool => Wire::Bool,
        Kind::Int32 => Wire::Int32,
        Kind::Sint32 => Wire::Sint32,
        Kind::Sfixed32 => Wire::Sfixed32,
        Kind::Int64 => Wire::Int64,
        Kind::Sint64 => Wire::Sint64,
        Kind::Sfixed64 => Wire::Sfixed64,
        Kind::Uint32 => Wire::Uint32,
        Kind::Fixed32 => Wire::Fixed32,
        Kind::Uint64 => Wire::Uint64,
        Kind::Fixed64 => Wire::Fixed64,
        Kind::Float => Wire::Float,
        Kind::Double => Wire::Double,
        Kind::String => Wire::String,
        Kind::Bytes => Wire::Bytes,
        Kind::Enum(desc) => Wire::Enum {
            default: desc.default_value().number(),
            desc,
        },
        Kind::Message(m) => match message_shape(&m) {
            Shape::Time { .. } => time_wire(&m)?,
            Shape::Raw => fixed_wire(&m, &[(1, Kind::Bytes)], Wire::Raw)?,
            Shape::IntOrString => fixed_wire(
                &m,
                &[(1, Kind::Int64), (2, Kind::Int32), (3, Kind::String)],
                Wire::IntOrString,
            )?,
            _ => Wire::Message {
                plan: index.get(m.full_name()).copied().ok_or_else(|| {
                    SchemaError::new(fd.full_name(), format!("unknown message type {}", m.full_name()))
                })?,
                group: fd.is_group(),
            },
        },
    })
}

/// A time is read into `seconds` (int64, field 1) and `nanos` (int32, field 2): refuse a schema
/// whose time message has other types there.
fn time_wire(m: &MessageDescriptor) -> Result<Wire, SchemaError> {
    let seconds = m
        .get_field(1)
        .filter(|f| f.kind() == Kind::Int64 && !f.is_list() && !f.is_map());
    let nanos = m
        .get_field(2)
        .filter(|f| f.kind() == Kind::Int32 && !f.is_list() && !f.is_map());
    match (seconds, nanos) {
        (Some(seconds), Some(_)) => Ok(Wire::Time {
            seconds_presence: seconds.supports_presence(),
        }),
        _ => Err(SchemaError::new(
            m.full_name(),
            "a time message needs int64 seconds = 1 and int32 nanos = 2",
        )),
    }
}

/// `wire` for a message the codec reads by fixed field numbers, if it has them with these types.
fn fixed_wire(m: &MessageDescriptor, fields: &[(u32, Kind)], wire: Wire) -> Result<Wire, SchemaError> {
    let fits = fields.iter().all(|(number, kind)| {
        m.get_field(*number)
            .is_some_and(|f| f.kind() == *kind && !f.is_list() && !f.is_map() && f.supports_presence())
    });
    if fits {
        Ok(wire)
    } else {
        Err(SchemaError::new(
            m.full_name(),
            "the fields the codec reads by number are not there with their types",
        ))
    }
}

fn layout_of(fd: &FieldDescriptor, index: &NameMap<usize>) -> Result<Layout, SchemaError> {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else {
            return Err(SchemaError::new(fd.full_name(), "a map without an entry type"));
        };
        let key = entry.map_entry_key_field();
        return Ok(Layout::Map {
            key_kind: key.kind(),
            key: wire_of(&key, index)?,
            key_presence: key.supports_presence(),
            value_presence: entry.map_entry_value_field().supports_presence(),
        });
    }
    if fd.is_list() {
        return Ok(Layout::List {
            packed: fd.is_packed(),
        });
    }
    Ok(Layout::Single {
        presence: fd.supports_presence(),
    })
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
        RAW_EXTENSION => Shape::Raw,
        INT_OR_STRING => Shape::IntOrString,
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
