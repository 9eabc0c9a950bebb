//! The REST JSON rules, in one place: Argo CD's REST bodies are Go
//! `encoding/json` applied to its structs, not protojson. Names are the proto
//! field names as written, zero values are omitted (`omitempty`), nested
//! structs that the server always sets are always emitted, and int64 is a
//! JSON number. Types serialised for REST use these predicates with
//! `#[serde(skip_serializing_if = ...)]`.

/// `omitempty` for strings, numbers, booleans, vectors and maps.
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_are_recognised() {
        assert!(is_zero(&String::new()));
        assert!(is_zero(&0_i64));
        assert!(is_zero(&false));
        assert!(is_zero(&Vec::<String>::new()));
        assert!(!is_zero(&"x".to_owned()));
        assert!(!is_zero(&true));
    }
}
