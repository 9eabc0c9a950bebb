#!/usr/bin/env python3
"""Generates an Argo CD style RBAC policy of exactly N lines, plus requests, for benches/rbac.sh.

    python3 benches/rbac_policy_gen.py --lines 10000 --out DIR [--groups 50] [--requests 500] [--seed 1]

Writes to DIR:
  policy.csv    N lines, no blank lines or comments (so both engines count N):
                - `g, <peer user>, org:team-K` for each of the benchmark user's groups (first);
                - a base role and department roles, each team role inheriting a department role
                  and every department role inheriting `role:base` (chains of at most 3 bindings);
                - per team: `p` lines for applications, applicationsets, logs, exec, repositories,
                  clusters and projects with objects like `proj-K/*`, `proj-K/app-*`, `*`, URLs and a
                  few `{a,b}` and `[...]` globs; deny lines (production deletes, exec); a group
                  binding `g, org:team-K, role:team-K`; a few users bound to the team role;
                - filler: more users bound to team roles, up to exactly N lines.
  groups.txt    the benchmark user's 50 groups (`org:team-K`), one per line: all bound to team roles.
  requests.csv  `sub,res,act,obj` lines for the peer user (sub = the peer user, see below), a mix of
                allowed and denied requests (allowed through the user's teams, their departments and
                the base role; denied by deny lines, by other teams' objects, by unknown actions).
  meta.json     the parameters and counts.

The Go peer (peer-go rbac-bench) checks ONE plain subject and knows no groups. The same 50-group
user is modelled there as the subject `bench-user` (the peer user), bound by `g` lines to the 50
group names, each bound to its team role: the same roles are reachable, one binding further away.
tiphys's benchmark decides for a different user name (not in any `g` line) with the 50 groups as
its `groups` claim, the way a real SSO user is decided.
"""

import argparse
import json
import os
import random

PEER_USER = "bench-user"
RESOURCES_APP = ["applications", "applicationsets", "logs", "exec"]


def team_block(rng, k, departments):
    """The lines of team k (p lines first, then its g lines)."""
    role = f"role:team-{k}"
    proj = f"proj-{k}"
    dept = k % departments
    p = []

    def allow(res, act, obj):
        p.append(f"p, {role}, {res}, {act}, {obj}, allow")

    def deny(res, act, obj):
        p.append(f"p, {role}, {res}, {act}, {obj}, deny")

    allow("applications", "get", f"{proj}/*")
    allow("applications", "sync", f"{proj}/*")
    allow("applications", "delete", f"{proj}/app-*")
    deny("applications", "delete", f"{proj}/prod-*")
    allow("logs", "get", f"{proj}/*")
    allow("repositories", "get", f"https://git.example.com/team-{k}/*")
    allow("projects", "get", proj)
    # optional lines: teams differ in size (about 14 lines a team on average)
    if rng.random() < 0.6:
        allow("applications", "update", f"{proj}/app-*")
    if rng.random() < 0.5:
        allow("applications", "action/*", f"{proj}/*")
    if rng.random() < 0.3:
        allow("applicationsets", "get", f"{proj}/*")
    if rng.random() < 0.4:
        allow("exec", "create", f"{proj}/dev-*")
    if rng.random() < 0.4:
        deny("exec", "create", f"{proj}/prod-*")
    if rng.random() < 0.3:
        allow("repositories", "create", f"https://git.example.com/team-{k}/*")
    if rng.random() < 0.3:
        allow("clusters", "get", f"https://k8s-{k}.example.com")
    if k % 5 == 0:
        # a glob with alternatives (quoted: it has a comma) and one with a class
        p.append(f'p, {role}, applications, override, "{proj}/{{app,svc}}-*", allow')
        allow("applications", "rollback", f"{proj}/[a-m]*")
    if k % 7 == 0:
        allow("clusters", "update", f"https://k8s-{k}.example.com")
    g = [f"g, org:team-{k}, {role}", f"g, {role}, role:dept-{dept}"]
    for u in range(rng.randint(1, 3)):
        g.append(f"g, user-{k}-{u}@example.com, {role}")
    return p + g


