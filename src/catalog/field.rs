//! The fields applications are filtered and counted by, and the values an application has for
//! each: the one definition the indexes, the filters and the facet counts share.

use crate::registry::Summary;

/// A field of an application that lists filter on and count by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `spec.project`.
    Project,
    /// The destination cluster, by server URL or by name.
    Cluster,
    /// The destination namespace.
    Namespace,
    /// `status.sync.status`.
    Sync,
    /// `status.health.status`.
    Health,
    /// A source repository URL (compared without a trailing `/` or `.git`, case-insensitively).
    Repo,
}

/// What an application reports before the controller has looked at it.
pub const UNKNOWN: &str = "Unknown";

impl Field {
    pub const ALL: [Field; 6] = [
        Field::Project,
        Field::Cluster,
        Field::Namespace,
        Field::Sync,
        Field::Health,
        Field::Repo,
    ];

    /// The name clients use for it (in `filter=` and `facets=`).
    pub fn name(self) -> &'static str {
        match self {
            Field::Project => "project",
            Field::Cluster => "cluster",
            Field::Namespace => "namespace",
            Field::Sync => "sync",
            Field::Health => "health",
            Field::Repo => "repo",
        }
    }

    pub fn parse(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The bit of this field in a set of fields.
    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// The values an application summarized as `s` has for this field, in the form filters
    /// compare and facets count.
    pub fn values(self, s: &Summary) -> Vec<String> {
        let mut out = Vec::with_capacity(1);
        self.each_value(s, |v| out.push(v.to_owned()));
        out
    }

    /// Calls `f` with each of [`Field::values`], without copying them where they are stored as
    /// they are counted (facets visit every application).
    pub fn each_value(self, s: &Summary, mut f: impl FnMut(&str)) {
        match self {
            Field::Project => f(&s.project),
            Field::Cluster => {
                for v in [&s.dest_server, &s.dest_name] {
                    if !v.is_empty() {
                        f(v);
                    }
                }
            }
            Field::Namespace => f(&s.dest_namespace),
            Field::Sync => f(status(&s.sync_status)),
            Field::Health => f(status(&s.health_status)),
            Field::Repo => {
                for r in &s.repos {
                    f(&normal_repo(r));
                }
            }
        }
    }

    /// Whether an application summarized as `s` has `value` (in [`Field::values`]'s form).
    pub fn has(self, s: &Summary, value: &str) -> bool {
        match self {
            Field::Project => s.project == value,
            Field::Cluster => !value.is_empty() && (s.dest_server == value || s.dest_name == value),
            Field::Namespace => s.dest_namespace == value,
            Field::Sync => status_is(&s.sync_status, value),
            Field::Health => status_is(&s.health_status, value),
            Field::Repo => s.repos.iter().any(|r| normal_repo(r) == value),
        }
    }

    /// A value as a client writes it, in the form [`Field::values`] gives.
    pub fn normal_value(self, value: &str) -> String {
        match self {
            Field::Repo => normal_repo(value),
            _ => value.to_owned(),
        }
    }
}

fn status(reported: &str) -> &str {
    if reported.is_empty() { UNKNOWN } else { reported }
}

fn status_is(reported: &str, value: &str) -> bool {
    if reported.is_empty() {
        value == UNKNOWN
    } else {
        reported == value
    }
}

/// A repository URL without a trailing `/` or `.git`, in lower case: how upstream's list filter
/// compares them.
pub fn normal_repo(url: &str) -> String {
    let url = url.trim_end_matches('/');
    url.strip_suffix(".git").unwrap_or(url).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary {
            project: "team-a".into(),
            repos: vec!["https://Git.example/Repo.git/".into()],
            dest_server: "https://kubernetes.default.svc".into(),
            dest_namespace: "prod".into(),
            health_status: "Degraded".into(),
            ..Summary::default()
        }
    }

    #[test]
    fn values_and_has_agree_for_every_field() {
        let s = summary();
        for field in Field::ALL {
            for value in field.values(&s) {
                assert!(field.has(&s, &value), "{field:?} {value}");
            }
            assert!(!field.has(&s, "nothing-like-it"), "{field:?}");
        }
    }

    #[test]
    fn an_unreported_status_is_unknown_and_repos_compare_loosely() {
        let s = summary();
        assert_eq!(Field::Sync.values(&s), vec![UNKNOWN.to_owned()]);
        assert!(Field::Sync.has(&s, UNKNOWN));
        assert!(!Field::Sync.has(&s, ""));
        assert!(Field::Repo.has(&s, &Field::Repo.normal_value("https://git.example/repo")));
        assert!(
            !Field::Cluster.has(&s, ""),
            "an empty cluster name matches nothing"
        );
    }

    #[test]
    fn names_parse_back() {
        for field in Field::ALL {
            assert_eq!(Field::parse(field.name()), Some(field));
        }
        assert_eq!(Field::parse("colour"), None);
    }
}
