//! Random cases over a small shared alphabet, so that rules, roles and
//! requests meet often. What stays out, and why:
//!
//! - the named differences (`differences.rs`): project tokens name a role of
//!   their project or a project that does not exist; `scopes` is always a list;
//!   glob patterns are well formed, ASCII, never `?` alone nor `x*x`-shaped
//!   overlaps; regex patterns avoid `\d`/`\w`/`\p{..}`, counted repeats and nesting;
//! - `**` (`globset` reads `**/` as "any directories, or none"; Argo CD and
//!   tiphys read `**` as `*`);
//! - chains of more than 10 bindings (the depth limit, tested on its own in
//!   `oracle.rs`, never decides here).

use rand::RngExt;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{Map, Value, json};

use crate::case::{Case, Line, Mode, Project, Request, Role, Who};
use crate::oracle::{glob_matches, regex_matches};

/// `g` lines of user policy. With the built-in policy's two and one per
/// project (a role's groups lead into it), no chain reaches 11 bindings.
const MAX_BINDINGS: usize = 5;

const USERS: &[&str] = &["alice", "bob", "admin"];
const GROUPS: &[&str] = &["devs", "ops", "carol@example.org"];
const ROLES: &[&str] = &["role:dev", "role:ops", "role:readonly", "role:admin"];
/// Project roles that the generator may create, by project.
const PROJECT_ROLES: &[(&str, &[&str])] = &[("web", &["deployer", "viewer"]), ("db", &["reader"])];

const RESOURCES: &[&str] = &[
    "applications",
    "applicationsets",
    "logs",
    "exec",
    "clusters",
    "repositories",
    "projects",
    "certificates",
];
const ACTIONS: &[&str] = &[
    "get",
    "create",
    "update",
    "delete",
    "sync",
    "action/apps/Deployment/restart",
    "action//ConfigMap/set-greeting",
    "update/apps/Deployment/ns/web",
    "delete//Pod/ns/p",
];
const OBJECTS: &[&str] = &[
    "web/app",
    "web/ns/app",
    "web/site",
    "db/app",
    "db/ns/db",
    "gone/app",
    "web",
    "db",
    "",
    "https://k8s",
    "web/https://k8s",
    "test",
];

const GLOB_RESOURCES: &[&str] = &["*", "app*", "*s", "{logs,exec}", "?lusters", "[cp]*", "*set*"];
const GLOB_ACTIONS: &[&str] = &[
    "*",
    "update/*",
    "action/*",
    "action/apps/Deployment/*",
    "delete/*",
    "[gs]*",
    "?et",
    "{get,sync}",
    "*/*",
    "*Pod*",
];
const GLOB_OBJECTS: &[&str] = &[
    "*",
    "*/*",
    "web/*",
    "db/*",
    "web/app",
    "*/app",
    "web/[a-m]*",
    "{web,db}/*",
    "*/ns/*",
    "https://*",
    "web",
    "",
    "?eb/*",
    "*/*/*",
    "[!w]*",
];

const REGEX_RESOURCES: &[&str] = &[
    "applications",
    "^applications$",
    "app",
    "logs|exec",
    "^(clusters|projects)$",
    ".*",
    "s$",
    "",
    "^cert",
];
const REGEX_ACTIONS: &[&str] = &[
    "get",
    "^get$",
    "update",
    "^update/.*",
    "action/.*",
    "^(get|sync)$",
    ".*",
    "[gs]et",
    "^delete$",
    "/Pod/",
];
const REGEX_OBJECTS: &[&str] = &[
    "web/.*",
    "^web/",
    "^db/app$",
    ".*",
    "/",
    "ns",
    "^$",
    "web/[a-m]+",
    "(web|db)/app",
    "^https://",
    "",
    "^[^/]+$",
];

fn pick<'a>(rng: &mut StdRng, items: &[&'a str]) -> &'a str {
    items.choose(rng).copied().unwrap_or_default()
}

