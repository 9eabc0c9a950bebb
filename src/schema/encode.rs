//! Protobuf bytes written straight from a message's JSON form, guided by the plans.
//!
//! Every gRPC reply passes through here. Building a `DynamicMessage` with `from_json` and encoding
//! it took a third of a unary call's instructions (BENCHMARKS.md, "Schema::encode"); this writer
//! reads the same input by the same rules (`gojson`'s scalar readers, its key matching, `inline`
//! fields, `null` as unset, the last of several keys for one field or one oneof winning, proto2
//! `required` fields always present) and reports the same errors, without the intermediate
//! message. The unit tests keep it checked against `from_json` plus prost-reflect's encoder.

use prost_reflect::MessageDescriptor;
use serde_json::{Map, Value};

use super::gojson::{
    IntOrStr, Key, Loc, base64_into, boolean, double, enum_number, float, int_or_string, int32, integer,
    key_of, kind_of, raw_bytes, string, time_value, uint32,
};
use super::plan::{FieldPlan, Layout, MessagePlan, Wire};
use super::{Schema, SchemaError};

// Protobuf wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const START_GROUP: u32 = 3;
const END_GROUP: u32 = 4;
const FIXED32: u32 = 5;

/// The keys of one message: those of its JSON object, or, for an `inline` field, those of its
/// own object (if given) followed by the keys found at its parent's level.
#[derive(Clone, Copy)]
enum Source<'a> {
    Object(&'a Map<String, Value>, &'a Loc<'a>),
    Merged(&'a [(&'a str, &'a Value, &'a Loc<'a>)]),
}

impl<'a> Source<'a> {
    fn entries(self) -> impl Iterator<Item = (&'a str, &'a Value, &'a Loc<'a>)> {
        let (object, merged) = match self {
            Source::Object(map, path) => (Some((map, path)), &[][..]),
            Source::Merged(entries) => (None, entries),
        };
        object
            .into_iter()
            .flat_map(|(map, path)| map.iter().map(move |(k, v)| (k.as_str(), v, path)))
            .chain(merged.iter().copied())
    }
}

/// The keys gathered for one `inline` field of the message being written.
#[derive(Default)]
struct Inline<'a> {
    /// The field's own object, its key and where that key is, when the JSON names the field.
    own: Option<(&'a Map<String, Value>, &'a str, &'a Loc<'a>)>,
    /// Keys of the inline message that sit at the parent's level, in order.
    lifted: Vec<(&'a str, &'a Value, &'a Loc<'a>)>,
}

/// Which fields a pass over the keys has met, to tell when a field (or a oneof) is given twice
/// and so only its last key may be written.
#[derive(Default)]
pub(super) struct Seen {
    fields: u128,
    oneofs: u64,
    twice: bool,
}

impl Seen {
    /// The widest message and the most oneofs the schema may have (`plan::build_all` checks).
    pub(super) const MAX_FIELDS: usize = 128;
    pub(super) const MAX_ONEOFS: usize = 64;

    fn mark(&mut self, index: usize, oneof: Option<usize>) {
        let bit = 1u128 << index;
        self.twice |= self.fields & bit != 0;
        self.fields |= bit;
        if let Some(o) = oneof {
            let bit = 1u64 << o;
            self.twice |= self.oneofs & bit != 0;
            self.oneofs |= bit;
        }
    }

    fn has(&self, index: usize) -> bool {
        self.fields & (1u128 << index) != 0
    }
}

impl Schema {
    /// The protobuf encoding of the message of type `desc` whose JSON form is `json`: the bytes
    /// `from_json(desc, json)` encodes to, up to the order of fields and map entries.
    pub fn encode(&self, desc: &MessageDescriptor, json: &Value) -> Result<Vec<u8>, SchemaError> {
        let mut out = Vec::with_capacity(128);
        self.encode_into(desc, json, &mut out)?;
        Ok(out)
    }

