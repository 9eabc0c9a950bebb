// The REST JSON shapes the dashboard reads (Go encoding/json of Argo CD's types; every field
// may be missing because zero values are omitted).

export interface ObjectMeta {
  name: string;
  namespace?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface ApplicationSource {
  repoURL?: string;
  path?: string;
  targetRevision?: string;
  chart?: string;
  [key: string]: unknown;
}

export interface Destination {
  server?: string;
  name?: string;
  namespace?: string;
}

export interface ApplicationSpec {
  project?: string;
  destination?: Destination;
  source?: ApplicationSource;
  sources?: ApplicationSource[];
  syncPolicy?: { automated?: { prune?: boolean; selfHeal?: boolean; enabled?: boolean } | null; syncOptions?: string[] } | null;
  [key: string]: unknown;
}

export interface Condition {
  type?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface ResourceRef {
  group?: string;
  kind?: string;
  namespace?: string;
  name?: string;
}

/** One entry of `status.resources` (what the controller compared). */
export interface ResourceStatus extends ResourceRef {
  version?: string;
  status?: string;
  health?: { status?: string; message?: string };
  hook?: boolean;
  requiresPruning?: boolean;
}

/** One entry of `operationState.syncResult.resources`. */
export interface ResourceResult extends ResourceRef {
  version?: string;
  status?: string;
  message?: string;
  hookType?: string;
  hookPhase?: string;
  syncPhase?: string;
}

export interface Operation {
  sync?: { revision?: string; prune?: boolean; dryRun?: boolean; resources?: ResourceRef[]; [k: string]: unknown };
  initiatedBy?: { username?: string; automated?: boolean };
  [k: string]: unknown;
}

export interface OperationState {
  phase?: string;
  message?: string;
  startedAt?: string | null;
  finishedAt?: string | null;
  operation?: Operation;
  syncResult?: { revision?: string; resources?: ResourceResult[] | null; [k: string]: unknown };
}

export interface HistoryEntry {
  id?: number;
  revision?: string;
  deployedAt?: string;
  deployStartedAt?: string;
  source?: ApplicationSource;
  sources?: ApplicationSource[];
  initiatedBy?: { username?: string; automated?: boolean };
}

export interface ApplicationStatus {
  sync?: { status?: string; revision?: string };
  health?: { status?: string; message?: string };
  summary?: unknown;
  conditions?: Condition[];
  operationState?: OperationState;
  history?: HistoryEntry[];
  reconciledAt?: string | null;
  resources?: ResourceStatus[] | null;
}

export interface Application {
  metadata: ObjectMeta;
  spec?: ApplicationSpec;
  status?: ApplicationStatus;
  operation?: Operation | null;
}

export interface ListResponse<T> {
  metadata?: { resourceVersion?: string; continue?: string };
  items?: T[] | null;
  /** tiphys's facet counts (`facets=` on the application list). */
  facets?: Facet[];
}

export interface Facet {
  field: string;
  values?: { value: string; count: number }[];
}

export interface WatchEvent {
  type: "ADDED" | "MODIFIED" | "DELETED" | string;
  application: Application;
}

export interface UserInfo {
  loggedIn?: boolean;
  username?: string;
  iss?: string;
  groups?: string[];
}

export interface Settings {
  userLoginsDisabled?: boolean;
  oidcConfig?: { name?: string } | null;
  /** tiphys: every provider, by name, when the server lists several. */
  ssoProviders?: Array<{ name?: string }>;
  dexConfig?: { connectors?: Array<{ name?: string }> } | null;
  passwordPattern?: string;
  [key: string]: unknown;
}

export interface VersionMessage {
  Version?: string;
  BuildDate?: string;
  GitCommit?: string;
  Platform?: string;
  [key: string]: unknown;
}

export interface ProjectRole {
  name: string;
  description?: string;
  policies?: string[];
  groups?: string[];
  jwtTokens?: Array<{ iat: number; exp?: number; id?: string }>;
}

export interface Project {
  metadata: ObjectMeta;
  spec?: {
    description?: string;
    sourceRepos?: string[];
    destinations?: Destination[];
    roles?: ProjectRole[];
    [key: string]: unknown;
  };
  status?: unknown;
}

export interface Cluster {
  server: string;
  name?: string;
  project?: string;
  namespaces?: string[];
  serverVersion?: string;
  connectionState?: ConnectionState;
  info?: { connectionState?: ConnectionState; applicationsCount?: number; serverVersion?: string };
}

export interface ConnectionState {
  status?: string;
  message?: string;
  attemptedAt?: string;
}

export interface Repository {
  repo: string;
  type?: string;
  name?: string;
  project?: string;
  username?: string;
  connectionState?: { status?: string; message?: string };
}

export interface RepoCreds {
  url: string;
  username?: string;
  type?: string;
}

export interface AccountToken {
  id?: string;
  issuedAt?: number;
  expiresAt?: number;
  /** A personal access token's (tiphys, field 1000). */
  description?: string;
}

export interface Account {
  name: string;
  enabled?: boolean;
  capabilities?: string[];
  tokens?: AccountToken[];
}
