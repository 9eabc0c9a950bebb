//! GetAppDetails (`RepoAppDetailsResponse`) from the files, for the app's type as upstream's
//! `GetAppDetails` decides it.
//!
//! Helm, as upstream's `populateHelmAppDetails`: `valueFiles` lists every file under the chart
//! whose name contains `values` and ends in `.yaml`/`.yml` (any case), relative to the chart and
//! in walk order; `values` is `values.yaml`'s text; `parameters` flatten `values.yaml` and then
//! the source's `helm.valueFiles` over it (sorted by name; upstream's map has no order), and
//! `fileParameters` repeat the source's. The source's `helm.parameters` are not applied, as
//! upstream does not apply them here. Value files are found relative to the chart, or to the
//! repository root when they start with `/`; one that is missing is skipped (as upstream's
//! `GetParameters` skips it), one outside the repository is refused, and URLs and `$ref/`
//! files are skipped, as fetching them is the caller's business. Upstream leaves `name` empty;
//! tiphys fills it from `Chart.yaml`.
//!
//! Kustomize: upstream runs `kustomize build` and lists the images of the output. tiphys cannot
//! build, so it lists the `images:` the kustomization declares, in upstream's override form
//! (`name=newName:newTag`, `name:newTag`, `name@digest`), with the source's
//! `kustomize.images` overriding the same image names. Images written only in resources do not
//! appear. Directory and Plugin: only the type, as upstream's answer for a directory.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::discover::KUSTOMIZATION_NAMES;
use super::helm_values::{MAX_VALUES_BYTES, flatten_into};
use super::source::{HelmSource, KustomizeSource, Source, resolve_type};
use super::{AppType, Files, app_dir, clean_path, join, read_text, under, walk_order, yaml};
use crate::error::AppError;

/// `RepoAppDetailsResponse`, in its JSON names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Details {
    #[serde(rename = "type")]
    pub app_type: AppType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmAppSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeAppSpec>,
}

/// `HelmAppSpec`. `parameters` and `fileParameters` are `HelmParameter`/`HelmFileParameter`
/// JSON objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppSpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub value_files: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub values: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_parameters: Vec<Value>,
}

/// `KustomizeAppSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KustomizeAppSpec {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// The details of the app at `path` for `source` (an `ApplicationSource` as JSON; `null` for
/// none).
pub fn app_details(files: &(impl Files + ?Sized), path: &str, source: &Value) -> Result<Details, AppError> {
    let dir = app_dir(files, path)?;
    let source = Source::parse(source)?;
    let app_type = resolve_type(files, &dir, &source)?;
    let mut details = Details {
        app_type,
        helm: None,
        kustomize: None,
    };
    match app_type {
        AppType::Helm => details.helm = Some(helm(files, &dir, source.helm.as_ref())?),
        AppType::Kustomize => {
            details.kustomize = Some(kustomize(files, &dir, source.kustomize.as_ref())?);
        }
        AppType::Directory | AppType::Plugin => {}
    }
    Ok(details)
}

fn helm(
    files: &(impl Files + ?Sized),
    dir: &str,
    source: Option<&HelmSource>,
) -> Result<HelmAppSpec, AppError> {
    let mut spec = HelmAppSpec {
        value_files: walk_order(files.list().iter())
            .into_iter()
            .filter_map(|(p, _)| under(dir, p))
            .filter(|rel| is_values_file(rel))
            .map(str::to_owned)
            .collect(),
        ..HelmAppSpec::default()
    };
    let chart = join(dir, "Chart.yaml");
    if files.contains(&chart) {
        let text = read_text(files, &chart, MAX_VALUES_BYTES)?;
        let meta = yaml::first_document(&text).map_err(|e| content_error(&chart, &e))?;
        spec.name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
    }
    let mut parameters = BTreeMap::new();
    let values = join(dir, "values.yaml");
    if files.contains(&values) {
        spec.values = read_text(files, &values, MAX_VALUES_BYTES)?;
        flatten_into(&spec.values, &values, &mut parameters).map_err(AppError::FailedPrecondition)?;
    }
    if let Some(source) = source {
        for file in &source.value_files {
            let Some(path) = value_file_path(dir, file)? else {
                continue;
            };
            if !files.contains(&path) {
                continue;
            }
            let text = read_text(files, &path, MAX_VALUES_BYTES)?;
            flatten_into(&text, &path, &mut parameters).map_err(AppError::FailedPrecondition)?;
        }
        spec.file_parameters.clone_from(&source.file_parameters);
    }
    spec.parameters = parameters
        .into_iter()
        .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
        .collect();
    Ok(spec)
}

/// Upstream's test for a values file: the base name contains `values`, the extension is
/// `.yaml` or `.yml` in any case.
fn is_values_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let ext = name.rfind('.').map(|i| name[i..].to_ascii_lowercase());
    name.contains("values") && matches!(ext.as_deref(), Some(".yaml" | ".yml"))
}

