//! RotateAuth: a new ServiceAccount token for a cluster registered with one, as upstream's
//! (server/cluster/cluster.go): the token's claims name its ServiceAccount and token Secret; a
//! new token Secret is made in the cluster with the old token, the new token is tried (the
//! server's version), stored in the cluster (client certificate data removed: the cluster now
//! uses the token), and only then is the old Secret revoked. `clusters, update`, as upstream.
//!
//! A failure before the new token is stored removes the new Secret again, so that no unused
//! token is left in the cluster (upstream leaves it).

use serde_json::Value;

use super::{ClusterQuery, authorized, connection, store};
use crate::clusters::{ClusterError, Target};
use crate::error::AppError;
use crate::kubernetes::cluster_auth::{self, ClusterAuthError, Made, TOKEN_WAIT};
use crate::service::sensitive::{object_mut, write};
use crate::service::{Ctx, Reply};

pub async fn rotate_auth(ctx: Ctx, q: ClusterQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let entry = authorized(&ctx.app, principal, &q.lookup()?, "update")?;
    let Some(clusters) = &ctx.app.clusters else {
        return Err(AppError::FailedPrecondition(
            "this server does not contact clusters (--cluster-access off), so it cannot rotate a token inside one"
                .to_owned(),
        ));
    };
    let target = Target::read(&entry.value).map_err(|e| AppError::InvalidArgument(e.to_string()))?;
    let server = crate::service::redact::url(&target.server);
    if target.config.bearer_token.is_empty() || target.exec().is_some() {
        return Err(AppError::InvalidArgument(format!(
            "Cluster '{server}' does not use bearer token authentication"
        )));
    }
    let claims =
        cluster_auth::token_claims(&target.config.bearer_token).map_err(|e| auth_failed(&server, e))?;
    let client = clusters
        .client(&target)
        .await
        .map_err(|e| reach_failed(&server, &e))?;
    let old = cluster_auth::Target {
        client: &client,
        url: &target.server,
    };
    let new = bounded(cluster_auth::new_token_secret(&old, &claims, TOKEN_WAIT))
        .await
        .map_err(|e| auth_failed(&server, e))?;
    let made = [Made::Secret {
        namespace: claims.namespace.clone(),
        name: new.secret_name.clone(),
    }];
    let mut value = entry.value.clone();
    if let Some(config) = object_mut(&mut value)
        .and_then(|o| o.get_mut("config"))
        .and_then(Value::as_object_mut)
    {
        config.insert("bearerToken".to_owned(), Value::String(new.token.clone()));
        if let Some(Value::Object(tls)) = config.get_mut("tlsClientConfig") {
            tls.remove("certData");
            tls.remove("keyData");
        }
    }
    let stored = async {
        let rotated = Target::read(&value).map_err(|e| AppError::InvalidArgument(e.to_string()))?;
        // Tried before it is stored, as upstream does.
        let reached = clusters
            .server_version(&rotated)
            .await
            .map_err(|e| reach_failed(&server, &e))?;
        write(&ctx.app, super::WHAT, store(&entry, value.clone())).await?;
        connection::record(&ctx.app, &value, &rotated, reached);
        Ok::<_, AppError>(())
    };
    if let Err(err) = stored.await {
        cluster_auth::undo(&old, &made).await;
        return Err(err);
    }
    bounded(cluster_auth::revoke_token_secret(&old, &claims, &new.secret_name))
        .await
        .map_err(|e| {
            AppError::Unavailable(format!(
                "the new token of cluster {server} is stored, but the old one was not revoked: {e}"
            ))
        })?;
    tracing::info!(cluster = %server, old = %claims.secret_name, new = %new.secret_name, "rotated the cluster's token");
    Ok(Reply::Message(Value::Object(serde_json::Map::new())))
}

/// A call into the cluster, bounded: the token controller may never fill a Secret.
async fn bounded<T>(call: impl Future<Output = Result<T, ClusterAuthError>>) -> Result<T, ClusterAuthError> {
    let bound = TOKEN_WAIT + std::time::Duration::from_secs(15);
    tokio::time::timeout(bound, call)
        .await
        .unwrap_or_else(|_| Err(ClusterAuthError::Timeout(format!("no answer within {bound:?}"))))
}

fn auth_failed(server: &str, err: ClusterAuthError) -> AppError {
    let message = format!("cannot rotate the token of cluster {server}: {err}");
    match err {
        ClusterAuthError::Invalid(_) => AppError::InvalidArgument(message),
        ClusterAuthError::Unreachable(_) | ClusterAuthError::Timeout(_) => AppError::Unavailable(message),
        ClusterAuthError::Forbidden(_) | ClusterAuthError::NotFound(_) => {
            AppError::FailedPrecondition(message)
        }
    }
}

fn reach_failed(server: &str, err: &ClusterError) -> AppError {
    connection::refusal(err, format!("cannot rotate the token of cluster {server}: {err}"))
}
