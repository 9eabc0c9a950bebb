//! Argo CD's manager identity in a destination cluster, as upstream's util/clusterauth makes it:
//! the ServiceAccount `argocd-manager` in the system namespace, the ClusterRole
//! `argocd-manager-role` bound to it (or, when the cluster is limited to namespaces, a Role and a
//! RoleBinding of those names in each), and a long-lived token Secret
//! (`kubernetes.io/service-account-token`) that the cluster's token controller fills.
//!
//! Transport-free: every function takes a kube client of the destination cluster (built by the
//! CLI from a kubeconfig context, or by the server from a cluster Secret) and the URL that
//! messages name it by. `tiphys cluster add` installs and `cluster rm --remove-rbac` uninstalls;
//! the server's RotateAuth makes a new token with [`new_token_secret`] and revokes the old one
//! with [`revoke_token_secret`].

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::core::v1::{ObjectReference, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const MANAGER_SERVICE_ACCOUNT: &str = "argocd-manager";
pub const MANAGER_ROLE: &str = "argocd-manager-role";
pub const MANAGER_ROLE_BINDING: &str = "argocd-manager-role-binding";
/// The token Secret of ServiceAccount `X` is `X-long-lived-token`.
pub const TOKEN_SECRET_SUFFIX: &str = "-long-lived-token";
pub const DEFAULT_SYSTEM_NAMESPACE: &str = "kube-system";
/// How long the token controller gets to fill a new token Secret (upstream's BearerTokenTimeout).
pub const TOKEN_WAIT: Duration = Duration::from_secs(30);
const TOKEN_POLL: Duration = Duration::from_millis(500);
const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Why the cluster side failed. Each message names the API server, the verb and the object.
#[derive(Debug, thiserror::Error)]
pub enum ClusterAuthError {
    /// The credentials are refused (401) or lack a permission (403).
    #[error("{0}")]
    Forbidden(String),
    /// The API server cannot be reached: refused, timed out, or its certificate is not trusted.
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    NotFound(String),
    /// Another refusal of the API server, or input that cannot be used (such as a token that is
    /// not a ServiceAccount token Secret's).
    #[error("{0}")]
    Invalid(String),
    /// The token controller did not fill the token Secret in time.
    #[error("{0}")]
    Timeout(String),
}

type Result<T> = std::result::Result<T, ClusterAuthError>;

/// A destination cluster: a client of its API server, and its URL for messages.
#[derive(Clone)]
pub struct Target<'a> {
    pub client: &'a Client,
    pub url: &'a str,
}

/// An object this run created (not one it found and updated), so that a later failure can
/// remove exactly what the run left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Made {
    ServiceAccount { namespace: String, name: String },
    Secret { namespace: String, name: String },
    ClusterRole(String),
    ClusterRoleBinding(String),
    Role { namespace: String, name: String },
    RoleBinding { namespace: String, name: String },
}

/// The manager's token, and what installing it created.
#[derive(Debug)]
pub struct Installed {
    pub token: String,
    pub made: Vec<Made>,
}

/// Installs the manager in `system_namespace`, with cluster-wide rights or, when `namespaces`
/// is not empty, rights in those namespaces only, and returns its long-lived token (waiting up
/// to `wait` for the token controller). Objects that exist are reused (the ServiceAccount and
/// token Secret) or updated to the manager's rules (roles and bindings). On failure, what this
/// call created is removed again.
pub async fn install_manager(
    target: &Target<'_>,
    system_namespace: &str,
    namespaces: &[String],
    wait: Duration,
) -> Result<Installed> {
    let mut made = Vec::new();
    match install_steps(target, system_namespace, namespaces, wait, &mut made).await {
        Ok(token) => Ok(Installed { token, made }),
        Err(err) => Err(with_undo(target, &made, err).await),
    }
}

