//! Casbin as the oracle: tiphys's own RBAC engine (`tiphys::rbac`) must decide
//! every request as Argo CD does, and Argo CD's decisions are reproduced here
//! with the `casbin` crate, Argo CD's model and its enforcement steps.
//!
//! Random policies and requests over a small alphabet, seeded and bounded:
//! `TIPHYS_ORACLE_SEED` replaces the seed, `TIPHYS_ORACLE_CASES` the number of
//! cases. A disagreement is shrunk (lines, roles, groups, claims dropped while
//! it persists) and printed as a reproduction with the seed that found it.
//! Where tiphys differs from upstream on purpose, `differences.rs` says so,
//! one named test each, and the generator stays away.

// Test code: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod case;
mod differences;
mod generate;
mod oracle;

use rand::SeedableRng;
use rand::rngs::StdRng;

use case::{Case, Mode, Request, Who, tiphys_decides};
use oracle::Argo;

/// Requests asked of each generated policy.
const REQUESTS_PER_CASE: usize = 25;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// Both answers for one request, when they differ.
fn disagreement(case: &Case, request: &Request) -> Option<(bool, bool)> {
    let (policy, projects) = case.tiphys();
    let ours = tiphys_decides(&policy, &projects, request);
    let upstream = Argo::new(case).decide(request);
    (ours != upstream).then_some((ours, upstream))
}

/// Every case one step smaller than `case`/`request`.
fn smaller(case: &Case, request: &Request) -> Vec<(Case, Request)> {
    let mut out = Vec::new();
    let mut with = |f: &dyn Fn(&mut Case, &mut Request)| {
        let (mut c, mut r) = (case.clone(), request.clone());
        f(&mut c, &mut r);
        if (&c, &r) != (case, request) && c.admits(&r) {
            out.push((c, r));
        }
    };
    for i in 0..case.lines.len() {
        with(&|c, _| {
            c.lines.remove(i);
        });
    }
    with(&|c, _| c.overlay = c.lines.len());
    with(&|c, _| c.default_role = None);
    with(&|c, _| c.scopes = None);
    for p in 0..case.projects.len() {
        with(&|c, _| {
            c.projects.remove(p);
        });
        for r in 0..case.projects[p].roles.len() {
            with(&|c, _| {
                c.projects[p].roles.remove(r);
            });
            for i in 0..case.projects[p].roles[r].policies.len() {
                with(&|c, _| {
                    c.projects[p].roles[r].policies.remove(i);
                });
            }
            for i in 0..case.projects[p].roles[r].groups.len() {
                with(&|c, _| {
                    c.projects[p].roles[r].groups.remove(i);
                });
            }
        }
    }
    if let Who::Claims { claims, .. } = &request.who {
        for key in claims.keys() {
            with(&|_, r| {
                if let Who::Claims { claims, .. } = &mut r.who {
                    claims.remove(key);
                }
            });
            if let Some(serde_json::Value::Array(items)) = claims.get(key) {
                for i in 0..items.len() {
                    with(&|_, r| {
                        if let Who::Claims { claims, .. } = &mut r.who
                            && let Some(serde_json::Value::Array(items)) = claims.get_mut(key)
                        {
                            items.remove(i);
                        }
                    });
                }
            }
        }
    }
    out
}

/// Greedy shrinking: take any smaller case that still disagrees, until none does.
fn shrink(mut case: Case, mut request: Request) -> (Case, Request, (bool, bool)) {
    let mut answers = disagreement(&case, &request).expect("shrinking starts from a disagreement");
    'outer: loop {
        for (c, r) in smaller(&case, &request) {
            if let Some(found) = disagreement(&c, &r) {
                (case, request, answers) = (c, r, found);
                continue 'outer;
            }
        }
        return (case, request, answers);
    }
}

fn verdict(allowed: bool) -> &'static str {
    if allowed { "allow" } else { "deny" }
}

/// Runs `cases` random cases from `seed`; each case has its own seed
/// (`seed + index`), so a failure reruns alone.
fn property(test: &str, mode: Mode, default_seed: u64, default_cases: u64) {
    let seed = env_u64("TIPHYS_ORACLE_SEED").unwrap_or(default_seed);
    let cases = env_u64("TIPHYS_ORACLE_CASES").unwrap_or(default_cases);
    let (mut allowed, mut total) = (0usize, 0usize);
    for index in 0..cases {
        let case_seed = seed.wrapping_add(index);
        let mut rng = StdRng::seed_from_u64(case_seed);
        let case = generate::case(&mut rng, mode);
        let (policy, projects) = case.tiphys();
        let upstream = Argo::new(&case);
        for _ in 0..REQUESTS_PER_CASE {
            let request = generate::request(&mut rng, &case);
            let ours = tiphys_decides(&policy, &projects, &request);
            total += 1;
            allowed += usize::from(ours);
            if ours == upstream.decide(&request) {
                continue;
            }
            let (case, request, (ours, theirs)) = shrink(case.clone(), request);
            panic!(
                "tiphys and the Casbin oracle disagree ({mode:?} mode).\n\
                 Rerun: TIPHYS_ORACLE_SEED={case_seed} TIPHYS_ORACLE_CASES=1 cargo test --test rbac_oracle {test}\n\
                 Shrunk reproduction:\n{case}request: {request}\n\
                 tiphys: {}, Argo CD (Casbin oracle): {}",
                verdict(ours),
                verdict(theirs),
            );
        }
    }
    // A generator that allows (or denies) everything would prove nothing.
    if cases >= 20 {
        let share = allowed as f64 / total as f64;
        assert!(
            (0.1..=0.9).contains(&share),
            "only {allowed} of {total} requests allowed: the generator has drifted"
        );
    }
    eprintln!("{mode:?}: seed {seed}, {cases} cases, {total} requests, {allowed} allowed");
}

#[test]
fn glob_mode_agrees_with_casbin() {
    property("glob_mode_agrees_with_casbin", Mode::Glob, 0x7197_5eed, 80);
}

#[test]
fn regex_mode_agrees_with_casbin() {
    property("regex_mode_agrees_with_casbin", Mode::Regex, 0x0e9e_5eed, 60);
}
