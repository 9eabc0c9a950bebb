//! Messages ↔ JSON with Go `encoding/json` rules (see `proto/tiphys/json.proto`).
//!
//! Output: proto field names, zero values omitted unless `always`; an unset `always` message is
//! `{}` and an empty `always` list or map `[]` or `{}` (never `null`: clients generated from an
//! OpenAPI document refuse it, and upstream's handlers build empty slices); `inline` messages
//! flattened, int64 as numbers, times as Kubernetes strings and left out when unset.
//! Input, as Go reads it: unknown keys ignored, keys matched exactly and then case-insensitively,
//! `null` leaves a field unset; in addition, int64 given as a decimal string (protojson style) is
//! accepted. A value of the wrong type is an error naming the field.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use prost_reflect::{
    DynamicMessage, EnumDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _, Value as Pv,
};
use serde_json::{Map, Value};

use super::plan::{FieldPlan, MessagePlan, Shape, Wire, is_zero};
use super::{Schema, SchemaError, time};

impl Schema {
    /// The JSON form of `msg`.
    pub fn to_json(&self, msg: &DynamicMessage) -> Value {
        let mut out = Map::new();
        self.write_fields(msg, &mut out);
        Value::Object(out)
    }

    fn write_fields(&self, msg: &DynamicMessage, out: &mut Map<String, Value>) {
        for field in &self.plan(&msg.descriptor()).fields {
            let fd = &field.fd;
            if field.inline {
                if let Some(inner) = msg.get_field(fd).as_message() {
                    self.write_fields(inner, out);
                }
                continue;
            }
            let set = msg.has_field(fd);
            let value = msg.get_field(fd);
            let json = if fd.is_list() {
                let items = value.as_list().unwrap_or_default();
                if items.is_empty() {
                    field.always.then(|| Value::Array(Vec::new()))
                } else {
                    Some(Value::Array(
                        items.iter().map(|v| self.value_json(field, v)).collect(),
                    ))
                }
            } else if fd.is_map() {
                match value.as_map() {
                    Some(map) if !map.is_empty() => {
                        let mut entries: Vec<(String, Value)> = map
                            .iter()
                            .map(|(k, v)| (map_key_string(k), self.value_json(field, v)))
                            .collect();
                        // Go's encoding/json sorts map keys.
                        entries.sort_by(|a, b| a.0.cmp(&b.0));
                        Some(Value::Object(entries.into_iter().collect()))
                    }
                    _ => field.always.then(|| Value::Object(Map::new())),
                }
            } else {
                match field.shape {
                    // An unset time is left out, `always` or not (never `null`).
                    Shape::Time { .. } => Some(self.value_json(field, &value)).filter(|json| !json.is_null()),
                    Shape::Message | Shape::Raw | Shape::IntOrString => {
                        (set || field.always).then(|| self.value_json(field, &value))
                    }
                    Shape::Scalar => (!is_zero(&value) || field.always || (set && field.pointer))
                        .then(|| self.value_json(field, &value)),
                }
            };
            if let Some(json) = json {
                out.insert(fd.name().to_owned(), json);
            }
        }
    }

    /// One value (a scalar, a message, a list element or a map value).
    fn value_json(&self, field: &FieldPlan, value: &Pv) -> Value {
        match (field.shape, value) {
            (Shape::Time { micro }, Pv::Message(m)) => time_json(m, micro),
            (Shape::Raw, Pv::Message(m)) => raw_json(m),
            (Shape::IntOrString, Pv::Message(m)) => int_or_string_json(m),
            (_, Pv::Message(m)) => self.to_json(m),
            // Enums as their names (Go's string types); a number without a name as itself.
            (_, Pv::EnumNumber(n)) => match &field.wire {
                Wire::Enum { desc, .. } => desc
                    .get_value(*n)
                    .map_or_else(|| Value::from(*n), |v| Value::String(v.name().to_owned())),
                _ => Value::from(*n),
            },
            (_, scalar) => scalar_json(scalar),
        }
    }

