//! `version.VersionService/Version` and `GET /api/version`: the Argo CD API level tiphys serves,
//! with tiphys's version as build metadata (`crate::buildinfo::SERVER_VERSION`), and for a signed-in
//! caller the build facts as upstream sends them (`BuildDate`, `GitCommit`, `GitTreeState`,
//! `GitTag`; a fact not known is left out). Tools tiphys does not run (Kustomize, Helm, kubectl,
//! Jsonnet) have no version, so those fields stay empty.

use serde::Serialize;

use super::{Ctx, Empty, Reply};
use crate::buildinfo;
use crate::error::AppError;
use crate::principal::Principal;
use crate::schema::is_zero;

/// The server's version facts, with Argo CD's capitalised field names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VersionInfo {
    pub version: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub build_date: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub git_commit: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub git_tag: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub git_tree_state: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub go_version: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub compiler: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub platform: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub extra_build_info: String,
}

/// `Version`.
pub async fn version(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    Reply::json(info(&ctx.caller.principal))
}

/// Anonymous callers learn only the version: tool versions would help an
/// attacker, and Argo CD's UI reads their presence as "auth is disabled".
pub fn info(principal: &Principal) -> VersionInfo {
    let mut info = VersionInfo {
        version: buildinfo::SERVER_VERSION.to_owned(),
        ..VersionInfo::default()
    };
    if principal.is_authenticated() {
        info.build_date = buildinfo::BUILD_DATE.to_owned();
        info.git_commit = buildinfo::GIT_COMMIT.to_owned();
        info.git_tree_state = buildinfo::GIT_TREE_STATE.to_owned();
        info.git_tag = buildinfo::GIT_TAG.to_owned();
        info.compiler = buildinfo::COMPILER.to_owned();
        info.platform = buildinfo::platform();
        info.extra_build_info = "tiphys".to_owned();
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_caller_gets_only_the_version() {
        let json = serde_json::to_value(info(&Principal::Anonymous)).unwrap();
        assert_eq!(json, serde_json::json!({ "Version": buildinfo::SERVER_VERSION }));
    }

    #[test]
    fn a_signed_in_caller_gets_the_build_facts() {
        let principal = Principal::Account(crate::principal::AccountPrincipal {
            name: "admin".into(),
            kind: crate::principal::TokenKind::Login,
            jti: "j".into(),
            issued_at_ms: 0,
            expires_at: None,
        });
        let json = serde_json::to_value(info(&principal)).unwrap();
        assert_eq!(json["BuildDate"], buildinfo::BUILD_DATE);
        assert_eq!(json["Platform"], buildinfo::platform());
        // An unknown fact is left out, never filled in.
        for (field, value) in [
            ("GitCommit", buildinfo::GIT_COMMIT),
            ("GitTreeState", buildinfo::GIT_TREE_STATE),
            ("GitTag", buildinfo::GIT_TAG),
        ] {
            match value {
                "" => assert!(json.get(field).is_none(), "{json}"),
                v => assert_eq!(json[field], v),
            }
        }
    }
}
