// What the controller reports about operations, reduced to what the page shows (behaviour as
// upstream's application-operation-state and application-status-panel).
import type { Application, Operation, OperationState, ResourceResult } from "../api/types";

/** Who started an operation: the automated sync policy, a user, or unknown. */
export function initiator(op?: Operation | null): string {
  if (!op?.initiatedBy) return "Unknown";
  if (op.initiatedBy.automated) return "automated sync policy";
  return op.initiatedBy.username || "Unknown";
}

/** Sync or rollback (a rollback is a sync of an earlier revision whose source the server set). */
export function operationKind(op?: Operation | null): string {
  if (!op) return "Unknown";
  if (op.sync) return op.sync.dryRun ? "Sync (dry run)" : "Sync";
  const other = Object.keys(op).find((k) => k !== "initiatedBy" && k !== "info" && k !== "retry");
  return other ? other[0].toUpperCase() + other.slice(1) : "Unknown";
}

export interface OperationSummary {
  kind: string;
  phase: string;
  running: boolean;
  message?: string;
  initiator: string;
  startedAt?: string;
  finishedAt?: string;
  revision?: string;
  results: ResourceResult[];
  /** Seconds from start to finish (or until `now` while running). */
  durationS?: number;
}

const RUNNING = new Set(["Running", "Terminating"]);

export function isRunning(state?: OperationState | null): boolean {
  return Boolean(state?.phase && RUNNING.has(state.phase) && !state.finishedAt);
}

export function summarizeOperation(state: OperationState | undefined | null, now = Date.now()): OperationSummary | undefined {
  if (!state) return undefined;
  const running = isRunning(state);
  const start = state.startedAt ? Date.parse(state.startedAt) : NaN;
  const end = state.finishedAt ? Date.parse(state.finishedAt) : running ? now : NaN;
  return {
    kind: operationKind(state.operation),
    phase: state.phase || "Unknown",
    running,
    message: state.message || undefined,
    initiator: initiator(state.operation),
    startedAt: state.startedAt || undefined,
    finishedAt: state.finishedAt || undefined,
    revision: state.syncResult?.revision || state.operation?.sync?.revision || undefined,
    // Per-resource results belong to a finished operation.
    results: state.finishedAt ? [...(state.syncResult?.resources ?? [])] : [],
    durationS: Number.isNaN(start) || Number.isNaN(end) ? undefined : Math.max(0, Math.round((end - start) / 1000)),
  };
}

/** `1h 2m 3s`, `4m 0s`, `5s`. */
export function formatDuration(s?: number): string {
  if (s === undefined) return "–";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h) return `${h}h ${m}m ${sec}s`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

/** The controller has not yet picked up a requested operation. */
export function operationPending(app: Application): boolean {
  return Boolean(app.operation) && !isRunning(app.status?.operationState);
}