    /// A message of type `desc` from its JSON form.
    pub fn from_json(&self, desc: &MessageDescriptor, json: &Value) -> Result<DynamicMessage, SchemaError> {
        let mut msg = DynamicMessage::new(desc.clone());
        match json {
            Value::Object(map) => self.read_fields(&mut msg, map, &Loc::Root)?,
            Value::Null => {}
            other => {
                return Err(SchemaError::new(
                    "",
                    format!("expected an object, got {}", kind_of(other)),
                ));
            }
        }
        self.fill_required(&mut msg);
        Ok(msg)
    }

    fn read_fields(
        &self,
        msg: &mut DynamicMessage,
        map: &Map<String, Value>,
        path: &Loc<'_>,
    ) -> Result<(), SchemaError> {
        let desc = msg.descriptor();
        let plan = self.plan(&desc);
        for (key, json) in map {
            if json.is_null() {
                continue;
            }
            if let Some(field) = plan.lookup(key) {
                let value = self.read_field(field, json, &Loc::Field(path, key))?;
                msg.set_field(&field.fd, value);
                continue;
            }
            // A key of an inline (embedded) message sits at this level.
            for field in plan.fields.iter().filter(|f| f.inline) {
                let Kind::Message(inner_desc) = field.fd.kind() else {
                    continue;
                };
                if self.takes_key(self.plan(&inner_desc), key) {
                    let mut inner = msg
                        .get_field(&field.fd)
                        .as_message()
                        .cloned()
                        .unwrap_or_else(|| DynamicMessage::new(inner_desc.clone()));
                    let mut single = Map::new();
                    single.insert(key.clone(), json.clone());
                    self.read_fields(&mut inner, &single, path)?;
                    msg.set_field(&field.fd, Pv::Message(inner));
                    break;
                }
            }
        }
        Ok(())
    }

