// Creating an application: a form for the common fields, or a whole manifest in YAML/JSON.
import { useState } from "preact/hooks";
import { createApp } from "../api/apps";
import { errorText } from "../api/http";
import type { Application, Cluster, ListResponse, Project } from "../api/types";
import { pagePath } from "../lib/routes";
import { parseDocument } from "../lib/yaml";
import { navigate } from "../router";
import { useGet } from "../components/hooks";
import { ErrorBox, Field } from "../components/ui";

interface FormState {
  name: string;
  project: string;
  repoURL: string;
  path: string;
  targetRevision: string;
  server: string;
  namespace: string;
  automated: boolean;
  labels: string;
}

/** The Application a form describes (labels as `k=v` comma-separated). */
export function appFromForm(f: FormState): Application {
  const labels: Record<string, string> = {};
  for (const part of f.labels.split(",")) {
    const [k, ...v] = part.split("=");
    if (k.trim()) labels[k.trim()] = v.join("=").trim();
  }
  return {
    metadata: { name: f.name.trim(), ...(Object.keys(labels).length ? { labels } : {}) },
    spec: {
      project: f.project || "default",
      source: { repoURL: f.repoURL.trim(), path: f.path.trim() || undefined, targetRevision: f.targetRevision.trim() || "HEAD" },
      destination: { server: f.server.trim(), namespace: f.namespace.trim() || undefined },
      ...(f.automated ? { syncPolicy: { automated: { prune: false, selfHeal: false } } } : {}),
    },
  };
}

export function AppCreate() {
  const [mode, setMode] = useState<"form" | "yaml">("form");
  const [form, setForm] = useState<FormState>({
    name: "",
    project: "default",
    repoURL: "",
    path: "",
    targetRevision: "HEAD",
    server: "https://kubernetes.default.svc",
    namespace: "default",
    automated: false,
    labels: "",
  });
  const [text, setText] = useState("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: \nspec:\n  project: default\n  source:\n    repoURL: \n    path: \n    targetRevision: HEAD\n  destination:\n    server: https://kubernetes.default.svc\n    namespace: default\n");
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const projects = useGet<ListResponse<Project>>("api/v1/projects?fields=items.metadata.name");
  const clusters = useGet<ListResponse<Cluster>>("api/v1/clusters");

  const set = (k: keyof FormState) => (e: Event) => {
    const t = e.currentTarget as HTMLInputElement;
    setForm({ ...form, [k]: t.type === "checkbox" ? t.checked : t.value });
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setBusy(true);
    try {
      let app: Application;
      if (mode === "form") app = appFromForm(form);
      else {
        const doc = (await parseDocument(text)) as Application & { apiVersion?: string; kind?: string };
        if (!doc || typeof doc !== "object" || !doc.metadata?.name) throw new Error("The manifest needs metadata.name.");
        const { apiVersion: _a, kind: _k, ...rest } = doc;
        app = rest;
      }
      const created = await createApp(app);
      navigate(`applications/${pagePath(created.metadata.namespace ?? "", created.metadata.name)}`);
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };

  return (
    <section class="narrow">
      <h1>New application</h1>
      <div class="segmented" role="group" aria-label="Input">
        <button type="button" aria-pressed={mode === "form"} onClick={() => setMode("form")}>
          Form
        </button>
        <button type="button" aria-pressed={mode === "yaml"} onClick={() => setMode("yaml")}>
          YAML / JSON
        </button>
      </div>
      <form onSubmit={submit} class="stack" aria-label="New application">
        {mode === "form" ? (
          <>
            <Field label="Name">
              <input name="name" required value={form.name} onInput={set("name")} pattern="[a-z0-9]([\-.a-z0-9]*[a-z0-9])?" />
            </Field>
            <Field label="Project">
              <select name="project" value={form.project} onChange={set("project")}>
                {(projects.data?.items ?? [{ metadata: { name: "default" } }]).map((p) => (
                  <option key={p.metadata.name} value={p.metadata.name}>
                    {p.metadata.name}
                  </option>
                ))}
              </select>
            </Field>
            <Field label="Repository URL">
              <input name="repoURL" required type="url" value={form.repoURL} onInput={set("repoURL")} />
            </Field>
            <Field label="Path">
              <input name="path" value={form.path} onInput={set("path")} />
            </Field>
            <Field label="Target revision">
              <input name="targetRevision" value={form.targetRevision} onInput={set("targetRevision")} />
            </Field>
            <Field label="Cluster URL">
              <input name="server" required list="cluster-urls" value={form.server} onInput={set("server")} />
              <datalist id="cluster-urls">
                {(clusters.data?.items ?? []).map((c) => (
                  <option key={c.server} value={c.server}>
                    {c.name}
                  </option>
                ))}
              </datalist>
            </Field>
            <Field label="Namespace">
              <input name="namespace" value={form.namespace} onInput={set("namespace")} />
            </Field>
            <Field label="Labels" hint="key=value, comma-separated">
              <input name="labels" value={form.labels} onInput={set("labels")} />
            </Field>
            <label class="check">
              <input type="checkbox" name="automated" checked={form.automated} onChange={set("automated")} /> Automated sync
            </label>
          </>
        ) : (
          <Field label="Manifest (YAML or JSON)">
            <textarea class="code" rows={18} spellcheck={false} value={text} onInput={(e) => setText(e.currentTarget.value)} data-testid="manifest" />
          </Field>
        )}
        <ErrorBox error={error} />
        <div class="row">
          <button type="submit" class="primary" disabled={busy}>
            Create
          </button>
          <button type="button" onClick={() => navigate("applications")}>
            Cancel
          </button>
        </div>
      </form>
    </section>
  );
}
