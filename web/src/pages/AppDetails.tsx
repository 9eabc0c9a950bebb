// One application: what the controller reports (status, operation, resources, history), YAML,
// spec editing, and the operations (sync, refresh, rollback, terminate, delete). Follows the
// watch, so the controller's changes show without a reload.
import { useEffect, useState } from "preact/hooks";
import { appObject, deleteApp, getApp, refreshApp, rollbackApp, syncApp, terminateOp, updateSpec } from "../api/apps";
import { errorText } from "../api/http";
import type { Application, ApplicationSource } from "../api/types";
import { AppWatch } from "../api/watch";
import { actionStates, isRefreshing } from "../lib/actions";
import { isRunning } from "../lib/operation";
import { pagePath } from "../lib/routes";
import { parseDocument, toYaml } from "../lib/yaml";
import { href, navigate } from "../router";
import { useCan } from "../components/hooks";
import { Action, Badge, Confirm, ErrorBox, ExternalUrl, KeyValues, Link, Loading, Time } from "../components/ui";
import { YamlView } from "../components/YamlView";
import { AppHistory } from "../components/AppHistory";
import { AppResources } from "../components/AppResources";
import { DeleteAppDialog } from "../components/DeleteAppDialog";
import { OperationState } from "../components/OperationState";
import { SyncPanel } from "../components/SyncPanel";

const TABS: Array<[string, string]> = [
  ["summary", "Summary"],
  ["resources", "Resources"],
  ["history", "History"],
  ["yaml", "YAML"],
  ["edit", "Edit spec"],
];

/** Re-renders every second while `on` (the running operation's duration). */
function useTicker(on: boolean): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!on) return;
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [on]);
  return now;
}

