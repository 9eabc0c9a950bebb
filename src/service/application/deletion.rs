//! Which finalizers a deletion leaves on an application, as upstream's `Delete` and
//! `getPropagationPolicyFinalizer` (server/application/application.go) and the
//! `SetCascadedDeletion` family (pkg/apis/application/v1alpha1/types.go) decide: a cascading
//! deletion (the default) needs the finalizer of its propagation policy, so that the controller
//! deletes the application's resources first; a non-cascading one must not keep any.

use serde_json::Value;

use crate::error::AppError;

/// The finalizer of a cascading deletion in the foreground (upstream's default, "").
const RESOURCES: &str = "resources-finalizer.argocd.argoproj.io";
const FOREGROUND: &str = "resources-finalizer.argocd.argoproj.io/foreground";
const BACKGROUND: &str = "resources-finalizer.argocd.argoproj.io/background";

/// The finalizers `app` must carry before it is deleted with `cascade` and `policy`, or `None`
/// when they need no change. Refuses a policy without cascading and a policy it does not know.
pub fn finalizers(app: &Value, cascade: Option<bool>, policy: &str) -> Result<Option<Vec<String>>, AppError> {
    let mut current: Vec<String> = app["metadata"]["finalizers"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if cascade == Some(false) {
        if !policy.is_empty() {
            return Err(AppError::InvalidArgument(
                "cannot set propagation policy when cascading is disabled".to_owned(),
            ));
        }
        let before = current.len();
        current.retain(|f| ![RESOURCES, FOREGROUND, BACKGROUND].contains(&f.as_str()));
        return Ok((current.len() != before).then_some(current));
    }
    let wanted = match policy.to_ascii_lowercase().as_str() {
        "" => RESOURCES,
        "foreground" => FOREGROUND,
        "background" => BACKGROUND,
        _ => {
            return Err(AppError::InvalidArgument(format!(
                "invalid propagation policy: {policy}"
            )));
        }
    };
    // Kubernetes refuses new finalizers on an object already being deleted; the deletion is
    // still sent again, so that a retried request succeeds.
    let deleting = !app["metadata"]["deletionTimestamp"].is_null();
    if current.iter().any(|f| f == wanted) || deleting {
        return Ok(None);
    }
    current.push(wanted.to_owned());
    Ok(Some(current))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cascading_adds_the_policy_finalizer_once() {
        let app = json!({"metadata": {"finalizers": ["other"]}});
        assert_eq!(
            finalizers(&app, None, "").unwrap(),
            Some(vec!["other".to_owned(), RESOURCES.to_owned()])
        );
        assert_eq!(
            finalizers(&app, Some(true), "Background").unwrap(),
            Some(vec!["other".to_owned(), BACKGROUND.to_owned()])
        );
        let has = json!({"metadata": {"finalizers": [FOREGROUND]}});
        assert_eq!(finalizers(&has, None, "foreground").unwrap(), None);
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(finalizers(&deleting, None, "").unwrap(), None);
    }

    #[test]
    fn not_cascading_drops_every_policy_finalizer() {
        let app = json!({"metadata": {"finalizers": [RESOURCES, "other", BACKGROUND]}});
        assert_eq!(
            finalizers(&app, Some(false), "").unwrap(),
            Some(vec!["other".to_owned()])
        );
        assert_eq!(finalizers(&json!({}), Some(false), "").unwrap(), None);
    }

    #[test]
    fn bad_policies_are_refused() {
        let err = finalizers(&json!({}), Some(false), "background").unwrap_err();
        assert!(err.to_string().contains("cascading is disabled"), "{err}");
        let err = finalizers(&json!({}), None, "sideways").unwrap_err();
        assert!(
            err.to_string().contains("invalid propagation policy: sideways"),
            "{err}"
        );
    }
}