async fn install_steps(
    target: &Target<'_>,
    system_namespace: &str,
    namespaces: &[String],
    wait: Duration,
    made: &mut Vec<Made>,
) -> Result<String> {
    let account = ServiceAccount {
        metadata: meta(MANAGER_SERVICE_ACCOUNT, Some(system_namespace)),
        ..Default::default()
    };
    let api = Api::namespaced(target.client.clone(), system_namespace);
    let what = format!("ServiceAccount {system_namespace}/{MANAGER_SERVICE_ACCOUNT}");
    if create(target, &api, &account, &what).await? {
        made.push(Made::ServiceAccount {
            namespace: system_namespace.to_owned(),
            name: MANAGER_SERVICE_ACCOUNT.to_owned(),
        });
    }
    let subject = Subject {
        kind: "ServiceAccount".to_owned(),
        name: MANAGER_SERVICE_ACCOUNT.to_owned(),
        namespace: Some(system_namespace.to_owned()),
        api_group: None,
    };
    if namespaces.is_empty() {
        let role = ClusterRole {
            metadata: meta(MANAGER_ROLE, None),
            rules: Some(cluster_rules()),
            ..Default::default()
        };
        if upsert(
            target,
            &Api::all(target.client.clone()),
            &role,
            &format!("ClusterRole {MANAGER_ROLE}"),
        )
        .await?
        {
            made.push(Made::ClusterRole(MANAGER_ROLE.to_owned()));
        }
        let binding = ClusterRoleBinding {
            metadata: meta(MANAGER_ROLE_BINDING, None),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject]),
        };
        let what = format!("ClusterRoleBinding {MANAGER_ROLE_BINDING}");
        if upsert(target, &Api::all(target.client.clone()), &binding, &what).await? {
            made.push(Made::ClusterRoleBinding(MANAGER_ROLE_BINDING.to_owned()));
        }
    } else {
        for namespace in namespaces {
            let role = Role {
                metadata: meta(MANAGER_ROLE, Some(namespace)),
                rules: Some(namespace_rules()),
            };
            let api = Api::namespaced(target.client.clone(), namespace);
            if upsert(target, &api, &role, &format!("Role {namespace}/{MANAGER_ROLE}")).await? {
                made.push(Made::Role {
                    namespace: namespace.clone(),
                    name: MANAGER_ROLE.to_owned(),
                });
            }
            let binding = RoleBinding {
                metadata: meta(MANAGER_ROLE_BINDING, Some(namespace)),
                role_ref: role_ref("Role"),
                subjects: Some(vec![subject.clone()]),
            };
            let api = Api::namespaced(target.client.clone(), namespace);
            let what = format!("RoleBinding {namespace}/{MANAGER_ROLE_BINDING}");
            if upsert(target, &api, &binding, &what).await? {
                made.push(Made::RoleBinding {
                    namespace: namespace.clone(),
                    name: MANAGER_ROLE_BINDING.to_owned(),
                });
            }
        }
    }
    let (token, secret) =
        service_account_token(target, system_namespace, MANAGER_SERVICE_ACCOUNT, wait).await?;
    made.extend(secret);
    Ok(token)
}