export function AppDetails(props: { namespace: string; name: string; tab: string }) {
  const [app, setApp] = useState<Application>();
  const [error, setError] = useState<string>();
  const [gone, setGone] = useState(false);
  const [dialog, setDialog] = useState<"sync" | "delete" | "terminate" | undefined>();
  const [notice, setNotice] = useState<string>();
  const [refreshing, setRefreshing] = useState<string>();

  useEffect(() => {
    let watch: AppWatch | undefined;
    let live = true;
    const load = () =>
      getApp(props.namespace, props.name).then(
        (a) => {
          if (!live) return;
          setApp(a);
          watch?.stop();
          // Named watch: the server sends the current state first, then every change.
          watch = new AppWatch({
            params: { name: props.name, appNamespace: props.namespace },
            onEvents: (events) => {
              for (const ev of events) {
                if (ev.type === "DELETED") setGone(true);
                else setApp(ev.application);
              }
            },
            onResync: () => void load(),
          });
        },
        (err) => live && setError(errorText(err)),
      );
    void load();
    return () => {
      live = false;
      watch?.stop();
    };
  }, [props.namespace, props.name]);

  const object = app ? appObject(app) : `-/${props.name}`;
  const canGet = useCan("applications", "get", object);
  const canSync = useCan("applications", "sync", object);
  const canDelete = useCan("applications", "delete", object);
  const canUpdate = useCan("applications", "update", object);
  const now = useTicker(isRunning(app?.status?.operationState));
  const base = `applications/${pagePath(props.namespace, props.name)}`;

  if (!app) {
    if (error) return <section><h1>{props.name}</h1><ErrorBox error={error} /><Link to="applications">Back to applications</Link></section>;
    return <Loading />;
  }

  const actions = actionStates(app, { get: canGet, sync: canSync, delete: canDelete }, gone);
  const run = async (what: () => Promise<unknown>, done: string) => {
    setError(undefined);
    setNotice(undefined);
    try {
      await what();
      setNotice(done);
    } catch (err) {
      setError(errorText(err));
    }
  };
  const refresh = (kind: "normal" | "hard") => {
    setRefreshing(kind);
    void run(async () => {
      try {
        const fresh = await refreshApp(props.namespace, props.name, kind);
        setApp((old) => (old && Number(old.metadata.resourceVersion) > Number(fresh.metadata.resourceVersion) ? old : fresh));
      } finally {
        setRefreshing(undefined);
      }
    }, kind === "hard" ? "Hard refresh done." : "Refresh done.");
  };
  const refreshState = refreshing ? { allowed: false, reason: "A refresh is in progress" } : actions.refresh;

  return (
    <section class="details">
      <nav aria-label="Breadcrumb" class="muted">
        <Link to="applications">Applications</Link> / {props.namespace} /
      </nav>
      <div class="toolbar">
        <h1 data-testid="app-name">{app.metadata.name}</h1>
        <Badge kind="health" value={app.status?.health?.status} />
        <Badge kind="sync" value={app.status?.sync?.status} />
        {app.status?.operationState && <Badge kind="phase" value={app.status.operationState.phase} />}
        {(refreshing || isRefreshing(app)) && <span class="live" role="status">Refreshing…</span>}
        <span class="spacer" />
        <Action allowed={actions.sync.allowed} reason={actions.sync.reason} class="primary" onClick={() => setDialog("sync")} data-testid="sync">
          Sync
        </Action>
        <Action allowed={refreshState.allowed} reason={refreshState.reason} onClick={() => refresh("normal")} data-testid="refresh">
          Refresh
        </Action>
        <Action allowed={refreshState.allowed} reason={refreshState.reason} onClick={() => refresh("hard")} data-testid="hard-refresh">
          Hard refresh
        </Action>
        {isRunning(app.status?.operationState) && (
          <Action allowed={actions.terminate.allowed} reason={actions.terminate.reason} onClick={() => setDialog("terminate")} data-testid="terminate">
            Terminate
          </Action>
        )}
        <Action allowed={actions.delete.allowed} reason={actions.delete.reason} class="danger" onClick={() => setDialog("delete")} data-testid="delete">
          Delete
        </Action>
      </div>
      {gone && <p class="notice" role="status">This application has been deleted.</p>}
      {notice && <p class="notice" role="status">{notice}</p>}
      <ErrorBox error={error} />
      <div role="tablist" class="tabs" aria-label="Application views">
        {TABS.map(([id, label]) => (
          <a key={id} role="tab" aria-selected={props.tab === id} href={href(`${base}${id === "summary" ? "" : `/${id}`}`)}>
            {label}
          </a>
        ))}
      </div>
      <div role="tabpanel">
        {props.tab === "summary" && <Summary app={app} now={now} />}
        {props.tab === "resources" && <AppResources app={app} />}
        {props.tab === "history" && (
          <AppHistory
            app={app}
            rollback={actions.rollback}
            onRollback={(id, prune) => void run(() => rollbackApp(props.namespace, props.name, { id, prune }), `Rollback to deployment ${id} requested.`)}
          />
        )}
        {props.tab === "yaml" && <YamlView value={app} label="Application YAML" />}
        {props.tab === "edit" && <EditSpec app={app} allowed={canUpdate} onSave={(spec) => run(() => updateSpec(props.namespace, props.name, spec), "Spec saved.")} />}
      </div>
      {dialog === "sync" && (
        <SyncPanel
          app={app}
          onCancel={() => setDialog(undefined)}
          onSync={async (request) => {
            // Errors stay in the panel (it shows the API's message); success closes it.
            await syncApp(request);
            setDialog(undefined);
            setError(undefined);
            setNotice(request.dryRun ? "Dry-run sync requested." : "Sync requested: the operation is shown below.");
          }}
        />
      )}
      {dialog === "terminate" && (
        <Confirm
          title="Terminate operation"
          confirmLabel="Terminate"
          message="Terminate the running operation? Resources already applied stay as they are."
          onCancel={() => setDialog(undefined)}
          onConfirm={() => {
            setDialog(undefined);
            void run(() => terminateOp(props.namespace, props.name), "Termination requested.");
          }}
        />
      )}
      {dialog === "delete" && (
        <DeleteAppDialog
          name={app.metadata.name}
          onCancel={() => setDialog(undefined)}
          onDelete={(policy) => {
            setDialog(undefined);
            void deleteApp(props.namespace, props.name, policy).then(
              () => navigate("applications"),
              (err) => setError(errorText(err)),
            );
          }}
        />
      )}
    </section>
  );
}

function Sources({ sources }: { sources: ApplicationSource[] }) {
  if (sources.length === 0) return <p class="muted">No source.</p>;
  return (
    <>
      {sources.map((s, i) => (
        <KeyValues
          key={i}
          rows={[
            ["Repository", <ExternalUrl url={s.repoURL} />],
            ["Path", s.path || "–"],
            ["Chart", s.chart || "–"],
            ["Target revision", s.targetRevision || "HEAD"],
          ]}
        />
      ))}
    </>
  );
}