    /// [`Schema::encode`], appending to `out` (after a frame header the caller fills in, say).
    /// On an error, `out` may hold part of the message.
    pub fn encode_into(
        &self,
        desc: &MessageDescriptor,
        json: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), SchemaError> {
        let plan = self.plan(desc);
        match json {
            Value::Object(map) => self.write_message(plan, Source::Object(map, &Loc::Root), out),
            Value::Null => self.write_message(plan, Source::Merged(&[]), out),
            other => Err(SchemaError::new(
                "",
                format!("expected an object, got {}", kind_of(other)),
            )),
        }
    }

    /// The fields of one message, without its tag or length.
    fn write_message(
        &self,
        plan: &MessagePlan,
        source: Source<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), SchemaError> {
        let start = out.len();
        let seen = self.write_keys(plan, source, None, out)?;
        let seen = match seen.twice {
            false => seen,
            true => {
                // A field (or oneof) was given more than once: as `from_json` sets each key in
                // turn, only the last one stays. Earlier ones are still read, for their errors.
                out.truncate(start);
                let keep = last_keys(plan, source);
                self.write_keys(plan, source, Some(&keep), out)?
            }
        };
        for required in &plan.required {
            if !seen.has(required.index) {
                out.extend_from_slice(&required.default);
            }
        }
        Ok(())
    }

