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
    let encoded = schema
        .encode(desc, &json)
        .unwrap_or_else(|e| panic!("decoded {} does not encode: {e}\n{json}", desc.full_name()));
    let again = schema.decode(desc, &encoded).unwrap_or_else(|e| {
        panic!(
            "the encoding of {} does not decode: {e}\n{json}",
            desc.full_name()
        )
    });
    assert_eq!(
        again,
        json,
        "{}: JSON → protobuf → JSON changed it",
        desc.full_name()
    );
    let message = schema
        .from_json(desc, &json)
        .unwrap_or_else(|e| panic!("decoded {} does not read back: {e}\n{json}", desc.full_name()));
    assert_eq!(
        schema.to_json(&message),
        json,
        "{}: JSON → message → JSON changed it",
        desc.full_name()
    );
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
