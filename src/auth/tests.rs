//! The kinds of local token together, through [`Auth`] as the server opens it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::jwt::Claims;
use super::*;
use crate::clock::Clock;
use crate::principal::{LOCAL_ISSUER, Principal};
use crate::store::{Entry, FileStore, Op, Revision, StoreError};

/// Project tokens listed by id; everything else refused.
#[derive(Default)]
struct Listed(Mutex<HashSet<String>>);

impl ProjectTokenSource for Listed {
    fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String> {
        let listed = self.0.lock().map(|l| l.contains(claims.jti)).unwrap_or(false);
        if project == "p1" && role == "ci" && listed {
            Ok(())
        } else {
            Err(format!("not a token of {project}:{role}"))
        }
    }
}

async fn open_with(dir: &std::path::Path, config: Arc<ConfigWatch>, projects: Arc<Listed>) -> Auth {
    open_at(dir, config, projects, Clock::system()).await
}

/// [`open_with`] reading time from `clock` (a paused one moves only when the test says).
async fn open_at(
    dir: &std::path::Path,
    config: Arc<ConfigWatch>,
    projects: Arc<Listed>,
    clock: Clock,
) -> Auth {
    std::fs::create_dir_all(dir).unwrap();
    let store = Arc::new(FileStore::open(dir).unwrap());
    let auth = Auth::open(
        store,
        config,
        AuthOptions {
            data_dir: Some(dir.to_path_buf()),
            exclusive: true,
            limits: LoginLimits::default(),
            projects,
            oidc: None,
            secrets: Arc::new(crate::registry::SecretsKeys::new(Vec::new(), b"auth tests")),
            redis: None,
            clock,
            kube: None,
        },
    )
    .await
    .unwrap();
    auth.logins.ensure_initial_admin().await.unwrap();
    auth
}

async fn open(dir: &std::path::Path, projects: Arc<Listed>) -> Auth {
    open_with(dir, ConfigWatch::new(None).unwrap(), projects).await
}

#[tokio::test]
async fn project_tokens_are_accepted_only_while_their_role_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let listed = Arc::new(Listed::default());
    let auth = open(dir.path(), Arc::clone(&listed)).await;
    let issued = auth
        .project_tokens
        .issue("p1", "ci", Some("t1".into()), Duration::from_secs(3600));
    assert_eq!(issued.jti, "t1");
    assert_eq!(issued.exp, Some(issued.iat + 3600));

    // Not (yet) recorded on the role: refused.
    assert!(
        auth.tokens
            .authenticate(&issued.token)
            .await
            .unwrap_err()
            .contains("not a token")
    );

    listed.0.lock().unwrap().insert("t1".into());
    let (principal, renewed) = auth.tokens.authenticate(&issued.token).await.unwrap();
    assert!(renewed.is_none(), "project tokens are never renewed");
    let Principal::Project(p) = principal else {
        panic!("not a project principal: {principal:?}")
    };
    assert_eq!(
        (
            p.project.as_str(),
            p.role.as_str(),
            p.subject.as_str(),
            p.jti.as_str()
        ),
        ("p1", "ci", "proj:p1:ci", "t1")
    );
    assert_eq!((p.iat, p.expires_at), (issued.iat, issued.exp));

    // Revoked by leaving the role's list.
    listed.0.lock().unwrap().clear();
    assert!(auth.tokens.authenticate(&issued.token).await.is_err());

    // A random id when none is given, and no expiry for zero.
    let other = auth.project_tokens.issue("p1", "ci", None, Duration::ZERO);
    assert_eq!(other.exp, None);
    assert_eq!(uuid::Uuid::parse_str(&other.jti).map(|_| ()), Ok(()));
}

/// A config dir whose `oidc.config` names `issuer` (none: SSO off).
fn write_oidc(dir: &std::path::Path, issuer: Option<&str>) {
    let mut cm = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n".to_owned();
    if let Some(issuer) = issuer {
        cm.push_str(&format!(
            "  oidc.config: |\n    name: IdP\n    issuer: {issuer}\n    clientID: cd\n"
        ));
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("argocd-cm.yaml"), cm).unwrap();
}

fn oidc_config(dir: &std::path::Path, issuer: Option<&str>) -> Arc<ConfigWatch> {
    write_oidc(dir, issuer);
    ConfigWatch::new(Some(dir.to_path_buf())).unwrap()
}

async fn start(auth: &Auth, iss: &str) -> String {
    start_at(auth, iss, "default").await
}

async fn start_at(auth: &Auth, iss: &str, provider: &str) -> String {
    let claims =
        serde_json::json!({"iss": iss, "sub": "u1", "exp": Clock::system().now_s() + 600, "groups": ["ops"]});
    auth.sso_sessions
        .start(claims.as_object().unwrap().clone(), "id.token".into(), provider)
        .await
        .unwrap()
}

