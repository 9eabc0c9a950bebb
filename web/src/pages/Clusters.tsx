// Clusters: list, add (credentials are sent, never shown), remove.
import { useState } from "preact/hooks";
import { del, errorText, post, seg } from "../api/http";
import type { Cluster, ListResponse } from "../api/types";
import { useCan, useGet } from "../components/hooks";
import { Action, Badge, Confirm, ErrorBox, Field, Loading } from "../components/ui";

export function Clusters() {
  const list = useGet<ListResponse<Cluster>>("api/v1/clusters");
  const canCreate = useCan("clusters", "create", "*");
  const canDelete = useCan("clusters", "delete", "*");
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
              <th>Applications</th>
              <th><span class="sr-only">Actions</span></th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((c) => (
              <tr key={c.server}>
                <td>{c.name || "–"}</td>
                <td class="mono">{c.server}</td>
                <td><Badge kind="conn" value={c.info?.connectionState?.status} /></td>
                <td>{c.info?.applicationsCount ?? 0}</td>
                <td>
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