    /// One pass over the keys; with `keep`, only the keys it marks are written (the others are
    /// read and dropped).
    fn write_keys<'a>(
        &self,
        plan: &MessagePlan,
        source: Source<'a>,
        keep: Option<&[bool]>,
        out: &mut Vec<u8>,
    ) -> Result<Seen, SchemaError> {
        let mut seen = Seen::default();
        let mut inlines: Vec<Inline<'a>> = Vec::new();
        for (n, (key, json, parent)) in source.entries().enumerate() {
            if json.is_null() {
                continue;
            }
            if let Some(index) = plan.lookup_index(key) {
                let field = &plan.fields[index];
                if field.inline {
                    let Value::Object(map) = json else {
                        return Err(SchemaError::at(
                            &Loc::Field(parent, key),
                            format!("expected an object, got {}", kind_of(json)),
                        ));
                    };
                    let slot = inline_slot(plan, index, &mut inlines);
                    if !slot.lifted.is_empty() {
                        // The field's own object replaces what was lifted before it; those keys
                        // are still read, for their errors.
                        let lifted = std::mem::take(&mut slot.lifted);
                        self.write_message(self.inner_plan(field), Source::Merged(&lifted), &mut Vec::new())?;
                    }
                    slot.own = Some((map, key, parent));
                    continue;
                }
                seen.mark(index, field.oneof);
                let mark = out.len();
                self.write_field(field, json, &Loc::Field(parent, key), out)?;
                if keep.is_some_and(|keep| !keep[n]) {
                    out.truncate(mark);
                }
                continue;
            }
            // A key of an inline (embedded) message sits at this level.
            for &index in &plan.inline {
                if self.takes_key(self.inner_plan(&plan.fields[index]), key) {
                    inline_slot(plan, index, &mut inlines)
                        .lifted
                        .push((key, json, parent));
                    break;
                }
            }
        }
        for (slot, &index) in inlines.iter().zip(&plan.inline) {
            if slot.own.is_none() && slot.lifted.is_empty() {
                continue;
            }
            seen.fields |= 1u128 << index;
            let field = &plan.fields[index];
            let own_path;
            let mut merged = Vec::new();
            if let Some((map, key, parent)) = slot.own {
                own_path = Loc::Field(parent, key);
                merged.extend(map.iter().map(|(k, v)| (k.as_str(), v, &own_path)));
            }
            merged.extend_from_slice(&slot.lifted);
            put_tag(out, field.number, LEN);
            let at = open_len(out);
            self.write_message(self.inner_plan(field), Source::Merged(&merged), out)?;
            close_len(out, at);
        }
        Ok(seen)
    }

    fn inner_plan(&self, field: &FieldPlan) -> &MessagePlan {
        match field.wire {
            Wire::Message { plan, .. } => &self.plans[plan],
            // Plans are built so that only message fields are inline.
            _ => &self.plans[0],
        }
    }

    /// One field: a single value, a list or a map.
    fn write_field(
        &self,
        field: &FieldPlan,
        json: &Value,
        path: &Loc<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), SchemaError> {
        match &field.layout {
            Layout::Single { presence } => {
                self.write_value(&field.wire, field.number, json, !presence, path, out)
            }
            Layout::List { packed } => {
                let Value::Array(items) = json else {
                    return Err(SchemaError::at(
                        path,
                        format!("expected an array, got {}", kind_of(json)),
                    ));
                };
                if items.is_empty() {
                    return Ok(());
                }
                if *packed {
                    put_tag(out, field.number, LEN);
                    let at = open_len(out);
                    for (i, item) in items.iter().enumerate() {
                        put_scalar(&field.wire, item, &Loc::Index(path, i), out)?;
                    }
                    close_len(out, at);
                    return Ok(());
                }
                for (i, item) in items.iter().enumerate() {
                    self.write_value(&field.wire, field.number, item, false, &Loc::Index(path, i), out)?;
                }
                Ok(())
            }
            Layout::Map {
                key_kind,
                key: key_wire,
                key_presence,
                value_presence,
            } => {
                let Value::Object(entries) = json else {
                    return Err(SchemaError::at(
                        path,
                        format!("expected an object, got {}", kind_of(json)),
                    ));
                };
                for (k, v) in entries {
                    let entry_path = Loc::Key(path, k);
                    let key = key_of(key_kind, k, &entry_path)?;
                    put_tag(out, field.number, LEN);
                    let at = open_len(out);
                    put_key(key_wire, key, !key_presence, out);
                    self.write_value(&field.wire, 2, v, !value_presence, &entry_path, out)?;
                    close_len(out, at);
                }
                Ok(())
            }
        }
    }

    /// One value with its tag. `skip_zero`: a scalar holding its type's zero is left out (a
    /// field without presence). `null` stands for the zero value (a list element, a map value).
    fn write_value(
        &self,
        wire: &Wire,
        number: u32,
        json: &Value,
        skip_zero: bool,
        path: &Loc<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), SchemaError> {
        match wire {
            Wire::Message { plan, group } => {
                let plan = &self.plans[*plan];
                let source = match json {
                    Value::Object(map) => Source::Object(map, path),
                    Value::Null => Source::Merged(&[]),
                    other => {
                        return Err(SchemaError::at(
                            path,
                            format!("expected an object, got {}", kind_of(other)),
                        ));
                    }
                };
                if *group {
                    put_tag(out, number, START_GROUP);
                    self.write_message(plan, source, out)?;
                    put_tag(out, number, END_GROUP);
                } else {
                    put_tag(out, number, LEN);
                    let at = open_len(out);
                    self.write_message(plan, source, out)?;
                    close_len(out, at);
                }
                Ok(())
            }
            Wire::Time { seconds_presence } => {
                put_tag(out, number, LEN);
                let at = open_len(out);
                if !json.is_null() {
                    let (seconds, nanos) = time_value(json, path)?;
                    if seconds != 0 || *seconds_presence {
                        put_tag(out, 1, VARINT);
                        put_varint(out, seconds.cast_unsigned());
                    }
                    if nanos != 0 {
                        put_tag(out, 2, VARINT);
                        put_varint(out, i64::from(nanos).cast_unsigned());
                    }
                }
                close_len(out, at);
                Ok(())
            }
            Wire::Raw | Wire::IntOrString => {
                // `null` (a list element or a map value) is the empty message.
                put_tag(out, number, LEN);
                let at = open_len(out);
                if !json.is_null() {
                    if let Wire::Raw = wire {
                        put_bytes(out, 1, &raw_bytes(json));
                    } else {
                        put_int_or_string(out, int_or_string(json, path)?);
                    }
                }
                close_len(out, at);
                Ok(())
            }
            Wire::String | Wire::Bytes => {
                let mark = out.len();
                put_tag(out, number, LEN);
                let at = open_len(out);
                if !json.is_null() {
                    if let Wire::String = wire {
                        out.extend_from_slice(string(json, path)?.as_bytes());
                    } else {
                        base64_into(json, path, out)?;
                    }
                }
                if skip_zero && out.len() == at + 1 {
                    out.truncate(mark);
                } else {
                    close_len(out, at);
                }
                Ok(())
            }
            scalar => {
                let mark = out.len();
                put_tag(out, number, wire_type(scalar));
                let zero = put_scalar(scalar, json, path, out)?;
                if skip_zero && zero {
                    out.truncate(mark);
                }
                Ok(())
            }
        }
    }
}

