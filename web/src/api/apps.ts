// Application API calls and the projection the list asks for.
import { del, get, post, put, query, seg } from "./http";
import type { Application, ListResponse } from "./types";
import type { SyncRequest } from "../lib/sync";
import { deleteParams, type PropagationPolicy } from "../lib/actions";

/** What the list shows; the server drops paths outside its whitelist silently. */
export const LIST_FIELDS = [
  "metadata.resourceVersion",
  "items.metadata.name",
  "items.metadata.namespace",
  "items.metadata.labels",
  "items.metadata.creationTimestamp",
  "items.metadata.deletionTimestamp",
  "items.metadata.resourceVersion",
  "items.spec.destination",
  "items.spec.project",
  "items.spec.source",
  "items.spec.sources",
  "items.spec.syncPolicy",
  "items.operation.sync",
  "items.status.sync.status",
  "items.status.sync.revision",
  "items.status.health",
  "items.status.operationState.phase",
  "items.status.operationState.startedAt",
  "items.status.operationState.finishedAt",
];

/** The same projection for the watch stream (each message is `{"result":{type,application}}`). */
export const WATCH_FIELDS = [
  "result.type",
  ...LIST_FIELDS.filter((f) => f.startsWith("items.")).map((f) => f.replace(/^items\./, "result.application.")),
];

/** The fields the list's facets count (tiphys's `facets=`). */
export const FACET_FIELDS = ["project", "sync", "health", "cluster", "namespace"];

/**
 * A page of the list as the server cuts it (tiphys's pages, filters and facets): `params` are
 * the filter parameters (`filter`, `search`, `selector`), `limit` the page size, `after` the
 * previous page's continue token.
 */
export function listPage(
  params: Record<string, string | string[] | undefined>,
  limit: number,
  opts: { after?: string; facets?: boolean; signal?: AbortSignal } = {},
) {
  const q = query({
    ...params,
    limit: String(limit),
    continue: opts.after,
    facets: opts.facets ? FACET_FIELDS.join(",") : undefined,
    fields: [...LIST_FIELDS, "metadata.continue", "facets"].join(","),
  });
  return get<ListResponse<Application>>(`api/v1/applications${q}`, opts.signal);
}

const ns = (namespace: string) => query({ appNamespace: namespace });

export const getApp = (namespace: string, name: string) =>
  get<Application>(`api/v1/applications/${seg(name)}${ns(namespace)}`);

export const createApp = (app: Application) => post<Application>("api/v1/applications", app);

export const updateSpec = (namespace: string, name: string, spec: unknown) =>
  put<unknown>(`api/v1/applications/${seg(name)}/spec${ns(namespace)}`, spec);

export const deleteApp = (namespace: string, name: string, policy: PropagationPolicy) =>
  del<unknown>(`api/v1/applications/${seg(name)}${query({ appNamespace: namespace, ...deleteParams(policy) })}`);

export const syncApp = (request: SyncRequest) => post<Application>(`api/v1/applications/${seg(request.name)}/sync`, request);

export const rollbackApp = (namespace: string, name: string, opts: { id: number; prune: boolean; dryRun?: boolean }) =>
  post<Application>(`api/v1/applications/${seg(name)}/rollback`, { name, appNamespace: namespace, ...opts });

/** Answers once the controller has refreshed the application (the server waits up to 60 s). */
export const refreshApp = (namespace: string, name: string, kind: "normal" | "hard") =>
  get<Application>(`api/v1/applications/${seg(name)}${query({ appNamespace: namespace, refresh: kind })}`);

export const terminateOp = (namespace: string, name: string) =>
  del<unknown>(`api/v1/applications/${seg(name)}/operation${ns(namespace)}`);

/** The RBAC object of an application, as can-i expects it: `project/namespace/name`. */
export function appObject(app: Application): string {
  const project = app.spec?.project || "default";
  const namespace = app.metadata.namespace;
  return namespace ? `${project}/${namespace}/${app.metadata.name}` : `${project}/${app.metadata.name}`;
}