/// Where a `helm.valueFiles` entry points in the repository, or `None` for what is fetched
/// elsewhere (a URL, another source's `$ref/`).
fn value_file_path(dir: &str, file: &str) -> Result<Option<String>, AppError> {
    if file.starts_with('$') || file.contains("://") {
        return Ok(None);
    }
    let joined = match file.strip_prefix('/') {
        Some(from_root) => from_root.to_owned(),
        None => join(dir, file),
    };
    clean_path(&joined).map(Some).map_err(|_| {
        AppError::InvalidArgument(format!("value file '{file}' resolved to outside repository root"))
    })
}

fn kustomize(
    files: &(impl Files + ?Sized),
    dir: &str,
    source: Option<&KustomizeSource>,
) -> Result<KustomizeAppSpec, AppError> {
    let Some(path) = KUSTOMIZATION_NAMES
        .iter()
        .map(|n| join(dir, n))
        .find(|p| files.contains(p))
    else {
        return Ok(KustomizeAppSpec::default());
    };
    let text = read_text(files, &path, MAX_VALUES_BYTES)?;
    let doc = yaml::first_document(&text).map_err(|e| content_error(&path, &e))?;
    let mut images: Vec<String> = match doc.get("images") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().filter_map(image_override).collect(),
        Some(_) => return Err(content_error(&path, "images is not a list")),
    };
    for wanted in source.map(|s| s.images.as_slice()).unwrap_or_default() {
        let name = image_name(wanted);
        match images.iter_mut().find(|i| image_name(i) == name) {
            Some(existing) => existing.clone_from(wanted),
            None => images.push(wanted.clone()),
        }
    }
    Ok(KustomizeAppSpec { images })
}

/// One `images:` entry in upstream's override form; entries without a name are skipped.
fn image_override(entry: &Value) -> Option<String> {
    let field = |k: &str| entry.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let name = field("name")?;
    let mut text = name.to_owned();
    if let Some(new_name) = field("newName").filter(|n| *n != name) {
        text = format!("{name}={new_name}");
    }
    if let Some(tag) = field("newTag") {
        text = format!("{text}:{tag}");
    }
    if let Some(digest) = field("digest") {
        text = format!("{text}@{digest}");
    }
    Some(text)
}

