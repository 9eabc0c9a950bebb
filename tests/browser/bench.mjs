// Dashboard benchmark (not a test): 10,000 applications seeded over REST, then in headless
// Chromium (1) the list's first render: navigation start until every application is counted
// and the first tiles are on screen; (2) a live update: the time from sending a change to the
// server until the changed tile is repainted (MutationObserver + the next animation frame).
// Usage: TIPHYS_RELEASE_BIN=... node bench.mjs [apps=10000] [runs=5]
import { api, launch, login, newPage, startServer, token } from "./harness.mjs";

const apps = Number(process.argv[2] ?? 10000);
const runs = Number(process.argv[3] ?? 5);
const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const name = (i) => `app-${String(i).padStart(5, "0")}`;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const server = await startServer();
try {
  const adminToken = await token(server);
  const seeding = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < apps) {
        const i = next++;
        await api(server, adminToken, "POST", "api/v1/applications", {
          metadata: { name: name(i), labels: { team: `team-${i % 20}`, tier: i % 3 ? "web" : "db" } },
          spec: {
            project: "default",
            destination: { server: "https://kubernetes.default.svc", namespace: `ns-${i % 50}` },
            source: { repoURL: REPO, path: `apps/${name(i)}`, targetRevision: "HEAD" },
          },
        });
      }
    }),
  );
  console.log(`seeded ${apps} applications in ${((Date.now() - seeding) / 1000).toFixed(1)} s`);

  const browser = await launch();
  const page = await newPage(browser);
  await login(page, server);
  const renders = [];
  for (let r = 0; r < runs; r++) {
    await page.goto(`${server.url}applications`);
    await page.waitForFunction((n) => document.querySelector('[data-testid="app-count"]')?.textContent?.startsWith(`${n} of ${n}`) && document.querySelector("[data-app]"), apps, { polling: "raf", timeout: 30000 });
    renders.push(await page.evaluate(() => performance.now()));
  }
  const domNodes = await page.evaluate(() => document.getElementsByTagName("*").length);
  console.log(`list first render (navigation start → ${apps} counted, tiles painted): median ${median(renders).toFixed(0)} ms, runs ${renders.map((x) => x.toFixed(0)).join(", ")} ms; DOM elements ${domNodes}`);

  await page.getByTestId("live").filter({ hasText: "Live" }).waitFor();
  const updates = [];
  for (let r = 0; r < runs; r++) {
    const marker = `bench-change-${r}`;
    const target = name(0);
    const painted = page.evaluate(
      ([target, marker]) =>
        new Promise((resolve) => {
          const seen = () => document.querySelector(`[data-app="${target}"]`)?.textContent?.includes(marker);
          const obs = new MutationObserver(() => {
            if (!seen()) return;
            obs.disconnect();
            requestAnimationFrame(() => resolve(Date.now()));
          });
          obs.observe(document.body, { subtree: true, childList: true, characterData: true });
          setTimeout(() => resolve(-1), 10000);
        }),
      [target, marker],
    );
    await new Promise((r) => setTimeout(r, 50));
    const sent = Date.now();
    await api(server, adminToken, "PUT", `api/v1/applications/${target}/spec`, {
      project: "default",
      destination: { server: "https://kubernetes.default.svc", namespace: "ns-0" },
      source: { repoURL: REPO, path: marker, targetRevision: "HEAD" },
    });
    const at = await painted;
    if (at < 0) throw new Error("the change was not repainted within 10 s");
    updates.push(at - sent);
  }
  console.log(`live update (REST write sent → tile repainted): median ${median(updates)} ms, runs ${updates.join(", ")} ms`);
  await browser.close();
} finally {
  await server.stop();
}