    fn read_field(&self, field: &FieldPlan, json: &Value, path: &Loc<'_>) -> Result<Pv, SchemaError> {
        let fd = &field.fd;
        if fd.is_list() {
            let Value::Array(items) = json else {
                return Err(SchemaError::at(
                    path,
                    format!("expected an array, got {}", kind_of(json)),
                ));
            };
            let kind = fd.kind();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if item.is_null() {
                    out.push(self.zero_value(&kind));
                } else {
                    out.push(self.read_value(field.shape, &kind, item, &Loc::Index(path, i))?);
                }
            }
            return Ok(Pv::List(out));
        }
        if fd.is_map() {
            let Value::Object(entries) = json else {
                return Err(SchemaError::at(
                    path,
                    format!("expected an object, got {}", kind_of(json)),
                ));
            };
            let Kind::Message(entry) = fd.kind() else {
                return Err(SchemaError::at(path, "map without an entry type"));
            };
            let key_kind = entry.map_entry_key_field().kind();
            let value_kind = entry.map_entry_value_field().kind();
            let mut out = std::collections::HashMap::with_capacity(entries.len());
            for (k, v) in entries {
                let entry_path = Loc::Key(path, k);
                let key = map_key(&key_kind, k, &entry_path)?;
                let value = if v.is_null() {
                    self.zero_value(&value_kind)
                } else {
                    self.read_value(field.shape, &value_kind, v, &entry_path)?
                };
                out.insert(key, value);
            }
            return Ok(Pv::Map(out));
        }
        self.read_value(field.shape, &fd.kind(), json, path)
    }

    fn read_value(&self, shape: Shape, kind: &Kind, json: &Value, path: &Loc<'_>) -> Result<Pv, SchemaError> {
        Ok(match kind {
            Kind::Message(desc) => {
                let mut msg = DynamicMessage::new(desc.clone());
                match shape {
                    Shape::Time { .. } => {
                        let (seconds, nanos) = time_value(json, path)?;
                        msg.set_field_by_number(1, Pv::I64(seconds));
                        if nanos != 0 {
                            msg.set_field_by_number(2, Pv::I32(nanos));
                        }
                        return Ok(Pv::Message(msg));
                    }
                    Shape::Raw => {
                        msg.set_field_by_number(1, Pv::Bytes(raw_bytes(json).into()));
                        return Ok(Pv::Message(msg));
                    }
                    Shape::IntOrString => {
                        match int_or_string(json, path)? {
                            IntOrStr::Int(n) => {
                                msg.set_field_by_number(1, Pv::I64(0));
                                msg.set_field_by_number(2, Pv::I32(n));
                            }
                            IntOrStr::Str(text) => {
                                msg.set_field_by_number(1, Pv::I64(1));
                                msg.set_field_by_number(3, Pv::String(text.to_owned()));
                            }
                        }
                        return Ok(Pv::Message(msg));
                    }
                    Shape::Scalar | Shape::Message => {}
                }
                let Value::Object(map) = json else {
                    return Err(mismatch(json, path, "an object"));
                };
                self.read_fields(&mut msg, map, path)?;
                self.fill_required(&mut msg);
                Pv::Message(msg)
            }
            Kind::String => Pv::String(string(json, path)?.to_owned()),
            Kind::Bool => Pv::Bool(boolean(json, path)?),
            Kind::Bytes => {
                let mut bytes = Vec::new();
                base64_into(json, path, &mut bytes)?;
                Pv::Bytes(bytes.into())
            }
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Pv::I64(integer(json, path)?),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Pv::I32(int32(json, path)?),
            Kind::Uint64 | Kind::Fixed64 => Pv::U64(integer(json, path)?),
            Kind::Uint32 | Kind::Fixed32 => Pv::U32(uint32(json, path)?),
            Kind::Double => Pv::F64(double(json, path)?),
            Kind::Float => Pv::F32(float(json, path)?),
            Kind::Enum(e) => Pv::EnumNumber(enum_number(e, json, path)?),
        })
    }

    /// What `null` stands for in a list or a map: the zero value, and for a message an empty
    /// one that still carries its `required` fields.
    fn zero_value(&self, kind: &Kind) -> Pv {
        let mut value = Pv::default_value(kind);
        if let Pv::Message(msg) = &mut value {
            self.fill_required(msg);
        }
        value
    }

    /// Whether `key` names a field of a message of this plan, directly or through its own
    /// inline fields (Go promotes the fields of nested embedded structs all the way up).
    pub(super) fn takes_key(&self, plan: &MessagePlan, key: &str) -> bool {
        plan.lookup_index(key).is_some()
            || plan.inline.iter().any(|&i| match plan.fields[i].fd.kind() {
                Kind::Message(inner) => self.takes_key(self.plan(&inner), key),
                _ => false,
            })
    }

    /// proto2 `required` fields are always encoded, even when empty (Go clients refuse a message
    /// without them).
    fn fill_required(&self, msg: &mut DynamicMessage) {
        let plan = self.plan(&msg.descriptor());
        for required in &plan.required {
            let fd = &plan.fields[required.index].fd;
            if !msg.has_field(fd) {
                msg.set_field(fd, fd.default_value());
            }
        }
    }
}

// How one JSON value is read as a protobuf scalar: shared by `from_json` and the direct encoder
// (`super::encode`), so that both accept exactly the same input.

pub(super) fn int32(json: &Value, path: &Loc<'_>) -> Result<i32, SchemaError> {
    i32::try_from(integer::<i64>(json, path)?)
        .map_err(|_| SchemaError::at(path, "number out of range for int32"))
}

pub(super) fn uint32(json: &Value, path: &Loc<'_>) -> Result<u32, SchemaError> {
    u32::try_from(integer::<u64>(json, path)?)
        .map_err(|_| SchemaError::at(path, "number out of range for uint32"))
}

pub(super) fn double(json: &Value, path: &Loc<'_>) -> Result<f64, SchemaError> {
    json.as_f64().ok_or_else(|| mismatch(json, path, "a number"))
}