/// The long-lived token of ServiceAccount `account` in `namespace`: its Secret
/// `<account>-long-lived-token` is created unless it exists, and read until the token
/// controller has filled it (at most `wait`). Also returns the Secret when this call made it.
/// The ServiceAccount itself is not created: `--service-account` names one that exists.
pub async fn service_account_token(
    target: &Target<'_>,
    namespace: &str,
    account: &str,
    wait: Duration,
) -> Result<(String, Option<Made>)> {
    let name = format!("{account}{TOKEN_SECRET_SUFFIX}");
    let mut metadata = meta(&name, Some(namespace));
    metadata.annotations = Some(BTreeMap::from([(
        SERVICE_ACCOUNT_NAME_ANNOTATION.to_owned(),
        account.to_owned(),
    )]));
    let secret = Secret {
        metadata,
        type_: Some(SERVICE_ACCOUNT_TOKEN_TYPE.to_owned()),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(target.client.clone(), namespace);
    let what = format!("Secret {namespace}/{name}");
    let made = create(target, &api, &secret, &what).await?.then(|| Made::Secret {
        namespace: namespace.to_owned(),
        name: name.clone(),
    });
    match wait_for_token(target, &api, namespace, &name, account, wait).await {
        Ok(token) => Ok((token, made)),
        Err(err) => Err(with_undo(target, made.as_slice(), err).await),
    }
}

/// Reads Secret `name` until its `token` is there, at most `wait`.
async fn wait_for_token(
    target: &Target<'_>,
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    account: &str,
    wait: Duration,
) -> Result<String> {
    let what = format!("Secret {namespace}/{name}");
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let secret = match api.get(name).await {
            Ok(secret) => secret,
            // The token controller deletes a token Secret whose ServiceAccount does not exist.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(ClusterAuthError::NotFound(format!(
                    "{what} was removed while waiting for its token on the Kubernetes API server at {}: \
                     the token controller does that when ServiceAccount {namespace}/{account} does not exist",
                    target.url
                )));
            }
            Err(e) => return Err(api_error(e, target.url, "get", &what)),
        };
        if let Some(token) = secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .filter(|t| !t.0.is_empty())
        {
            return String::from_utf8(token.0.clone())
                .map_err(|_| ClusterAuthError::Invalid(format!("the token in {what} is not text")));
        }
        if tokio::time::Instant::now() + TOKEN_POLL > deadline {
            return Err(ClusterAuthError::Timeout(format!(
                "the token of ServiceAccount {namespace}/{account} did not appear in {what} within {wait:?} on \
                 the Kubernetes API server at {}: its token controller (kube-controller-manager with \
                 --service-account-private-key-file) fills it; is it running, and does ServiceAccount \
                 {account} exist?",
                target.url
            )));
        }
        tokio::time::sleep(TOKEN_POLL).await;
    }
}

/// Removes the manager: its bindings and roles (cluster-wide, and in each of `namespaces`),
/// its token Secret and its ServiceAccount in `system_namespace`. What does not exist is
/// skipped. Returns what was removed, as "Kind namespace/name".
pub async fn uninstall_manager(
    target: &Target<'_>,
    system_namespace: &str,
    namespaces: &[String],
) -> Result<Vec<String>> {
    let mut objects = vec![
        Made::ClusterRoleBinding(MANAGER_ROLE_BINDING.to_owned()),
        Made::ClusterRole(MANAGER_ROLE.to_owned()),
    ];
    for namespace in namespaces {
        objects.push(Made::RoleBinding {
            namespace: namespace.clone(),
            name: MANAGER_ROLE_BINDING.to_owned(),
        });
        objects.push(Made::Role {
            namespace: namespace.clone(),
            name: MANAGER_ROLE.to_owned(),
        });
    }
    objects.push(Made::Secret {
        namespace: system_namespace.to_owned(),
        name: format!("{MANAGER_SERVICE_ACCOUNT}{TOKEN_SECRET_SUFFIX}"),
    });
    objects.push(Made::ServiceAccount {
        namespace: system_namespace.to_owned(),
        name: MANAGER_SERVICE_ACCOUNT.to_owned(),
    });
    let mut removed = Vec::new();
    for object in &objects {
        if remove(target, object).await? {
            removed.push(describe(object));
        }
    }
    Ok(removed)
}

/// Removes what a run created, newest first (a failed `cluster add`, or one whose registration
/// failed). Returns what could not be removed, described.
pub async fn undo(target: &Target<'_>, made: &[Made]) -> Vec<String> {
    let mut left = Vec::new();
    for object in made.iter().rev() {
        if let Err(e) = remove(target, object).await {
            left.push(format!("{} ({e})", describe(object)));
        }
    }
    left
}

async fn with_undo(target: &Target<'_>, made: &[Made], err: ClusterAuthError) -> ClusterAuthError {
    let left = undo(target, made).await;
    if left.is_empty() {
        return err;
    }
    let note = format!("; left in the cluster: {}", left.join(", "));
    match err {
        ClusterAuthError::Forbidden(m) => ClusterAuthError::Forbidden(m + &note),
        ClusterAuthError::Unreachable(m) => ClusterAuthError::Unreachable(m + &note),
        ClusterAuthError::NotFound(m) => ClusterAuthError::NotFound(m + &note),
        ClusterAuthError::Invalid(m) => ClusterAuthError::Invalid(m + &note),
        ClusterAuthError::Timeout(m) => ClusterAuthError::Timeout(m + &note),
    }
}

