import { test } from "node:test";
import assert from "node:assert/strict";
import type { Application, ResourceStatus } from "../src/api/types";
import { buildSyncRequest, defaultSyncChoices, outOfSyncKeys, prunesEverything, resourceKey, syncableResources } from "../src/lib/sync";
import { actionStates, autoSyncOn, deleteParams } from "../src/lib/actions";
import { formatDuration, initiator, isRunning, operationPending, summarizeOperation } from "../src/lib/operation";

const deploy: ResourceStatus = { group: "apps", kind: "Deployment", namespace: "web", name: "guestbook-ui", status: "OutOfSync" };
const svc: ResourceStatus = { group: "", kind: "Service", namespace: "web", name: "guestbook-ui", status: "Synced" };
const hook: ResourceStatus = { group: "batch", kind: "Job", namespace: "web", name: "migrate", hook: true };

function app(extra: Partial<Application> = {}, resources: ResourceStatus[] = [deploy, svc, hook]): Application {
  return {
    metadata: { name: "guestbook", namespace: "argocd" },
    spec: { project: "default", source: { repoURL: "https://git.test/r.git", targetRevision: "main" }, syncPolicy: { syncOptions: ["CreateNamespace=true"] } },
    status: { resources },
    ...extra,
  };
}

test("sync panel offers status.resources without hooks, sorted, all chosen; its defaults come from the app", () => {
  const a = app();
  assert.deepEqual(syncableResources(a).map(resourceKey), ["/Service/web/guestbook-ui", "apps/Deployment/web/guestbook-ui"]);
  const c = defaultSyncChoices(a);
  assert.equal(c.revision, "main");
  assert.deepEqual(c.syncOptions, ["CreateNamespace=true"]);
  assert.equal(c.selected.size, 2);
  assert.equal(defaultSyncChoices(app({ spec: { source: {} } })).revision, "HEAD");
  assert.deepEqual([...outOfSyncKeys(a)], ["apps/Deployment/web/guestbook-ui"]);
});

test("sync request: all resources means no list; a partial choice lists them; none is refused", () => {
  const a = app();
  const c = defaultSyncChoices(a);
  const all = buildSyncRequest(a, { ...c, prune: true, dryRun: true });
  assert.deepEqual(all, {
    ok: true,
    partial: false,
    request: { name: "guestbook", appNamespace: "argocd", revision: "main", prune: true, dryRun: true, syncOptions: { items: ["CreateNamespace=true"] } },
  });
  const part = buildSyncRequest(a, { ...c, revision: "  ", syncOptions: [""], selected: outOfSyncKeys(a) });
  assert.ok(part.ok);
  assert.equal(part.partial, true);
  assert.deepEqual(part.request, {
    name: "guestbook",
    appNamespace: "argocd",
    prune: false,
    dryRun: false,
    resources: [{ group: "apps", kind: "Deployment", name: "guestbook-ui", namespace: "web" }],
  });
  assert.deepEqual(buildSyncRequest(a, { ...c, selected: new Set() }), { ok: false, error: "Select at least one resource." });
  // Nothing reported yet (a new application): the whole application is synced.
  const fresh = app({}, []);
  const r = buildSyncRequest(fresh, defaultSyncChoices(fresh));
  assert.ok(r.ok && r.request.resources === undefined);
});

test("pruning everything asks first, only when every chosen resource would be pruned", () => {
  const gone = app({}, [{ ...deploy, requiresPruning: true }, { ...svc, requiresPruning: true }]);
  const c = defaultSyncChoices(gone);
  assert.equal(prunesEverything(gone, { ...c, prune: true }), true);
  assert.equal(prunesEverything(gone, c), false);
  assert.equal(prunesEverything(gone, { ...c, prune: true, selected: new Set([resourceKey(deploy)]) }), false);
  assert.equal(prunesEverything(app(), { ...defaultSyncChoices(app()), prune: true }), false);
});