pub(super) fn float(json: &Value, path: &Loc<'_>) -> Result<f32, SchemaError> {
    #[allow(clippy::cast_possible_truncation)]
    Ok(double(json, path)? as f32)
}

pub(super) fn boolean(json: &Value, path: &Loc<'_>) -> Result<bool, SchemaError> {
    json.as_bool()
        .ok_or_else(|| mismatch(json, path, "true or false"))
}

pub(super) fn string<'a>(json: &'a Value, path: &Loc<'_>) -> Result<&'a str, SchemaError> {
    json.as_str().ok_or_else(|| mismatch(json, path, "a string"))
}

/// Appends the bytes of a base64 string to `out`.
pub(super) fn base64_into(json: &Value, path: &Loc<'_>, out: &mut Vec<u8>) -> Result<(), SchemaError> {
    let text = json
        .as_str()
        .ok_or_else(|| mismatch(json, path, "a base64 string"))?;
    B64.decode_vec(text, out)
        .map_err(|e| SchemaError::at(path, format!("invalid base64: {e}")))
}

/// An enum value by name or by number.
pub(super) fn enum_number(e: &EnumDescriptor, json: &Value, path: &Loc<'_>) -> Result<i32, SchemaError> {
    match json {
        Value::String(name) => Ok(e
            .get_value_by_name(name)
            .ok_or_else(|| SchemaError::at(path, format!("unknown value {name:?}")))?
            .number()),
        _ => i32::try_from(integer::<i64>(json, path)?)
            .map_err(|_| SchemaError::at(path, "enum number out of range")),
    }
}

/// Seconds and nanoseconds of a time string.
pub(super) fn time_value(json: &Value, path: &Loc<'_>) -> Result<(i64, i32), SchemaError> {
    let text = json
        .as_str()
        .ok_or_else(|| mismatch(json, path, "a time string"))?;
    time::parse(text).map_err(|e| SchemaError::at(path, e))
}

/// The bytes a `RawExtension` keeps for a JSON value (Go keeps the bytes it was given; this is
/// their compact form).
pub(super) fn raw_bytes(json: &Value) -> Vec<u8> {
    json.to_string().into_bytes()
}

/// An `IntOrString` as read from JSON.
pub(super) enum IntOrStr<'a> {
    Int(i32),
    Str(&'a str),
}

/// A number (an int32) or a string, as Go's `intstr.IntOrString` reads it.
pub(super) fn int_or_string<'a>(json: &'a Value, path: &Loc<'_>) -> Result<IntOrStr<'a>, SchemaError> {
    match json {
        Value::String(text) => Ok(IntOrStr::Str(text)),
        Value::Number(_) => Ok(IntOrStr::Int(int32(json, path)?)),
        other => Err(mismatch(other, path, "a number or a string")),
    }
}

/// A `RawExtension` as the JSON value its bytes hold (`null` when they hold none).
fn raw_json(msg: &DynamicMessage) -> Value {
    msg.get_field_by_number(1)
        .and_then(|v| v.as_bytes().and_then(|b| serde_json::from_slice(b).ok()))
        .unwrap_or(Value::Null)
}

/// An `IntOrString` as a number or a string.
fn int_or_string_json(msg: &DynamicMessage) -> Value {
    let kind = msg.get_field_by_number(1).and_then(|v| v.as_i64()).unwrap_or(0);
    if kind == 1 {
        let text = msg.get_field_by_number(3);
        Value::from(text.as_deref().and_then(Pv::as_str).unwrap_or_default())
    } else {
        Value::from(msg.get_field_by_number(2).and_then(|v| v.as_i32()).unwrap_or(0))
    }
}

fn mismatch(json: &Value, path: &Loc<'_>, want: &str) -> SchemaError {
    SchemaError::at(path, format!("expected {want}, got {}", kind_of(json)))
}

