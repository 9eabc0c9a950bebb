//! One test case: an `argocd-rbac-cm`, some AppProject roles and requests,
//! held as plain data so that both engines get the same thing (tiphys as
//! the text it would read, Casbin as fields) and so that a failure prints as a
//! reproduction.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};
use tiphys::rbac::{FixedProjects, LoadOptions, Policy, ProjectRole, ProjectRoles, Subject};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Glob,
    Regex,
}

/// A policy line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    P {
        sub: String,
        res: String,
        act: String,
        obj: String,
        eft: String,
    },
    G {
        member: String,
        role: String,
    },
}

impl Line {
    pub fn p(sub: &str, res: &str, act: &str, obj: &str, eft: &str) -> Self {
        Self::P {
            sub: sub.to_owned(),
            res: res.to_owned(),
            act: act.to_owned(),
            obj: obj.to_owned(),
            eft: eft.to_owned(),
        }
    }

    pub fn g(member: &str, role: &str) -> Self {
        Self::G {
            member: member.to_owned(),
            role: role.to_owned(),
        }
    }

    /// The fields after the first (`p`/`g`), as Casbin stores them.
    pub fn fields(&self) -> Vec<String> {
        match self {
            Self::P {
                sub,
                res,
                act,
                obj,
                eft,
            } => vec![sub.clone(), res.clone(), act.clone(), obj.clone(), eft.clone()],
            Self::G { member, role } => vec![member.clone(), role.clone()],
        }
    }

    /// The line as `policy.csv` text (a field with a comma or quote is quoted).
    pub fn csv(&self) -> String {
        let head = match self {
            Self::P { .. } => "p",
            Self::G { .. } => "g",
        };
        let mut out = head.to_owned();
        for field in self.fields() {
            out.push_str(", ");
            if field.contains([',', '"']) {
                out.push('"');
                out.push_str(&field.replace('"', "\"\""));
                out.push('"');
            } else {
                out.push_str(&field);
            }
        }
        out
    }
}

/// One role of an AppProject; `policies` are `p` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub policies: Vec<Line>,
    pub groups: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    pub name: String,
    pub roles: Vec<Role>,
}

impl Project {
    pub fn subject(&self, role: &Role) -> String {
        format!("proj:{}:{}", self.name, role.name)
    }

    /// The lines Argo CD adds for this project's objects: per role, `get` on
    /// the project, the role's own policies, and one `g` line per group.
    pub fn runtime_policy(&self) -> Vec<Line> {
        let mut lines = Vec::new();
        for role in &self.roles {
            let subject = self.subject(role);
            lines.push(Line::p(&subject, "projects", "get", &self.name, "allow"));
            lines.extend(role.policies.iter().cloned());
            lines.extend(role.groups.iter().map(|group| Line::g(group, &subject)));
        }
        lines
    }
}

/// An `argocd-rbac-cm` and the projects that exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub mode: Mode,
    pub lines: Vec<Line>,
    /// `lines[overlay..]` go to a second key, `policy.overlay.csv`.
    pub overlay: usize,
    pub default_role: Option<String>,
    pub scopes: Option<Vec<String>>,
    pub projects: Vec<Project>,
}

/// Who asks: a bare subject (anonymous `""`, `rbac can`) or a signed-in caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    Plain(String),
    Claims {
        user: String,
        claims: Map<String, Value>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub who: Who,
    pub res: String,
    pub act: String,
    pub obj: String,
}

fn text(lines: &[Line]) -> String {
    let mut out = String::from("# generated\n");
    for line in lines {
        out.push_str(&line.csv());
        out.push('\n');
    }
    out
}

impl Case {
    /// The `argocd-rbac-cm` data tiphys reads.
    pub fn config_map(&self) -> BTreeMap<String, String> {
        let split = self.overlay.min(self.lines.len());
        let mut data = BTreeMap::from([("policy.csv".to_owned(), text(&self.lines[..split]))]);
        if split < self.lines.len() {
            data.insert("policy.overlay.csv".to_owned(), text(&self.lines[split..]));
        }
        if self.mode == Mode::Regex {
            data.insert("policy.matchMode".to_owned(), "regex".to_owned());
        }
        if let Some(role) = &self.default_role {
            data.insert("policy.default".to_owned(), role.clone());
        }
        if let Some(scopes) = &self.scopes {
            data.insert("scopes".to_owned(), format!("[{}]", scopes.join(", ")));
        }
        data
    }

    pub fn tiphys(&self) -> (Policy, FixedProjects) {
        let policy = Policy::from_config(&self.config_map(), LoadOptions::default())
            .unwrap_or_else(|e| panic!("tiphys refused a generated policy: {e}\n{self}"));
        let projects = self
            .projects
            .iter()
            .map(|p| {
                Arc::new(ProjectRoles {
                    name: p.name.clone(),
                    roles: p
                        .roles
                        .iter()
                        .map(|r| ProjectRole {
                            name: r.name.clone(),
                            policies: r.policies.iter().map(Line::csv).collect(),
                            groups: r.groups.clone(),
                        })
                        .collect(),
                })
            })
            .collect();
        (policy, FixedProjects(projects))
    }

    /// Keeps cases out of the named differences (see `differences.rs`): a
    /// project token names a role of its project, or a project that does not exist.
    pub fn admits(&self, request: &Request) -> bool {
        let Who::Claims { user, .. } = &request.who else {
            return true;
        };
        let parts: Vec<&str> = user.split(':').collect();
        let ["proj", project, role] = parts.as_slice() else {
            return true;
        };
        match self.projects.iter().find(|p| p.name == *project) {
            Some(p) => p.roles.iter().any(|r| r.name == *role),
            None => true,
        }
    }
}

/// tiphys's decision, through its public entry point (with its cache).
pub fn tiphys_decides(policy: &Policy, projects: &FixedProjects, request: &Request) -> bool {
    let subject = match &request.who {
        Who::Plain(name) => Subject::Plain(name),
        Who::Claims { user, claims } => Subject::Claims {
            user,
            // A local account has no claims at all; the same as no groups.
            claims: (!claims.is_empty()).then_some(claims),
        },
    };
    policy.decide(projects, subject, &request.res, &request.act, &request.obj)
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "argocd-rbac-cm data:")?;
        for (key, value) in self.config_map() {
            if value.contains('\n') {
                writeln!(f, "  {key}: |")?;
                for line in value.lines() {
                    writeln!(f, "    {line}")?;
                }
            } else {
                writeln!(f, "  {key}: {value:?}")?;
            }
        }
        if self.projects.is_empty() {
            writeln!(f, "projects: none")?;
        }
        for project in &self.projects {
            writeln!(f, "project {:?}:", project.name)?;
            for role in &project.roles {
                writeln!(f, "  role {:?}: groups {:?}", role.name, role.groups)?;
                for line in &role.policies {
                    writeln!(f, "    {}", line.csv())?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.who {
            Who::Plain(name) => write!(f, "plain subject {name:?}")?,
            Who::Claims { user, claims } => {
                write!(f, "user {user:?} with claims {}", Value::Object(claims.clone()))?;
            }
        }
        write!(f, " asks ({:?}, {:?}, {:?})", self.res, self.act, self.obj)
    }
}
