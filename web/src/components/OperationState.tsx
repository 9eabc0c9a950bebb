// The operation in progress (or the last one) as the controller reports it, with its
// per-resource results once finished (behaviour as upstream's application-operation-state).
import type { Application } from "../api/types";
import { formatDuration, initiator, operationPending, summarizeOperation } from "../lib/operation";
import { Badge, KeyValues, Time } from "./ui";
import { YamlView } from "./YamlView";

export function OperationState({ app, now }: { app: Application; now: number }) {
  const op = summarizeOperation(app.status?.operationState, now);
  return (
    <section class="panel wide" data-testid="operation">
      <h2>{op?.running ? "Operation in progress" : "Last operation"}</h2>
      {operationPending(app) && (
        <div class="notice" role="status" data-testid="operation-requested">
          <p>
            Requested operation: {initiator(app.operation)} asked for a {app.operation?.sync ? "sync" : "new operation"}
            {app.operation?.sync?.revision ? ` of ${app.operation.sync.revision}` : ""}; waiting for the application controller to start it.
          </p>
          <details>
            <summary>The requested operation</summary>
            <YamlView value={app.operation} label="Requested operation" />
          </details>
        </div>
      )}
      {op ? (
        <>
          <KeyValues
            rows={[
              ["Operation", op.kind],
              ["Phase", <Badge kind="phase" value={op.phase} />],
              ["Message", op.message ? <span class="pre">{op.message}</span> : "–"],
              ["Initiated by", op.initiator],
              ["Started", <Time value={op.startedAt} />],
              [op.running ? "Running for" : "Duration", formatDuration(op.durationS)],
              ["Finished", <Time value={op.finishedAt} />],
              ["Revision", <span class="mono">{op.revision || "–"}</span>],
            ]}
          />
          {op.results.length > 0 && (
            <table class="table" data-testid="sync-results">
              <caption>Result per resource</caption>
              <thead>
                <tr>
                  <th>Kind</th>
                  <th>Namespace</th>
                  <th>Name</th>
                  <th>Status</th>
                  <th>Hook</th>
                  <th>Message</th>
                </tr>
              </thead>
              <tbody>
                {op.results.map((r, i) => (
                  <tr key={i}>
                    <td>{r.group ? `${r.group}/${r.kind}` : r.kind}</td>
                    <td>{r.namespace || "–"}</td>
                    <td class="mono">{r.name}</td>
                    <td>{r.status || "–"}</td>
                    <td>{r.hookType ? `${r.hookType} (${r.hookPhase ?? "–"})` : "–"}</td>
                    <td>{r.message || "–"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      ) : (
        <p class="muted">No operation has run.</p>
      )}
    </section>
  );
}