// ---- rotation (the server's RotateAuth) --------------------------------------------------------

/// What a ServiceAccount token Secret's token says about itself (its JWT claims, read without
/// verification: the API server that issued it is the one that checks it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaims {
    pub namespace: String,
    pub secret_name: String,
    pub service_account: String,
}

/// The claims of a token from a `kubernetes.io/service-account-token` Secret. A bound token
/// (TokenRequest) or one of another issuer names no Secret, so it cannot be rotated.
pub fn token_claims(token: &str) -> Result<TokenClaims> {
    let not_rotatable = |why: &str| {
        ClusterAuthError::Invalid(format!(
            "the cluster's bearer token is not a ServiceAccount token Secret's ({why}), so it cannot be rotated"
        ))
    };
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| not_rotatable("not a JWT"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| not_rotatable("its payload is not base64url"))?;
    let claims: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| not_rotatable("its payload is not JSON"))?;
    let claim = |key: &str| {
        claims
            .get(format!("kubernetes.io/serviceaccount/{key}"))
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| not_rotatable(&format!("no claim kubernetes.io/serviceaccount/{key}")))
    };
    // The Secret's name first: a bound token (TokenRequest) has the others under another key.
    let secret_name = claim("secret.name")?;
    Ok(TokenClaims {
        namespace: claim("namespace")?,
        secret_name,
        service_account: claim("service-account.name")?,
    })
}

/// A new token Secret and its token.
#[derive(Debug)]
pub struct NewToken {
    pub token: String,
    pub secret_name: String,
}

/// Makes a new token Secret for the ServiceAccount of `claims` (named like the old one, with a
/// generated suffix, and with its annotations) and waits up to `wait` for its token. The old
/// Secret stays, so that the caller can store the new token before revoking the old one with
/// [`revoke_token_secret`].
pub async fn new_token_secret(target: &Target<'_>, claims: &TokenClaims, wait: Duration) -> Result<NewToken> {
    let api: Api<Secret> = Api::namespaced(target.client.clone(), &claims.namespace);
    let old_what = format!("Secret {}/{}", claims.namespace, claims.secret_name);
    let old = api
        .get(&claims.secret_name)
        .await
        .map_err(|e| api_error(e, target.url, "get", &old_what))?;
    // As upstream: `argocd-manager-long-lived-token` becomes `argocd-manager-long-lived-<random>`.
    let prefix = match claims.secret_name.rsplit_once('-') {
        Some((head, _)) => format!("{head}-"),
        None => format!("{}-", claims.secret_name),
    };
    let secret = Secret {
        metadata: ObjectMeta {
            generate_name: Some(prefix.clone()),
            namespace: Some(claims.namespace.clone()),
            annotations: old.metadata.annotations.clone(),
            ..Default::default()
        },
        type_: Some(SERVICE_ACCOUNT_TOKEN_TYPE.to_owned()),
        ..Default::default()
    };
    let what = format!("Secret {}/{prefix}*", claims.namespace);
    let created = api
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|e| api_error(e, target.url, "create", &what))?;
    let name = created.metadata.name.unwrap_or_default();
    let made = Made::Secret {
        namespace: claims.namespace.clone(),
        name: name.clone(),
    };
    match wait_for_token(
        target,
        &api,
        &claims.namespace,
        &name,
        &claims.service_account,
        wait,
    )
    .await
    {
        Ok(token) => Ok(NewToken {
            token,
            secret_name: name,
        }),
        Err(err) => Err(with_undo(target, std::slice::from_ref(&made), err).await),
    }
}