/// The slot of the inline field `index` (`plan.inline` holds it), made on first use.
fn inline_slot<'s, 'a>(
    plan: &MessagePlan,
    index: usize,
    inlines: &'s mut Vec<Inline<'a>>,
) -> &'s mut Inline<'a> {
    if inlines.is_empty() {
        inlines.resize_with(plan.inline.len(), Inline::default);
    }
    let at = plan.inline.iter().position(|&i| i == index).unwrap_or(0);
    &mut inlines[at]
}

/// For each key, whether it is the last one naming its field and its oneof (the one that stays).
fn last_keys(plan: &MessagePlan, source: Source<'_>) -> Vec<bool> {
    let targets: Vec<Option<usize>> = source
        .entries()
        .map(|(k, v, _)| {
            if v.is_null() {
                return None;
            }
            plan.lookup_index(k).filter(|&i| !plan.fields[i].inline)
        })
        .collect();
    let last_of = |found: &dyn Fn(usize) -> bool| targets.iter().rposition(|t| t.is_some_and(found));
    targets
        .iter()
        .enumerate()
        .map(|(n, target)| {
            let Some(index) = *target else {
                return true;
            };
            let field = &plan.fields[index];
            let last_for_field = last_of(&|i| i == index) == Some(n);
            let last_for_oneof = field
                .oneof
                .is_none_or(|o| last_of(&|i| plan.fields[i].oneof == Some(o)) == Some(n));
            last_for_field && last_for_oneof
        })
        .collect()
}

fn wire_type(wire: &Wire) -> u32 {
    match wire {
        Wire::Fixed64 | Wire::Sfixed64 | Wire::Double => FIXED64,
        Wire::Fixed32 | Wire::Sfixed32 | Wire::Float => FIXED32,
        Wire::String
        | Wire::Bytes
        | Wire::Message { .. }
        | Wire::Time { .. }
        | Wire::Raw
        | Wire::IntOrString => LEN,
        _ => VARINT,
    }
}

/// Writes one scalar without a tag (`null` as zero); true when it is its type's zero.
fn put_scalar(wire: &Wire, json: &Value, path: &Loc<'_>, out: &mut Vec<u8>) -> Result<bool, SchemaError> {
    if json.is_null() {
        // A list element or map value: the type's zero (an enum's is its first value).
        return Ok(match wire {
            Wire::Enum { default, .. } => {
                put_varint(out, i64::from(*default).cast_unsigned());
                *default == 0
            }
            _ => {
                match wire_type(wire) {
                    FIXED32 => out.extend_from_slice(&[0; 4]),
                    FIXED64 => out.extend_from_slice(&[0; 8]),
                    _ => out.push(0),
                }
                true
            }
        });
    }
    Ok(match wire {
        Wire::Bool => put_varint_zero(out, u64::from(boolean(json, path)?)),
        Wire::Int32 => put_varint_zero(out, i64::from(int32(json, path)?).cast_unsigned()),
        Wire::Sint32 => put_varint_zero(out, zigzag32(int32(json, path)?)),
        Wire::Int64 => put_varint_zero(out, integer::<i64>(json, path)?.cast_unsigned()),
        Wire::Sint64 => put_varint_zero(out, zigzag64(integer(json, path)?)),
        Wire::Uint32 => put_varint_zero(out, u64::from(uint32(json, path)?)),
        Wire::Uint64 => put_varint_zero(out, integer(json, path)?),
        Wire::Enum { desc, .. } => {
            put_varint_zero(out, i64::from(enum_number(desc, json, path)?).cast_unsigned())
        }
        Wire::Sfixed32 => put_fixed_zero(out, int32(json, path)?.to_le_bytes()),
        Wire::Fixed32 => put_fixed_zero(out, uint32(json, path)?.to_le_bytes()),
        Wire::Sfixed64 => put_fixed_zero(out, integer::<i64>(json, path)?.to_le_bytes()),
        Wire::Fixed64 => put_fixed_zero(out, integer::<u64>(json, path)?.to_le_bytes()),
        Wire::Float => {
            let n = float(json, path)?;
            out.extend_from_slice(&n.to_le_bytes());
            n == 0.0
        }
        Wire::Double => {
            let n = double(json, path)?;
            out.extend_from_slice(&n.to_le_bytes());
            n == 0.0
        }
        Wire::String
        | Wire::Bytes
        | Wire::Message { .. }
        | Wire::Time { .. }
        | Wire::Raw
        | Wire::IntOrString => {
            return Err(SchemaError::at(path, "not a scalar field"));
        }
    })
}