#[tokio::test]
async fn sso_sessions_of_several_providers_are_their_providers_and_qualified() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    let cm = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  tiphys.oidc.providers: |\n    \
              - name: a\n      issuer: https://a\n      clientID: cd\n    \
              - name: b\n      issuer: https://b\n      clientID: cd\n      groupsClaim: groups\n";
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("argocd-cm.yaml"), cm).unwrap();
    let config = ConfigWatch::new(Some(cfg.clone())).unwrap();
    let auth = open_with(&dir.path().join("store"), config, Arc::default()).await;
    let user = |principal: &Principal| {
        let sso = principal.sso().unwrap();
        (
            sso.user.clone(),
            sso.provider.clone(),
            sso.groups.clone().unwrap(),
        )
    };
    let (a, _) = auth
        .tokens
        .authenticate(&start_at(&auth, "https://a", "a").await)
        .await
        .unwrap();
    let (b, _) = auth
        .tokens
        .authenticate(&start_at(&auth, "https://b", "b").await)
        .await
        .unwrap();
    // The same `sub` at two providers is two users, with two sets of groups.
    assert_eq!(
        user(&a),
        ("a:u1".to_owned(), "a".to_owned(), vec!["a:ops".to_owned()])
    );
    assert_eq!(
        user(&b),
        ("b:u1".to_owned(), "b".to_owned(), vec!["b:ops".to_owned()])
    );
    // A session recorded for one provider with another's issuer, or for none configured, is
    // refused.
    let gone = "the single sign-on session's provider is no longer configured, please log in again";
    let mixed = start_at(&auth, "https://b", "a").await;
    assert_eq!(auth.tokens.authenticate(&mixed).await.unwrap_err(), gone);
    let removed = start_at(&auth, "https://c", "c").await;
    assert_eq!(auth.tokens.authenticate(&removed).await.unwrap_err(), gone);
}

#[tokio::test]
async fn sso_sessions_end_when_their_provider_is_no_longer_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    let config = oidc_config(&cfg, Some("https://idp"));
    let auth = open_with(&dir.path().join("store"), Arc::clone(&config), Arc::default()).await;
    let token = start(&auth, "https://idp").await;
    assert!(auth.tokens.authenticate(&token).await.is_ok());
    // A session from some other issuer is refused under this configuration.
    let foreign = start(&auth, "https://other").await;
    let gone = "the single sign-on session's provider is no longer configured, please log in again";
    assert_eq!(auth.tokens.authenticate(&foreign).await.unwrap_err(), gone);

    // The admin switches provider.
    write_oidc(&cfg, Some("https://idp2"));
    assert!(config.poll_once().unwrap());
    assert_eq!(auth.tokens.authenticate(&token).await.unwrap_err(), gone);
    // Switching back: the session is valid again (it was not ended).
    write_oidc(&cfg, Some("https://idp"));
    assert!(config.poll_once().unwrap());
    assert!(auth.tokens.authenticate(&token).await.is_ok());
    // SSO turned off.
    write_oidc(&cfg, None);
    assert!(config.poll_once().unwrap());
    assert_eq!(auth.tokens.authenticate(&token).await.unwrap_err(), gone);
}

#[tokio::test]
async fn sso_sessions_name_their_server_side_state_and_end_at_logout() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    let store = dir.path().join("store");
    let auth = open_with(&store, oidc_config(&cfg, Some("https://idp")), Arc::default()).await;
    let now = Clock::system().now_s();
    let groups: Vec<String> = (0..500).map(|i| format!("group-with-a-long-name-{i}")).collect();
    let claims = serde_json::json!({
        "iss": "https://idp", "sub": "u1", "email": "u1@example.test", "exp": now + 600, "groups": groups,
    });
    let token = auth
        .sso_sessions
        .start(
            claims.as_object().unwrap().clone(),
            "id.token.here".into(),
            "default",
        )
        .await
        .unwrap();
    assert!(token.len() < 300, "the cookie token stays small: {}", token.len());
    let (principal, renewed) = auth.tokens.authenticate(&token).await.unwrap();
    assert!(renewed.is_none());
    let Principal::Sso(sso) = &principal else {
        panic!("not an SSO principal: {principal:?}")
    };
    assert_eq!(
        (sso.user.as_str(), sso.username.as_str(), sso.issuer.as_str()),
        ("u1", "u1@example.test", "https://idp")
    );
    assert_eq!(sso.expires_at, Some(now + 600));
    let sid = sso.session.clone().unwrap();
    assert_eq!(
        auth.sso_sessions.get(&sid).await.unwrap().unwrap().id_token,
        "id.token.here"
    );

    // The session survives a restart of the server.
    drop(auth);
    let auth = open_with(&store, oidc_config(&cfg, Some("https://idp")), Arc::default()).await;
    assert!(auth.tokens.authenticate(&token).await.is_ok());
    auth.sso_sessions.end(&sid).await.unwrap();
    assert_eq!(
        auth.tokens.authenticate(&token).await.unwrap_err(),
        "the single sign-on session has ended, please log in again"
    );
    // An account named `sso` keeps its own login tokens.
    let err = auth
        .tokens
        .authenticate(&auth.tokens.issue_login("sso"))
        .await
        .unwrap_err();
    assert_eq!(err, "account sso does not exist");
}

