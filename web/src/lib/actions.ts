// Which of the page's actions are offered and, when one is not, why (shown as the button's
// tooltip). Permissions come from can-i; the rest from the application, as upstream's
// application-details decides (rollback refused while auto-sync is on, terminate only while an
// operation runs, refresh not while one is pending).
import type { Application } from "../api/types";
import { isRunning } from "./operation";

export const REFRESH_ANNOTATION = "argocd.argoproj.io/refresh";

export interface Permissions {
  get?: boolean;
  sync?: boolean;
  delete?: boolean;
}

/** `allowed` as the Action button takes it: undefined while can-i is asked. */
export interface ActionState {
  allowed: boolean | undefined;
  reason?: string;
}

export type ActionName = "sync" | "refresh" | "rollback" | "terminate" | "delete";

const DENIED = "You are not permitted to do this";

/** Automated sync is on (v3: `automated.enabled` absent means on). */
export function autoSyncOn(app: Application): boolean {
  const a = app.spec?.syncPolicy?.automated;
  return Boolean(a) && a!.enabled !== false;
}

export function isRefreshing(app: Application): boolean {
  return Boolean(app.metadata.annotations?.[REFRESH_ANNOTATION]);
}

function gate(permitted: boolean | undefined, blocker?: string): ActionState {
  if (permitted === false) return { allowed: false, reason: DENIED };
  if (blocker) return { allowed: false, reason: blocker };
  return { allowed: permitted };
}

export function actionStates(app: Application, can: Permissions, gone = false): Record<ActionName, ActionState> {
  const deleted = gone ? "The application has been deleted" : app.metadata.deletionTimestamp ? "The application is being deleted" : undefined;
  const running = isRunning(app.status?.operationState);
  return {
    sync: gate(can.sync, deleted ?? (running ? "An operation is already running" : undefined)),
    refresh: gate(can.get, deleted ?? (isRefreshing(app) ? "A refresh is in progress" : undefined)),
    rollback: gate(
      can.sync,
      deleted ??
        (autoSyncOn(app)
          ? "Rollback cannot be initiated while auto-sync is enabled: turn automated sync off first"
          : running
            ? "An operation is already running"
            : undefined),
    ),
    terminate: gate(can.sync, deleted ?? (running ? (app.status?.operationState?.phase === "Terminating" ? "The operation is already terminating" : undefined) : "No operation is running")),
    delete: gate(can.delete, gone ? "The application has been deleted" : undefined),
  };
}

export type PropagationPolicy = "foreground" | "background" | "non-cascading";

/** The query of `DELETE api/v1/applications/{name}` for a choice (as upstream's delete dialog). */
export function deleteParams(policy: PropagationPolicy): { cascade: string; propagationPolicy?: string } {
  if (policy === "non-cascading") return { cascade: "false" };
  return { cascade: "true", propagationPolicy: policy };
}