/// Writes field `number` holding `bytes`.
fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_tag(out, number, LEN);
    let at = open_len(out);
    out.extend_from_slice(bytes);
    close_len(out, at);
}

/// The fields of an `IntOrString`, as prost-reflect writes the message `from_json` makes.
fn put_int_or_string(out: &mut Vec<u8>, value: IntOrStr<'_>) {
    put_tag(out, 1, VARINT);
    match value {
        IntOrStr::Int(n) => {
            put_varint(out, 0);
            put_tag(out, 2, VARINT);
            put_varint(out, i64::from(n).cast_unsigned());
        }
        IntOrStr::Str(text) => {
            put_varint(out, 1);
            put_bytes(out, 3, text.as_bytes());
        }
    }
}

/// Writes a varint; true when it is zero.
fn put_varint_zero(out: &mut Vec<u8>, value: u64) -> bool {
    put_varint(out, value);
    value == 0
}

/// Writes fixed-width little-endian bytes; true when they are all zero.
fn put_fixed_zero<const N: usize>(out: &mut Vec<u8>, bytes: [u8; N]) -> bool {
    out.extend_from_slice(&bytes);
    bytes == [0; N]
}

/// Writes a map entry's key (field 1), unless `skip_zero` and it is its type's zero.
fn put_key(wire: &Wire, key: Key<'_>, skip_zero: bool, out: &mut Vec<u8>) {
    let zero = match key {
        Key::Bool(b) => !b,
        Key::I32(n) => n == 0,
        Key::I64(n) => n == 0,
        Key::U32(n) => n == 0,
        Key::U64(n) => n == 0,
        Key::String(s) => s.is_empty(),
    };
    if skip_zero && zero {
        return;
    }
    put_tag(out, 1, wire_type(wire));
    match (key, wire) {
        (Key::Bool(b), _) => put_varint(out, u64::from(b)),
        (Key::I32(n), Wire::Sint32) => put_varint(out, zigzag32(n)),
        (Key::I32(n), Wire::Sfixed32) => out.extend_from_slice(&n.to_le_bytes()),
        (Key::I32(n), _) => put_varint(out, i64::from(n).cast_unsigned()),
        (Key::I64(n), Wire::Sint64) => put_varint(out, zigzag64(n)),
        (Key::I64(n), Wire::Sfixed64) => out.extend_from_slice(&n.to_le_bytes()),
        (Key::I64(n), _) => put_varint(out, n.cast_unsigned()),
        (Key::U32(n), Wire::Fixed32) => out.extend_from_slice(&n.to_le_bytes()),
        (Key::U32(n), _) => put_varint(out, u64::from(n)),
        (Key::U64(n), Wire::Fixed64) => out.extend_from_slice(&n.to_le_bytes()),
        (Key::U64(n), _) => put_varint(out, n),
        (Key::String(s), _) => {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn zigzag32(n: i32) -> u64 {
    u64::from(((n << 1) ^ (n >> 31)).cast_unsigned())
}

fn zigzag64(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)).cast_unsigned()
}

fn put_tag(out: &mut Vec<u8>, number: u32, wire_type: u32) {
    put_varint(out, u64::from((number << 3) | wire_type));
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    out.push(value as u8);
}

/// Reserves one byte for a length that `close_len` fills in: most messages and strings are
/// shorter than 128 bytes, so their length needs no move of what follows.
fn open_len(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len() - 1
}

fn close_len(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        {
            out[at] = len as u8;
        }
        return;
    }
    let mut prefix = Vec::with_capacity(10);
    put_varint(&mut prefix, len as u64);
    out.splice(at..=at, prefix);
}
