// The sync panel's choices and the request they become (behaviour as upstream's
// application-sync-panel: hooks are not offered, all resources selected means "no resource
// list", at least one resource must be chosen, pruning everything asks first).
import type { Application, ResourceRef, ResourceStatus } from "../api/types";

/** `group/kind/namespace/name`, the order upstream sorts and labels resources by. */
export function resourceKey(r: ResourceRef): string {
  return [r.group ?? "", r.kind ?? "", r.namespace ?? "", r.name ?? ""].join("/");
}

/** The resources the panel offers: `status.resources` without hooks, sorted by key. */
export function syncableResources(app: Application): ResourceStatus[] {
  return (app.status?.resources ?? [])
    .filter((r) => !r.hook)
    .sort((a, b) => resourceKey(a).localeCompare(resourceKey(b), undefined, { numeric: true }));
}

export interface SyncChoices {
  revision: string;
  prune: boolean;
  dryRun: boolean;
  /** Keys (resourceKey) of the chosen resources. */
  selected: Set<string>;
  syncOptions: string[];
}

/** The panel's starting state: the target revision (or HEAD), every resource, the app's options. */
export function defaultSyncChoices(app: Application): SyncChoices {
  const spec = app.spec ?? {};
  const source = spec.source ?? spec.sources?.[0];
  return {
    revision: source?.targetRevision || "HEAD",
    prune: false,
    dryRun: false,
    selected: new Set(syncableResources(app).map(resourceKey)),
    syncOptions: [...(spec.syncPolicy?.syncOptions ?? [])],
  };
}

export interface SyncRequest {
  name: string;
  appNamespace?: string;
  revision?: string;
  prune: boolean;
  dryRun: boolean;
  resources?: Array<{ group: string; kind: string; name: string; namespace: string }>;
  syncOptions?: { items: string[] };
}

export type Built = { ok: true; request: SyncRequest; partial: boolean } | { ok: false; error: string };

/** The body of `POST api/v1/applications/{name}/sync`, or why it cannot be sent. */
export function buildSyncRequest(app: Application, c: SyncChoices): Built {
  const offered = syncableResources(app);
  const chosen = offered.filter((r) => c.selected.has(resourceKey(r)));
  if (offered.length > 0 && chosen.length === 0) return { ok: false, error: "Select at least one resource." };
  const partial = chosen.length < offered.length;
  const request: SyncRequest = { name: app.metadata.name, prune: c.prune, dryRun: c.dryRun };
  if (app.metadata.namespace) request.appNamespace = app.metadata.namespace;
  const revision = c.revision.trim();
  if (revision) request.revision = revision;
  if (partial) {
    request.resources = chosen.map((r) => ({ group: r.group ?? "", kind: r.kind ?? "", name: r.name ?? "", namespace: r.namespace ?? "" }));
  }
  const items = c.syncOptions.map((o) => o.trim()).filter(Boolean);
  if (items.length) request.syncOptions = { items };
  return { ok: true, request, partial };
}

/** Prune with every resource chosen and every one of them to be pruned: upstream asks first. */
export function prunesEverything(app: Application, c: SyncChoices): boolean {
  const offered = syncableResources(app);
  if (!c.prune || offered.length === 0) return false;
  return offered.every((r) => c.selected.has(resourceKey(r)) && r.requiresPruning === true);
}

/** Resources the controller reports out of sync (the panel's "out of sync" shortcut). */
export function outOfSyncKeys(app: Application): Set<string> {
  return new Set(syncableResources(app).filter((r) => r.status === "OutOfSync").map(resourceKey));
}