#[tokio::test]
async fn malformed_project_subjects_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let auth = open(dir.path(), Arc::default()).await;
    let sign = |sub: &str, exp: Option<i64>| {
        auth.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: sub.to_owned(),
            jti: "x".into(),
            iat: Clock::system().now_s(),
            nbf: 0,
            exp,
            iat_ms: None,
        })
    };
    for sub in ["proj:p1", "proj:p1:ci:extra", "proj:", "proj:p1:"] {
        let err = auth.tokens.authenticate(&sign(sub, None)).await.unwrap_err();
        assert_eq!(err, "token subject is invalid", "{sub}");
    }
    // `proj:login` is the login token of an account named `proj`, not a project token.
    let err = auth
        .tokens
        .authenticate(&sign("proj:login", Some(Clock::system().now_s() + 60)))
        .await
        .unwrap_err();
    assert_eq!(err, "account proj does not exist");
}

#[tokio::test]
async fn logout_revokes_a_login_token_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let auth = open(dir.path(), Arc::default()).await;
    let token = auth.tokens.issue_login("admin");
    let (principal, _) = auth.tokens.authenticate(&token).await.unwrap();
    let caller = crate::principal::Caller {
        principal,
        credentials: crate::principal::Credentials::Valid(Arc::from(token.as_str())),
        ..crate::principal::Caller::anonymous(std::net::IpAddr::from([127, 0, 0, 1]))
    };
    auth.end_session(&caller).await.unwrap();
    assert_eq!(
        auth.tokens.authenticate(&token).await.unwrap_err(),
        "token is revoked, please log in again"
    );
    assert_eq!(auth.revocations.len(), 1);
    drop(auth);
    let auth = open(dir.path(), Arc::default()).await;
    assert!(auth.tokens.authenticate(&token).await.is_err());
}

/// A file store that counts its reads.
struct Counted {
    inner: FileStore,
    reads: AtomicUsize,
}

impl Counted {
    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    fn read(&self) {
        self.reads.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Store for Counted {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        self.read();
        self.inner.get(key).await
    }

    async fn get_many(&self, keys: Vec<String>) -> Result<Vec<Option<Entry>>, StoreError> {
        self.read();
        self.inner.get_many(keys).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        self.read();
        self.inner.list(prefix).await
    }

    async fn commit(&self, ops: Vec<Op>) -> Result<Revision, StoreError> {
        self.inner.commit(ops).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision().await
    }

    async fn snapshot(&self, prefixes: &[&str]) -> Result<(Vec<Vec<Entry>>, Revision), StoreError> {
        self.read();
        self.inner.snapshot(prefixes).await
    }
}

#[tokio::test]
async fn token_checks_read_the_store_only_when_it_is_shared() {
    for exclusive in [true, false] {
        let clock = Clock::paused();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Counted {
            inner: FileStore::open(dir.path()).unwrap(),
            reads: Default::default(),
        });
        let auth = Auth::open(
            Arc::clone(&store) as _,
            ConfigWatch::new(None).unwrap(),
            AuthOptions {
                data_dir: Some(dir.path().to_path_buf()),
                exclusive,
                limits: LoginLimits::default(),
                projects: Arc::<Listed>::default(),
                oidc: None,
                secrets: Arc::new(crate::registry::SecretsKeys::new(Vec::new(), b"auth tests")),
                redis: None,
                clock: clock.clone(),
                kube: None,
            },
        )
        .await
        .unwrap();
        let token = auth.tokens.issue_login("admin");
        let before = store.reads();
        auth.tokens.authenticate(&token).await.unwrap();
        assert_eq!(
            store.reads() - before,
            usize::from(!exclusive),
            "exclusive {exclusive}: one read per check on a shared store, none on an exclusive one"
        );

        // Either way, a password change and a logout are in force at the next check.
        clock.advance(Duration::from_millis(5));
        auth.logins
            .set_password("admin", "another-password-1")
            .await
            .unwrap();
        assert_eq!(
            auth.tokens.authenticate(&token).await.unwrap_err(),
            "account password has changed since token issued",
            "exclusive {exclusive}"
        );
        clock.advance(Duration::from_millis(5));
        let fresh = auth.tokens.issue_login("admin");
        let (principal, _) = auth.tokens.authenticate(&fresh).await.unwrap();
        let caller = crate::principal::Caller {
            principal,
            credentials: crate::principal::Credentials::Valid(Arc::from(fresh.as_str())),
            ..crate::principal::Caller::anonymous(std::net::IpAddr::from([127, 0, 0, 1]))
        };
        auth.end_session(&caller).await.unwrap();
        assert_eq!(
            auth.tokens.authenticate(&fresh).await.unwrap_err(),
            "token is revoked, please log in again",
            "exclusive {exclusive}"
        );
    }
}