function Summary({ app, now }: { app: Application; now: number }) {
  const spec = app.spec ?? {};
  const status = app.status ?? {};
  const sources = spec.sources?.length ? spec.sources : spec.source ? [spec.source] : [];
  const auto = spec.syncPolicy?.automated;
  const labels = Object.entries(app.metadata.labels ?? {});
  const annotations = Object.entries(app.metadata.annotations ?? {});
  return (
    <div class="panels">
      <section class="panel">
        <h2>Metadata</h2>
        <KeyValues
          rows={[
            ["Name", app.metadata.name],
            ["Namespace", app.metadata.namespace ?? "–"],
            ["Project", <Link to={`settings/projects/${encodeURIComponent(spec.project || "default")}`}>{spec.project || "default"}</Link>],
            ["Created", <Time value={app.metadata.creationTimestamp} />],
            ["Resource version", app.metadata.resourceVersion ?? "–"],
            ["Labels", labels.length ? <span class="chips">{labels.map(([k, v]) => <span class="chip" key={k}>{`${k}=${v}`}</span>)}</span> : "–"],
            ["Annotations", annotations.length ? <span class="chips">{annotations.map(([k, v]) => <span class="chip" key={k}>{`${k}=${v}`}</span>)}</span> : "–"],
          ]}
        />
      </section>
      <section class="panel" data-testid="sources">
        <h2>{sources.length > 1 ? "Sources" : "Source"}</h2>
        <Sources sources={sources} />
      </section>
      <section class="panel">
        <h2>Destination</h2>
        <KeyValues
          rows={[
            ["Server", spec.destination?.server || "–"],
            ["Cluster name", spec.destination?.name || "–"],
            ["Namespace", spec.destination?.namespace || "–"],
          ]}
        />
      </section>
      <section class="panel">
        <h2>Sync policy</h2>
        <KeyValues
          rows={[
            ["Automated", auto ? "yes" : "no (manual sync)"],
            ["Prune", auto?.prune ? "yes" : "no"],
            ["Self heal", auto?.selfHeal ? "yes" : "no"],
            ["Options", spec.syncPolicy?.syncOptions?.join(", ") || "–"],
          ]}
        />
      </section>
      <section class="panel">
        <h2>Status</h2>
        <KeyValues
          rows={[
            ["Sync", <Badge kind="sync" value={status.sync?.status} />],
            ["Revision", <span class="mono">{status.sync?.revision || "–"}</span>],
            ["Health", <Badge kind="health" value={status.health?.status} />],
            ["Health message", status.health?.message || "–"],
            ["Reconciled", <Time value={status.reconciledAt} />],
          ]}
        />
      </section>
      <section class="panel">
        <h2>Conditions</h2>
        {status.conditions?.length ? (
          <ul class="conditions">
            {status.conditions.map((c, i) => (
              <li key={i}>
                <strong>{c.type}</strong>: {c.message} <Time value={c.lastTransitionTime} />
              </li>
            ))}
          </ul>
        ) : (
          <p class="muted">No conditions.</p>
        )}
      </section>
      <OperationState app={app} now={now} />
    </div>
  );
}

function EditSpec({ app, allowed, onSave }: { app: Application; allowed: boolean | undefined; onSave: (spec: unknown) => Promise<void> }) {
  const [text, setText] = useState<string>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    if (text === undefined) void toYaml(app.spec ?? {}).then(setText);
  }, [app]);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      const spec = await parseDocument(text ?? "");
      if (!spec || typeof spec !== "object" || Array.isArray(spec)) throw new Error("The spec must be an object.");
      await onSave(spec);
    } catch (err) {
      setError(errorText(err));
    }
  };
  if (text === undefined) return <Loading />;
  return (
    <form onSubmit={save} class="stack">
      <label class="field">
        <span>Spec (YAML or JSON)</span>
        <textarea class="code" rows={20} spellcheck={false} value={text} readOnly={allowed !== true} onInput={(e) => setText(e.currentTarget.value)} data-testid="spec-editor" />
      </label>
      <ErrorBox error={error} />
      <div class="row">
        <Action allowed={allowed} type="submit" class="primary">
          Save spec
        </Action>
      </div>
    </form>
  );
}
