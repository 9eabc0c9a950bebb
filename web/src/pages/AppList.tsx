// Applications: search, filters (kept in the URL), tiles or a table, live updates.
import { useMemo, useState } from "preact/hooks";
import type { Application } from "../api/types";
import { activeFilterCount, appCluster, appRepos, distinct, filtersFromQuery, filtersToQuery, type AppFilters } from "../lib/apps";
import { pagePath } from "../lib/routes";
import { navigate } from "../router";
import { useCan } from "../components/hooks";
import { VirtualGrid } from "../components/VirtualGrid";
import { Badge, ErrorBox, Link, Loading } from "../components/ui";
import { FilterPanel } from "./AppFilters";
import { useAppList } from "./useAppList";

type View = "tiles" | "table";
const VIEW_KEY = "tiphys.appsView";

export function appPath(app: Application): string {
  return `applications/${pagePath(app.metadata.namespace ?? "", app.metadata.name)}`;
}

export function AppList({ search }: { search: URLSearchParams }) {
  const filters = filtersFromQuery(search);
  const filterKey = filtersToQuery(filters).toString();
  const { apps, loading, error, live, version, matching, total, facets: counted, loadMore } = useAppList(filters, filterKey);
  const [view, setView] = useState<View>(() => (search.get("view") as View) || (localStorage.getItem(VIEW_KEY) as View) || "tiles");
  const canCreate = useCan("applications", "create", "*/*");

  const setFilters = (f: AppFilters) => {
    const q = filtersToQuery(f, new URLSearchParams(search));
    const s = q.toString();
    navigate(`applications${s ? `?${s}` : ""}`, true);
  };
  const chooseView = (v: View) => {
    localStorage.setItem(VIEW_KEY, v);
    setView(v);
  };

  // The server counts each filter's values under the caller's RBAC; the label suggestions come
  // from what is loaded.
  const { facets, counts } = useMemo(() => {
    const values = (field: string) => (counted.find((f) => f.field === field)?.values ?? []).map((v) => v.value).sort();
    const counts: Record<string, number> = {};
    for (const f of counted) for (const v of f.values ?? []) counts[`${f.field}/${v.value}`] = v.count;
    return {
      facets: {
        projects: values("project"),
        sync: ["Synced", "OutOfSync", "Unknown"],
        health: ["Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"],
        clusters: values("cluster"),
        namespaces: values("namespace"),
        labels: distinct(apps, (a) => Object.entries(a.metadata.labels ?? {}).map(([k, v]) => `${k}=${v}`)),
      },
      counts,
    };
  }, [version]);

  return (
    <section class="apps-page">
      <div class="toolbar">
        <h1>Applications</h1>
        <input
          type="search"
          aria-label="Search applications"
          placeholder="Search applications"
          value={filters.search}
          onInput={(e) => setFilters({ ...filters, search: e.currentTarget.value })}
        />
        <div class="segmented" role="group" aria-label="View">
          <button type="button" aria-pressed={view === "tiles"} onClick={() => chooseView("tiles")}>
            Tiles
          </button>
          <button type="button" aria-pressed={view === "table"} onClick={() => chooseView("table")}>
            Table
          </button>
        </div>
        <button type="button" class="primary" disabled={canCreate !== true} onClick={() => navigate("applications/new")} data-testid="new-app">
          New application
        </button>
        <span class={live ? "live on" : "live"} title={live ? "Live updates connected" : "Reconnecting"} data-testid="live">
          {live ? "Live" : "Offline"}
        </span>
      </div>
      <div class="apps-body">
        <FilterPanel filters={filters} facets={facets} counts={counts} onChange={setFilters} />
        <div class="apps-main">
          <ErrorBox error={error} />
          <p class="muted" aria-live="polite" data-testid="app-count">
            {loading ? "Loading…" : `${matching} of ${total} applications`}
            {activeFilterCount(filters) > 0 && (
              <>
                {" · "}
                <button type="button" class="link" onClick={() => setFilters({ ...filters, projects: [], sync: [], health: [], labels: [], clusters: [], namespaces: [], search: "" })}>
                  Clear filters
                </button>
              </>
            )}
          </p>
          {loading ? <Loading /> : view === "tiles" ? <Tiles apps={apps} onNearEnd={loadMore} /> : <Table apps={apps} onNearEnd={loadMore} />}
        </div>
      </div>
    </section>
  );
}

const key = (a: Application) => `${a.metadata.namespace ?? ""}/${a.metadata.name}`;

function source(app: Application): string {
  const s = app.spec?.sources?.[0] ?? app.spec?.source;
  if (!s) return "";
  return [s.path || s.chart, s.targetRevision].filter(Boolean).join(" @ ");
}

function Tiles({ apps, onNearEnd }: { apps: Application[]; onNearEnd: () => void }) {
  return (
    <VirtualGrid
      items={apps}
      onNearEnd={onNearEnd}
      rowHeight={176}
      minTileWidth={300}
      gap={12}
      itemKey={key}
      label="Applications"
      render={(app) => (
        <article class="tile" data-app={app.metadata.name}>
          <h2>
            <Link to={appPath(app)}>{app.metadata.name}</Link>
          </h2>
          <p class="badges">
            <Badge kind="health" value={app.status?.health?.status} />
            <Badge kind="sync" value={app.status?.sync?.status} />
            {app.operation && <span class="badge phase-running">Sync requested</span>}
          </p>
          <dl class="kv compact">
            <dt>Project</dt>
            <dd>{app.spec?.project || "default"}</dd>
            <dt>Repository</dt>
            <dd class="mono ellipsis">{appRepos(app)[0] ?? "–"}</dd>
            <dt>Source</dt>
            <dd class="mono ellipsis" data-field="source">{source(app) || "–"}</dd>
            <dt>Destination</dt>
            <dd class="ellipsis">
              {appCluster(app)} / {app.spec?.destination?.namespace || "–"}
            </dd>
          </dl>
        </article>
      )}
    />
  );
}

function Table({ apps, onNearEnd }: { apps: Application[]; onNearEnd: () => void }) {
  return (
    <div role="table" aria-label="Applications" aria-rowcount={apps.length + 1} class="apps-table">
      <VirtualGrid
        items={apps}
        onNearEnd={onNearEnd}
        rowHeight={40}
        itemKey={key}
        label="Application rows"
        header={
          <div role="row" class="trow thead">
            <span role="columnheader">Name</span>
            <span role="columnheader">Project</span>
            <span role="columnheader">Health</span>
            <span role="columnheader">Sync</span>
            <span role="columnheader">Source</span>
            <span role="columnheader">Destination</span>
          </div>
        }
        render={(app, i) => (
          <div role="row" class="trow" aria-rowindex={i + 2} data-app={app.metadata.name}>
            <span role="cell" class="ellipsis">
              <Link to={appPath(app)}>{app.metadata.name}</Link>
            </span>
            <span role="cell" class="ellipsis">{app.spec?.project || "default"}</span>
            <span role="cell">
              <Badge kind="health" value={app.status?.health?.status} />
            </span>
            <span role="cell">
              <Badge kind="sync" value={app.status?.sync?.status} />
            </span>
            <span role="cell" class="mono ellipsis" data-field="source">{source(app) || "–"}</span>
            <span role="cell" class="ellipsis">
              {appCluster(app)} / {app.spec?.destination?.namespace || "–"}
            </span>
          </div>
        )}
      />
    </div>
  );
}