/// The image an override is for: before `=`, else before the tag or digest.
fn image_name(image: &str) -> &str {
    if let Some((name, _)) = image.split_once('=') {
        return name;
    }
    let image = image.split_once('@').map_or(image, |(n, _)| n);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

fn content_error(path: &str, why: &str) -> AppError {
    AppError::FailedPrecondition(format!("failed to parse {path}: {why}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::service::repository::content::MemFiles;

    const VALUES: &str =
        "replicaCount: 1\nimage:\n  repository: nginx\n  tag: \"1.19\"\nservice:\n  ports: [80, 443]\n";

    fn chart() -> MemFiles {
        MemFiles::new([
            ("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
            ("chart/values.yaml", VALUES),
            ("chart/values-prod.yaml", "replicaCount: 3\nextra: on\n"),
            ("chart/ci/test-values.YML", "x: 1\n"),
            ("chart/templates/deploy.yaml", "kind: Deployment\n"),
            ("chart/values.json", "{}"),
            ("shared/common-values.yaml", "common: true\n"),
        ])
    }

    fn params(spec: &HelmAppSpec) -> Vec<(String, String)> {
        spec.parameters
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or_default().to_owned(),
                    p["value"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn helm_details_from_the_chart() {
        let details = app_details(&chart(), "chart", &Value::Null);
        let Ok(Details {
            app_type: AppType::Helm,
            helm: Some(spec),
            kustomize: None,
        }) = details
        else {
            panic!("{details:?}");
        };
        assert_eq!(spec.name, "web");
        assert_eq!(
            spec.value_files,
            ["ci/test-values.YML", "values-prod.yaml", "values.yaml"]
        );
        assert_eq!(spec.values, VALUES);
        assert_eq!(
            params(&spec),
            [
                ("image.repository".to_owned(), "nginx".to_owned()),
                ("image.tag".to_owned(), "1.19".to_owned()),
                ("replicaCount".to_owned(), "1".to_owned()),
                ("service.ports[0]".to_owned(), "80".to_owned()),
                ("service.ports[1]".to_owned(), "443".to_owned()),
            ]
        );
        let text = serde_json::to_value(Details {
            app_type: AppType::Helm,
            helm: Some(spec),
            kustomize: None,
        })
        .unwrap_or_default();
        assert_eq!(text["type"], "Helm");
        assert_eq!(text["helm"]["valueFiles"][0], "ci/test-values.YML");
        assert_eq!(
            text["helm"]["parameters"][0],
            json!({"name": "image.repository", "value": "nginx"})
        );
    }

    #[test]
    fn source_value_files_override_values_yaml() {
        let source = json!({"helm": {
            "valueFiles": ["values-prod.yaml", "/shared/common-values.yaml", "missing.yaml",
                           "https://example.com/v.yaml", "$ref/v.yaml"],
            "parameters": [{"name": "replicaCount", "value": "9"}],
            "fileParameters": [{"name": "cfg", "path": "files/cfg"}],
        }});
        let spec = app_details(&chart(), "chart", &source)
            .ok()
            .and_then(|d| d.helm)
            .unwrap_or_default();
        let params = params(&spec);
        assert!(
            params.contains(&("replicaCount".to_owned(), "3".to_owned())),
            "{params:?}"
        );
        assert!(params.contains(&("extra".to_owned(), "on".to_owned())));
        assert!(params.contains(&("common".to_owned(), "true".to_owned())));
        assert_eq!(
            spec.file_parameters,
            [json!({"name": "cfg", "path": "files/cfg"})]
        );
    }

    #[test]
    fn a_value_file_outside_the_repository_is_refused() {
        let source = json!({"helm": {"valueFiles": ["../../etc/passwd"]}});
        let err = app_details(&chart(), "chart", &source);
        assert!(
            matches!(&err, Err(AppError::InvalidArgument(m)) if m.contains("../../etc/passwd")),
            "{err:?}"
        );
    }

    #[test]
    fn a_values_file_that_is_a_list_is_an_error() {
        let files = MemFiles::new([("c/Chart.yaml", "name: c\n"), ("c/values.yaml", "- a\n- b\n")]);
        let err = app_details(&files, "c", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("c/values.yaml")),
            "{err:?}"
        );
        let files = MemFiles::new([("c/Chart.yaml", "name: [\n")]);
        let err = app_details(&files, "c", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("c/Chart.yaml")),
            "{err:?}"
        );
    }

    #[test]
    fn a_huge_values_file_is_refused_before_parsing() {
        let big = "a: b\n".repeat((MAX_VALUES_BYTES / 5 + 1) as usize);
        let files = MemFiles::new([("c/Chart.yaml", "name: c\n".to_owned()), ("c/values.yaml", big)]);
        let err = app_details(&files, "c", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::PayloadTooLarge(m)) if m.contains("c/values.yaml")),
            "{err:?}"
        );
    }

    #[test]
    fn kustomize_images_from_the_kustomization() {
        let files = MemFiles::new([(
            "k/kustomization.yaml",
            "resources: [deploy.yaml]\nimages:\n- name: nginx\n  newName: my/nginx\n  newTag: \"1.2\"\n\
             - name: redis\n  newTag: \"7\"\n- name: app\n  digest: sha256:abc\n- newTag: orphan\n",
        )]);
        let details = app_details(&files, "k", &Value::Null).ok();
        let images = details
            .and_then(|d| d.kustomize)
            .map(|k| k.images)
            .unwrap_or_default();
        assert_eq!(images, ["nginx=my/nginx:1.2", "redis:7", "app@sha256:abc"]);

        let source = json!({"kustomize": {"images": ["redis:8", "busybox=my/busybox:1"]}});
        let details = app_details(&files, "k", &source).ok();
        let images = details
            .and_then(|d| d.kustomize)
            .map(|k| k.images)
            .unwrap_or_default();
        assert_eq!(
            images,
            [
                "nginx=my/nginx:1.2",
                "redis:8",
                "app@sha256:abc",
                "busybox=my/busybox:1"
            ]
        );
    }

    #[test]
    fn kustomize_with_bad_yaml_names_the_file() {
        let files = MemFiles::new([("k/Kustomization", "images: {\n")]);
        let err = app_details(&files, "k", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("k/Kustomization")),
            "{err:?}"
        );
    }

    #[test]
    fn directory_and_plugin_have_only_a_type() {
        let files = MemFiles::new([("d/a.yaml", "kind: ConfigMap\n")]);
        let details = app_details(&files, "d", &Value::Null).ok();
        assert_eq!(
            details,
            Some(Details {
                app_type: AppType::Directory,
                helm: None,
                kustomize: None
            })
        );
        let details = app_details(&files, "d", &json!({"plugin": {}}))
            .ok()
            .map(|d| d.app_type);
        assert_eq!(details, Some(AppType::Plugin));
        let empty = app_details(&MemFiles::default(), ".", &Value::Null)
            .ok()
            .map(|d| d.app_type);
        assert_eq!(empty, Some(AppType::Directory));
    }

    #[test]
    fn bad_paths_are_refused() {
        assert!(matches!(
            app_details(&chart(), "../chart", &Value::Null),
            Err(AppError::InvalidArgument(_))
        ));
        assert!(matches!(
            app_details(&chart(), "/chart", &Value::Null),
            Err(AppError::InvalidArgument(_))
        ));
        assert!(
            matches!(app_details(&chart(), "nope", &Value::Null), Err(AppError::NotFound(m)) if m.contains("nope"))
        );
    }

    #[test]
    fn image_names_of_overrides() {
        assert_eq!(image_name("nginx"), "nginx");
        assert_eq!(image_name("nginx:1.2"), "nginx");
        assert_eq!(image_name("reg:5000/nginx"), "reg:5000/nginx");
        assert_eq!(image_name("reg:5000/nginx:1"), "reg:5000/nginx");
        assert_eq!(image_name("a=b:1"), "a");
        assert_eq!(image_name("app@sha256:abc"), "app");
    }
}
