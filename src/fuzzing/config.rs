//! `argocd-cm` and `argocd-rbac-cm` as manifest files: YAML → the object's data → settings.

use std::path::PathBuf;

use serde_yaml_ng::{Mapping, Value};

use crate::config::settings::Settings;
use crate::config::source::{ARGOCD_CM, ARGOCD_RBAC_CM, ARGOCD_SECRET, Input, RawObject, parse_input};

/// The input is `argocd-cm.yaml`. See [`check`].
pub fn argocd_cm(data: &[u8]) {
    check(ARGOCD_CM, data);
}

/// The input is `argocd-rbac-cm.yaml`. See [`check`].
pub fn argocd_rbac_cm(data: &[u8]) {
    check(ARGOCD_RBAC_CM, data);
}

/// - A manifest that does not parse gets an error located in its file.
/// - One that parses gives data that, written as a manifest again or as a mounted volume (one
///   file per key), parses to the same data; and settings from either are the same (both
///   load, or both fail for the same reason).
/// - A settings error is located in the file, at a line the file has.
fn check(name: &'static str, data: &[u8]) {
    let path = PathBuf::from(format!("{name}.yaml"));
    let shown = path.display().to_string();
    let input = Input::Manifest {
        path: path.clone(),
        bytes: data.to_vec(),
    };
    let raw = match parse_input(name, &input) {
        Ok(raw) => raw,
        Err(err) => {
            assert!(err.location.starts_with(&shown), "error not in the file: {err}");
            return;
        }
    };
    let settings = settings(name, &raw);
    if let Err(err) = &settings {
        // Lines as YAML counts them: a lone `\r` breaks a line too.
        let lines = 1 + data
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && data.get(i + 1) != Some(&b'\n')))
            .count();
        let line = err
            .location
            .strip_prefix(&shown)
            .and_then(|at| at.strip_prefix(':'))
            .map(|at| at.parse::<usize>().unwrap_or_else(|_| panic!("location {at:?}")));
        assert!(
            err.location == shown || line.is_some_and(|l| (1..=lines).contains(&l)),
            "error located outside the file ({lines} lines): {err}"
        );
    }

    let written = manifest(name, &raw);
    let again = parse_input(
        name,
        &Input::Manifest {
            path: path.clone(),
            bytes: written.clone().into_bytes(),
        },
    )
    .unwrap_or_else(|e| panic!("the data written as a manifest does not parse: {e}\n{written}"));
    assert_eq!(again.data, raw.data, "data changed on the way back:\n{written}");
    let volume = parse_input(
        name,
        &Input::Volume {
            path: PathBuf::from(name),
            files: raw
                .data
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect(),
        },
    )
    .unwrap_or_else(|e| panic!("the data as a volume does not parse: {e}"));
    assert_eq!(volume.data, raw.data, "a volume read different data");
    for other in [settings_of(name, &again), settings_of(name, &volume)] {
        assert_eq!(other, summary(&settings), "the same data, other settings");
    }
}

fn settings(name: &'static str, raw: &RawObject) -> Result<Settings, crate::config::source::ConfigError> {
    let empty = |n| RawObject::empty(n);
    let secret = empty(ARGOCD_SECRET);
    if name == ARGOCD_CM {
        Settings::from_raw(raw, &empty(ARGOCD_RBAC_CM), &secret)
    } else {
        Settings::from_raw(&empty(ARGOCD_CM), raw, &secret)
    }
}

/// What is compared between two loads of the same data: whether it loaded, and why not.
fn summary(settings: &Result<Settings, crate::config::source::ConfigError>) -> Result<(), String> {
    settings.as_ref().map(drop).map_err(|e| e.reason.clone())
}

fn settings_of(name: &'static str, raw: &RawObject) -> Result<(), String> {
    summary(&settings(name, raw))
}

/// `raw` as a ConfigMap manifest.
fn manifest(name: &str, raw: &RawObject) -> String {
    let mut data = Mapping::new();
    for (key, value) in &raw.data {
        data.insert(Value::from(key.as_str()), Value::from(value.as_str()));
    }
    let mut top = Mapping::new();
    top.insert("apiVersion".into(), "v1".into());
    top.insert("kind".into(), "ConfigMap".into());
    let mut metadata = Mapping::new();
    metadata.insert("name".into(), name.into());
    top.insert("metadata".into(), Value::Mapping(metadata));
    top.insert("data".into(), Value::Mapping(data));
    serde_yaml_ng::to_string(&top).unwrap_or_else(|e| panic!("a mapping of strings serialises: {e}"))
}
