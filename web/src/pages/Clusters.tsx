// Clusters: list with each one's connection (state, server version, what failed, when it was
// checked), add (credentials are sent, never shown), check again, remove.
import { useEffect, useState } from "preact/hooks";
import { del, errorText, post, seg } from "../api/http";
import type { Cluster, ListResponse } from "../api/types";
import { useCan, useGet } from "../components/hooks";
import { Action, Badge, Confirm, ErrorBox, Field, Loading, Time } from "../components/ui";

/** A list shows a cluster not checked yet as Unknown while its check runs: ask again soon. */
const RECHECK_MS = 2000;
const RECHECKS = 15;

function beingChecked(c: Cluster): boolean {
  const state = c.info?.connectionState;
  return state?.status === "Unknown" && state.message === "being checked";
}

function Connection({ cluster }: { cluster: Cluster }) {
  const state = cluster.info?.connectionState ?? cluster.connectionState;
  return (
    <div class="conn" data-testid={`conn-${cluster.server}`}>
      <Badge kind="conn" value={state?.status} />
      {state?.message && <div class="muted small conn-message">{state.message}</div>}
      {state?.attemptedAt && (
        <div class="muted small">
          checked <Time value={state.attemptedAt} />
        </div>
      )}
    </div>
  );
}

export function Clusters() {
  const list = useGet<ListResponse<Cluster>>("api/v1/clusters");
  const canCreate = useCan("clusters", "create", "*");
  const canDelete = useCan("clusters", "delete", "*");
  const canUpdate = useCan("clusters", "update", "*");
  const [rechecks, setRechecks] = useState(0);
  const [checking, setChecking] = useState<string>();
  const [form, setForm] = useState({ name: "", server: "", bearerToken: "", insecure: false });
  const [error, setError] = useState<string>();
  const [removing, setRemoving] = useState<string>();

  const add = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      await post("api/v1/clusters", {
        name: form.name.trim(),
        server: form.server.trim(),
        config: { bearerToken: form.bearerToken || undefined, tlsClientConfig: { insecure: form.insecure } },
      });
      setForm({ name: "", server: "", bearerToken: "", insecure: false });
      list.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  // Bounded: a cluster whose first check never ends stops being asked for after RECHECKS.
  const pending = (list.data?.items ?? []).some(beingChecked);
  useEffect(() => {
    if (!pending || rechecks >= RECHECKS) return;
    const t = setTimeout(() => {
      setRechecks((n) => n + 1);
      list.reload();
    }, RECHECK_MS);
    return () => clearTimeout(t);
  }, [pending, rechecks, list.data]);
  const checkNow = async (server: string) => {
    setError(undefined);
    setChecking(server);
    try {
      await post(`api/v1/clusters/${seg(server)}/invalidate-cache`, {});
      list.reload();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setChecking(undefined);
    }
  };
  const remove = async (server: string) => {
    setRemoving(undefined);
    try {
      await del(`api/v1/clusters/${seg(server)}`);
      list.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  return (
    <section>
      <h1>Clusters</h1>
      <ErrorBox error={list.error ?? error} />
      {list.loading && !list.data ? (
        <Loading />
      ) : (
        <table class="table" data-testid="clusters">
          <thead>
            <tr>
              <th>Name</th>
              <th>Server</th>
              <th>Connection</th>
              <th>Version</th>
              <th>Applications</th>
              <th><span class="sr-only">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((c) => (
              <tr key={c.server}>
                <td>{c.name || "–"}</td>
                <td class="mono">{c.server}</td>
                <td><Connection cluster={c} /></td>
                <td data-testid={`version-${c.server}`}>{c.serverVersion ?? c.info?.serverVersion ?? "–"}</td>
                <td>{c.info?.applicationsCount ?? 0}</td>
                <td class="actions">
                  <Action
                    allowed={canUpdate}
                    class="small"
                    disabled={checking === c.server}
                    onClick={() => void checkNow(c.server)}
                    aria-label={`Check cluster ${c.name || c.server} now`}
                  >
                    {checking === c.server ? "Checking…" : "Check now"}
                  </Action>{" "}
                  <Action allowed={canDelete} class="danger small" onClick={() => setRemoving(c.server)} aria-label={`Remove cluster ${c.name || c.server}`}>
                    Remove
                  </Action>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <form class="inline-form" onSubmit={add} aria-label="Add cluster">
        <h2>Add cluster</h2>
        <Field label="Name">
          <input name="name" required value={form.name} onInput={(e) => setForm({ ...form, name: e.currentTarget.value })} />
        </Field>
        <Field label="Server URL">
          <input name="server" type="url" required value={form.server} onInput={(e) => setForm({ ...form, server: e.currentTarget.value })} />
        </Field>
        <Field label="Bearer token" hint="Stored by the server; never shown again.">
          <input name="bearerToken" type="password" autoComplete="off" value={form.bearerToken} onInput={(e) => setForm({ ...form, bearerToken: e.currentTarget.value })} />
        </Field>
        <label class="check">
          <input type="checkbox" checked={form.insecure} onChange={(e) => setForm({ ...form, insecure: e.currentTarget.checked })} /> Skip TLS verification
        </label>
        <Action allowed={canCreate} type="submit" class="primary">
          Add cluster
        </Action>
      </form>
      {removing && <Confirm title="Remove cluster" message={`Remove cluster ${removing}?`} confirmLabel="Remove" onCancel={() => setRemoving(undefined)} onConfirm={() => void remove(removing)} />}
    </section>
  );
}
