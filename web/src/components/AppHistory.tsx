// Deployment history with a rollback per entry (behaviour as upstream's
// application-deployment-history and application-details' rollbackApplication: refused while
// auto-sync is on, prune offered in the confirm dialog).
import { useState } from "preact/hooks";
import type { Application, HistoryEntry } from "../api/types";
import type { ActionState } from "../lib/actions";
import { Action, Confirm, ExternalUrl, Time } from "./ui";

export function AppHistory(props: { app: Application; rollback: ActionState; onRollback: (id: number, prune: boolean) => void }) {
  const history = props.app.status?.history ?? [];
  const [chosen, setChosen] = useState<HistoryEntry>();
  const [prune, setPrune] = useState(false);
  if (history.length === 0) return <p class="muted">No deployments yet.</p>;
  const latest = history[history.length - 1]?.id;
  return (
    <>
      {props.rollback.allowed === false && props.rollback.reason && (
        <p class="muted" data-testid="rollback-reason">{props.rollback.reason}.</p>
      )}
      <table class="table" data-testid="history">
        <thead>
          <tr>
            <th>ID</th>
            <th>Revision</th>
            <th>Deployed</th>
            <th>Initiated by</th>
            <th>Source</th>
            <th><span class="sr-only">Actions</span></th>
          </tr>
        </thead>
        <tbody>
          {[...history].reverse().map((h) => {
            const source = h.source ?? h.sources?.[0];
            return (
              <tr key={h.id}>
                <td>{h.id}</td>
                <td class="mono">{h.revision || "–"}</td>
                <td><Time value={h.deployedAt} /></td>
                <td>{h.initiatedBy?.automated ? "automated sync policy" : h.initiatedBy?.username || "–"}</td>
                <td>
                  <ExternalUrl url={source?.repoURL} /> {source?.path || source?.chart || ""}
                </td>
                <td>
                  <Action allowed={props.rollback.allowed} reason={props.rollback.reason} onClick={() => setChosen(h)} data-testid="rollback">
                    {h.id === latest ? "Redeploy" : "Rollback"}
                  </Action>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {chosen && (
        <Confirm
          title="Rollback application"
          confirmLabel="Rollback"
          onCancel={() => setChosen(undefined)}
          onConfirm={() => {
            setChosen(undefined);
            props.onRollback(chosen.id ?? 0, prune);
          }}
          message={
            <>
              <p>
                Roll <strong>{props.app.metadata.name}</strong> back to deployment {chosen.id} (<span class="mono">{chosen.revision}</span>)?
              </p>
              <label class="check">
                <input type="checkbox" checked={prune} onChange={(e) => setPrune(e.currentTarget.checked)} /> Prune
              </label>
            </>
          }
        />
      )}
    </>
  );
}
