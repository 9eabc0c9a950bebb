//! The bodies of the fuzz targets (`fuzz/`, run by `benches/fuzz.sh`): each takes arbitrary
//! bytes, feeds them to the real parser, and panics only when an invariant breaks (a panic
//! inside the parser, a round trip that changes the value, a bad input that gets no clear
//! error). They live in the library so that the fuzz crate and the corpus replay test
//! (`tests/it/fuzz_corpus.rs`) run exactly the same code.
//!
//! Top of the layers: a target may call into any module, and no module calls it.

mod policy;

/// One fuzz target: its name (the fuzz crate's binary and its corpus directory,
/// `fuzz/corpus/<name>/`) and its body.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `benches/fuzz.sh` runs them.
pub const TARGETS: &[Target] = &[Target {
    name: "policy_csv",
    run: policy_csv,
}];

pub use self::policy::policy_csv;

/// The input as text, or `None` for bytes no caller could hand the parser as text.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}
