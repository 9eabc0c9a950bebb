// One application: summary, the recorded operation, history, YAML, spec editing, sync and delete.
import { useEffect, useState } from "preact/hooks";
import { appObject, deleteApp, getApp, syncApp, terminateOp, updateSpec } from "../api/apps";
import { errorText } from "../api/http";
import type { Application, ApplicationSource } from "../api/types";
import { AppWatch } from "../api/watch";
import { pagePath } from "../lib/routes";
import { parseDocument, toYaml } from "../lib/yaml";
import { href, navigate } from "../router";
import { useCan } from "../components/hooks";
import { Action, Badge, Confirm, ErrorBox, ExternalUrl, KeyValues, Link, Loading, Modal, Time } from "../components/ui";
import { YamlView } from "../components/YamlView";

const TABS: Array<[string, string]> = [
  ["summary", "Summary"],
  ["history", "History"],
  ["yaml", "YAML"],
  ["edit", "Edit spec"],
];

export function AppDetails(props: { namespace: string; name: string; tab: string }) {
  const [app, setApp] = useState<Application>();
  const [error, setError] = useState<string>();
  const [gone, setGone] = useState(false);
  const [dialog, setDialog] = useState<"sync" | "delete" | undefined>();
  const [notice, setNotice] = useState<string>();

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
  const canSync = useCan("applications", "sync", object);
  const canDelete = useCan("applications", "delete", object);
  const canUpdate = useCan("applications", "update", object);
  const base = `applications/${pagePath(props.namespace, props.name)}`;

  if (error) return <section><h1>{props.name}</h1><ErrorBox error={error} /><Link to="applications">Back to applications</Link></section>;
  if (!app) return <Loading />;

  const run = async (what: () => Promise<unknown>, done: string) => {
    setError(undefined);
    try {
      await what();
      setNotice(done);
    } catch (err) {
      setNotice(undefined);
      setError(errorText(err));
    }
  };

  return (
    <section class="details">
      <nav aria-label="Breadcrumb" class="muted">
        <Link to="applications">Applications</Link> / {props.namespace} /
      </nav>
      <div class="toolbar">
        <h1 data-testid="app-name">{app.metadata.name}</h1>
        <Badge kind="health" value={app.status?.health?.status} />
        <Badge kind="sync" value={app.status?.sync?.status} />
        <span class="spacer" />
        <Action allowed={canSync && !gone} class="primary" onClick={() => setDialog("sync")} data-testid="sync">
          Sync
        </Action>
        {app.operation && (
          <Action allowed={canSync && !gone} onClick={() => void run(() => terminateOp(props.namespace, props.name), "Operation terminated.")}>
            Terminate operation
          </Action>
        )}
        <Action allowed={canDelete && !gone} class="danger" onClick={() => setDialog("delete")} data-testid="delete">
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
        {props.tab === "summary" && <Summary app={app} />}
        {props.tab === "history" && <History app={app} />}
        {props.tab === "yaml" && <YamlView value={app} label="Application YAML" />}
        {props.tab === "edit" && <EditSpec app={app} allowed={canUpdate} onSave={(spec) => run(() => updateSpec(props.namespace, props.name, spec), "Spec saved.")} />}
      </div>
      {dialog === "sync" && (
        <SyncDialog
          onCancel={() => setDialog(undefined)}
          onSync={(opts) => {
            setDialog(undefined);
            void run(() => syncApp(props.namespace, props.name, opts), "Sync requested: the operation is recorded below.");
          }}
        />
      )}
      {dialog === "delete" && (
        <DeleteDialog
          name={app.metadata.name}
          onCancel={() => setDialog(undefined)}
          onDelete={(cascade) => {
            setDialog(undefined);
            void deleteApp(props.namespace, props.name, cascade).then(
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

function Summary({ app }: { app: Application }) {
  const spec = app.spec ?? {};
  const status = app.status ?? {};
  const sources = spec.sources?.length ? spec.sources : spec.source ? [spec.source] : [];
  const auto = spec.syncPolicy?.automated;
  const op = status.operationState;
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
      <section class="panel wide" data-testid="operation">
        <h2>Operation</h2>
        {app.operation ? (
          <>
            <p>
              Requested operation{app.operation.initiatedBy?.username ? ` by ${app.operation.initiatedBy.username}` : ""}, waiting for a
              controller:
            </p>
            <YamlView value={app.operation} label="Requested operation" />
          </>
        ) : (
          <p class="muted">No operation requested.</p>
        )}
        <h3>Last operation state</h3>
        {op ? (
          <KeyValues
            rows={[
              ["Phase", <Badge kind="phase" value={op.phase} />],
              ["Message", op.message || "–"],
              ["Started", <Time value={op.startedAt} />],
              ["Finished", <Time value={op.finishedAt} />],
            ]}
          />
        ) : (
          <p class="muted">No operation has run.</p>
        )}
      </section>
    </div>
  );
}

function History({ app }: { app: Application }) {
  const history = app.status?.history ?? [];
  if (history.length === 0) return <p class="muted">No deployments yet.</p>;
  return (
    <table class="table">
      <thead>
        <tr>
          <th>ID</th>
          <th>Revision</th>
          <th>Deployed</th>
          <th>Source</th>
        </tr>
      </thead>
      <tbody>
        {[...history].reverse().map((h) => (
          <tr key={h.id}>
            <td>{h.id}</td>
            <td class="mono">{h.revision}</td>
            <td><Time value={h.deployedAt} /></td>
            <td class="mono">{h.source?.repoURL} {h.source?.path}</td>
          </tr>
        ))}
      </tbody>
    </table>
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

function SyncDialog(props: { onCancel: () => void; onSync: (o: { revision?: string; prune?: boolean; dryRun?: boolean }) => void }) {
  const [revision, setRevision] = useState("");
  const [prune, setPrune] = useState(false);
  const [dryRun, setDryRun] = useState(false);
  return (
    <Modal title="Sync application" onClose={props.onCancel}>
      <form
        method="dialog"
        class="stack"
        onSubmit={(e) => {
          e.preventDefault();
          props.onSync({ revision: revision || undefined, prune, dryRun });
        }}
      >
        <label class="field">
          <span>Revision (empty: the target revision)</span>
          <input value={revision} onInput={(e) => setRevision(e.currentTarget.value)} />
        </label>
        <label class="check">
          <input type="checkbox" checked={prune} onChange={(e) => setPrune(e.currentTarget.checked)} /> Prune
        </label>
        <label class="check">
          <input type="checkbox" checked={dryRun} onChange={(e) => setDryRun(e.currentTarget.checked)} /> Dry run
        </label>
        <div class="row end">
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
          <button type="submit" class="primary" data-testid="confirm-sync">
            Synchronize
          </button>
        </div>
      </form>
    </Modal>
  );
}

function DeleteDialog(props: { name: string; onCancel: () => void; onDelete: (cascade: boolean) => void }) {
  const [cascade, setCascade] = useState(true);
  return (
    <Confirm
      title="Delete application"
      confirmLabel="Delete"
      onCancel={props.onCancel}
      onConfirm={() => props.onDelete(cascade)}
      message={
        <>
          Delete <strong>{props.name}</strong>?
          <label class="check">
            <input type="checkbox" checked={cascade} onChange={(e) => setCascade(e.currentTarget.checked)} /> Also delete its resources (cascade)
          </label>
        </>
      }
    />
  );
}