/// Revokes the token of `claims`: the ServiceAccount lists `new_secret` instead of the old
/// Secret, and the old Secret is deleted (the API server then refuses its token).
pub async fn revoke_token_secret(target: &Target<'_>, claims: &TokenClaims, new_secret: &str) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(target.client.clone(), &claims.namespace);
    let what = format!("ServiceAccount {}/{}", claims.namespace, claims.service_account);
    let mut account = accounts
        .get(&claims.service_account)
        .await
        .map_err(|e| api_error(e, target.url, "get", &what))?;
    let mut listed: Vec<ObjectReference> = account
        .secrets
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.name.as_deref() != Some(claims.secret_name.as_str()))
        .collect();
    if !listed.iter().any(|r| r.name.as_deref() == Some(new_secret)) {
        listed.push(ObjectReference {
            name: Some(new_secret.to_owned()),
            ..Default::default()
        });
    }
    account.secrets = Some(listed);
    accounts
        .replace(&claims.service_account, &PostParams::default(), &account)
        .await
        .map_err(|e| api_error(e, target.url, "update", &what))?;
    remove(
        target,
        &Made::Secret {
            namespace: claims.namespace.clone(),
            name: claims.secret_name.clone(),
        },
    )
    .await?;
    Ok(())
}

/// Both steps at once, for a caller with nothing to store in between.
pub async fn rotate_token(target: &Target<'_>, claims: &TokenClaims, wait: Duration) -> Result<NewToken> {
    let new = new_token_secret(target, claims, wait).await?;
    revoke_token_secret(target, claims, &new.secret_name).await?;
    Ok(new)
}

// ---- the rules and requests ---------------------------------------------------------------------

/// Everything, cluster-wide, and every non-resource URL (upstream's manager rules).
pub fn cluster_rules() -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(vec!["*".to_owned()]),
            resources: Some(vec!["*".to_owned()]),
            verbs: vec!["*".to_owned()],
            ..Default::default()
        },
        PolicyRule {
            non_resource_urls: Some(vec!["*".to_owned()]),
            verbs: vec!["*".to_owned()],
            ..Default::default()
        },
    ]
}

/// Everything in one namespace.
pub fn namespace_rules() -> Vec<PolicyRule> {
    cluster_rules().into_iter().take(1).collect()
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..Default::default()
    }
}

fn role_ref(kind: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.to_owned(),
        kind: kind.to_owned(),
        name: MANAGER_ROLE.to_owned(),
    }
}

/// Creates `object`; true when created, false when it already existed (left as it is).
async fn create<K>(target: &Target<'_>, api: &Api<K>, object: &K, what: &str) -> Result<bool>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(api_error(e, target.url, "create", what)),
    }
}

/// Creates `object`, or replaces the one of its name (roles and bindings get the manager's
/// rules and subject even if someone changed them); true when created.
async fn upsert<K>(target: &Target<'_>, api: &Api<K>, object: &K, what: &str) -> Result<bool>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    if create(target, api, object, what).await? {
        return Ok(true);
    }
    let name = object.meta().name.clone().unwrap_or_default();
    api.replace(&name, &PostParams::default(), object)
        .await
        .map_err(|e| api_error(e, target.url, "update", what))?;
    Ok(false)
}

/// Deletes `object`; false when it did not exist.
async fn remove(target: &Target<'_>, object: &Made) -> Result<bool> {
    let client = target.client.clone();
    let params = DeleteParams::default();
    let what = describe(object);
    let result = match object {
        Made::ServiceAccount { namespace, name } => Api::<ServiceAccount>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(drop),
        Made::Secret { namespace, name } => Api::<Secret>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(drop),
        Made::ClusterRole(name) => Api::<ClusterRole>::all(client)
            .delete(name, &params)
            .await
            .map(drop),
        Made::ClusterRoleBinding(name) => Api::<ClusterRoleBinding>::all(client)
            .delete(name, &params)
            .await
            .map(drop),
        Made::Role { namespace, name } => Api::<Role>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(drop),
        Made::RoleBinding { namespace, name } => Api::<RoleBinding>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(drop),
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(api_error(e, target.url, "delete", &what)),
    }
}