pub(super) fn integer<T: TryFrom<i128>>(json: &Value, path: &Loc<'_>) -> Result<T, SchemaError> {
    let wide: Option<i128> = match json {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    let wide =
        wide.ok_or_else(|| SchemaError::at(path, format!("expected an integer, got {}", kind_of(json))))?;
    T::try_from(wide).map_err(|_| SchemaError::at(path, "integer out of range"))
}

fn time_json(msg: &DynamicMessage, micro: bool) -> Value {
    let seconds = msg.get_field_by_number(1).and_then(|v| v.as_i64()).unwrap_or(0);
    let nanos = msg.get_field_by_number(2).and_then(|v| v.as_i32()).unwrap_or(0);
    if seconds == 0 && nanos == 0 {
        return Value::Null;
    }
    time::format(seconds, nanos, micro).map_or(Value::Null, Value::String)
}

fn scalar_json(value: &Pv) -> Value {
    match value {
        Pv::Bool(b) => Value::Bool(*b),
        Pv::I32(n) | Pv::EnumNumber(n) => Value::from(*n),
        Pv::I64(n) => Value::from(*n),
        Pv::U32(n) => Value::from(*n),
        Pv::U64(n) => Value::from(*n),
        Pv::F32(n) => serde_json::Number::from_f64(f64::from(*n)).map_or(Value::Null, Value::Number),
        Pv::F64(n) => serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Pv::String(s) => Value::String(s.clone()),
        Pv::Bytes(b) => Value::String(B64.encode(b)),
        Pv::Message(_) | Pv::List(_) | Pv::Map(_) => Value::Null,
    }
}

fn map_key_string(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

fn map_key(kind: &Kind, text: &str, path: &Loc<'_>) -> Result<MapKey, SchemaError> {
    Ok(match key_of(kind, text, path)? {
        Key::String(s) => MapKey::String(s.to_owned()),
        Key::Bool(b) => MapKey::Bool(b),
        Key::I32(n) => MapKey::I32(n),
        Key::I64(n) => MapKey::I64(n),
        Key::U32(n) => MapKey::U32(n),
        Key::U64(n) => MapKey::U64(n),
    })
}

/// A map key as read from its JSON text, borrowing a string key.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Key<'a> {
    Bool(bool),
    I32(i32),
    I64(i64),
    U32(u32),
    U64(u64),
    String(&'a str),
}

pub(super) fn key_of<'a>(kind: &Kind, text: &'a str, path: &Loc<'_>) -> Result<Key<'a>, SchemaError> {
    let parsed = match kind {
        Kind::String => Some(Key::String(text)),
        Kind::Bool => text.parse().ok().map(Key::Bool),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => text.parse().ok().map(Key::I32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => text.parse().ok().map(Key::I64),
        Kind::Uint32 | Kind::Fixed32 => text.parse().ok().map(Key::U32),
        Kind::Uint64 | Kind::Fixed64 => text.parse().ok().map(Key::U64),
        _ => None,
    };
    parsed.ok_or_else(|| SchemaError::at(path, format!("{text:?} is not a valid map key")))
}

/// Where a value sits in the JSON being read (`spec.sources[0].repoURL`), written out only when
/// an error names it: reading a message must not build a path per field.
#[derive(Clone, Copy)]
pub(super) enum Loc<'a> {
    Root,
    Field(&'a Loc<'a>, &'a str),
    Index(&'a Loc<'a>, usize),
    Key(&'a Loc<'a>, &'a str),
}

impl std::fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loc::Root => Ok(()),
            Loc::Field(Loc::Root, key) => f.write_str(key),
            Loc::Field(parent, key) => write!(f, "{parent}.{key}"),
            Loc::Index(parent, i) => write!(f, "{parent}[{i}]"),
            Loc::Key(parent, k) => write!(f, "{parent}[{k:?}]"),
        }
    }
}

impl SchemaError {
    pub(super) fn at(loc: &Loc<'_>, reason: impl Into<String>) -> Self {
        Self::new(&loc.to_string(), reason)
    }
}

/// How a JSON value is named in errors.
pub(crate) fn kind_of(json: &Value) -> &'static str {
    match json {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
