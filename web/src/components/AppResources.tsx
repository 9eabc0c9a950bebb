// The resources the controller compared (`status.resources`), with their sync and health.
import type { Application } from "../api/types";
import { resourceKey } from "../lib/sync";
import { Badge } from "./ui";

export function AppResources({ app }: { app: Application }) {
  const resources = app.status?.resources ?? [];
  if (resources.length === 0) return <p class="muted">The controller has not reported any resources.</p>;
  return (
    <table class="table" data-testid="resources">
      <thead>
        <tr>
          <th>Kind</th>
          <th>Namespace</th>
          <th>Name</th>
          <th>Sync</th>
          <th>Health</th>
        </tr>
      </thead>
      <tbody>
        {resources.map((r) => (
          <tr key={resourceKey(r)}>
            <td>{r.group ? `${r.group}/${r.kind}` : r.kind}{r.hook ? " (hook)" : ""}</td>
            <td>{r.namespace || "–"}</td>
            <td class="mono">{r.name}</td>
            <td><Badge kind="sync" value={r.status} />{r.requiresPruning ? <span class="muted"> requires pruning</span> : null}</td>
            <td>
              {r.health ? <Badge kind="health" value={r.health.status} /> : <span class="muted">–</span>}
              {r.health?.message ? <span class="muted"> {r.health.message}</span> : null}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
