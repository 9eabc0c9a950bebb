import { test } from "node:test";
import assert from "node:assert/strict";
import type { Application } from "../src/api/types";
import { activeFilterCount, appMatcher, applyEvents, emptyFilters, filtersFromQuery, filtersToQuery } from "../src/lib/apps";

function app(name: string, extra: Partial<{ project: string; sync: string; health: string; labels: Record<string, string>; server: string; name: string; ns: string; rv: string; repo: string }> = {}): Application {
  return {
    metadata: { name, namespace: "argocd", labels: extra.labels, resourceVersion: extra.rv },
    spec: {
      project: extra.project ?? "default",
      destination: { server: extra.server, name: extra.name, namespace: extra.ns ?? "default" },
      source: { repoURL: extra.repo ?? "https://git.test/repo.git", path: "guestbook" },
    },
    status: { sync: { status: extra.sync ?? "Synced" }, health: { status: extra.health ?? "Healthy" } },
  };
}

test("watch events insert, replace and delete by namespace/name", () => {
  const apps = new Map<string, Application>();
  assert.equal(applyEvents(apps, [{ type: "ADDED", application: app("a", { rv: "1" }) }, { type: "ADDED", application: app("b", { rv: "2" }) }]), true);
  assert.deepEqual([...apps.keys()], ["argocd/a", "argocd/b"]);
  applyEvents(apps, [{ type: "MODIFIED", application: app("a", { rv: "3", sync: "OutOfSync" }) }]);
  assert.equal(apps.get("argocd/a")!.status!.sync!.status, "OutOfSync");
  // A repeated, older event (after a resume) does not undo a newer state.
  assert.equal(applyEvents(apps, [{ type: "MODIFIED", application: app("a", { rv: "2", sync: "Synced" }) }]), false);
  assert.equal(apps.get("argocd/a")!.status!.sync!.status, "OutOfSync");
  applyEvents(apps, [{ type: "DELETED", application: app("b", { rv: "4" }) }]);
  assert.deepEqual([...apps.keys()], ["argocd/a"]);
  // Deleting what is not there changes nothing; events without a name are ignored.
  assert.equal(applyEvents(apps, [{ type: "DELETED", application: app("zz") }]), false);
  assert.equal(applyEvents(apps, [{ type: "ADDED", application: { metadata: {} } as Application }]), false);
});

test("filters: project, sync, health, labels, cluster, namespace, search", () => {
  const all = [
    app("guestbook", { project: "team-a", labels: { env: "prod", tier: "web" }, server: "https://kubernetes.default.svc" }),
    app("billing", { project: "team-b", sync: "OutOfSync", health: "Degraded", labels: { env: "dev" }, name: "in-cluster", ns: "pay" }),
    app("search", { project: "team-a", health: "Progressing", server: "https://other.test", repo: "https://git.test/special.git" }),
  ];
  const names = (q: string) => all.filter(appMatcher(filtersFromQuery(new URLSearchParams(q)))).map((a) => a.metadata.name);
  assert.deepEqual(names(""), ["guestbook", "billing", "search"]);
  assert.deepEqual(names("projects=team-a"), ["guestbook", "search"]);
  assert.deepEqual(names("projects=team-a&projects=team-b"), ["guestbook", "billing", "search"]);
  assert.deepEqual(names("sync=OutOfSync"), ["billing"]);
  assert.deepEqual(names("health=Healthy&health=Progressing"), ["guestbook", "search"]);
  assert.deepEqual(names("labels=env%3Dprod"), ["guestbook"]);
  assert.deepEqual(names("labels=env"), ["guestbook", "billing"]);
  assert.deepEqual(names("labels=env%3Dprod&labels=tier%3Dweb"), ["guestbook"]);
  assert.deepEqual(names("labels=env%3Dprod&labels=tier%3Ddb"), []);
  assert.deepEqual(names("clusters=in-cluster"), ["billing"]);
  assert.deepEqual(names("clusters=https%3A%2F%2Fother.test"), ["search"]);
  assert.deepEqual(names("namespaces=pay"), ["billing"]);
  assert.deepEqual(names("search=BILL"), ["billing"]);
  assert.deepEqual(names("search=special"), ["search"]);
  assert.deepEqual(names("search=team-a&health=Healthy"), ["guestbook"]);
});

test("filters round-trip through the query string and keep other parameters", () => {
  const f = { ...emptyFilters(), search: "x", projects: ["a", "b"], labels: ["k=v"] };
  const q = filtersToQuery(f, new URLSearchParams("view=table&sync=Synced"));
  assert.equal(q.get("view"), "table");
  assert.equal(q.get("sync"), null, "sync is a filter key and f has none");
  assert.deepEqual(filtersFromQuery(q), f);
  assert.equal(activeFilterCount(f), 4);
});
