//! gRPC messages: protobuf bytes → the JSON form the use cases work on (`Schema::decode`, what
//! the gRPC and gRPC-Web adapters do with every request), and back.

use prost_reflect::MessageDescriptor;

use crate::schema::Schema;

/// The first line names a message type (the input or output of one method of the API; any
/// other line picks one by its bytes); the rest is its protobuf encoding. Bytes that decode give JSON that encodes (the server
/// encodes every reply from its JSON form), and whose encoding decodes to the same JSON; the
/// JSON reads back as the same message (`from_json`, the REST adapter's direction). Bytes
/// that do not decode get an error that names the message type.
pub fn grpc_message(data: &[u8]) {
    let (name, bytes) = super::first_line(data);
    let schema = Schema::get();
    let types = message_types(schema);
    let desc = super::pick(&types, name, |t| t.full_name());
    let json = match schema.decode(desc, bytes) {
        Ok(json) => json,
        Err(err) => {
            assert!(
                err.to_string().contains(desc.name()),
                "the error does not name {}: {err}",
                desc.name()
            );
            return;
        }
    };
    let name = desc.full_name();
    let normal = normal_form(schema, desc, &json);
    assert_eq!(
        normal_form(schema, desc, &normal),
        normal,
        "{name}: reading the JSON again changed it"
    );
    for from in [&json, &normal] {
        let encoded = schema
            .encode(desc, from)
            .unwrap_or_else(|e| panic!("decoded {name} does not encode: {e}\n{from}"));
        let again = schema
            .decode(desc, &encoded)
            .unwrap_or_else(|e| panic!("the encoding of {name} does not decode: {e}\n{from}"));
        assert_eq!(again, normal, "{name}: JSON → protobuf → JSON changed it");
    }
}

/// The JSON a message reads as: `from_json` then `to_json`. It differs from what `decode`
/// gives only by proto2 `required` fields the wire left out, which `from_json` (and `encode`)
/// fill in and `decode` does not.
pub(super) fn normal_form(
    schema: &Schema,
    desc: &MessageDescriptor,
    json: &serde_json::Value,
) -> serde_json::Value {
    let message = schema
        .from_json(desc, json)
        .unwrap_or_else(|e| panic!("{} does not read its own JSON: {e}\n{json}", desc.full_name()));
    schema.to_json(&message)
}

/// The request and reply types of every method, each once, in name order.
fn message_types(schema: &Schema) -> Vec<MessageDescriptor> {
    let mut types: Vec<MessageDescriptor> = schema
        .pool()
        .services()
        .flat_map(|s| {
            s.methods()
                .flat_map(|m| [m.input(), m.output()])
                .collect::<Vec<_>>()
        })
        .collect();
    types.sort_by(|a, b| a.full_name().cmp(b.full_name()));
    types.dedup_by(|a, b| a.full_name() == b.full_name());
    types
}
