//! From a stored repository to what `gitrepo` needs to reach it: its own credentials, or its
//! credential template's (the longest URL prefix, as upstream borrows them), and the CA
//! certificates and SSH host keys kept for its host by the certificates service.

use serde::Deserialize;
use serde_json::Value;

use super::Flavor;
use super::templates::{Templates, has_credentials};
use crate::gitrepo::{self, Remote};
use crate::service::certificate::trust;
use crate::state::ServerState;

/// The fields of a repository (or template, or access query) that say how to reach it.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Reach {
    repo: String,
    username: String,
    password: String,
    bearer_token: String,
    ssh_private_key: String,
    tls_client_cert_data: String,
    tls_client_cert_key: String,
    insecure: bool,
    insecure_ignore_host_key: bool,
}

impl Reach {
    fn read(value: &Value) -> Self {
        Self::deserialize(value).unwrap_or_default()
    }
}

/// How to reach the repository `value` (stored, or as a caller sent it), borrowing a
/// template's credentials when it has none of its own.
pub fn remote_of(app: &ServerState, f: Flavor, value: &Value) -> Remote {
    let own = Reach::read(value);
    let creds = if has_credentials(value) {
        own
    } else {
        match Templates::load(app, f.creds).for_repo(&own.repo) {
            Some(template) => Reach {
                repo: own.repo,
                insecure: own.insecure,
                insecure_ignore_host_key: own.insecure_ignore_host_key,
                ..Reach::read(template)
            },
            None => own,
        }
    };
    build(app, creds)
}

fn build(app: &ServerState, reach: Reach) -> Remote {
    let mut remote = Remote {
        url: reach.repo,
        username: reach.username,
        password: reach.password,
        bearer_token: reach.bearer_token,
        ssh_private_key: reach.ssh_private_key,
        tls_client_cert: (!reach.tls_client_cert_data.is_empty())
            .then_some((reach.tls_client_cert_data, reach.tls_client_cert_key)),
        insecure: reach.insecure || reach.insecure_ignore_host_key,
        ..Remote::default()
    };
    if let Some((host, port, ssh)) = gitrepo::endpoint(&remote.url) {
        if ssh {
            let name = if port == 22 {
                host.clone()
            } else {
                format!("[{host}]:{port}")
            };
            remote.known_hosts = trust::known_host_keys_for(app, &host, port)
                .iter()
                .filter_map(|key| key.to_openssh().ok())
                .map(|key| format!("{name} {key}"))
                .collect();
        } else {
            remote.ca_certificates = trust::ca_certificates_for(app, &host);
        }
    }
    remote
}