def generate(lines, n_groups, n_requests, seed):
    rng = random.Random(seed)
    departments = max(4, lines // 14 // 25)
    head = [
        "p, role:base, projects, get, *, allow",
        "p, role:base, clusters, get, *, allow",
        "p, role:base, repositories, get, https://git.example.com/shared/*, allow",
        "p, role:base, applications, get, shared/*, allow",
        "p, role:base, exec, create, *, deny",
    ]
    for d in range(departments):
        head += [
            f"p, role:dept-{d}, applications, get, */dept-{d}-*, allow",
            f"p, role:dept-{d}, logs, get, */dept-{d}-*, allow",
            f"p, role:dept-{d}, applications, sync, staging-{d}/*, allow",
            f"p, role:dept-{d}, applications, delete, */prod-*, deny",
            f"g, role:dept-{d}, role:base",
        ]
    # Team blocks until the budget (N minus the peer user's g lines) is used; only
    # complete blocks count as teams, and the user's groups are chosen among them.
    budget = lines - n_groups - len(head)
    body = []
    teams = 0
    while True:
        block = team_block(rng, teams, departments)
        if len(body) + len(block) > budget:
            break
        body += block
        teams += 1
    if teams < n_groups:
        raise SystemExit(f"{lines} lines hold only {teams} complete teams, fewer than {n_groups} groups")
    member_teams = sorted(rng.sample(range(teams), n_groups))
    groups = [f"org:team-{k}" for k in member_teams]
    out = [f"g, {PEER_USER}, {g}" for g in groups] + head + body
    extra = 0
    while len(out) < lines:
        out.append(f"g, extra-{extra}@example.com, role:team-{extra % teams}")
        extra += 1
    text = "\n".join(out) + "\n"
    defined_teams = teams

    # Requests.
    mine = member_teams
    # objects of teams the user is not in (some beyond the policy's teams)
    others = [t for t in range(defined_teams + 20) if t not in set(member_teams)]
    my_depts = sorted({t % departments for t in mine})

    def allowed_req():
        t = rng.choice(mine)
        kind = rng.randrange(9)
        app = f"app-{rng.randrange(1000)}"
        return [
            ("applications", "get", f"proj-{t}/{app}"),
            ("applications", "sync", f"proj-{t}/svc-{rng.randrange(1000)}"),
            ("applications", "delete", f"proj-{t}/{app}"),
            ("logs", "get", f"proj-{t}/{app}"),
            ("repositories", "get", f"https://git.example.com/team-{t}/repo-{rng.randrange(100)}"),
            ("applications", "action/apps/Deployment/restart", f"proj-{t}/{app}"),
            ("clusters", "get", f"https://k8s-{rng.randrange(teams)}.example.com"),
            ("applications", "get", f"proj-{rng.choice(others)}/dept-{rng.choice(my_depts)}-{app}"),
            ("projects", "get", f"proj-{rng.randrange(teams)}"),
        ][kind]

    def denied_req():
        t = rng.choice(mine)
        o = rng.choice(others)
        kind = rng.randrange(8)
        app = f"app-{rng.randrange(1000)}"
        return [
            ("applications", "delete", f"proj-{t}/prod-{rng.randrange(1000)}"),
            ("exec", "create", f"proj-{t}/prod-{rng.randrange(1000)}"),
            ("applications", "get", f"proj-{o}/{app}"),
            ("applications", "sync", f"proj-{o}/{app}"),
            ("clusters", "delete", f"https://k8s-{t}.example.com"),
            ("repositories", "create", f"https://git.example.com/team-{o}/repo"),
            ("logs", "get", f"proj-{o}/{app}"),
            ("accounts", "update", f"user-{t}"),
        ][kind]

    seen = set()
    requests = []
    while len(requests) < n_requests:
        req = allowed_req() if rng.random() < 0.5 else denied_req()
        if req not in seen:
            seen.add(req)
            requests.append(req)

    def csv_field(s):
        return f'"{s}"' if any(c in s for c in ',"') else s

    req_text = "".join(
        ",".join(csv_field(f) for f in (PEER_USER,) + r) + "\n" for r in requests
    )
    meta = {
        "lines": len(out),
        "p_lines": sum(1 for line in out if line.startswith("p,")),
        "g_lines": sum(1 for line in out if line.startswith("g,")),
        "teams": defined_teams,
        "departments": departments,
        "groups": len(groups),
        "requests": len(requests),
        "peer_user": PEER_USER,
        "seed": seed,
    }
    return text, groups, req_text, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    text, groups, req_text, meta = generate(args.lines, args.groups, args.requests, args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "policy.csv"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "groups.txt"), "w") as f:
        f.write("\n".join(groups) + "\n")
    with open(os.path.join(args.out, "requests.csv"), "w") as f:
        f.write(req_text)
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f)
        f.write("\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