#[tokio::test]
async fn tokens_and_sessions_age_on_the_state_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::paused();
    let auth = open_at(
        dir.path(),
        ConfigWatch::new(None).unwrap(),
        Arc::default(),
        clock.clone(),
    )
    .await;
    let token = auth.tokens.issue_login("admin");
    // Nothing sleeps: the token (24 h by default) is nearly a day old only because the clock
    // says so.
    clock.advance(Duration::from_secs(24 * 3600 - 240));
    let (principal, renewed) = auth.tokens.authenticate(&token).await.unwrap();
    assert_eq!(principal.subject(), "admin");
    assert!(renewed.is_some(), "a login token near its expiry is renewed");
    clock.advance(Duration::from_secs(241));
    assert_eq!(
        auth.tokens.authenticate(&token).await.unwrap_err(),
        "token is expired"
    );
    // A token issued now is valid now, whatever the wall clock says.
    let fresh = auth.tokens.issue_login("admin");
    let checked = auth.tokens.authenticate(&fresh).await;
    assert!(checked.is_ok(), "{:?}", checked.err());
}

/// A personal access token acts as its owner with the groups frozen in its record, and stops at
/// once when revoked, when its user is disabled (and again when enabled) or deleted.
#[tokio::test]
async fn personal_tokens_stop_at_revocation_disablement_and_deletion() {
    use crate::error::AppError;
    use crate::principal::SsoPrincipal;

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config");
    let cm = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  tiphys.personaltokens.enabled: \"true\"\n  \
              oidc.config: |\n    name: IdP\n    issuer: https://idp\n    clientID: cd\n";
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("argocd-cm.yaml"), cm).unwrap();
    let config = ConfigWatch::new(Some(cfg)).unwrap();
    let auth = open_with(&dir.path().join("store"), config, Arc::default()).await;
    let claims = serde_json::json!({"iss": "https://idp", "sub": "u1", "email": "u1@example.test"});
    let mut owner = SsoPrincipal::from_claims(Arc::new(claims.as_object().unwrap().clone()), 0, None, None);
    "default".clone_into(&mut owner.provider);
    let pats = &auth.personal_tokens;
    let make = |id: Option<&str>| {
        pats.create(
            &owner,
            vec!["ops".to_owned()],
            id.map(str::to_owned),
            "ci".to_owned(),
            Duration::ZERO,
        )
    };
    let refusal = |token: String| {
        let tokens = Arc::clone(&auth.tokens);
        async move { tokens.authenticate(&token).await.unwrap_err() }
    };

    let (token, record) = make(Some("t1")).await.unwrap();
    assert_eq!((record.id.as_str(), record.description.as_str()), ("t1", "ci"));
    let (principal, renewed) = auth.tokens.authenticate(&token).await.unwrap();
    let sso = principal.sso().unwrap();
    assert_eq!(
        (sso.user.as_str(), sso.username.as_str(), sso.groups.clone()),
        ("u1", "u1@example.test", Some(vec!["ops".to_owned()]))
    );
    assert_eq!((principal.token_id(), renewed), ("t1", None));
    assert!(matches!(make(Some("t1")).await, Err(AppError::AlreadyExists(_))));

    pats.set_disabled("u1", true).await.unwrap();
    assert_eq!(
        refusal(token.clone()).await,
        "the SSO user u1 is disabled by an administrator"
    );
    assert!(matches!(make(None).await, Err(AppError::FailedPrecondition(_))));
    pats.set_disabled("u1", false).await.unwrap();
    auth.tokens.authenticate(&token).await.unwrap();

    pats.revoke("u1", "t1").await.unwrap();
    assert_eq!(
        refusal(token.clone()).await,
        "personal access token t1 has been revoked"
    );
    assert!(matches!(
        pats.revoke("u1", "t1").await,
        Err(AppError::NotFound(_))
    ));
    // The id made again is another token: the revoked one stays dead.
    make(Some("t1")).await.unwrap();
    assert_eq!(refusal(token).await, "personal access token t1 has been revoked");

    let (second, _) = make(None).await.unwrap();
    pats.delete_user("u1").await.unwrap();
    assert_eq!(
        refusal(second).await,
        "the SSO user u1 was deleted by an administrator"
    );
    assert!(pats.list("u1").await.unwrap().is_empty());
}