/// Regex patterns that do not compile: a check that reaches one denies.
const INVALID_REGEXES: &[&str] = &["*", "*/*", "(", "web/[a-"];

/// Draws the parts of a case in one match mode.
struct Gen<'r> {
    rng: &'r mut StdRng,
    mode: Mode,
}

impl Gen<'_> {
    fn pick(&mut self, items: &[&'static str]) -> String {
        pick(self.rng, items).to_owned()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// A role name. In regex mode the built-in roles (written as globs, so
    /// every check that reaches them fails) are kept rare, or little is allowed.
    fn role(&mut self) -> String {
        let common = self.mode == Mode::Regex && self.chance(0.85);
        self.pick(if common { &ROLES[..2] } else { ROLES })
    }

    /// A pattern: one of the mode's patterns or a plain value, rarely one
    /// that does not compile (regex mode only).
    fn pattern(
        &mut self,
        values: &[&'static str],
        globs: &[&'static str],
        regexes: &[&'static str],
    ) -> String {
        let special = match self.mode {
            Mode::Glob => globs,
            Mode::Regex => {
                let invalid = self.chance(0.03);
                if invalid { INVALID_REGEXES } else { regexes }
            }
        };
        if self.chance(0.5) {
            self.pick(special)
        } else {
            self.pick(values)
        }
    }

    fn effect(&mut self) -> String {
        match self.rng.random_range(0..20) {
            0 => "Allow",
            1..=7 => "deny",
            _ => "allow",
        }
        .to_owned()
    }

    fn policy_subject(&mut self) -> String {
        match self.rng.random_range(0..20) {
            0..=7 => self.role(),
            8..=11 => self.pick(USERS),
            12..=15 => self.pick(GROUPS),
            16..=17 => self.project_subject(),
            18 => String::new(),
            _ => "*".to_owned(),
        }
    }

    fn project_subject(&mut self) -> String {
        let (project, roles) = *PROJECT_ROLES.choose(self.rng).unwrap_or(&("web", &["deployer"]));
        format!("proj:{project}:{}", pick(self.rng, roles))
    }

    fn p_line(&mut self, sub: String) -> Line {
        Line::P {
            sub,
            res: self.pattern(RESOURCES, GLOB_RESOURCES, REGEX_RESOURCES),
            act: self.pattern(ACTIONS, GLOB_ACTIONS, REGEX_ACTIONS),
            obj: self.pattern(OBJECTS, GLOB_OBJECTS, REGEX_OBJECTS),
            eft: self.effect(),
        }
    }

    /// `line` with the other effect and one field widened to "anything", so
    /// that an allow and a deny of one check often meet.
    fn twin(&mut self, line: &Line) -> Line {
        let mut twin = line.clone();
        if let Line::P {
            res, act, obj, eft, ..
        } = &mut twin
        {
            *eft = if eft == "allow" { "deny" } else { "allow" }.to_owned();
            let any = match self.mode {
                Mode::Glob => "*",
                Mode::Regex => ".*",
            };
            let field = match self.rng.random_range(0..3) {
                0 => res,
                1 => act,
                _ => obj,
            };
            any.clone_into(field);
        }
        twin
    }

    fn g_line(&mut self) -> Line {
        let member = match self.rng.random_range(0..10) {
            0..=2 => self.pick(USERS),
            3..=5 => self.pick(GROUPS),
            6..=8 => self.role(),
            _ => self.project_subject(),
        };
        let role = match self.rng.random_range(0..10) {
            0..=7 => self.role(),
            8 => self.project_subject(),
            _ => self.pick(GROUPS),
        };
        Line::G { member, role }
    }

    fn project(&mut self, name: &str, role_names: &[&str]) -> Project {
        let mut roles = Vec::new();
        for role_name in role_names {
            if !roles.is_empty() && self.chance(0.5) {
                continue;
            }
            let subject = format!("proj:{name}:{role_name}");
            let mut policies = Vec::new();
            for _ in 0..self.rng.random_range(0..4) {
                // Project roles name themselves, as validation demands, but
                // enforcement loads whatever is there.
                let sub = if self.chance(0.9) {
                    subject.clone()
                } else {
                    self.policy_subject()
                };
                let mut line = self.p_line(sub);
                if let Line::P { obj, .. } = &mut line
                    && self.chance(0.6)
                {
                    let suffix = match self.mode {
                        Mode::Glob => self.pick(&["*", "app", "ns/*"]),
                        Mode::Regex => self.pick(&[".*", "app$", "ns/"]),
                    };
                    *obj = format!("{name}/{suffix}");
                }
                policies.push(line);
            }
            let mut groups = Vec::new();
            for _ in 0..self.rng.random_range(0..3) {
                let group = if self.chance(0.8) {
                    self.pick(GROUPS)
                } else {
                    self.role()
                };
                groups.push(group);
            }
            roles.push(Role {
                name: (*role_name).to_owned(),
                policies,
                groups,
            });
        }
        Project {
            name: name.to_owned(),
            roles,
        }
    }
}

pub fn case(rng: &mut StdRng, mode: Mode) -> Case {
    let mut g = Gen { rng, mode };
    let mut lines = Vec::new();
    let mut bindings = 0;
    for _ in 0..g.rng.random_range(1..14) {
        if bindings < MAX_BINDINGS && g.chance(0.35) {
            bindings += 1;
            lines.push(g.g_line());
        } else {
            let subject = g.policy_subject();
            let line = g.p_line(subject);
            if g.chance(0.25) {
                lines.push(g.twin(&line));
            }
            lines.push(line);
        }
    }
    let overlay = if g.chance(0.3) {
        g.rng.random_range(0..=lines.len())
    } else {
        lines.len()
    };
    let default_role = match g.rng.random_range(0..12) {
        0..=5 => None,
        6 => Some(String::new()),
        7..=9 => Some(g.role()),
        10 => Some("role:readonly".to_owned()),
        _ => Some("alice".to_owned()),
    };
    let scopes = match g.rng.random_range(0..10) {
        0..=4 => None,
        5 => Some(vec![]),
        6 => Some(vec!["groups".to_owned()]),
        7 | 8 => Some(vec!["groups".to_owned(), "email".to_owned()]),
        _ => Some(vec!["email".to_owned()]),
    };
    let mut projects = Vec::new();
    for (name, roles) in PROJECT_ROLES {
        if g.chance(0.7) {
            projects.push(g.project(name, roles));
        }
    }
    Case {
        mode,
        lines,
        overlay,
        default_role,
        scopes,
        projects,
    }
}

/// A claim value for `groups`: usually a list, sometimes one string or junk.
fn groups_claim(rng: &mut StdRng) -> Option<Value> {
    let names: Vec<Value> = (0..rng.random_range(0..4))
        .map(|_| match rng.random_range(0..10) {
            0..=6 => json!(pick(rng, GROUPS)),
            7 | 8 => json!(pick(rng, ROLES)),
            _ => json!(7),
        })
        .collect();
    match rng.random_range(0..10) {
        0 => None,
        1 => Some(json!(pick(rng, GROUPS))),
        2 => Some(json!({"not": "a list"})),
        _ => Some(Value::Array(names)),
    }
}

/// A `p` line a request aims at: its subject (or a member bound to it) and
/// values its patterns match.
struct Aim {
    subject: String,
    res: Option<String>,
    act: Option<String>,
    obj: Option<String>,
}

fn aim(rng: &mut StdRng, case: &Case) -> Option<Aim> {
    let mut rules = Vec::new();
    let mut bindings: Vec<(&str, &str)> = Vec::new();
    for line in &case.lines {
        match line {
            Line::P { .. } => rules.push(line),
            Line::G { member, role } => bindings.push((member, role)),
        }
    }
    for project in &case.projects {
        for role in &project.roles {
            rules.extend(&role.policies);
        }
    }
    let Line::P {
        sub, res, act, obj, ..
    } = rules.choose(rng)?
    else {
        return None;
    };
    let members: Vec<&str> = bindings
        .iter()
        .filter(|(_, r)| r == sub)
        .map(|(m, _)| *m)
        .collect();
    let subject = match members.choose(rng) {
        Some(member) if rng.random_bool(0.5) => (*member).to_owned(),
        _ => sub.clone(),
    };
    let mode = case.mode;
    Some(Aim {
        subject,
        res: matching(rng, mode, res, RESOURCES),
        act: matching(rng, mode, act, ACTIONS),
        obj: matching(rng, mode, obj, OBJECTS),
    })
}

/// One of `values` that `pattern` matches (by the oracle's matchers), if any.
fn matching(rng: &mut StdRng, mode: Mode, pattern: &str, values: &[&str]) -> Option<String> {
    let hits: Vec<&str> = values
        .iter()
        .copied()
        .filter(|value| match mode {
            Mode::Glob => glob_matches(value, pattern),
            Mode::Regex => regex_matches(value, pattern) == Some(true),
        })
        .collect();
    hits.choose(rng).map(|value| (*value).to_owned())
}

/// A request: most of them aimed at one of the case's rules, so that rules
/// match often; the rest anything from the alphabet.
pub fn request(rng: &mut StdRng, case: &Case) -> Request {
    let project_subject = |rng: &mut StdRng| Gen { rng, mode: case.mode }.project_subject();
    let aim = if rng.random_bool(0.6) {
        aim(rng, case)
    } else {
        None
    };
    let aimed = aim.as_ref().map(|a| a.subject.clone());
    let who = if rng.random_bool(0.15) {
        Who::Plain(match (rng.random_range(0..6), &aimed) {
            (0..=2, Some(subject)) => subject.clone(),
            (0, _) => String::new(),
            (1, _) => pick(rng, ROLES).to_owned(),
            (2, _) => pick(rng, GROUPS).to_owned(),
            (3, _) => project_subject(rng),
            _ => pick(rng, USERS).to_owned(),
        })
    } else {
        let user = match (rng.random_range(0..10), &aimed) {
            (0..=5, Some(subject)) => subject.clone(),
            (0..=4, _) => pick(rng, USERS).to_owned(),
            (5, _) => pick(rng, GROUPS).to_owned(),
            (6, _) => String::new(),
            (7, _) => "proj:gone:x".to_owned(),
            _ => project_subject(rng),
        };
        let mut claims = Map::new();
        if let Some(mut groups) = groups_claim(rng) {
            // The aimed subject as a group of the caller.
            if let (Value::Array(items), Some(subject)) = (&mut groups, &aimed)
                && rng.random_bool(0.5)
            {
                items.push(json!(subject));
            }
            claims.insert("groups".to_owned(), groups);
        }
        if rng.random_bool(0.4) {
            let email = *["carol@example.org", "bob@example.org"]
                .choose(rng)
                .unwrap_or(&"");
            claims.insert("email".to_owned(), json!(email));
        }
        Who::Claims { user, claims }
    };
    let (res, act, obj) = match aim {
        Some(a) => (a.res, a.act, a.obj),
        None => (None, None, None),
    };
    let request = Request {
        who,
        res: res.unwrap_or_else(|| pick(rng, RESOURCES).to_owned()),
        act: act.unwrap_or_else(|| pick(rng, ACTIONS).to_owned()),
        obj: obj.unwrap_or_else(|| pick(rng, OBJECTS).to_owned()),
    };
    if case.admits(&request) {
        request
    } else {
        // A token for a role its project lacks: ask as some role that exists.
        let Who::Claims { claims, .. } = request.who else {
            return request;
        };
        let user = case
            .projects
            .iter()
            .find_map(|p| p.roles.first().map(|r| p.subject(r)))
            .unwrap_or_default();
        Request {
            who: Who::Claims { user, claims },
            ..request
        }
    }
}