fn describe(object: &Made) -> String {
    match object {
        Made::ServiceAccount { namespace, name } => format!("ServiceAccount {namespace}/{name}"),
        Made::Secret { namespace, name } => format!("Secret {namespace}/{name}"),
        Made::ClusterRole(name) => format!("ClusterRole {name}"),
        Made::ClusterRoleBinding(name) => format!("ClusterRoleBinding {name}"),
        Made::Role { namespace, name } => format!("Role {namespace}/{name}"),
        Made::RoleBinding { namespace, name } => format!("RoleBinding {namespace}/{name}"),
    }
}

/// `err`, from `verb` on `what`, named for the user: a refusal says which right the
/// credentials lack, a transport failure says why the server could not be reached (an
/// untrusted certificate is called that).
pub fn api_error(err: kube::Error, url: &str, verb: &str, what: &str) -> ClusterAuthError {
    match err {
        kube::Error::Api(status) => match status.code {
            401 => ClusterAuthError::Forbidden(format!(
                "the Kubernetes API server at {url} does not accept the credentials (to {verb} {what}): {}",
                status.message
            )),
            403 => ClusterAuthError::Forbidden(format!(
                "the credentials may not {verb} {what} on the Kubernetes API server at {url}: {}",
                status.message
            )),
            404 => ClusterAuthError::NotFound(format!(
                "{what} does not exist on the Kubernetes API server at {url} (to {verb} it)"
            )),
            code => ClusterAuthError::Invalid(format!(
                "the Kubernetes API server at {url} refused to {verb} {what} ({code} {}): {}",
                status.reason, status.message
            )),
        },
        other => {
            let chain = causes(&other);
            let why = if chain.contains("certificate") || chain.contains("UnknownIssuer") {
                "its TLS certificate is not trusted (is the kubeconfig's certificate-authority this \
                 server's?)"
            } else if chain.contains("refused") {
                "the connection was refused"
            } else if chain.to_ascii_lowercase().contains("timed out") || chain.contains("elapsed") {
                "it did not answer in time"
            } else {
                "the request failed"
            };
            ClusterAuthError::Unreachable(format!(
                "the Kubernetes API server at {url} cannot be reached (to {verb} {what}): {why}: {chain}"
            ))
        }
    }
}

/// An error and its causes, as one line (kube-rs's transport errors hide the reason in them).
fn causes(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut next = err.source();
    let mut left = 16; // bounded: a cycle of causes would otherwise never end
    while let (Some(cause), true) = (next, left > 0) {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
        left -= 1;
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let part = |v: &serde_json::Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
        format!(
            "{}.{}.sig",
            part(&serde_json::json!({"alg": "RS256"})),
            part(&claims)
        )
    }

    #[test]
    fn legacy_token_claims_name_the_secret() {
        let token = jwt(serde_json::json!({
            "iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": "kube-system",
            "kubernetes.io/serviceaccount/secret.name": "argocd-manager-long-lived-token",
            "kubernetes.io/serviceaccount/service-account.name": "argocd-manager",
        }));
        assert_eq!(
            token_claims(&token).unwrap(),
            TokenClaims {
                namespace: "kube-system".into(),
                secret_name: "argocd-manager-long-lived-token".into(),
                service_account: "argocd-manager".into(),
            }
        );
    }

    #[test]
    fn bound_and_foreign_tokens_are_not_rotatable() {
        let bound = jwt(serde_json::json!({
            "kubernetes.io": {"namespace": "kube-system", "serviceaccount": {"name": "argocd-manager"}}
        }));
        let err = token_claims(&bound).unwrap_err().to_string();
        assert!(
            err.contains("secret.name") && err.contains("cannot be rotated"),
            "{err}"
        );
        let err = token_claims("opaque-token").unwrap_err().to_string();
        assert!(err.contains("not a JWT"), "{err}");
    }

    #[test]
    fn namespaced_rules_have_no_non_resource_urls() {
        assert_eq!(cluster_rules().len(), 2);
        let ns = namespace_rules();
        assert_eq!(ns.len(), 1);
        assert!(ns[0].non_resource_urls.is_none());
        assert_eq!(ns[0].verbs, vec!["*"]);
    }
}
