//! The manager identity of `tiphys::kubernetes::cluster_auth` on a real kube-apiserver with its
//! token controller (kube-controller-manager): installed, its token rotated in two steps (the
//! old token works until it is revoked, then the API server refuses it), and uninstalled.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ListParams};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use tiphys::kubernetes::cluster_auth::{self, Made, Target};
use tiphys::kubernetes::{Connection, KubeOptions};

use crate::controlplane::{ControlPlane, Options};

/// How long the API server may keep accepting a revoked token (its Secret informer's lag).
const REVOKED_WITHIN: Duration = Duration::from_secs(20);

/// A client of the plane's API server that authenticates with `token` alone.
fn bearer_client(plane: &ControlPlane, token: &str) -> kube::Client {
    let mut config = kube::Config::new(plane.state.apiserver.url.parse().unwrap());
    let ca = CertificateDer::from_pem_file(&plane.state.pki.ca).unwrap();
    config.root_cert = Some(vec![ca.to_vec()]);
    config.auth_info = serde_json::from_value(serde_json::json!({"token": token})).unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The status code of listing namespaces with `token` (200 when it is accepted).
async fn list_namespaces(plane: &ControlPlane, token: &str) -> u16 {
    let api: Api<Namespace> = Api::all(bearer_client(plane, token));
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("listing namespaces: {e}"),
    }
}

#[test]
fn install_rotate_and_uninstall() {
    let root = tempfile::tempdir().unwrap();
    let options = Options {
        controller: false,
        controller_manager: true,
        ..Options::default()
    };
    let plane = ControlPlane::start(root.path(), options).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connection = Connection::open(&KubeOptions {
            kubeconfig: Some(plane.state.kubeconfig.clone()),
            namespace_of_context: false,
        })
        .await
        .unwrap();
        let target = Target {
            client: &connection.client,
            url: &connection.url,
        };
        let installed = cluster_auth::install_manager(&target, "kube-system", &[], cluster_auth::TOKEN_WAIT)
            .await
            .unwrap();
        let secret = "argocd-manager-long-lived-token";
        assert_eq!(
            installed.made,
            vec![
                Made::ServiceAccount {
                    namespace: "kube-system".into(),
                    name: "argocd-manager".into()
                },
                Made::ClusterRole("argocd-manager-role".into()),
                Made::ClusterRoleBinding("argocd-manager-role-binding".into()),
                Made::Secret {
                    namespace: "kube-system".into(),
                    name: secret.into()
                },
            ]
        );
        let old = installed.token;
        assert_eq!(list_namespaces(&plane, &old).await, 200);
        // A second install finds everything and makes nothing.
        let again = cluster_auth::install_manager(&target, "kube-system", &[], cluster_auth::TOKEN_WAIT)
            .await
            .unwrap();
        assert_eq!((again.token.as_str(), again.made.len()), (old.as_str(), 0));

        let claims = cluster_auth::token_claims(&old).unwrap();
        assert_eq!(
            (
                claims.namespace.as_str(),
                claims.secret_name.as_str(),
                claims.service_account.as_str()
            ),
            ("kube-system", secret, "argocd-manager")
        );
        let new = cluster_auth::new_token_secret(&target, &claims, cluster_auth::TOKEN_WAIT)
            .await
            .unwrap();
        assert!(
            new.secret_name.starts_with("argocd-manager-long-lived-") && new.secret_name != secret,
            "{}",
            new.secret_name
        );
        assert_ne!(new.token, old);
        // Both work until the old one is revoked, so the caller can store the new one first.
        assert_eq!(list_namespaces(&plane, &new.token).await, 200);
        assert_eq!(list_namespaces(&plane, &old).await, 200);
        cluster_auth::revoke_token_secret(&target, &claims, &new.secret_name)
            .await
            .unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(connection.client.clone(), "kube-system");
        let listed: Vec<String> = accounts
            .get("argocd-manager")
            .await
            .unwrap()
            .secrets
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| r.name)
            .collect();
        assert_eq!(listed, vec![new.secret_name.clone()]);
        let deadline = Instant::now() + REVOKED_WITHIN;
        while list_namespaces(&plane, &old).await != 401 {
            assert!(
                Instant::now() < deadline,
                "the revoked token is still accepted after {REVOKED_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(list_namespaces(&plane, &new.token).await, 200);
        // A token of another kind cannot be rotated, and says why.
        let err = cluster_auth::token_claims("not-a-jwt").unwrap_err().to_string();
        assert!(err.contains("cannot be rotated"), "{err}");

        let removed = cluster_auth::uninstall_manager(&target, "kube-system", &[])
            .await
            .unwrap();
        assert_eq!(
            removed,
            vec![
                "ClusterRoleBinding argocd-manager-role-binding",
                "ClusterRole argocd-manager-role",
                "ServiceAccount kube-system/argocd-manager",
            ],
            "the original token Secret was revoked already"
        );
        assert!(accounts.get_opt("argocd-manager").await.unwrap().is_none());
    });
}
