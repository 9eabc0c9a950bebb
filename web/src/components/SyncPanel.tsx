// The sync panel: revision, prune, dry run, sync options and the resources to sync (behaviour as
// upstream's application-sync-panel). Builds the request with lib/sync and hands it back.
import { useState } from "preact/hooks";
import type { Application } from "../api/types";
import { buildSyncRequest, defaultSyncChoices, outOfSyncKeys, prunesEverything, resourceKey, syncableResources, type SyncChoices, type SyncRequest } from "../lib/sync";
import { Badge, ErrorBox, ExternalUrl, Modal } from "./ui";

export function SyncPanel(props: { app: Application; onCancel: () => void; onSync: (r: SyncRequest) => Promise<void> }) {
  const { app } = props;
  const [c, setC] = useState<SyncChoices>(() => defaultSyncChoices(app));
  const [error, setError] = useState<string>();
  const [confirmPrune, setConfirmPrune] = useState(false);
  const [busy, setBusy] = useState(false);
  const resources = syncableResources(app);
  const built = buildSyncRequest(app, c);
  const source = app.spec?.source ?? app.spec?.sources?.[0];
  const set = (patch: Partial<SyncChoices>) => setC((old) => ({ ...old, ...patch }));
  const toggle = (key: string, on: boolean) => {
    const selected = new Set(c.selected);
    if (on) selected.add(key);
    else selected.delete(key);
    set({ selected });
  };

  const send = async () => {
    if (!built.ok) return setError(built.error);
    setBusy(true);
    setError(undefined);
    try {
      await props.onSync(built.request);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Modal title="Sync application" onClose={props.onCancel}>
      <form
        class="stack sync-panel"
        onSubmit={(e) => {
          e.preventDefault();
          if (prunesEverything(app, c) && !confirmPrune) setConfirmPrune(true);
          else void send();
        }}
      >
        <p class="muted">
          From <ExternalUrl url={source?.repoURL} />
        </p>
        <label class="field">
          <span>Revision</span>
          <input value={c.revision} onInput={(e) => set({ revision: e.currentTarget.value })} data-testid="sync-revision" />
        </label>
        <div class="row wrap">
          <label class="check">
            <input type="checkbox" checked={c.prune} onChange={(e) => set({ prune: e.currentTarget.checked })} data-testid="sync-prune" /> Prune
          </label>
          <label class="check">
            <input type="checkbox" checked={c.dryRun} onChange={(e) => set({ dryRun: e.currentTarget.checked })} data-testid="sync-dry-run" /> Dry run
          </label>
        </div>
        <label class="field">
          <span>Sync options (one per line)</span>
          <textarea rows={2} class="mono" value={c.syncOptions.join("\n")} onInput={(e) => set({ syncOptions: e.currentTarget.value.split("\n") })} />
        </label>
        <fieldset class="sync-resources">
          <legend>Resources</legend>
          {resources.length === 0 ? (
            <p class="muted">The controller has not reported any resources yet: the whole application is synced.</p>
          ) : (
            <>
              <div class="row">
                Select:
                <button type="button" class="link" onClick={() => set({ selected: new Set(resources.map(resourceKey)) })}>all</button>
                <button type="button" class="link" onClick={() => set({ selected: outOfSyncKeys(app) })}>out of sync</button>
                <button type="button" class="link" onClick={() => set({ selected: new Set() })}>none</button>
              </div>
              {built.ok && built.partial && <p class="warning">A partial sync is not recorded in the history.</p>}
              <ul class="sync-list">
                {resources.map((r) => {
                  const key = resourceKey(r);
                  return (
                    <li key={key}>
                      <label class="check">
                        <input type="checkbox" checked={c.selected.has(key)} onChange={(e) => toggle(key, e.currentTarget.checked)} data-testid="sync-resource" value={key} />
                        <span class="mono">{key}</span>
                        <Badge kind="sync" value={r.status} />
                      </label>
                    </li>
                  );
                })}
              </ul>
            </>
          )}
        </fieldset>
        {confirmPrune && (
          <p class="warning" role="alert">
            Every resource is selected and every one of them would be pruned. Press Synchronize again to prune them all.
          </p>
        )}
        <ErrorBox error={error ?? (built.ok ? undefined : built.error)} />
        <div class="row end">
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy || !built.ok} data-testid="confirm-sync">
            {busy ? "Synchronizing…" : "Synchronize"}
          </button>
        </div>
      </form>
    </Modal>
  );
}