test("operation summary: running, finished with results, initiator", () => {
  const running = summarizeOperation(
    { phase: "Running", startedAt: "2026-01-01T00:00:00Z", operation: { sync: { revision: "abc" }, initiatedBy: { username: "alice" } } },
    Date.parse("2026-01-01T00:01:05Z"),
  )!;
  assert.equal(running.running, true);
  assert.equal(running.initiator, "alice");
  assert.equal(running.kind, "Sync");
  assert.equal(running.revision, "abc");
  assert.equal(formatDuration(running.durationS), "1m 5s");
  assert.deepEqual(running.results, []);
  const done = summarizeOperation({
    phase: "Failed",
    message: "one or more objects failed to apply",
    startedAt: "2026-01-01T00:00:00Z",
    finishedAt: "2026-01-01T00:00:07Z",
    operation: { sync: { dryRun: true }, initiatedBy: { automated: true } },
    syncResult: { revision: "def", resources: [{ kind: "Service", name: "x", status: "SyncFailed", message: "bad" }] },
  })!;
  assert.equal(done.running, false);
  assert.equal(done.kind, "Sync (dry run)");
  assert.equal(done.initiator, "automated sync policy");
  assert.equal(done.revision, "def");
  assert.equal(done.durationS, 7);
  assert.equal(done.results[0].message, "bad");
  assert.equal(summarizeOperation(undefined), undefined);
  assert.equal(initiator(undefined), "Unknown");
  assert.equal(formatDuration(3723), "1h 2m 3s");
  assert.equal(formatDuration(undefined), "–");
});

test("a requested operation is pending until the controller runs it", () => {
  assert.equal(operationPending(app({ operation: { sync: {} } })), true);
  assert.equal(operationPending(app({ operation: { sync: {} }, status: { operationState: { phase: "Running" } } })), false);
  assert.equal(operationPending(app()), false);
  assert.equal(isRunning({ phase: "Succeeded", finishedAt: "x" }), false);
  assert.equal(isRunning({ phase: "Terminating" }), true);
});

test("actions: permission first, then the application's state, each with its reason", () => {
  const all = { get: true, sync: true, delete: true };
  const idle = actionStates(app(), all);
  assert.deepEqual(
    Object.fromEntries(Object.entries(idle).map(([k, v]) => [k, v.allowed])),
    { sync: true, refresh: true, rollback: true, terminate: false, delete: true },
  );
  assert.equal(idle.terminate.reason, "No operation is running");

  const auto = app({ spec: { syncPolicy: { automated: { prune: true } } } });
  assert.equal(autoSyncOn(auto), true);
  assert.equal(autoSyncOn(app({ spec: { syncPolicy: { automated: { enabled: false } } } })), false);
  assert.match(actionStates(auto, all).rollback.reason!, /auto-sync/);

  const running = app({ status: { operationState: { phase: "Running" } } });
  const r = actionStates(running, all);
  assert.equal(r.terminate.allowed, true);
  assert.equal(r.sync.allowed, false);
  assert.equal(r.sync.reason, "An operation is already running");

  const denied = actionStates(running, { get: true, sync: false, delete: undefined });
  assert.equal(denied.terminate.reason, "You are not permitted to do this");
  assert.equal(denied.delete.allowed, undefined, "still asking can-i");

  const refreshing = app({ metadata: { name: "guestbook", annotations: { "argocd.argoproj.io/refresh": "normal" } } });
  assert.equal(actionStates(refreshing, all).refresh.allowed, false);
  const gone = actionStates(app(), all, true);
  assert.ok(Object.values(gone).every((s) => s.allowed === false));
});

test("delete: foreground, background, non-cascading", () => {
  assert.deepEqual(deleteParams("foreground"), { cascade: "true", propagationPolicy: "foreground" });
  assert.deepEqual(deleteParams("background"), { cascade: "true", propagationPolicy: "background" });
  assert.deepEqual(deleteParams("non-cascading"), { cascade: "false" });
});
