//! The bodies of the fuzz targets (`fuzz/`, run by `benches/fuzz.sh`): each takes arbitrary
//! bytes, feeds them to the real parser, and panics only when an invariant breaks (a panic
//! inside the parser, a round trip that changes the value, a bad input that gets no clear
//! error). They live in the library so that the fuzz crate and the corpus replay test
//! (`tests/it/fuzz_corpus.rs`) run exactly the same code.
//!
//! Top of the layers: a target may call into any module, and no module calls it.

mod apply;
mod auth;
mod config;
mod grpc_message;
mod grpc_web;
mod policy;
mod rest_json;
mod sniff;

/// One fuzz target: its name (the fuzz crate's binary and its corpus directory,
/// `fuzz/corpus/<name>/`) and its body.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `benches/fuzz.sh` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "sniff",
        run: sniff,
    },
    Target {
        name: "grpc_web",
        run: grpc_web,
    },
    Target {
        name: "grpc_message",
        run: grpc_message,
    },
    Target {
        name: "rest_json",
        run: rest_json,
    },
    Target {
        name: "policy_csv",
        run: policy_csv,
    },
    Target {
        name: "argocd_cm",
        run: argocd_cm,
    },
    Target {
        name: "argocd_rbac_cm",
        run: argocd_rbac_cm,
    },
    Target {
        name: "cookie",
        run: cookie,
    },
    Target {
        name: "token",
        run: token,
    },
    Target {
        name: "apply_yaml",
        run: apply_yaml,
    },
];

pub use self::apply::apply_yaml;
pub use self::auth::{cookie, token};
pub use self::config::{argocd_cm, argocd_rbac_cm};
pub use self::grpc_message::grpc_message;
pub use self::grpc_web::grpc_web;
pub use self::policy::policy_csv;
pub use self::rest_json::rest_json;
pub use self::sniff::sniff;

/// The input as text, or `None` for bytes no caller could hand the parser as text.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The first line of the input (without its `\n`) and the rest.
fn first_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(end) => (&data[..end], &data[end + 1..]),
        None => (data, &[]),
    }
}

/// The item named `name` (as `key` names items), else one picked by the bytes of `name`: a
/// corpus file says what it is for, and any mutation of it still picks something.
fn pick<'a, T>(items: &'a [T], name: &[u8], key: impl Fn(&T) -> &str) -> &'a T {
    items
        .iter()
        .find(|item| key(item).as_bytes() == name)
        .unwrap_or_else(|| {
            let sum = name.iter().map(|&b| usize::from(b)).sum::<usize>();
            &items[sum % items.len()]
        })
}
